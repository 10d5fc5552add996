"""Recording allocations through the controller: checked against the snapshot,
one at a time per process, run on a worker, the agent's answer in the record."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from app.core.agents.directory import AgentDirectory
from app.core.agents.recording import AllocationSite, RecordResult
from app.core.agents.types import AgentReport
from app.core.control.controller import FINISHED, STARTED, AppController
from app.core.control.records import RecordAction
from app.core.control.requests import RecordAllocations, Refusal, RequestError
from app.core.control.work import RECORD_MARGIN_S
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB, MiB


def report(pid, cuda=True):
    return AgentReport(pid=pid, argv=("python", "train.py"), devices=(), models=(),
                       python="3.11", torch="2.5.1", torch_status="loaded",
                       cuda_initialized=cuda, allocator_backend="native")


def snap(agents):
    procs = (ProcessSample(10, GiB, name="python", command="python train.py"),
             ProcessSample(12, GiB, name="python", command="python other.py"))
    gpu = GpuSample(index=0, name="GPU", uuid="GPU-0", memory_total=24 * GiB,
                    memory_used=2 * GiB, memory_free=22 * GiB, processes=procs)
    return Snapshot(1000.0, 10.0, "nvml", "550", (gpu,), agents=agents)


class Recorder(AgentDirectory):
    def __init__(self, raises=None):
        self.gate = threading.Event()
        self.calls = []
        self.threads = []
        self.raises = raises

    def reports(self):
        return {}

    def entries(self):
        return []

    def free_cache(self, pid, timeout_s=30.0):
        raise AssertionError

    def collect_garbage(self, pid, timeout_s=30.0):
        raise AssertionError

    def record(self, pid, seconds, max_entries=None, timeout_s=None):
        self.calls.append((pid, seconds, max_entries, timeout_s))
        self.threads.append(threading.get_ident())
        self.gate.wait(5)
        if self.raises:
            raise self.raises
        return RecordResult(pid, True, path="/tmp/x.pickle", entries=3, seconds=seconds,
                            sites=(AllocationSite("a.py:1 in f", 8 * MiB, 3, MiB),))


@pytest.fixture
def controller():
    directory = Recorder()
    c = AppController(directory)
    c.on_snapshot(snap({10: report(10), 11: report(11, cuda=False)}))
    yield c, directory
    directory.gate.set()
    c.wait(3)
    c.close()


def test_a_recording_runs_on_a_worker_and_its_answer_lands_in_the_record(controller):
    c, directory = controller
    heard = []
    c.subscribe(lambda u: heard.append((u.stage, u.action)))
    action = c.submit(RecordAllocations(10, 5, max_entries=1000))
    assert isinstance(action, RecordAction) and action.label == "train.py (10)"
    assert heard == [(STARTED, action)]
    assert c.recording() == {10}
    with pytest.raises(RequestError) as busy:
        c.submit(RecordAllocations(10, 5))
    assert busy.value.code is Refusal.BUSY
    left = action.seconds_left(action.started_at + 2)
    assert left == pytest.approx(3.0)
    directory.gate.set()
    assert c.wait(3)
    assert directory.calls == [(10, 5.0, 1000, 5.0 + RECORD_MARGIN_S)]
    assert directory.threads[0] != threading.get_ident()
    assert heard[-1] == (FINISHED, action)
    assert action.done and action.ok and action.result.sites[0].bytes == 8 * MiB
    assert action.seconds_left(0.0) is None
    assert c.recording() == set()
    assert c.busy_pids() == set() and c.busy_models() == set()  # nothing else is held


@pytest.mark.parametrize("request_, code", [
    (RecordAllocations(10, 0), Refusal.INVALID),
    (RecordAllocations(10, -5), Refusal.INVALID),
    (RecordAllocations(10, float("nan")), Refusal.INVALID),
    (RecordAllocations(10, 3600), Refusal.INVALID),
    (RecordAllocations(10, 5, max_entries=0), Refusal.INVALID),
    (RecordAllocations(11, 5), Refusal.NO_CUDA),
    (RecordAllocations(12, 5), Refusal.NO_AGENT),
    (RecordAllocations(99, 5), Refusal.UNKNOWN_PROCESS),
])
def test_bad_requests_are_refused_and_change_nothing(controller, request_, code):
    c, directory = controller
    with pytest.raises(RequestError) as err:
        c.submit(request_)
    assert err.value.code is code
    assert c.running() == [] and directory.calls == []


def test_without_a_directory_recording_is_unavailable():
    c = AppController(None)
    c.on_snapshot(snap({10: report(10)}))
    with pytest.raises(RequestError) as err:
        c.submit(RecordAllocations(10, 5))
    assert err.value.code is Refusal.UNAVAILABLE


def test_an_agent_that_fails_gives_an_answer_not_an_exception():
    directory = Recorder(raises=ConnectionResetError("agent went away"))
    directory.gate.set()
    c = AppController(directory)
    c.on_snapshot(snap({10: report(10)}))
    action = c.submit(RecordAllocations(10, 1))
    assert c.wait(3)
    assert not action.ok and action.result.error == "agent went away"
    c.on_snapshot(dataclasses.replace(snap({10: report(10)}), monotonic=20.0))
    c.close()
