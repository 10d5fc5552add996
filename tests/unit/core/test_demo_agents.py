"""DemoAgents: simulated agents whose figures add up with the demo's NVML figures,
and a free-cache that really gives memory back in the demo."""

from __future__ import annotations

import pytest

from app.core.agent_types import VramBreakdown
from app.core.collector import Collector, default_agents_for
from app.core.demo_agents import DemoAgents
from app.core.demo_source import GiB, MiB, DemoSource, scaled_scenario


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def setup(elapsed: float = 0.0):
    clock = FakeClock()
    src = DemoSource(seed=7, clock=clock)
    src.open()
    agents = DemoAgents(src)
    clock.now += elapsed
    gpus = src.read()
    return src, agents, clock, gpus


def procs_by_pid(gpus):
    return {p.pid: (g.index, p) for g in gpus for p in g.processes}


def report_for(agents, fragment):
    found = [r for r in agents.reports().values() if fragment in " ".join(r.argv)]
    assert len(found) == 1, fragment
    return found[0]


@pytest.mark.parametrize("t", [0.0, 8.3, 10.0, 13.0, 30.0, 44.0, 100.0, 300.0, 479.0, 900.0])
def test_figures_add_up_with_nvml(t):
    src, agents, clock, gpus = setup(t)
    procs = procs_by_pid(gpus)
    reports = agents.reports()
    assert reports, "train.py and the notebook are always there"
    for pid, report in reports.items():
        gpu, proc = procs[pid]
        assert len(report.devices) == 1 and report.devices[0].index == gpu
        dev = report.devices[0]
        b = VramBreakdown.of(proc.gpu_memory, dev, report.param_bytes_on(gpu))
        assert 0 <= b.context <= 600 * MiB
        assert b.context + dev.reserved == proc.gpu_memory
        assert dev.allocated + dev.cache == dev.reserved
        assert dev.allocated >= report.param_bytes_on(gpu)
        assert report.cuda_initialized and report.torch_status == "loaded"


def test_scenario_models():
    src, agents, clock, gpus = setup(20.0)
    train = report_for(agents, "train.py")
    assert [m.class_name for m in train.models] == ["torchvision.models.resnet.ResNet"]
    assert train.models[0].training is True and train.models[0].dtype == "float32"
    nb = report_for(agents, "ipykernel")
    assert {m.group for m in nb.models} == {"StableDiffusionPipeline"}
    assert {m.name for m in nb.models} == {"pipe.unet", "pipe.text_encoder", "pipe.vae"}
    assert all(m.dtype == "float16" and m.training is False for m in nb.models)
    assert all(nb.received_at - m.last_used > 3600 for m in nb.models)  # idle for long
    assert nb.devices[0].cache > 1 * GiB  # a sizeable cache
    ev = report_for(agents, "eval.py")
    assert ev.models[0].name == "bert-base-uncased" and ev.models[0].training is False
    emb = report_for(agents, "serve_embeddings")
    assert emb.models[0].param_bytes < 200 * MiB
    assert len(agents.entries()) == 4
    # vLLM and Xorg have no agent
    assert len(agents.reports()) == 4


def test_training_cache_saw_tooths():
    src, agents, clock, gpus = setup(2.0)
    low = report_for(agents, "train.py").devices[0].cache
    clock.now += 40.0
    src.read()
    high = report_for(agents, "train.py").devices[0].cache
    assert high - low > 4 * GiB


def test_free_cache_drops_the_nvml_figure_and_the_training_cache_regrows():
    src, agents, clock, gpus = setup(30.0)
    pid = report_for(agents, "train.py").pid
    before_nvml = procs_by_pid(gpus)[pid][1].gpu_memory
    cache = report_for(agents, "train.py").devices[0].cache
    result = agents.free_cache(pid)
    assert result.ok and result.freed == result.reserved_before - result.reserved_after
    assert result.freed == pytest.approx(cache, abs=8 * MiB)
    after_nvml = procs_by_pid(src.read())[pid][1].gpu_memory
    assert before_nvml - after_nvml == pytest.approx(cache, abs=8 * MiB)
    assert report_for(agents, "train.py").devices[0].cache <= 4 * MiB
    clock.now += 20.0
    regrown = procs_by_pid(src.read())[pid][1].gpu_memory
    assert regrown - after_nvml > 2 * GiB
    assert report_for(agents, "train.py").devices[0].cache > 2 * GiB


def test_free_cache_in_the_notebook_stays_freed():
    src, agents, clock, gpus = setup(5.0)
    nb = report_for(agents, "ipykernel")
    result = agents.free_cache(nb.pid)
    assert result.ok and result.freed == pytest.approx(nb.devices[0].cache, abs=MiB)
    clock.now += 60.0
    gpus = src.read()
    report = report_for(agents, "ipykernel")
    assert report.devices[0].cache < MiB
    assert procs_by_pid(gpus)[nb.pid][1].gpu_memory == 472 * MiB + report.devices[0].reserved
    again = agents.free_cache(nb.pid)
    assert again.ok and again.freed < MiB


def test_free_cache_of_a_leaking_process_is_reset_by_its_restart():
    src, agents, clock, gpus = setup(100.0)
    pid = report_for(agents, "serve_embeddings").pid
    assert agents.free_cache(pid).ok
    clock.now += 400.0  # after 480 s of life + 6 s gap it is back with a new pid
    src.read()
    new = report_for(agents, "serve_embeddings")
    assert new.pid != pid and new.devices[0].cache > 50 * MiB
    assert not agents.free_cache(pid).ok


def test_unknown_pid_and_gc():
    src, agents, clock, gpus = setup(1.0)
    assert not agents.free_cache(1843).ok  # Xorg has no agent
    assert not agents.collect_garbage(1843)["ok"]
    pid = report_for(agents, "train.py").pid
    gc = agents.collect_garbage(pid)
    assert gc["ok"] and gc["collected"] >= 0 and gc["seconds"] > 0


def test_scaled_scenario_has_no_agents_and_demo_is_untouched_without_agents():
    gpus, procs = scaled_scenario(2, 8)
    src = DemoSource(gpus=gpus, processes=procs)
    src.read()
    assert DemoAgents(src).reports() == {}


def test_collector_attaches_demo_agents():
    src = DemoSource(seed=7)
    agents = default_agents_for(src)
    assert isinstance(agents, DemoAgents)
    collector = Collector(src, agents=agents)
    collector.open()
    snap = collector.collect()
    collector.close()
    assert len(snap.agents) == 3  # eval.py starts 8 s into the demo
    pids = {p.pid for g in snap.gpus for p in g.processes}
    assert set(snap.agents) <= pids
