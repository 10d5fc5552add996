"""OOM post-mortems: the verdict the figures support, in plain words, fixes ranked."""

from __future__ import annotations

from app.core.agents.oom import OomCapture, SegmentSummary
from app.core.agents.types import AgentReport, DeviceMemory, ModelInfo
from app.core.diagnosis.oom_report import LeakHint, build_report, choose_snapshot
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

MiB = 1024**2
GiB = 1024**3
T = 50_000.0
UUID = "GPU-11111111-2222"


def capture(request=2 * GiB, free=1400 * MiB, allocated=10 * GiB, reserved=13 * GiB,
            seg_free=3 * GiB + 100 * MiB, largest=512 * MiB) -> OomCapture:
    return OomCapture(
        seq=1, time=T, device=0, uuid="11111111-2222", request=request, limit=80 * GiB,
        free=free, stats={"allocated": allocated, "reserved": reserved},
        segments=SegmentSummary(40, reserved, allocated, seg_free, largest))


def agent(pid: int, allocated: int, reserved: int, idle_model_bytes: int = 0) -> AgentReport:
    models = ()
    if idle_model_bytes:
        models = (ModelInfo("m1", "unet", "UNet", 1, idle_model_bytes, 0, "cuda:0", "float16",
                            False, None, bytes_by_device={"cuda:0": {"params": idle_model_bytes}},
                            idle_since=T - 3600),)
    return AgentReport(pid, ("python", "x.py"), None, "2.5", "loaded", True, "native",
                       (DeviceMemory(0, allocated, reserved, uuid="11111111-2222"),), models,
                       received_at=T)


def snapshot(procs, agents, used=78 * GiB, when=T - 0.5) -> Snapshot:
    g = GpuSample(0, "H100", UUID, 80 * GiB, used, 80 * GiB - used, processes=tuple(procs))
    return Snapshot(when, 0.0, "nvml", "550", (g,), agents=agents)


TRAIN = ProcessSample(10, 14 * GiB, 90.0, command="python train.py")
LLM = ProcessSample(20, 61 * GiB, 40.0, command="python -m vllm.entrypoints.api_server")
NOTEBOOK = ProcessSample(30, 3 * GiB, 0.0, command="python -m ipykernel_launcher")


def test_fragmentation_verdict_says_why_and_puts_expandable_segments_first():
    snap = snapshot([TRAIN, LLM], {10: agent(10, 10 * GiB, 13 * GiB)})
    r = build_report(capture(), 10, [snap])
    assert r.verdict == "fragmentation"
    text = " ".join(r.explanation)
    assert "python train.py asked for 2.0 GiB; 1.4 GiB was free on the card." in text
    assert "Other processes held 61.0 GiB" in text
    assert "3.1 GiB of free blocks, but the largest was 512 MiB: fragmentation" in text
    assert r.fixes[0].action == "expandable_segments"
    assert r.gpu == "0" and r.snapshot_age_s == 0.5
    assert [h.pid for h in r.holders] == [20, 10] and r.holders[1].is_oom_process


def test_other_processes_verdict_ranks_the_frees_that_fit_cheapest_first():
    cap = capture(seg_free=100 * MiB, largest=100 * MiB, allocated=2 * GiB, reserved=2 * GiB)
    small = ProcessSample(10, 2 * GiB + 500 * MiB, 90.0, command="python train.py")
    snap = snapshot([small, LLM, NOTEBOOK], {10: agent(10, 2 * GiB, 2 * GiB),
                                             30: agent(30, 1 * GiB, 1200 * MiB, 1 * GiB)})
    r = build_report(cap, 10, [snap])
    assert r.verdict == "other_processes"
    actions = [(f.action, f.pid) for f in r.fixes]
    # shortfall 600 MiB: the notebook's idle UNet (1 GiB) fits before stopping anything;
    # its 200 MiB cache does not fit and comes after the frees that do.
    assert actions[0] == ("unload_model", 30)
    assert actions.index(("stop_process", 30)) < actions.index(("stop_process", 20))
    assert actions.index(("stop_process", 20)) < actions.index(("free_cache", 30))
    assert "enough for the request" in r.fixes[0].text
    assert r.fixes[-1].action == "reduce_activations"


def test_cache_verdict_when_other_processes_caches_would_make_room():
    cap = capture(seg_free=50 * MiB, largest=50 * MiB, allocated=6 * GiB, reserved=6 * GiB)
    snap = snapshot([ProcessSample(10, 6 * GiB + 500 * MiB, 90.0, command="python a.py"),
                     ProcessSample(40, 12 * GiB, 0.0, command="python b.py")],
                    {10: agent(10, 6 * GiB, 6 * GiB), 40: agent(40, 2 * GiB, 11 * GiB)})
    r = build_report(cap, 10, [snap])
    assert r.verdict == "cache"
    assert r.fixes[0].action == "free_cache" and r.fixes[0].pid == 40
    assert r.fixes[0].gain_bytes == 9 * GiB


def test_live_tensors_verdict_with_a_leak_puts_the_leak_fix_first():
    cap = capture(seg_free=200 * MiB, largest=200 * MiB, allocated=40 * GiB, reserved=41 * GiB)
    proc = ProcessSample(10, 42 * GiB, 90.0, command="python train.py")
    snap = snapshot([proc, ProcessSample(50, 30 * GiB, 10.0, command="python other.py")],
                    {10: agent(10, 40 * GiB, 41 * GiB)})
    plain = build_report(cap, 10, [snap])
    assert plain.verdict == "live_tensors"
    assert plain.fixes[0].action == "reduce_activations"
    leaked = build_report(cap, 10, [snap], leak=LeakHint(per_step=8 * MiB))
    assert leaked.verdict == "live_tensors"
    assert [f.action for f in leaked.fixes[:2]] == ["fix_leak", "record_allocations"]
    assert "loss.item()" in leaked.fixes[0].text
    assert any("per optimizer step" in line for line in leaked.explanation)


def test_the_snapshot_just_before_the_oom_is_preferred_and_no_view_is_said():
    before, after = snapshot([TRAIN], {}, when=T - 3), snapshot([TRAIN], {}, when=T + 1)
    assert choose_snapshot([after, before], T) is before
    assert choose_snapshot([after], T) is after
    r = build_report(capture(), 10, [])
    assert r.gpu is None and any("no view of the card" in line for line in r.explanation)
    assert r.holders[0].is_oom_process


def test_report_round_trips_through_json():
    from app.core.diagnosis.types import OomReport

    snap = snapshot([TRAIN, LLM, NOTEBOOK], {10: agent(10, 10 * GiB, 13 * GiB),
                                              30: agent(30, 1 * GiB, 2 * GiB, 1 * GiB)})
    r = build_report(capture(), 10, [snap])
    assert OomReport.from_json(r.to_json()) == r
