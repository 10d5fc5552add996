"""OOM post-mortem capture, against the fake at the ``torch.cuda`` boundary.

The headline test runs a real child process (real CPU torch, the agent
started by the bootstrap, the fake installed there), fires the allocator's
OOM observer the way the allocator does, and reads the capture back through
the agent's real socket with the app's client.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import torch

from app.agent import introspect, oom_capture, protocol
from app.agent.eligibility import OptimizerSteps
from app.agent.introspect import CudaWatch
from app.core.agents import client as agent_client
from app.core.agents import registry as agent_registry
from app.core.agents.oom import STAT_KEYS, OomCapture
from tests.fakes import fake_cuda
from tests.fakes.fake_cuda import FakeCuda, GiB, MiB, block, native_stats, segment

from .conftest import PYTHON, REPO, agent_env, short_tmpdir, wait_entry, wait_line


def fragmented_segments() -> list[dict]:
    """800 MiB reserved but free on device 0, in blocks of at most 300 MiB."""
    return [
        segment([block(GiB, "active_allocated"), block(300 * MiB, "inactive"),
                 block(500 * MiB, "active_allocated"), block(200 * MiB, "inactive")]),
        segment([block(64 * MiB, "active_allocated"), block(300 * MiB, "inactive")],
                expandable=False),
        segment([block(8 * GiB, "inactive")], device=1),  # another device: not counted
    ]


@pytest.fixture
def install(monkeypatch):
    def _install(fake: FakeCuda) -> FakeCuda:
        fake_cuda.install(monkeypatch, torch, fake, allocator=True)
        monkeypatch.setattr(CudaWatch, "_attached_process", False)
        monkeypatch.setattr(CudaWatch, "_current", None)
        monkeypatch.setattr(introspect, "_UUIDS", {})
        return fake
    return _install


def watching(fake: FakeCuda, steps: OptimizerSteps | None = None
             ) -> tuple[CudaWatch, list[tuple[str, dict]]]:
    got: list[tuple[str, dict]] = []
    watch = CudaWatch(lambda n, d: got.append((n, d)))
    watch.steps = steps
    watch.activate()
    return watch, got


def counted_stats(allocations: int) -> dict:
    stats = native_stats(3 * GiB, 4 * GiB, retries=1, ooms=0)
    stats["allocation.all.allocated"] = allocations
    return stats


# --------------------------------------------------------------------------
# in this process: what a capture holds


def test_capture_holds_request_stats_and_segment_summary(install):
    fake = install(FakeCuda([counted_stats(100), native_stats(0, 0)]))
    fake.segments = fragmented_segments()
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 10 * MiB)
    finally:
        watch.deactivate()
    [(name, data)] = got
    assert name == "oom"
    # the older keys stay for older apps
    assert (data["alloc"], data["device_allocated"], data["device_free"]) == (
        600 * MiB, 80 * GiB, 10 * MiB)
    cap = OomCapture.from_json(data)
    assert cap is not None and cap.seq == 1 and cap.device == 0 and cap.uuid == "GPU-fake-0"
    assert (cap.request, cap.limit, cap.free) == (600 * MiB, 80 * GiB, 10 * MiB)
    assert set(cap.stats) == set(STAT_KEYS)
    assert cap.stats["allocated"] == 3 * GiB and cap.stats["reserved"] == 4 * GiB
    assert cap.stats["inactive_split"] == 5 * MiB and cap.stats["num_alloc_retries"] == 1
    seg = cap.segments
    assert seg is not None and seg.count == 2 and seg.expandable is False
    assert seg.reserved == GiB + 1364 * MiB
    assert seg.allocated == GiB + 564 * MiB and seg.free == 800 * MiB
    assert seg.largest_free_block == 300 * MiB
    assert cap.fragmented is True  # 800 MiB free, but no block of 600 MiB
    assert cap.thread == "MainThread" and cap.capture_s is not None and cap.errors == ()
    assert cap.step is None  # no optimizer seen
    # the fast nested stats were used, and the plain snapshot (no history on)
    assert "_cuda_memoryStats" in fake.names() and "memory_stats" not in fake.names()
    assert [c[3] for c in fake.calls if c[0] == "memory_snapshot"] == [(True,)]
    [kept] = watch.ooms.captures()  # what the report's "ooms" lists: the same capture
    assert kept == {k: data[k] for k in kept} and kept["seq"] == 1
    protocol.encode(protocol.event(name, data))


def test_request_larger_than_all_free_memory_is_not_fragmentation(install):
    fake = install(FakeCuda([counted_stats(1)]))
    fake.segments = fragmented_segments()
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 2 * GiB, 80 * GiB, 10 * MiB)
    finally:
        watch.deactivate()
    assert OomCapture.from_json(got[0][1]).fragmented is False


def test_observer_never_raises_when_snapshot_and_stats_raise(install):
    fake = install(FakeCuda([native_stats(GiB, GiB)]))
    fake.stats_error = RuntimeError("stats boom")
    fake.snapshot_error = RuntimeError("snapshot boom")
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 4 * GiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    [(name, data)] = got
    cap = OomCapture.from_json(data)
    assert cap is not None and cap.request == 4 * GiB
    assert all(v is None for v in cap.stats.values()) and cap.segments is None
    assert any("stats boom" in e for e in cap.errors)
    assert any("snapshot boom" in e for e in cap.errors)
    assert cap.fragmented is None
    assert watch.oom_events == 1


def test_capture_failing_half_way_still_sends_the_event(install, monkeypatch):
    install(FakeCuda([native_stats(GiB, GiB)]))

    def broken(*args: object) -> None:
        raise MemoryError("no memory for the capture itself")

    monkeypatch.setattr(oom_capture.OomLog, "_capture", broken)
    watch, got = watching(FakeCuda())
    try:
        CudaWatch._observer(0, GiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    [(name, data)] = got
    assert name == "oom" and data["alloc"] == GiB and watch.ooms.captures() == []


def test_a_retry_of_the_same_request_is_captured_once(install):
    fake = install(FakeCuda([counted_stats(100)]))
    fake.segments = fragmented_segments()
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 0)
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 0)  # retried: no allocation between
        fake.stats[0]["allocation.all.allocated"] = 101  # training went on ...
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 0)  # ... and failed again: a new OOM
        CudaWatch._observer(0, 700 * MiB, 80 * GiB, 0)  # another size: a new OOM
    finally:
        watch.deactivate()
    assert [d["seq"] for _, d in got] == [1, 2, 3]
    assert [c["request"] for c in watch.ooms.captures()] == [600 * MiB, 600 * MiB, 700 * MiB]
    assert watch.oom_events == 4 and watch.ooms.repeats == 1


def test_without_an_allocation_count_a_retry_is_the_same_thread_soon_after(install):
    fake = install(FakeCuda([native_stats(GiB, GiB)]))  # no "allocation.all.allocated"
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, GiB, 80 * GiB, 0)
        CudaWatch._observer(0, GiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    assert len(got) == 1 and watch.oom_events == 2


def test_report_keeps_the_last_eight_oldest_first(install):
    fake = install(FakeCuda([counted_stats(0)]))
    watch, _got = watching(fake)
    try:
        for i in range(10):
            fake.stats[0]["allocation.all.allocated"] = i
            CudaWatch._observer(0, (i + 1) * MiB, 80 * GiB, 0)
        report = introspect.build_report("t", None, watch, {"models": False})
    finally:
        watch.deactivate()
    assert [c["seq"] for c in report["ooms"]] == list(range(3, 11))
    assert report["oom_events"] == 10


def test_history_on_takes_the_snapshot_without_traces(install):
    fake = install(FakeCuda([counted_stats(1)]))
    fake.segments = fragmented_segments()
    fake.history_enabled = True  # the user's own recording
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    assert [c[3] for c in fake.calls if c[0] == "memory_snapshot"] == [(False,)]
    assert OomCapture.from_json(got[0][1]).segments.largest_free_block == 300 * MiB
    assert fake.history_calls == []  # the user's recording is left alone


def test_history_on_and_an_older_torch_skips_the_segments(install, monkeypatch):
    fake = install(FakeCuda([counted_stats(1)]))
    fake.history_enabled = True
    calls = []

    def old_snapshot(mempool_id: object = None) -> list:  # no include_traces
        calls.append(mempool_id)
        raise AssertionError("must not be called: it would convert the whole history")

    monkeypatch.setattr(torch.cuda, "memory_snapshot", old_snapshot)
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    cap = OomCapture.from_json(got[0][1])
    assert cap.segments is None and calls == []
    assert any("history" in e for e in cap.errors)
    assert cap.stats["allocated"] == 3 * GiB


def test_segment_walk_is_bounded(install, monkeypatch):
    fake = install(FakeCuda([counted_stats(1)]))
    fake.segments = [segment([block(2 * MiB, "inactive")]) for _ in range(50)]
    monkeypatch.setattr(oom_capture, "MAX_SEGMENTS", 10)
    watch, got = watching(fake)
    try:
        CudaWatch._observer(0, 600 * MiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    cap = OomCapture.from_json(got[0][1])
    assert cap.segments.count == 10 and cap.segments.reserved == 20 * MiB
    assert any("stopped after 10 segments" in e for e in cap.errors)


def test_capture_names_the_optimizer_step(install):
    # built before the fake: with torch._C's CUDA names patched in, torch
    # believes it was compiled with CUDA and a first import of dynamo fails
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    fake = install(FakeCuda([counted_stats(1)]))
    steps = OptimizerSteps()
    steps.memory.torch = torch
    for _ in range(7):
        steps.on_step(opt, (), {})
    watch, got = watching(fake, steps)
    try:
        CudaWatch._observer(0, MiB, 80 * GiB, 0)
    finally:
        watch.deactivate()
    assert got[0][1]["step"] == 7


# --------------------------------------------------------------------------
# a real child process, read back by the app's client over the real socket

CHILD = r'''
import os, sys, time
import torch
from tests.fakes import fake_cuda
from tests.fakes.fake_cuda import FakeCuda, GiB, MiB, block, native_stats, segment

stats = native_stats(3 * GiB, 4 * GiB, retries=2)
stats["allocation.all.allocated"] = 500
fake = FakeCuda([stats])
fake.segments = [segment([block(GiB, "active_allocated"), block(300 * MiB, "inactive"),
                          block(500 * MiB, "active_allocated"), block(200 * MiB, "inactive")])]

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(5):  # real optimizer steps (CPU parameters: counted, never sampled)
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
fake_cuda.install(fake_cuda.Patcher(), torch, fake, allocator=True)  # CUDA "initialised" now
deadline = time.monotonic() + 30
while not fake.observers and time.monotonic() < deadline:
    time.sleep(0.02)  # the agent's tick attaches the observer once CUDA looks initialised
print("ATTACHED %d" % len(fake.observers), flush=True)
fire = sys.argv[1]
while not os.path.exists(fire):
    time.sleep(0.02)
observer = fake.observers[0]
observer(0, 450 * MiB, 80 * GiB, 12 * MiB)  # what the allocator does before raising
observer(0, 450 * MiB, 80 * GiB, 12 * MiB)  # its retry: the same OOM
print("FIRED", flush=True)
sys.stdin.readline()
'''


def test_oom_capture_in_a_real_child_read_back_by_the_apps_client():
    runtime = short_tmpdir()
    fire = os.path.join(runtime, "fire")
    env = agent_env(runtime, PYTHONPATH=REPO)
    proc = subprocess.Popen([PYTHON, "-c", CHILD, fire], env=env, cwd=runtime,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_line(proc, "ATTACHED ") == "1"
        wait_entry(runtime, proc.pid)
        [entry] = [e for e in agent_registry.read_registry(runtime) if e.pid == proc.pid]
        from app.core.agents.connection import AgentConnection
        with AgentConnection(entry, 10.0) as sub:
            assert sub.call("subscribe", {"events": ["oom"]}) == {"events": ["oom"]}
            open(fire, "w").close()
            wait_line(proc, "FIRED")
            report = agent_client.query_report(entry, timeout_s=10.0, models=False)
            sub.call("ping", {}, 10.0)
            pushed = [e for e in sub.events() if e.get("event") == "oom"]
        assert report.oom_events == 2
        [cap] = report.ooms
        assert cap.request == 450 * MiB and cap.limit == 80 * GiB and cap.free == 12 * MiB
        assert cap.device == 0 and cap.uuid == "GPU-fake-0" and cap.thread == "MainThread"
        assert cap.stats["allocated"] == 3 * GiB and cap.stats["num_alloc_retries"] == 2
        assert cap.segments is not None and cap.segments.free == 500 * MiB
        assert cap.segments.largest_free_block == 300 * MiB
        assert cap.fragmented is True
        assert cap.step == 5
        assert report.steps is not None and report.steps.count == 5
        assert report.steps.samples == ()  # CPU parameters: nothing to sample
        [event] = pushed  # the retry was not pushed again
        assert OomCapture.from_json(event["data"]) == cap
        assert event["data"]["alloc"] == 450 * MiB  # the older keys too
    finally:
        try:
            proc.communicate("\n", timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        shutil.rmtree(runtime, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr



def test_observer_attached_as_cuda_initialises(install, monkeypatch):
    fake = install(FakeCuda([counted_stats(1)], initialized=False))
    monkeypatch.setattr(CudaWatch, "_queued_process", False)
    monkeypatch.setattr(torch.cuda, "_queued_calls", [])
    watch, _got = watching(fake)
    try:
        watch.attach_at_init(torch)
        watch.attach_at_init(torch)  # once per process
        assert fake.observers == [] and len(torch.cuda._queued_calls) == 1
        fake.initialized = True  # what torch's lazy init does with its queue:
        for queued, _stack in torch.cuda._queued_calls:
            queued()
        assert fake.observers == [CudaWatch._observer]
        watch.tick(torch)  # the tick finds it attached: never twice
        assert fake.names().count("attach_oom_observer") == 1
    finally:
        watch.deactivate()


def test_a_failing_attach_at_init_never_breaks_cudas_initialisation(install, monkeypatch):
    fake = install(FakeCuda([counted_stats(1)], initialized=False))
    monkeypatch.setattr(CudaWatch, "_queued_process", False)
    monkeypatch.setattr(torch.cuda, "_queued_calls", [])

    def refuse(fn: object) -> None:
        raise RuntimeError("no observers in this build")

    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", refuse)
    watch, _got = watching(fake)
    try:
        watch.attach_at_init(torch)
        [(queued, _stack)] = torch.cuda._queued_calls
        fake.initialized = True
        assert queued() is None  # raised nothing into torch's _lazy_init
    finally:
        watch.deactivate()
