"""DemoAgents: simulated agents whose figures add up with the demo's NVML figures,
and a free-cache that really gives memory back in the demo."""

from __future__ import annotations

import pytest

from app.core.agents.demo import DemoAgents
from app.core.agents.types import VramBreakdown
from app.core.monitor.collector import Collector, default_agents_for
from app.core.monitor.demo_source import DemoSource, GiB, MiB, scaled_scenario


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
    assert all(m.idle_since == m.last_used for m in nb.models)  # the idle clock: last forward
    assert nb.devices[0].cache > 1 * GiB  # a sizeable cache
    ev = report_for(agents, "eval.py")
    assert ev.models[0].name == "bert-base-uncased" and ev.models[0].training is False
    emb = report_for(agents, "serve_embeddings")
    assert emb.models[0].param_bytes < 200 * MiB
    assert len(agents.entries()) == 4
    # vLLM and Xorg have no agent
    assert len(agents.reports()) == 4


def test_models_are_reported_as_the_real_agent_reports_them():
    src, agents, clock, gpus = setup(20.0)
    reports = agents.reports().values()
    models = [m for r in reports for m in r.models]
    # ids per process, like the real agent's
    assert all([m.id for m in r.models] == [f"m{i}" for i in range(1, len(r.models) + 1)]
               for r in reports)
    # requires_grad like every from_pretrained model; it blocks nothing
    assert all(m.requires_grad is True for m in models)
    for r in reports:
        for m in r.models:
            assert m.first_seen is not None and m.first_seen <= m.idle_since <= r.received_at
            assert m.unload_blocker is None and m.placeholder_bytes == 0
    # training evidence only for the training job's ResNet, and it is its blocker
    assert {m.name: m.training_evidence for m in models if m.training_evidence} == {
        "model": "train mode"}
    assert {m.name: m.auto_unload_blocker for m in models if m.auto_unload_blocker} == {
        "model": "train mode"}
    nb = report_for(agents, "ipykernel")
    assert all(m.first_seen < m.idle_since for m in nb.models)  # seen before its last use


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
    clock.now += 600.0  # after its OOM, exit at 558 s and a 42 s gap it is back with a new pid
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


# ------------------------------------------------------------ model manager


def model_named(report, name):
    return next(m for m in report.models if m.name == name)


def test_unload_takes_the_bytes_out_of_nvml_and_allocator_figures_and_reload_puts_them_back():
    src, agents, clock, gpus = setup(10.0)
    nb = report_for(agents, "ipykernel")
    unet = model_named(nb, "pipe.unet")
    assert (unet.state, unet.home_device, unet.auto_unload_blocker) == ("resident", "cuda:0", None)
    nvml_before = procs_by_pid(gpus)[nb.pid][1].gpu_memory
    cache = nb.devices[0].cache
    result = agents.unload(nb.pid, unet.id, to="disk")
    assert result.ok and result.code is None
    ev = result.event
    assert (ev.action, ev.state, ev.target, ev.reason) == ("unload", "offloaded", "disk", "manual")
    assert ev.bytes_moved == unet.param_bytes
    assert ev.seconds == pytest.approx(unet.param_bytes / 2e9, rel=0.05)  # ~2 GB/s to disk
    assert ev.bytes_released == pytest.approx(unet.param_bytes + cache, abs=2 * MiB)
    gpus = src.read()
    after = report_for(agents, "ipykernel")
    nvml_after = procs_by_pid(gpus)[nb.pid][1].gpu_memory
    assert nvml_before - nvml_after == pytest.approx(ev.bytes_released, abs=2 * MiB)
    m = model_named(after, "pipe.unet")
    assert (m.state, m.offloaded_to, m.device, m.bytes_by_device) == ("offloaded", "disk", "disk", {})
    assert after.param_bytes_on(0) == nb.param_bytes_on(0) - unet.param_bytes
    assert after.devices[0].allocated >= after.param_bytes_on(0)
    assert after.events == (ev,)
    # the notebook is idle: it stays offloaded ...
    clock.now += 60.0
    gpus = src.read()
    assert model_named(report_for(agents, "ipykernel"), "pipe.unet").state == "offloaded"
    # ... until reloaded (~10 GB/s from host memory, 2 GB/s from disk)
    back = agents.reload(nb.pid, unet.id)
    assert back.ok and back.event.action == "reload" and back.event.target == "disk"
    assert back.event.seconds == pytest.approx(unet.param_bytes / 2e9, rel=0.05)
    gpus = src.read()
    again = report_for(agents, "ipykernel")
    assert model_named(again, "pipe.unet").state == "resident"
    assert procs_by_pid(gpus)[nb.pid][1].gpu_memory == pytest.approx(
        nvml_after + unet.param_bytes, abs=2 * MiB)
    assert [e.seq for e in again.events] == [1, 2]
    assert [(e.action, p) for p, e in agents.events_since(0)[0]] == [
        ("unload", nb.pid), ("reload", nb.pid)]


@pytest.mark.parametrize("t", [10.0, 30.0, 44.0, 100.0])
def test_figures_add_up_with_models_offloaded(t):
    src, agents, clock, gpus = setup(t)
    nb = report_for(agents, "ipykernel")
    for m in nb.models[:2]:
        assert agents.unload(nb.pid, m.id, to="cpu").ok
    gpus = src.read()
    procs = procs_by_pid(gpus)
    r = report_for(agents, "ipykernel")
    dev = r.devices[0]
    assert 472 * MiB + dev.reserved == procs[r.pid][1].gpu_memory
    assert dev.allocated + dev.cache == dev.reserved
    assert dev.allocated >= r.param_bytes_on(0) > 0
    offloaded = [m for m in r.models if m.state == "offloaded"]
    assert len(offloaded) == 2 and all(m.bytes_by_device.get("cpu") for m in offloaded)


def test_training_model_is_refused_without_force_and_reloads_on_its_next_forward():
    src, agents, clock, gpus = setup(20.0)
    train = report_for(agents, "train.py")
    resnet = train.models[0]
    assert resnet.auto_unload_blocker == "train mode" and resnet.training
    assert resnet.training_evidence == "train mode" and resnet.id == "m1"
    refused = agents.unload(train.pid, resnet.id)
    assert not refused.ok and refused.code == "refused"
    assert refused.error == "training evidence: train mode"
    assert agents.unload(train.pid, resnet.id, reason="pressure").code == "refused"
    forced = agents.unload(train.pid, resnet.id, force=True)
    assert forced.ok and forced.event.seconds == pytest.approx(resnet.param_bytes / 10e9 + 0.015,
                                                               rel=0.05)
    assert report_for(agents, "train.py").models[0].state == "offloaded"
    clock.now += 0.25  # the training loop's next step
    src.read()
    m = report_for(agents, "train.py").models[0]
    assert m.state == "resident" and m.device == "cuda:0"
    last = agents.events_since(0)[0][-1][1]
    assert (last.action, last.reason) == ("reload", "forward")


def test_errors_pin_and_the_agents_own_idle_timer():
    src, agents, clock, gpus = setup(20.0)
    nb = report_for(agents, "ipykernel")
    vae = model_named(nb, "pipe.vae")
    assert agents.unload(1843, "x").code == "not_found"  # Xorg has no agent
    assert agents.unload(nb.pid, "nope").code == "not_found"
    assert agents.reload(nb.pid, vae.id).code == "refused"  # it is resident
    assert agents.unload(nb.pid, vae.id, to="gpu").code == "bad_params"
    pinned = agents.pin(nb.pid, vae.id, True)
    assert pinned.ok and pinned.pinned
    m = model_named(report_for(agents, "ipykernel"), "pipe.vae")
    assert m.pinned and m.auto_unload_blocker == "pinned"
    assert agents.unload(nb.pid, vae.id, reason="pressure").error == "pinned"
    assert agents.unload(nb.pid, vae.id).ok  # by hand it still goes
    assert agents.set_idle_unload(nb.pid, -5)["code"] == "bad_params"
    assert agents.set_idle_unload(1843, 60)["code"] == "not_found"
    assert agents.set_idle_unload(nb.pid, 600) == {"ok": True, "idle_unload_s": 600.0,
                                                   "error": None, "code": None}
    clock.now += 0.25
    src.read()
    r = report_for(agents, "ipykernel")
    assert r.idle_unload_s == 600.0
    assert {m.name: m.state for m in r.models} == {
        "pipe.unet": "offloaded", "pipe.text_encoder": "offloaded", "pipe.vae": "offloaded"}
    idle = [e for _, e in agents.events_since(0)[0] if e.reason == "idle"]
    assert sorted(e.name for e in idle) == ["pipe.text_encoder", "pipe.unet"]
    assert agents.set_idle_unload(nb.pid, None)["idle_unload_s"] is None
