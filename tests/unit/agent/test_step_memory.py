"""Step counting and live bytes after optimizer steps (the step post-hook)."""

from __future__ import annotations

import shutil
import time

import pytest
import torch

from app.agent import runtime, step_memory
from app.agent.eligibility import OptimizerSteps
from tests.fakes import fake_cuda
from tests.fakes.fake_cuda import FakeCuda, GiB, native_stats

from .conftest import Client, short_tmpdir


class Param:
    """A parameter stand-in: only its device is read."""

    def __init__(self, device: torch.device) -> None:
        self.device = device


class Opt:
    """An optimizer stand-in (weak-referenceable, like a real one)."""

    def __init__(self, device: str) -> None:
        self.param_groups = [{"params": [Param(torch.device(device))]}]


@pytest.fixture
def steps():
    s = OptimizerSteps()
    s.memory.torch = torch
    return s


@pytest.fixture
def fake(monkeypatch):
    f = FakeCuda([native_stats(GiB, 2 * GiB), native_stats(3 * GiB, 4 * GiB)])
    fake_cuda.install(monkeypatch, torch, f, allocator=True)
    return f


def test_cuda_step_is_sampled_on_the_optimizers_device_at_most_once_a_second(steps, fake):
    opt = Opt("cuda:1")
    for _ in range(30):
        steps.on_step(opt, (), {})
    report = steps.to_json()
    assert report["count"] == 30
    [sample] = report["samples"]
    assert sample["step"] == 1 and sample["device"] == 1 and sample["allocated"] == 3 * GiB
    assert isinstance(sample["time"], float)
    # the fast nested stats, on that device; never the public flat ones
    assert [c[3] for c in fake.calls if c[0] == "_cuda_memoryStats"] == [(1,)]
    assert "memory_stats" not in fake.names()


def test_samples_follow_allocated_and_keep_the_last_120(steps, fake, monkeypatch):
    monkeypatch.setattr(step_memory, "SAMPLE_INTERVAL_S", 0.0)
    opt = Opt("cuda:0")
    for i in range(200):
        fake.stats[0]["allocated_bytes.all.current"] = GiB + i
        steps.on_step(opt, (), {})
    samples = steps.to_json()["samples"]
    assert len(samples) == step_memory.MAX_SAMPLES
    assert [s["step"] for s in samples] == list(range(81, 201))
    assert [s["allocated"] for s in samples] == [GiB + i for i in range(80, 200)]


def test_fallback_to_memory_stats_when_the_fast_path_fails(steps, fake, monkeypatch):
    def broken(device: int) -> dict:
        raise RuntimeError("no nested stats in this build")

    monkeypatch.setattr(torch._C, "_cuda_memoryStats", broken)
    steps.on_step(Opt("cuda:0"), (), {})
    assert steps.to_json()["samples"][0]["allocated"] == GiB
    assert "memory_stats" in fake.names()


def test_no_sample_before_cuda_is_initialised(steps, fake):
    fake.initialized = False
    for _ in range(3):
        steps.on_step(Opt("cuda:0"), (), {})
    assert steps.to_json() == {"count": 3, "samples": []}
    assert set(fake.names()) <= {"is_initialized"}


def test_cpu_parameters_are_counted_never_sampled(steps, fake):
    steps.on_step(Opt("cpu"), (), {})
    assert steps.to_json() == {"count": 1, "samples": []}
    assert fake.names() == []


def test_nothing_counted_while_compiling(steps, fake):
    steps.compiling = lambda: True
    steps.on_step(Opt("cuda:0"), (), {})
    assert steps.to_json() == {"count": 0, "samples": []} and fake.names() == []


def test_the_hook_never_raises(steps, fake, monkeypatch):
    def broken() -> bool:
        raise RuntimeError("boom")

    monkeypatch.setattr(torch.cuda, "is_initialized", broken)
    weird = [object(), Opt("cuda:0"), type("NoGroups", (), {"param_groups": []})()]
    for opt in weird:
        assert steps.on_step(opt, (), {}) is None
    assert steps.count == 3


def test_unknown_before_the_hook_is_installed():
    assert OptimizerSteps().to_json() is None


def test_real_optimizer_steps_are_counted_by_a_running_agent():
    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.05)
    try:
        agent = runtime.current()
        assert agent is not None and agent.server is not None
        model = torch.nn.Linear(4, 4)
        opts = [torch.optim.SGD(model.parameters(), lr=0.1),
                torch.optim.Adam(model.parameters())]
        for i in range(6):
            model(torch.randn(2, 4)).sum().backward()
            opts[i % 2].step()
        c = Client(agent.server.address)
        rep = c.call("report", {"models": False})["result"]
        c.close()
        assert rep["steps"] == {"count": 6, "samples": []}  # CPU: counted, not sampled
        assert rep["ooms"] == [] and not torch.cuda.is_initialized()
    finally:
        runtime.stop()
        shutil.rmtree(rt, ignore_errors=True)
    time.sleep(0)  # nothing left running
