"""Each advice rule, from the numbers; the TensorFlow rule reads a real child's maps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.core.agents.types import AgentReport, DeviceMemory, ModelInfo
from app.core.diagnosis import advice
from app.core.diagnosis.tf_maps import TfDetector, maps_mention
from app.core.monitor.samples import GpuSample, ProcessSample

MiB = 1024**2
GiB = 1024**3
NOW = 10_000.0
CFG = advice.AdviceConfig()


def gpu(*procs: ProcessSample, total: int = 24 * GiB) -> GpuSample:
    return GpuSample(0, "GPU", "GPU-abc", total, 10 * GiB, total - 10 * GiB, processes=procs)


def proc(pid: int = 100, mem: int | None = 6 * GiB, sm: float | None = 0.0) -> ProcessSample:
    return ProcessSample(pid, mem, sm, command="python job.py", create_time=5.0)


def device(allocated: int, reserved: int, split: int = 0, retries: int = 0) -> DeviceMemory:
    return DeviceMemory(0, allocated, reserved, inactive_split=split, num_alloc_retries=retries,
                        num_ooms=0, uuid="abc")


def model(idle_s: float | None, nbytes: int = 2 * GiB, training: str | None = None,
          mid: str = "m1") -> ModelInfo:
    return ModelInfo(mid, f"net-{mid}", "Net", 1, nbytes, 0, "cuda:0", "float16", False,
                     None, bytes_by_device={"cuda:0": {"params": nbytes}},
                     idle_since=None if idle_s is None else NOW - idle_s,
                     training_evidence=training)


def report(*models: ModelInfo, dev: DeviceMemory | None = None) -> AgentReport:
    return AgentReport(100, ("python", "job.py"), None, "2.5", "loaded", True, "native",
                       (dev,) if dev else (), models, received_at=NOW)


def view(p: ProcessSample, rep: AgentReport | None = None, dev: DeviceMemory | None = None,
         no_kernels_s: float | None = None, retries_rising: bool = False) -> advice.ProcessView:
    return advice.ProcessView(gpu(p), p, rep, dev, no_kernels_s, retries_rising)


def test_idle_cache_larger_than_live_tensors_gives_a_free_cache_fix():
    dev = device(1 * GiB, 4 * GiB)
    d = advice.idle_cache(view(proc(), report(model(600), dev=dev), dev, 300.0), NOW, CFG)
    assert d.kind == "idle_cache" and d.fixes[0].action == "free_cache"
    assert d.fixes[0].gain_bytes == 3 * GiB
    # Busy (a forward a second ago, kernels running): no advice.
    assert advice.idle_cache(view(proc(sm=80), report(model(1), dev=dev), dev, None),
                             NOW, CFG) is None
    # Cache smaller than live tensors: no advice.
    small = device(3 * GiB, 4 * GiB)
    assert advice.idle_cache(view(proc(), report(model(600), dev=small), small, 300.0),
                             NOW, CFG) is None


def test_fragmentation_from_split_blocks_or_rising_retries():
    split = device(2 * GiB, 6 * GiB, split=2 * GiB)
    d = advice.fragmentation(view(proc(), report(dev=split), split), CFG)
    assert d.kind == "fragmentation" and d.fixes[0].action == "expandable_segments"
    assert "expandable_segments:True" in d.fixes[0].text and d.fixes[0].gain_bytes == 2 * GiB
    retries = device(2 * GiB, 6 * GiB, split=10 * MiB, retries=7)
    assert advice.fragmentation(view(proc(), report(dev=retries), retries,
                                     retries_rising=True), CFG) is not None
    assert advice.fragmentation(view(proc(), report(dev=retries), retries), CFG) is None


def test_idle_process_needs_zero_sm_for_long_and_none_is_unknown():
    d = advice.idle_process(view(proc(), no_kernels_s=2 * 3600), CFG)
    assert d.kind == "idle_process" and d.fixes[0].action == "stop_process"
    assert d.fixes[0].gain_bytes == 6 * GiB
    assert advice.idle_process(view(proc(), no_kernels_s=600), CFG) is None
    assert advice.idle_process(view(proc(sm=None), no_kernels_s=None), CFG) is None


def test_idle_models_give_unload_fixes_largest_first_and_skip_training_ones():
    rep = report(model(3600, 1 * GiB, mid="m1"), model(7200, 3 * GiB, mid="m2"),
                 model(9000, 5 * GiB, training="train mode", mid="m3"), model(5, mid="m4"),
                 dev=device(9 * GiB, 10 * GiB))
    d = advice.idle_models(view(proc(), rep, rep.devices[0]), NOW, CFG)
    assert d.kind == "idle_model"
    assert [(f.action, f.model, f.gain_bytes) for f in d.fixes] == [
        ("unload_model", "m2", 3 * GiB), ("unload_model", "m1", 1 * GiB)]


def test_tensorflow_rule_needs_the_library_and_most_of_the_card():
    big = proc(mem=23 * GiB)
    d = advice.tensorflow(view(big), True, CFG)
    assert d.kind == "tensorflow" and d.fixes[0].action == "tf_memory_growth"
    assert advice.tensorflow(view(big), None, CFG) is None  # unknown: nothing said
    assert advice.tensorflow(view(big), False, CFG) is None
    assert advice.tensorflow(view(proc(mem=4 * GiB)), True, CFG) is None


CHILD = """
import mmap, sys, time
with open(sys.argv[1], "r+b") as fh:
    m = mmap.mmap(fh.fileno(), 4096)
    print("ready", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def mapping_child(tmp_path):
    started = []

    def start(name: str) -> int:
        lib = tmp_path / name
        lib.write_bytes(b"\0" * 4096)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(lib)],
                                 stdout=subprocess.PIPE, text=True)
        started.append(child)
        assert child.stdout.readline().strip() == "ready"
        return child.pid

    yield start
    for child in started:
        child.kill()
        child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/maps")
def test_a_real_process_mapping_tensorflows_library_is_detected(mapping_child):
    tf_pid = mapping_child("libtensorflow_framework.so.2")
    other_pid = mapping_child("libtorch_cuda.so")
    assert maps_mention(tf_pid) is True
    assert maps_mention(other_pid) is False
    detector = TfDetector()
    assert detector.is_tensorflow(tf_pid, 1.0) is True
    assert detector.is_tensorflow(other_pid, 1.0) is False
    assert maps_mention(2**22 + 12345) is None  # no such process: unknown
