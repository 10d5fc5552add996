"""``record`` from the app's side: the client's call and the hub's, against a
fake agent over a real socket."""

from __future__ import annotations

import socket

import pytest

from app.core.agents import client as agent_client
from app.core.agents.hub import AgentHub
from tests.fakes.recording_agent import MiB, RecordingAgent

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


@pytest.fixture
def fake(runtime):
    agent = RecordingAgent(sock_dir=runtime)
    yield agent
    agent.close()


def test_record_sends_the_params_and_parses_the_sites(fake):
    result = agent_client.record(fake.entry(), 5, max_entries=2000)
    assert fake.requests[-1] == ("record", {"seconds": 5, "max_entries": 2000})
    assert result.ok and result.pid == fake.pid and result.code is None
    assert result.path.endswith(".pickle") and result.entries == 48213
    assert result.seconds == 5.0 and result.truncated is False and result.device is None
    assert [(s.site, s.bytes, s.count, s.live_bytes) for s in result.sites] == [
        ("train.py:42 in step", 3072 * MiB, 120, 512 * MiB),
        ("model.py:88 in forward", 700 * MiB, 4000, 0)]


def test_default_entries_are_the_agents(fake):
    agent_client.record(fake.entry(), 3)
    assert fake.requests[-1] == ("record", {"seconds": 3})


@pytest.mark.parametrize("code", ["refused", "busy", "bad_params", "failed"])
def test_agent_errors_come_back_with_their_code(fake, code):
    fake.error = (code, "why not")
    result = agent_client.record(fake.entry(), 1)
    assert not result.ok and result.code == code and result.error == "why not"
    assert result.sites == ()


def test_no_answer_in_time_is_a_timeout(fake):
    fake.record_delay_s = 1.0
    result = agent_client.record(fake.entry(), 1, timeout_s=0.2)
    assert not result.ok and result.code == "timeout" and "0.2 s" in result.error


def test_an_agent_that_is_gone_is_unavailable(fake):
    entry = fake.entry()
    fake.close()
    result = agent_client.record(entry, 1, timeout_s=1.0)
    assert not result.ok and result.code == "unavailable"


def test_hub_records_through_the_registry(fake, runtime):
    fake.register(runtime)
    hub = AgentHub(runtime_dir=runtime)
    result = hub.record(fake.pid, 2, 1000, timeout_s=5.0)
    assert result.ok and result.entries == 48213
    assert fake.requests[-1] == ("record", {"seconds": 2, "max_entries": 1000})
    missing = hub.record(999_999_999, 2)
    assert not missing.ok and missing.code == "not_found"
    hub.close()
