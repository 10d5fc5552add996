"""Collector: one sampler tick, which never raises."""

from __future__ import annotations

import dataclasses
import getpass
import subprocess
import sys
import types

import psutil
import pytest

import app.core.monitor.collector as collector_mod
from app.core.monitor.collector import Collector
from app.core.monitor.demo_source import DemoSource
from app.core.monitor.host_processes import HostProcessReader
from app.core.monitor.samples import DeviceState, GpuSample, HostStatus, ProcessSample, Snapshot
from app.core.monitor.source import GpuSource, SourceUnavailable
from tests.fakes.directories import EmptyDirectory

GiB = 1024**3


class UntouchablePsutil(types.ModuleType):
    """A psutil that fails the test on any use (except the exception classes)."""

    NoSuchProcess = psutil.NoSuchProcess
    AccessDenied = psutil.AccessDenied

    def __init__(self) -> None:
        super().__init__("psutil")

    def __getattr__(self, name):
        pytest.fail(f"psutil.{name} used")


class FakeMonotonic:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """Drive the collector's time.monotonic by hand (only inside the collector)."""
    fake = FakeMonotonic()
    fake_time = types.SimpleNamespace(monotonic=fake, time=collector_mod.time.time,
                                      perf_counter=collector_mod.time.perf_counter)
    monkeypatch.setattr(collector_mod, "time", fake_time)
    return fake


def one_gpu(*procs: ProcessSample) -> tuple[GpuSample, ...]:
    return (GpuSample(index=0, name="Fake GPU", uuid="GPU-fake", memory_total=24 * GiB,
                      memory_used=4 * GiB, memory_free=20 * GiB, processes=tuple(procs)),)


class ScriptedSource(GpuSource):
    """A GPU source whose open/read results the test sets."""

    name = "fake"

    def __init__(self) -> None:
        self.open_error: BaseException | None = None
        self.read_error: BaseException | None = None
        self.gpus = one_gpu()
        self.opens = self.reads = self.closes = 0

    def open(self) -> None:
        self.opens += 1
        if self.open_error is not None:
            raise self.open_error

    def read(self):
        self.reads += 1
        if self.read_error is not None:
            raise self.read_error
        return self.gpus

    def driver_version(self):
        return "555.42"

    def close(self) -> None:
        self.closes += 1


def assert_error_snapshot(snap: Snapshot, reason: str) -> None:
    assert isinstance(snap, Snapshot)
    assert snap.error is not None and reason in snap.error
    assert snap.gpus == ()
    assert snap.sample_cost >= 0.0


# -- demo ---------------------------------------------------------------------

def test_demo_source_snapshot_without_touching_psutil():
    ps = UntouchablePsutil()
    col = Collector(DemoSource(seed=1), host=HostProcessReader(ps))
    for _ in range(3):
        snap = col.collect()
        assert snap.source == "demo"
        assert snap.error is None
        assert snap.driver_version == "demo"
        assert len(snap.gpus) == 2
        procs = [p for g in snap.gpus for p in g.processes]
        assert procs and all(p.host_status is HostStatus.SIMULATED for p in procs)
        assert all(p.name and p.command and p.user for p in procs)
        assert snap.sample_cost >= 0.0
    col.close()


def test_demo_source_without_a_host_reader_creates_none():
    col = Collector(DemoSource(seed=1))
    snap = col.collect()
    assert snap.error is None and col._host is None


# -- failures -----------------------------------------------------------------

def test_open_failure_gives_error_snapshot_and_waits_before_retrying(clock):
    src = ScriptedSource()
    src.open_error = SourceUnavailable("NVIDIA driver not loaded", code="driver_not_loaded")
    col = Collector(src, host=HostProcessReader(UntouchablePsutil()))
    snap = col.collect()
    assert_error_snapshot(snap, "NVIDIA driver not loaded")
    assert snap.source == "fake"
    assert src.opens == 1

    # Within RETRY_AFTER_S: the same reason, no new attempt.
    for dt in (0.1, 1.0, Collector.RETRY_AFTER_S - 0.01):
        clock.now = 100.0 + dt
        assert_error_snapshot(col.collect(), "NVIDIA driver not loaded")
    assert src.opens == 1
    assert src.reads == 0

    # After RETRY_AFTER_S it tries again; still failing: a new wait starts.
    clock.now = 100.0 + Collector.RETRY_AFTER_S
    assert_error_snapshot(col.collect(), "NVIDIA driver not loaded")
    assert src.opens == 2
    clock.now += 1.0
    col.collect()
    assert src.opens == 2

    # The driver is back: the next attempt works and sampling resumes.
    src.open_error = None
    clock.now += Collector.RETRY_AFTER_S
    snap = col.collect()
    assert snap.error is None
    assert snap.gpus == src.gpus
    assert snap.driver_version == "555.42"
    assert src.opens == 3
    clock.now += 0.25
    assert col.collect().error is None
    assert src.opens == 3  # opened once, read every tick
    assert src.reads == 2


def test_retry_immediately_when_retry_after_is_zero(monkeypatch):
    monkeypatch.setattr(Collector, "RETRY_AFTER_S", 0.0)
    src = ScriptedSource()
    src.open_error = SourceUnavailable("no library")
    col = Collector(src)
    assert_error_snapshot(col.collect(), "no library")
    assert_error_snapshot(col.collect(), "no library")
    assert src.opens == 2
    src.open_error = None
    snap = col.collect()
    assert snap.error is None and len(snap.gpus) == 1


def test_source_unavailable_on_read_closes_and_reopens_later(clock):
    src = ScriptedSource()
    col = Collector(src, host=HostProcessReader(UntouchablePsutil()))
    assert col.collect().error is None
    src.read_error = SourceUnavailable("GPU driver vanished")
    clock.now += 0.25
    assert_error_snapshot(col.collect(), "GPU driver vanished")
    assert src.closes == 1
    src.read_error = None
    clock.now += 1.0
    assert_error_snapshot(col.collect(), "GPU driver vanished")  # waiting
    assert src.opens == 1
    clock.now += Collector.RETRY_AFTER_S
    assert col.collect().error is None
    assert src.opens == 2


def test_unexpected_exception_in_read_is_an_error_snapshot_and_sampling_goes_on(clock, caplog):
    src = ScriptedSource()
    col = Collector(src, host=HostProcessReader(UntouchablePsutil()))
    src.read_error = ZeroDivisionError("division by zero")
    snap = col.collect()
    assert_error_snapshot(snap, "ZeroDivisionError")
    assert "division by zero" in snap.error
    assert "source read failed" in caplog.text
    # Keeps going: more ticks, no exception, and recovery once reads work.
    src.read_error = None
    clock.now += Collector.RETRY_AFTER_S + 0.1
    snap = col.collect()
    assert snap.error is None and len(snap.gpus) == 1


def test_unexpected_exception_in_open_is_an_error_snapshot(clock):
    src = ScriptedSource()
    src.open_error = RuntimeError("boom")
    col = Collector(src)
    assert_error_snapshot(col.collect(), "RuntimeError: boom")


def test_failing_close_of_a_failed_source_is_swallowed(clock):
    src = ScriptedSource()
    col = Collector(src, host=HostProcessReader(UntouchablePsutil()))
    col.collect()

    def bad_close():
        raise OSError("close failed")

    src.close = bad_close
    src.read_error = SourceUnavailable("gone")
    assert_error_snapshot(col.collect(), "gone")


def test_open_raises_with_the_reason():
    src = ScriptedSource()
    src.open_error = SourceUnavailable("NVML library not found", code="no_library")
    col = Collector(src)
    with pytest.raises(SourceUnavailable) as info:
        col.open()
    assert info.value.reason == "NVML library not found"
    assert info.value.code == "no_library"


def test_close_is_safe_twice():
    src = ScriptedSource()
    col = Collector(src, host=HostProcessReader(UntouchablePsutil()))
    col.collect()
    col.close()
    col.close()
    assert src.closes == 1


# -- host enrichment ----------------------------------------------------------

@pytest.fixture
def child():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()


def test_enrichment_fills_host_fields_for_a_real_child(child):
    src = ScriptedSource()
    src.gpus = one_gpu(ProcessSample(pid=child.pid, gpu_memory=2 * GiB))
    col = Collector(src)  # a source that wants host details gets the real psutil
    first = col.collect()
    [p] = first.gpus[0].processes
    truth = psutil.Process(child.pid)
    assert p.host_status is HostStatus.OK
    assert p.gpu_memory == 2 * GiB
    assert p.name == truth.name()
    assert p.user == getpass.getuser()
    assert p.command == " ".join(truth.cmdline())
    assert p.create_time == pytest.approx(truth.create_time(), abs=0.01)
    assert p.host_rss and p.host_rss > 0
    assert p.cpu_percent is None  # first sight
    [p2] = col.collect().gpus[0].processes
    assert p2.cpu_percent is not None and p2.cpu_percent >= 0.0
    # Everything else about the GPU is passed through untouched.
    g = first.gpus[0]
    assert (g.memory_used, g.memory_total, g.uuid) == (4 * GiB, 24 * GiB, "GPU-fake")


def test_enrichment_prunes_pids_the_driver_no_longer_reports(child):
    src = ScriptedSource()
    src.gpus = one_gpu(ProcessSample(pid=child.pid, gpu_memory=2 * GiB))
    host = HostProcessReader()
    col = Collector(src, host=host)
    col.collect()
    assert child.pid in host._entries
    src.gpus = one_gpu()
    col.collect()
    assert host._entries == {}


def test_failing_host_reader_does_not_lose_the_tick(clock, caplog):
    class BrokenReader(HostProcessReader):
        def __init__(self) -> None:
            super().__init__(UntouchablePsutil())

        def enrich(self, processes):
            raise OSError("weird /proc")

        def prune(self, live_pids):
            raise ValueError("also broken")

    src = ScriptedSource()
    raw = ProcessSample(pid=4242, gpu_memory=1 * GiB)
    src.gpus = one_gpu(raw)
    col = Collector(src, host=BrokenReader())
    snap = col.collect()
    assert snap.error is None
    assert snap.gpus[0].processes == (raw,)  # host fields stay unknown (None)
    assert snap.gpus[0].processes[0].name is None
    assert "host details" in caplog.text
    assert col.collect().error is None  # and the next tick too


class RecordingAgents(EmptyDirectory):
    """An AgentDirectory that records start/close and returns fixed reports."""

    def __init__(self) -> None:
        self.starts = self.closes = self.calls = 0

    def reports(self):
        self.calls += 1
        return {4242: "report"}

    def start(self):
        self.starts += 1

    def close(self):
        self.closes += 1


def test_agents_are_started_attached_to_every_snapshot_and_closed(clock):
    agents = RecordingAgents()
    source = ScriptedSource()
    collector = Collector(source, agents=agents)
    collector.open()
    assert agents.starts == 1
    assert collector.collect().agents == {4242: "report"}
    source.read_error = SourceUnavailable("driver gone")
    snap = collector.collect()
    assert snap.error and snap.agents == {4242: "report"}  # also on error snapshots
    source.read_error = None
    clock.now += 10
    collector.collect()
    assert agents.starts == 1  # reopening the source does not restart the agents
    collector.close()
    collector.close()
    assert agents.closes == 1


def test_without_agents_snapshots_have_none():
    collector = Collector(DemoSource(seed=1))
    assert collector.collect().agents == {}
    collector.close()


def test_default_agents_for_a_non_demo_source_is_the_hub():
    from app.core.agents.hub import AgentHub
    from app.core.monitor.collector import default_agents_for

    assert isinstance(default_agents_for(ScriptedSource()), AgentHub)


def _with_notes(gpus, **fields):
    return tuple(dataclasses.replace(g, **fields) for g in gpus)


def test_a_process_list_failing_for_a_tick_keeps_the_host_cache(child):
    src = ScriptedSource()
    listed = one_gpu(ProcessSample(pid=child.pid, gpu_memory=2 * GiB))
    src.gpus = listed
    host = HostProcessReader()
    col = Collector(src, host=host)
    col.collect()
    # No permission this tick: the list is unknown, not empty; the process stays known.
    src.gpus = _with_notes(one_gpu(), notes={"processes": "n/a (no permission)"})
    col.collect()
    assert child.pid in host._entries
    src.gpus = listed
    [proc] = col.collect().gpus[0].processes
    assert proc.cpu_percent is not None  # its CPU baseline survived the gap


def test_lists_that_never_come_do_not_hold_pruning_back(child):
    src = ScriptedSource()
    host = HostProcessReader()
    col = Collector(src, host=host)
    src.gpus = one_gpu(ProcessSample(pid=child.pid, gpu_memory=2 * GiB))
    col.collect()
    # A MIG parent (its processes are on its MIG devices) and a lost GPU: the process left.
    mig_parent = _with_notes(one_gpu(), notes={"processes": "n/a (see MIG devices)"})
    lost = _with_notes(one_gpu(), state=DeviceState.LOST, index=1)
    src.gpus = mig_parent + lost
    col.collect()
    assert host._entries == {}
