"""Model manager over the protocol: the client's unload/reload/pin/set_idle_unload
and the hub's (own connections, long timeouts, events deduplicated behind a cursor)."""

from __future__ import annotations

import socket
import time

import pytest

from app.core.agents import client as agent_client
from app.core.agents.event_log import ModelEventLog
from app.core.agents.hub import AgentHub
from app.core.agents.types import ModelEvent
from tests.fakes.directories import EmptyDirectory
from tests.fakes.fake_agent import FakeAgent
from tests.unit.core.conftest import wait_for

pytestmark = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="needs AF_UNIX")


@pytest.fixture
def fake(runtime):
    agent = FakeAgent(sock_dir=runtime).with_models()
    yield agent
    agent.close()




# ------------------------------------------------------------------ client


def test_unload_then_reload_returns_the_agents_events(fake):
    entry = fake.entry()
    result = agent_client.unload(entry, "m2", to="disk")
    assert result.ok and result.code is None and result.error is None
    ev = result.event
    assert (ev.action, ev.state, ev.target, ev.bytes_moved, ev.reason) == (
        "unload", "offloaded", "disk", 2016, "manual")
    assert fake.requests[-1] == ("unload", {"model": "m2", "to": "disk", "force": False})
    data = result.to_json()
    assert data["state"] == "offloaded" and data["bytes_released"] == ev.bytes_released
    report = agent_client.query_report(entry)
    m2 = next(m for m in report.models if m.id == "m2")
    assert (m2.state, m2.offloaded_to, m2.home_device) == ("offloaded", "disk", "cuda:0")
    assert [e.seq for e in report.events] == [1]

    back = agent_client.reload(entry, "m2")
    assert back.ok and back.event.action == "reload" and back.event.state == "resident"
    assert back.event.target == "disk" and back.event.seq == 2


def test_a_refusal_keeps_the_agents_reason_and_code(fake):
    result = agent_client.unload(fake.entry(), "m1")
    assert not result.ok and result.code == "refused"
    assert result.error == "training evidence: train mode"
    assert result.to_json()["code"] == "refused" and result.to_json()["state"] is None
    forced = agent_client.unload(fake.entry(), "m1", force=True)
    assert forced.ok and fake.requests[-1][1]["force"] is True


def test_unknown_model_is_not_found(fake):
    for result in (agent_client.unload(fake.entry(), "nope"),
                   agent_client.reload(fake.entry(), "nope"),
                   agent_client.pin(fake.entry(), "nope", True)):
        assert not result.ok and result.code == "not_found"


def test_pressure_reason_is_sent_and_an_older_strict_agent_gets_it_dropped(fake):
    result = agent_client.unload(fake.entry(), "m2", reason="pressure")
    assert result.ok and result.event.reason == "pressure"
    assert fake.requests[-1][1]["reason"] == "pressure"
    agent_client.reload(fake.entry(), "m2")
    fake.strict_params = True
    again = agent_client.unload(fake.entry(), "m2", reason="pressure")
    assert again.ok
    assert [r[1].get("reason") for r in fake.requests if r[0] == "unload"][-2:] == [
        "pressure", None]


def test_pin_and_idle_policy(fake):
    entry = fake.entry()
    pinned = agent_client.pin(entry, "m2", True)
    assert pinned.ok and pinned.pinned is True and fake.models[1]["pinned"] is True
    assert agent_client.pin(entry, "m2", False).pinned is False
    assert agent_client.set_idle_unload(entry, 600) == {
        "ok": True, "idle_unload_s": 600, "error": None, "code": None}
    assert agent_client.query_report(entry).idle_unload_s == 600
    off = agent_client.set_idle_unload(entry, None)
    assert off["ok"] and off["idle_unload_s"] is None and fake.idle_unload_s is None
    bad = agent_client.set_idle_unload(entry, -1)
    assert not bad["ok"] and bad["code"] == "bad_params"


def test_a_hung_agent_times_out_and_a_gone_one_is_unavailable(fake):
    fake.hang = True
    started = time.monotonic()
    result = agent_client.unload(fake.entry(), "m2", timeout_s=0.3)
    assert time.monotonic() - started < 2.0
    assert not result.ok and result.code == "timeout" and "may still finish" in result.error
    assert agent_client.set_idle_unload(fake.entry(), 5, timeout_s=0.3)["code"] == "timeout"
    fake.close()
    gone = agent_client.reload(fake.entry(), "m2", timeout_s=0.5)
    assert not gone.ok and gone.code == "unavailable"


def test_an_agent_without_the_model_manager_says_unknown_method(runtime):
    old = FakeAgent(sock_dir=runtime)  # no with_models(): an older agent
    try:
        result = agent_client.unload(old.entry(), "m1")
        assert not result.ok and result.code == "unknown_method"
    finally:
        old.close()


def test_a_malformed_or_failed_event_reply():
    bad = agent_client.model_event_result(1, "m", {"ok": False, "error": "CUDA error"})
    assert not bad.ok and bad.code == "failed" and bad.error == "CUDA error"
    failed = agent_client.model_event_result(1, "m", {
        "seq": 3, "time": 1.0, "model": "m", "action": "unload", "state": "resident",
        "ok": False, "error": "out of host memory"})
    assert not failed.ok and failed.event.seq == 3 and failed.error == "out of host memory"


# ------------------------------------------------------------------ event log


def ev(seq: int, model: str = "m2") -> ModelEvent:
    return ModelEvent(seq=seq, time=100.0 + seq, model=model, name=model, action="unload",
                      state="offloaded")


def test_event_log_dedupes_by_agent_and_seq_behind_a_cursor():
    log = ModelEventLog()
    assert log.since(0) == ([], 0)
    assert log.add(5, [ev(1), ev(2)]) == 2
    assert log.add(5, [ev(1), ev(2), ev(3)]) == 1  # a report repeats the last 64
    events, cursor = log.since(0)
    assert [(pid, e.seq) for pid, e in events] == [(5, 1), (5, 2), (5, 3)] and cursor == 3
    assert log.since(cursor) == ([], 3)
    log.add(6, [ev(1)])  # another agent's seq 1 is another event
    log.add(5, [ev(1)], key=(5, 2.0))  # so is a reused pid's (keyed by create time)
    events, cursor2 = log.since(cursor)
    assert [(pid, e.seq) for pid, e in events] == [(6, 1), (5, 1)] and cursor2 == 5


def test_default_directory_has_no_model_manager():
    bare = EmptyDirectory()
    assert bare.unload(1, "m").code == "unsupported"
    assert bare.set_idle_unload(1, 5)["ok"] is False
    assert bare.events_since(7) == ([], 7)
    # An action's reply event reaches the event path through any directory, once.
    ev = ModelEvent(seq=3, time=1.0, model="m", name="m", action="unload", state="offloaded",
                    target="cpu", reason="manual", ok=True)
    bare.note_reply(41, ev)
    bare.note_reply(41, ev)
    events, cursor = bare.events_since(0)
    assert events == [(41, ev)] and bare.events_since(cursor) == ([], cursor)


# ------------------------------------------------------------------ hub


def test_hub_actions_never_hold_up_polling_and_events_arrive_once(runtime):
    fake = FakeAgent(sock_dir=runtime, own_process=True).with_models()
    fake.register(runtime)
    fake.action_delay_s = 1.0  # a big model: the unload takes a second
    hub = AgentHub(runtime, period_s=0.05, registry_period_s=0.1)
    hub.start()
    try:
        assert wait_for(lambda: fake.pid in hub.reports())
        import threading

        out = {}
        thread = threading.Thread(target=lambda: out.setdefault(
            "r", hub.unload(fake.pid, "m2", to="cpu")))
        thread.start()
        time.sleep(0.2)
        seen = hub.reports()[fake.pid].received_at
        time.sleep(0.4)  # mid-unload: the poller still gets reports
        assert hub.reports()[fake.pid].received_at > seen
        thread.join(5)
        result = out["r"]
        assert result.ok and result.event.state == "offloaded"
        # the reply's event is in the log at once; the reports repeat it: still once
        events, cursor = hub.events_since(0)
        assert [(pid, e.seq, e.action) for pid, e in events] == [(fake.pid, 1, "unload")]
        assert wait_for(lambda: any(m.state == "offloaded" for m in
                                    hub.reports()[fake.pid].models if m.id == "m2"))
        time.sleep(0.2)
        assert hub.events_since(cursor) == ([], cursor)
        # an unload the agent did on its own (its idle TTL) reaches the log through a report
        fake.action_delay_s = 0.0
        agent_client.reload(fake.entry(), "m2")
        assert wait_for(lambda: hub.events_since(cursor)[0])
        events, cursor = hub.events_since(cursor)
        assert [(e.seq, e.action) for _, e in events] == [(2, "reload")]
        # refusal, pin, policy, unknown pid
        refused = hub.unload(fake.pid, "m1")
        assert refused.code == "refused" and "training" in refused.error
        assert hub.pin(fake.pid, "m1", True).pinned is True
        assert hub.set_idle_unload(fake.pid, 300)["idle_unload_s"] == 300
        assert hub.reload(fake.pid, "m2").code == "refused"
        for missing in (hub.unload(1, "m2"), hub.reload(1, "m2"), hub.pin(1, "m2", True)):
            assert not missing.ok and missing.code == "not_found"
        assert hub.set_idle_unload(1, 5)["code"] == "not_found"
    finally:
        hub.close()
        fake.close()


def test_hub_actions_work_without_polling(runtime):
    """The CLI's way: no start(), the entry comes from the registry."""
    fake = FakeAgent(sock_dir=runtime, own_process=True).with_models()
    fake.register(runtime)
    hub = AgentHub(runtime)
    try:
        result = hub.unload(fake.pid, "m2", to="disk")
        assert result.ok and result.event.target == "disk"
        assert [e.seq for _, e in hub.events_since(0)[0]] == [1]
    finally:
        hub.close()
        fake.close()
