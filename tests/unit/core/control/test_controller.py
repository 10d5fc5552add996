"""The application controller without Qt: validation against the latest
snapshot, the busy set, worker threads, before/after NVML measurement, the
agent's own "freed" figure, processes that leave mid-request, and the
auto-unload settings applied to the pressure policy."""

from __future__ import annotations

import math
import threading

import pytest

from app.core.agents.directory import AgentDirectory
from app.core.agents.types import (
    AgentReport,
    DeviceMemory,
    FreeCacheResult,
    ModelActionResult,
    ModelInfo,
)
from app.core.control.controller import FINISHED, MEASURED, PROGRESS, STARTED, AppController
from app.core.control.records import CacheAction, ModelAction
from app.core.control.requests import (
    CollectGarbage,
    FreeCache,
    Pin,
    Refusal,
    Reload,
    RequestError,
    SetAutoUnload,
    SetIdleUnload,
    Unload,
    UnloadIdle,
)
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

GiB = 1 << 30
NOW = 1_700_000_000.0


def model(mid, size=GiB, state="resident", idle_s=3600.0, **kw):
    fields = dict(id=mid, name=f"net-{mid}", class_name="Net", params=size // 2,
                  param_bytes=size, buffer_bytes=0, device="cuda:0", dtype="float16",
                  training=False, last_used=NOW - idle_s, idle_since=NOW - idle_s,
                  first_seen=NOW - 7200, state=state, home_device="cuda:0",
                  bytes_by_device={"cuda:0": {"params": size, "buffers": 0}})
    fields.update(kw)
    return ModelInfo(**fields)


def report(pid, allocated=2 * GiB, reserved=3 * GiB, models=()):
    return AgentReport(pid=pid, argv=("python", f"job{pid}.py"), python="3.11.9",
                       torch="2.5.1", torch_status="loaded", cuda_initialized=True, allocator_backend="native",
                       devices=(DeviceMemory(index=0, allocated=allocated, reserved=reserved),),
                       models=tuple(models), received_at=NOW)


def proc(pid, mem):
    return ProcessSample(pid, mem, name="python", user="alice", command=f"python job{pid}.py",
                         create_time=NOW - 100)


def snap(procs, agents, t=10.0):
    used = sum(p.gpu_memory or 0 for p in procs)
    gpu = GpuSample(index=0, name="Test GPU", uuid="GPU-0", memory_total=24 * GiB,
                    memory_used=used, memory_free=None, processes=tuple(procs))
    return Snapshot(NOW + t, t, "nvml", "550.54", (gpu,), agents=agents)


def two_agents(t=10.0, mem10=8 * GiB, mem11=4 * GiB):
    """pid 10 (cache 1 GiB, a model), 11 (cache 1 GiB), 12 (no agent)."""
    agents = {10: report(10, models=[model("m1")]), 11: report(11)}
    return snap([proc(10, mem10), proc(11, mem11), proc(12, GiB)], agents, t)


class FakeDirectory(AgentDirectory):
    """Answers from the test's tables; a gate holds the calls; records threads."""

    def __init__(self, freed=None, block=False):
        self.freed = freed or {}
        self.gate = threading.Event()
        if not block:
            self.gate.set()
        self.calls: list[tuple] = []
        self.threads: set[int] = set()
        self.gone: set[int] = set()  # processes that exited

    def reports(self):
        return {}

    def entries(self):
        return []

    def _call(self, *call):
        self.threads.add(threading.get_ident())
        self.calls.append(call)
        assert self.gate.wait(5)
        if call[1] in self.gone:
            raise ConnectionError("agent went away")

    def free_cache(self, pid, timeout_s=30.0):
        self._call("free", pid)
        freed = self.freed.get(pid, 0)
        # reserved_before/after say something else on purpose: "freed" is taken as reported.
        return FreeCacheResult(pid=pid, ok=True, reserved_before=5 * GiB, reserved_after=0,
                               freed=freed)

    def collect_garbage(self, pid, timeout_s=30.0):
        self._call("gc", pid)
        return {"ok": True, "collected": 7, "seconds": 0.01, "error": None}

    def unload(self, pid, model, to="cpu", force=False, reason="manual", timeout_s=300.0):
        self._call("unload", pid, model, to, force, reason)
        return ModelActionResult(pid, model, True)

    def reload(self, pid, model, timeout_s=300.0):
        self._call("reload", pid, model)
        return ModelActionResult(pid, model, True)

    def pin(self, pid, model, pinned, timeout_s=10.0):
        self._call("pin", pid, model, pinned)
        return ModelActionResult(pid, model, True, pinned=pinned)

    def set_idle_unload(self, pid, seconds, timeout_s=10.0):
        self._call("idle", pid, seconds)
        return {"ok": True, "idle_unload_s": seconds, "error": None}


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def clock():
    return Clock()


def make(directory, clock, **kw):
    c = AppController(directory, settle_s=0.5, clock=clock, **kw)
    updates = []
    c.subscribe(lambda u: updates.append((u.stage, u.action, u.pid)))
    c.updates = updates
    return c


# -- validation -----------------------------------------------------------------------------------

def test_requests_are_checked_against_the_latest_snapshot_and_change_nothing(clock):
    fake = FakeDirectory()
    c = make(fake, clock)
    with pytest.raises(RequestError) as err:
        c.submit(FreeCache.of(10))
    assert err.value.code is Refusal.NO_SNAPSHOT
    c.on_snapshot(two_agents())
    cases = [(FreeCache.of(99), Refusal.UNKNOWN_PROCESS), (FreeCache.of(12), Refusal.NO_AGENT),
             (CollectGarbage(99), Refusal.UNKNOWN_PROCESS),
             (Unload(10, "nope"), Refusal.UNKNOWN_MODEL),
             (Reload(99, "m1"), Refusal.UNKNOWN_PROCESS),
             (SetIdleUnload(12, 60.0), Refusal.NO_AGENT),
             (FreeCache.on_gpu("7"), Refusal.UNKNOWN_GPU)]
    for request, code in cases:
        with pytest.raises(RequestError) as err:
            c.submit(request)
        assert err.value.code is code, request
        assert str(err.value)
    assert c.running() == [] and c.updates == [] and fake.calls == []


@pytest.mark.parametrize("seconds", [1e-300, 9.5, 0.0, -60.0, math.nan, math.inf,
                                     30 * 86400.0 + 1, True])
def test_an_idle_timer_out_of_the_agents_bounds_is_refused(clock, seconds):
    fake = FakeDirectory()
    c = make(fake, clock)
    c.on_snapshot(two_agents())
    with pytest.raises(RequestError) as err:
        c.submit(SetIdleUnload(10, seconds))
    assert err.value.code is Refusal.INVALID and "idle timer" in str(err.value)
    if not isinstance(seconds, bool):
        assert "between 10 s and 30 days" in str(err.value)
    assert c.running() == [] and c.updates == [] and fake.calls == []


def test_no_directory_means_actions_are_unavailable(clock):
    c = make(None, clock)
    c.on_snapshot(two_agents())
    assert not c.available
    with pytest.raises(RequestError) as err:
        c.submit(FreeCache.of(10))
    assert err.value.code is Refusal.UNAVAILABLE


def test_a_getter_returning_no_directory_is_an_answer_not_a_crash(clock):
    c = make(lambda: None, clock)
    c.on_snapshot(two_agents())
    action = c.submit(FreeCache.of(10))
    assert c.wait(3)
    assert action.results[10].ok is False and action.results[10].error == "no agent connection"


# -- running, busy set ----------------------------------------------------------------------------

def test_free_runs_on_a_worker_and_a_second_click_is_refused_while_busy(clock):
    fake = FakeDirectory(freed={10: GiB}, block=True)
    c = make(fake, clock)
    c.on_snapshot(two_agents())
    action = c.submit(FreeCache.of(10))
    assert isinstance(action, CacheAction) and action.labels == {10: "job10.py (10)"}
    assert c.busy_pids() == {10}
    with pytest.raises(RequestError) as err:
        c.submit(FreeCache.of(10))  # the double click
    assert err.value.code is Refusal.BUSY
    with pytest.raises(RequestError):
        c.submit(CollectGarbage(10))
    # "Free all" skips the busy process and frees the other one.
    every = c.submit(FreeCache.everywhere())
    assert every.pids == (11,)
    fake.gate.set()
    assert c.wait(3)
    assert threading.get_ident() not in fake.threads
    assert sorted(fake.calls) == [("free", 10), ("free", 11)]
    assert c.busy_pids() == set() and action.done
    stages = [(s, a.id) for s, a, _ in c.updates]
    assert stages.index((STARTED, action.id)) < stages.index((PROGRESS, action.id)) \
        < stages.index((FINISHED, action.id))


def test_nothing_to_free_is_a_refusal(clock):
    c = make(FakeDirectory(), clock)
    no_cache = {10: report(10, reserved=2 * GiB)}
    c.on_snapshot(snap([proc(10, 3 * GiB)], no_cache))
    with pytest.raises(RequestError) as err:
        c.submit(FreeCache.on_gpu("0"))
    assert err.value.code is Refusal.NOTHING_TO_DO


def test_free_all_on_a_gpu_takes_the_agent_processes_holding_cache(clock):
    fake = FakeDirectory()
    c = make(fake, clock)
    agents = {10: report(10), 11: report(11, reserved=2 * GiB)}  # 11: no cache
    c.on_snapshot(snap([proc(10, 8 * GiB), proc(11, 4 * GiB), proc(12, GiB)], agents))
    action = c.submit(FreeCache.on_gpu("0"))
    assert action.pids == (10,) and action.display_id == "0"
    assert action.gpu_before == 13 * GiB
    assert c.wait(3)


def test_model_busy_set_refuses_the_same_model_and_lets_others_through(clock):
    fake = FakeDirectory(block=True)
    c = make(fake, clock)
    agents = {10: report(10, models=[model("m1"), model("m2", state="offloaded")])}
    c.on_snapshot(snap([proc(10, 8 * GiB)], agents))
    unload = c.submit(Unload(10, "m1", to="disk"))
    assert isinstance(unload, ModelAction)
    assert unload.display_id == "0" and unload.baseline == 8 * GiB and unload.size == GiB
    assert unload.label == "job10.py (10)" and unload.name == "m1"
    with pytest.raises(RequestError) as err:
        c.submit(Pin(10, "m1", True))
    assert err.value.code is Refusal.BUSY
    reload_ = c.submit(Reload(10, "m2", name="vae"))
    timer = c.submit(SetIdleUnload(10, 600.0))
    with pytest.raises(RequestError):
        c.submit(SetIdleUnload(10, None))
    assert c.busy_models() == {(10, "m1"), (10, "m2"), (10, None)}
    fake.gate.set()
    assert c.wait(3)
    assert unload.ok and reload_.ok and timer.ok and timer.ttl_result["idle_unload_s"] == 600.0
    assert ("unload", 10, "m1", "disk", False, "manual") in fake.calls
    assert c.last_model_actions(10) == {"m1": unload, "m2": reload_}


# -- measurement ------------------------------------------------------------------------------------

def test_freed_is_the_agents_figure_and_nvml_is_measured_after_settling(clock):
    fake = FakeDirectory(freed={10: 2 * GiB, 11: GiB})
    c = make(fake, clock)
    c.on_snapshot(two_agents())
    action = c.submit(FreeCache.on_gpu("0"))
    assert action.baseline == {10: 8 * GiB, 11: 4 * GiB}
    assert c.wait(3)
    assert action.freed == 3 * GiB  # as reported, not reserved_before - reserved_after
    # Too early: the driver may lag behind.
    clock.t += 0.2
    c.on_snapshot(two_agents(t=11.0, mem10=6 * GiB, mem11=3 * GiB))
    assert not action.measured
    clock.t += 0.4
    c.on_snapshot(two_agents(t=12.0, mem10=6 * GiB, mem11=3 * GiB))
    assert action.measured
    assert action.released == {10: 2 * GiB, 11: GiB}
    assert action.gpu_released == 3 * GiB
    assert [s for s, a, _ in c.updates if a is action][-1] == MEASURED


def test_unload_is_measured_on_its_gpu(clock):
    fake = FakeDirectory()
    c = make(fake, clock)
    agents = {10: report(10, models=[model("m1")])}
    c.on_snapshot(snap([proc(10, 8 * GiB)], agents))
    action = c.submit(Unload(10, "m1"))
    assert c.wait(3)
    clock.t += 1.0
    # The first snapshot after the answer may have been sampled while it ran: not that one.
    c.on_snapshot(snap([proc(10, 8 * GiB)], agents, t=11.0))
    assert not action.measured
    after = {10: report(10, allocated=GiB, reserved=GiB + (512 << 20), models=[model("m1")])}
    c.on_snapshot(snap([proc(10, 7 * GiB)], after, t=12.0))
    assert action.measured and action.released == GiB and action.gpu_released == GiB
    assert action.cache_after == 512 << 20  # the allocator's cache in that same snapshot


def test_a_process_exiting_mid_request(clock):
    fake = FakeDirectory(block=True)
    c = make(fake, clock)
    c.on_snapshot(two_agents())
    action = c.submit(FreeCache.everywhere())
    fake.gone.add(11)
    fake.gate.set()
    assert c.wait(3)
    assert action.results[10].ok
    assert not action.results[11].ok and action.results[11].error == "agent went away"
    assert action.errors == [(11, "agent went away")]
    clock.t += 1.0
    gone = snap([proc(10, 8 * GiB)], {10: two_agents().agents[10]}, t=12.0)
    c.on_snapshot(gone)
    c.on_snapshot(gone)
    assert action.measured and action.released == {10: 0, 11: None}
    # And a request for it now is refused: it left the snapshot.
    with pytest.raises(RequestError) as err:
        c.submit(CollectGarbage(11))
    assert err.value.code is Refusal.UNKNOWN_PROCESS


def test_gc_answer(clock):
    fake = FakeDirectory()
    c = make(fake, clock)
    c.on_snapshot(two_agents())
    action = c.submit(CollectGarbage(11))
    assert c.wait(3)
    assert action.ok and action.gc_result["collected"] == 7 and fake.calls == [("gc", 11)]
    assert not action.wants_measure


# -- idle models, the pressure policy, the demo ------------------------------------------------------

def test_unload_idle_unloads_every_eligible_model(clock):
    fake = FakeDirectory()
    c = make(fake, clock)
    agents = {10: report(10, models=[model("m1", idle_s=3600), model("m2", idle_s=1)]),
              11: report(11, models=[model("m3", pinned=True, auto_unload_blocker="pinned")])}
    c.on_snapshot(snap([proc(10, 8 * GiB), proc(11, 4 * GiB)], agents))
    actions = c.submit(UnloadIdle(min_idle_s=600.0))
    assert [(a.pid, a.model, a.reason) for a in actions] == [(10, "m1", "idle (from the tray)")]
    assert c.wait(3)


def test_auto_unload_settings_follow_a_new_runner(clock):
    from app.core.policies.pressure import PolicyRunner

    runners = [PolicyRunner(FakeDirectory())]
    c = make(FakeDirectory(), clock, policy_runner=lambda: runners[0])
    applied = c.submit(SetAutoUnload(True, 0.8, 0.7, 600.0, 30.0))
    assert applied.error is None and applied.config.threshold == pytest.approx(0.8)
    assert runners[0].config.min_idle_s == 600.0 and runners[0].config.target == "cpu"
    runners[0] = PolicyRunner(FakeDirectory())
    assert runners[0].config.threshold == pytest.approx(0.90)
    c.on_snapshot(two_agents())
    assert runners[0].config.threshold == pytest.approx(0.8)
    bad = c.submit(SetAutoUnload(True, 0.5, 0.9, 600.0, 30.0))  # re-arm above threshold
    assert bad.error and c.policy_error


def test_settings_wait_for_a_policy(clock):
    c = make(None, clock)
    assert c.submit(SetAutoUnload(False, 0.9, 0.85, 300.0, 30.0)).config is None


def test_with_the_demo_agents(clock):
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.collector import Collector
    from app.core.monitor.demo_source import DemoSource

    source = DemoSource()
    agents = DemoAgents(source)
    collector = Collector(source, agents=agents)
    try:
        snapshot = None
        for _ in range(3):
            snapshot = collector.collect()
        c = AppController(agents)
        c.on_snapshot(snapshot)
        pid = sorted(snapshot.agents)[0]
        action = c.submit(FreeCache.of(pid))
        assert c.wait(5)
        assert action.results[pid].ok and action.freed is not None
        c.close()
    finally:
        collector.close()
