"""One controller per host (``HostControllers``): a request goes to its
host's directory, checked against that host's snapshot with that host's busy
set; pids are only unique per host; "Free all" reaches every host; a remote
terminate is the server's, and its answer comes back as a result."""

from __future__ import annotations

import dataclasses
import time

import pytest

from app.core.control.controller import AppController
from app.core.control.hosts import HostControllers
from app.core.control.records import Outcome, TerminateAction
from app.core.control.requests import (
    FreeCache,
    Refusal,
    RequestError,
    Terminate,
    Unload,
)
from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView, qualify_gpu
from tests.unit.core.control.test_controller import NOW, FakeDirectory, two_agents


class HostDirectory(FakeDirectory):
    """A host's directory: the test's answers, and a server's terminate."""

    def __init__(self, terminated=None, **kw):
        super().__init__(**kw)
        self.terminated = terminated or {"pid": 10, "label": "job10.py (10)",
                                         "outcome": "exited", "elapsed_s": 0.25}

    def terminate(self, pid, create_time, grace_s=None):
        self._call("terminate", pid, create_time, grace_s)
        return self.terminated


def remote(key: str, state: str = CONNECTED, user: str = "alice", t: float = 10.0):
    snap = two_agents(t)
    snap = dataclasses.replace(snap, gpus=tuple(qualify_gpu(g, key) for g in snap.gpus))
    return HostView(key, f"ssh://{key}", state, snapshot=snap, user=user)


def world(*views: HostView, t: float = 10.0):
    return dataclasses.replace(two_agents(t), hosts=tuple(views))


@pytest.fixture
def hosts():
    dirs = {"": HostDirectory(), "gpu1": HostDirectory(), "gpu2": HostDirectory()}
    local = AppController(dirs[""], settle_s=0.5)
    ctl = HostControllers(local, lambda key: dirs.get(key))
    ctl.dirs = dirs
    ctl.on_snapshot(world(remote("gpu1"), remote("gpu2")))
    yield ctl
    for d in dirs.values():
        d.gate.set()
    ctl.wait(5)
    ctl.close()


def test_a_request_goes_to_its_hosts_directory_only(hosts):
    action = hosts.submit(FreeCache.of(10, host="gpu1"))
    assert hosts.wait(5)
    assert action.host == "gpu1" and action.results[10].ok
    assert hosts.dirs["gpu1"].calls == [("free", 10)]
    assert hosts.dirs[""].calls == [] and hosts.dirs["gpu2"].calls == []
    hosts.submit(Unload(10, "m1", host="gpu2"))
    hosts.submit(FreeCache.of(11))
    assert hosts.wait(5)
    assert hosts.dirs["gpu2"].calls == [("unload", 10, "m1", "cpu", False, "manual")]
    assert hosts.dirs[""].calls == [("free", 11)]
    # one GPU's "Free all caches": the GPU's id names its host
    action = hosts.submit(FreeCache.on_gpu("0@gpu2"))
    assert hosts.wait(5)
    assert action.host == "gpu2" and action.display_id == "0@gpu2"
    assert sorted(c[1] for c in hosts.dirs["gpu2"].calls if c[0] == "free") == [10, 11]


def test_the_same_pid_on_two_hosts_is_two_processes(hosts):
    for d in hosts.dirs.values():
        d.gate.clear()
    hosts.submit(FreeCache.of(10, host="gpu1"))
    assert hosts.busy_pids("gpu1") == {10}
    assert hosts.busy_pids("") == set() and hosts.busy_pids("gpu2") == set()
    hosts.submit(FreeCache.of(10))  # this machine's pid 10 is not busy
    hosts.submit(FreeCache.of(10, host="gpu2"))
    with pytest.raises(RequestError) as err:
        hosts.submit(FreeCache.of(10, host="gpu1"))
    assert err.value.code is Refusal.BUSY
    hosts.submit(Unload(10, "m1", host="gpu1"))
    assert hosts.busy_models("gpu1") == {(10, "m1")} and hosts.busy_models("") == set()
    assert [a.pid for a in hosts.pending_models(10, "gpu1")] == [10]
    assert hosts.pending_models(10, "gpu2") == [] and hosts.pending_models(10) == []
    assert {a.host for a in hosts.running()} == {"", "gpu1", "gpu2"}
    for d in hosts.dirs.values():
        d.gate.set()
    assert hosts.wait(5)
    assert set(hosts.last_model_actions(10, "gpu1")) == {"m1"}
    assert hosts.last_model_actions(10) == {} and hosts.busy_pids("gpu9") == set()


def test_free_all_everywhere_reaches_every_host(hosts):
    record = hosts.submit(FreeCache.everywhere())
    assert hosts.wait(5)
    assert record.host == ""  # this machine's record is returned; the others are heard
    for d in hosts.dirs.values():
        assert sorted(c[1] for c in d.calls) == [10, 11]


def test_free_all_everywhere_without_local_agents_still_reaches_the_hosts():
    dirs = {"gpu1": HostDirectory()}
    ctl = HostControllers(AppController(None), lambda key: dirs.get(key))
    ctl.on_snapshot(world(remote("gpu1")))
    record = ctl.submit(FreeCache.everywhere())
    assert ctl.wait(5)
    assert record.host == "gpu1" and sorted(c[1] for c in dirs["gpu1"].calls) == [10, 11]
    ctl.close()


def test_a_host_not_watched_is_refused(hosts):
    with pytest.raises(RequestError) as err:
        hosts.submit(FreeCache.of(10, host="gpu9"))
    assert err.value.code is Refusal.UNKNOWN_PROCESS and "gpu9" in str(err.value)
    with pytest.raises(RequestError) as err:
        hosts.submit(FreeCache.on_gpu("0@gpu9"))
    assert "gpu9" in str(err.value)
    assert all(d.calls == [] for d in hosts.dirs.values())


def test_a_remote_terminate_is_the_servers_and_its_answer_comes_back(hosts):
    updates = []
    hosts.subscribe(lambda u: updates.append((u.stage, u.action.host)))
    action = hosts.submit(Terminate(10, NOW - 100, host="gpu1"))
    assert isinstance(action, TerminateAction)
    assert hosts.wait(5)
    assert action.host == "gpu1" and hosts.dirs["gpu1"].calls == [
        ("terminate", 10, NOW - 100, action.grace_s)]
    assert (action.result.outcome, action.result.elapsed_s) == (Outcome.EXITED, 0.25)
    assert ("finished", "gpu1") in updates
    assert hosts.dirs[""].calls == []
    # the server's refusal, with its reason
    hosts.dirs["gpu2"].terminated = {"pid": 10, "outcome": "refused", "code": "not_owned",
                                     "reason": "process 10 is not alice's: only your own "
                                               "processes can be acted on"}
    action = hosts.submit(Terminate(10, NOW - 100, host="gpu2"))
    assert hosts.wait(5)
    assert action.result.outcome is Outcome.REFUSED and "not alice's" in action.result.reason
    # an answer that is not one
    hosts.dirs["gpu2"].terminated = {"pid": 10, "outcome": "vanished"}
    action = hosts.submit(Terminate(10, NOW - 100, host="gpu2"))
    assert hosts.wait(5)
    assert action.result.outcome is Outcome.FAILED and "gpu2 answered" in action.result.reason


def test_a_remote_terminate_is_checked_against_the_hosts_user(hosts):
    hosts.on_snapshot(world(remote("gpu1", user="bob"), remote("gpu2")))
    with pytest.raises(RequestError) as err:
        hosts.submit(Terminate(10, NOW - 100, host="gpu1"))
    assert err.value.code is Refusal.NOT_OWNED and "alice's process" in str(err.value)
    assert hosts.dirs["gpu1"].calls == []


def test_a_host_that_went_away_refuses_a_terminate_it_cannot_send():
    dirs = {"gpu1": HostDirectory()}
    ctl = HostControllers(AppController(None), lambda key: dirs.get(key))
    ctl.on_snapshot(world(remote("gpu1")))
    dirs.clear()  # no directory any more: the host was removed after the check
    action = ctl.submit(Terminate(10, NOW - 100, host="gpu1"))
    assert ctl.wait(5)
    assert action.result.outcome is Outcome.REFUSED and "gpu1" in action.result.reason
    ctl.close()


def test_a_disconnected_host_is_refused_before_anything_is_sent():
    dirs = {"gpu1": HostDirectory()}
    ctl = HostControllers(AppController(None), lambda key: dirs.get(key))
    view = dataclasses.replace(remote("gpu1", state=DISCONNECTED), reason="connection refused")
    ctl.on_snapshot(world(view))
    for request in (Terminate(10, NOW - 100, host="gpu1"), FreeCache.of(10, host="gpu1")):
        with pytest.raises(RequestError) as refused:
            ctl.submit(request)
        assert refused.value.code is Refusal.UNAVAILABLE
        assert str(refused.value) == "gpu1 is not connected: connection refused"
    assert dirs["gpu1"].calls == []
    ctl.close()


def test_each_hosts_controller_sees_its_own_snapshot(hosts):
    gpu1 = hosts.of("gpu1")
    assert gpu1 is not None and hosts.of("") is hosts.local and hosts.of("gpu9") is None
    assert [g.display_id for g in gpu1.latest.gpus] == ["0@gpu1"]
    assert [g.display_id for g in hosts.local.latest.gpus] == ["0"]
    assert hosts.available


def test_a_remote_action_is_measured_on_figures_that_came_after_it(hosts):
    action = hosts.submit(FreeCache.of(10, host="gpu1"))
    assert hosts.wait(5) and action.done and action.host == "gpu1"
    time.sleep(0.6)  # past the settling time
    for _ in range(3):  # the same arrival, offered again each tick: never a measure
        hosts.on_snapshot(world(remote("gpu1"), remote("gpu2")))
    assert not action.measured
    gone = dataclasses.replace(remote("gpu1", t=11.0), state=DISCONNECTED)
    hosts.on_snapshot(world(gone, remote("gpu2")))  # a lost host's last figures: not either
    assert not action.measured
    for t in (12.0, 13.0):  # new arrivals: measured as a local action is
        hosts.on_snapshot(world(remote("gpu1", t=t), remote("gpu2")))
    assert action.measured and action.snapshots_after == 2
