"""The agent on a real GPU (skipped without one, see conftest.py): reported
allocator figures equal the process's own, free-cache lowers NVML's
per-process figure by the cache, and the agent never initialises CUDA."""

from __future__ import annotations

import textwrap
import time

import pytest

from app.core.agents import client as agent_client
from tests.gpu.agent_children import CUDA_CHILD, ROOT, entry_for, read_line, start

MiB = 1024**2

pytestmark = pytest.mark.skipif(
    not (ROOT / "app" / "agent" / "_bootstrap" / "sitecustomize.py").exists(),
    reason="the agent's bootstrap is not there yet")

CPU_CHILD = textwrap.dedent("""
    import json, os, sys, time
    import torch

    model = torch.nn.Linear(64, 64)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    stop = sys.argv[1]
    while not os.path.exists(stop):
        model(torch.randn(4, 64))
        time.sleep(0.01)
    print(json.dumps({"cuda_initialized": torch.cuda.is_initialized()}), flush=True)
""")


def nvml_used(pid: int) -> int | None:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == pid:
                return p.usedGpuMemory
        return None
    finally:
        pynvml.nvmlShutdown()


def test_reported_figures_equal_the_process_own_and_free_cache_lowers_nvml(tmp_path, runtime):
    proc, stop, _ = start(tmp_path, runtime, CUDA_CHILD)
    try:
        own = read_line(proc)
        entry = entry_for(runtime, own["pid"])
        report = agent_client.query_report(entry, timeout_s=10)
        assert report.cuda_initialized is True
        dev = report.device(0)
        assert dev is not None
        assert dev.allocated == own["allocated"]
        assert dev.reserved == own["reserved"]
        cache = own["reserved"] - own["allocated"]
        assert cache >= 400 * MiB
        before = nvml_used(own["pid"])
        if before is None:
            pytest.skip("NVML does not show this pid (PID namespace?)")
        result = agent_client.free_cache(entry, timeout_s=30)
        assert result.ok, result.error
        assert result.reserved_before == own["reserved"]
        assert result.reserved_after == own["allocated"] or result.reserved_after < own["reserved"]
        time.sleep(0.5)
        after = nvml_used(own["pid"])
        assert after is not None
        assert before - after == pytest.approx(cache, rel=0.05)
    finally:
        stop.write_text("stop")
        proc.wait(timeout=60)


def test_agent_never_initialises_cuda(tmp_path, runtime):
    proc, stop, _ = start(tmp_path, runtime, CPU_CHILD)
    try:
        pid = read_line(proc)["pid"]
        entry = entry_for(runtime, pid)
        for _ in range(5):
            report = agent_client.query_report(entry, timeout_s=10)
            assert report.cuda_initialized is False
            assert report.devices == ()
            time.sleep(0.1)
        assert agent_client.collect_garbage(entry, timeout_s=10)["ok"]
        agent_client.free_cache(entry, timeout_s=10)  # must not initialise CUDA either
    finally:
        stop.write_text("stop")
    assert read_line(proc)["cuda_initialized"] is False
    assert proc.wait(timeout=60) == 0
