"""A server's snapshots through the local seams: the collector over a
RemoteSource gives what the server made; the remote directory acts there."""

from __future__ import annotations

import time

import pytest

from app.core.monitor.collector import Collector
from app.core.monitor.source import SourceUnavailable
from app.core.remote.address import parse_address
from app.core.remote.agents import RemoteAgents
from app.core.remote.client import RemoteClient
from app.core.remote.errors import RemoteError
from app.core.remote.http_transport import HttpTransport
from app.core.remote.source import RemoteSource
from tests.unit.core.remote.conftest import TOKEN


def connect(server, token=TOKEN):
    return lambda: RemoteClient(HttpTransport(parse_address(server.url), token, timeout_s=5))


def wait_for(predicate, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_collector_over_a_remote_source_passes_on_the_servers_findings(
        demo_server, demo_engine, monkeypatch):
    made = []
    publish = demo_engine._publish
    monkeypatch.setattr(demo_engine, "_publish", lambda s: (made.append(s), publish(s)))
    source = RemoteSource(connect(demo_server))
    collector = Collector(source, agents=RemoteAgents(connect(demo_server)(), source),
                          pressure_policy=False, doctor=False)
    collector.open()
    wait_for(lambda: any(m.monotonic == source.latest().monotonic for m in made))
    snapshot = collector.collect()
    collector.close()
    (served,) = [m for m in made if m.gpus == snapshot.gpus][-1:]
    assert snapshot.source == "demo" and snapshot.driver_version == served.driver_version
    assert snapshot.agents == served.agents and snapshot.agents
    assert snapshot.diagnoses == served.diagnoses and snapshot.diagnoses
    assert snapshot.model_events == served.model_events
    assert snapshot.policy_decisions == served.policy_decisions


def test_a_server_that_goes_away_makes_read_raise_with_the_reason(demo_server):
    source = RemoteSource(connect(demo_server))
    source.open()
    assert source.read()
    demo_server.shutdown()
    demo_server.server_close()
    demo_server.api.engine.stop()  # ends the stream's loop as the process's end would
    with pytest.raises(SourceUnavailable):
        wait_for(lambda: _fails(source), 10.0)
        source.read()
    source.close()


def _fails(source):
    try:
        source.read()
    except SourceUnavailable:
        return True
    return False


def test_open_says_why_it_cannot_connect():
    source = RemoteSource(lambda: RemoteClient(HttpTransport(
        parse_address("http://127.0.0.1:1"), None, timeout_s=2)))
    with pytest.raises(SourceUnavailable, match="connection refused"):
        source.open()


def test_remote_agents_act_through_the_server(demo_server, demo_engine):
    agents = RemoteAgents(connect(demo_server)())
    assert {e.pid for e in agents.entries()} == set(demo_engine.agents.reports())
    assert agents.reports().keys() == demo_engine.agents.reports().keys()
    assert agents.free_cache(18822).ok
    result = agents.unload(18822, "nope")
    assert not result.ok and result.code
    refused = RemoteAgents(connect(demo_server, token=None)()).free_cache(18822)
    assert not refused.ok and "--token-file" in refused.error
    with pytest.raises(RemoteError):
        RemoteAgents(connect(demo_server, token="x" * 20)()).entries()
