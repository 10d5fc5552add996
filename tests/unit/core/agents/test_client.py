"""The one-shot calls and their results, against a fake agent speaking
``app.agent.protocol`` over real sockets."""

from __future__ import annotations

import socket

import pytest

from app.core.agents import client as agent_client
from app.core.agents.connection import AgentConnection

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


def test_ping_report_free_cache_and_gc(agent):
    entry = agent.entry()
    with AgentConnection(entry, 2.0) as conn:
        assert conn.hello["pid"] == agent.pid
        assert conn.call("ping") == {"pong": True}
        assert conn.call("ping") == {"pong": True}  # several calls on one connection
    report = agent_client.query_report(entry, 2.0)
    assert report.pid == agent.pid
    assert report.devices[0].allocated == 1000 and report.devices[0].reserved == 4000
    assert report.models[0].param_bytes == 40
    assert report.round_trip_s is not None and report.received_at > 0
    result = agent_client.free_cache(entry, 2.0)
    assert result.ok and result.reserved_before == 4000 and result.reserved_after == 1000
    assert result.freed == 3000
    gc = agent_client.collect_garbage(entry, 2.0)
    assert gc == {"ok": True, "collected": 7, "seconds": 0.001, "error": None}


def test_freed_is_the_agents_figure_never_computed_again():
    """The agent measures ``freed`` around its own release; the client copies it,
    and an unknown figure stays unknown even when both reserved figures are known."""
    result = agent_client.free_cache_result(
        7, {"reserved_before": 4000, "reserved_after": 1000, "freed": 2500})
    assert (result.pid, result.ok, result.freed) == (7, True, 2500)
    assert (result.reserved_before, result.reserved_after) == (4000, 1000)
    result = agent_client.free_cache_result(
        7, {"reserved_before": 4000, "reserved_after": 1000, "freed": None})
    assert result.freed is None and result.reserved_before == 4000
    result = agent_client.free_cache_result(7, {"reserved_before": None, "freed": True})
    assert result.freed is None and result.reserved_before is None  # a bool is no byte count
    assert agent_client.free_cache_result(7, {"freed": 0}).freed == 0  # zero is not unknown
