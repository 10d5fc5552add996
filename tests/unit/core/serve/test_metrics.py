"""``/metrics`` of serve: every series equals the snapshot's figure, unknown is absent.

Snapshots come from the demo (through the real Collector and its simulated
agents) and from hand-made samples; the exposition is parsed back with
prometheus_client's own parser and linted with ``promtool check metrics``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from app.core.agents.demo import DemoAgents
from app.core.agents.placement import gpu_of_device
from app.core.agents.types import AgentReport, DeviceMemory, ModelInfo
from app.core.diagnosis.types import KINDS, SEVERITIES, Diagnosis
from app.core.monitor.collector import Collector
from app.core.monitor.demo_source import demo_source
from app.core.monitor.samples import Container, DeviceState, GpuSample, ProcessSample, Snapshot
from app.core.serve.metric_gpus import COMMAND_CHARS, GPU_GAUGES
from app.core.serve.metrics import chosen_pids, metrics_registry, render
from app.core.serve.state import ServeState

GiB = 1024 ** 3
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

Series = dict[str, dict[frozenset[tuple[str, str]], float]]


def demo_snapshot(size: tuple[int, int] | None = None, seed: int = 7) -> Snapshot:
    """A demo tick 30 s in, through the real collector and the demo's agents."""
    source = demo_source(size, seed)
    source.open(elapsed=30.0)
    collector = Collector(source, agents=DemoAgents(source))
    collector.open()
    try:
        return collector.collect()
    finally:
        collector.close()


def state_of(snapshot: Snapshot | None, oom: dict | None = None) -> ServeState:
    return ServeState(snapshot, 1, oom or {}, time.time() - 60)


def scrape(state: ServeState, accept: str | None = None, **options) -> tuple[bytes, str]:
    return render(metrics_registry(lambda: state, **options), accept)


def series(state: ServeState, **options) -> Series:
    """Sample name -> {label set: value} of one text-format scrape."""
    body, _ = scrape(state, **options)
    out: Series = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def key(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def gpu_key(g: GpuSample) -> frozenset[tuple[str, str]]:
    return key(gpu=g.display_id, uuid=g.uuid or "")


def promtool_lint(body: bytes) -> None:
    if not shutil.which(PROMTOOL):
        pytest.skip("promtool is not installed (Debian package prometheus)")
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                            timeout=30)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


@pytest.fixture(scope="module")
def demo() -> Snapshot:
    return demo_snapshot()


# ------------------------------------------------------------------ the demo

def test_gpu_series_equal_the_snapshot(demo):
    got = series(state_of(demo))
    assert demo.gpus
    for name, _doc, _unit, read in GPU_GAUGES:
        for g in demo.gpus:
            assert got[name][gpu_key(g)] == read(g), name
    for g in demo.gpus:
        k = gpu_key(g)
        assert got["vram_steward_gpu_memory_used_bytes"][k] == g.memory_used
        assert got["vram_steward_gpu_memory_total_bytes"][k] == g.memory_total
        assert got["vram_steward_gpu_memory_reserved_bytes"][k] == g.memory_reserved
        assert got["vram_steward_gpu_utilization_ratio"][k] == g.utilization_gpu / 100
        assert got["vram_steward_gpu_unattributed_memory_bytes"][k] == g.unattributed_memory
        assert got["vram_steward_gpu_processes"][k] == len(g.processes)
        info = k | {("name", g.name), ("driver_version", demo.driver_version or "")}
        assert got["vram_steward_gpu_info"][frozenset(info)] == 1


def test_process_series_equal_nvml_per_process_memory(demo):
    got = series(state_of(demo))["vram_steward_process_gpu_memory_bytes"]
    want = {}
    for g in demo.gpus:
        for p in g.processes:
            command = " ".join((p.command or "").split())[:COMMAND_CHARS]
            labels = key(gpu=g.display_id, uuid=g.uuid or "", pid=str(p.pid), user=p.user or "",
                         command=command,
                         container=p.container.label if p.container else "")
            want[labels] = p.gpu_memory
    assert got == want
    assert any(("container", "docker vllm-llama3") in k for k in got)


def test_torch_series_equal_each_agents_allocator_on_its_nvml_gpu(demo):
    got = series(state_of(demo))
    uuids = {g.display_id: g.uuid for g in demo.gpus}
    assert demo.agents
    count = 0
    for pid, report in demo.agents.items():
        for dev in report.devices:
            gpu = gpu_of_device(demo, report, f"cuda:{dev.index}", pid)
            assert gpu is not None
            k = key(gpu=gpu, uuid=uuids[gpu], pid=str(pid))
            assert got["vram_steward_torch_allocated_bytes"][k] == dev.allocated
            assert got["vram_steward_torch_reserved_bytes"][k] == dev.reserved
            assert got["vram_steward_torch_cache_bytes"][k] == dev.reserved - dev.allocated
            count += 1
    assert len(got["vram_steward_torch_reserved_bytes"]) == count


def test_model_bytes_by_state_sum_each_agents_models(demo):
    got = series(state_of(demo))["vram_steward_model_bytes"]
    want: Counter = Counter()
    for pid, report in demo.agents.items():
        for m in report.models:
            want[key(pid=str(pid), state=m.state)] += m.param_bytes + m.buffer_bytes
    assert got == dict(want)


def test_health_diagnoses_and_oom_counter(demo):
    gpu0 = demo.gpus[0]
    state = state_of(demo, {(gpu0.display_id, gpu0.uuid): 3, ("", ""): 1})
    got = series(state)
    assert got["vram_steward_up"] == {key(): 1}
    assert got["vram_steward_agents"] == {key(): len(demo.agents)}
    assert got["vram_steward_collector_tick_duration_seconds"] == {key(): demo.sample_cost}
    assert got["vram_steward_start_timestamp_seconds"] == {key(): state.started_at}
    ooms = got["vram_steward_oom_total"]
    assert ooms[gpu_key(gpu0)] == 3 and ooms[key(gpu="", uuid="")] == 1
    assert all(ooms[gpu_key(g)] == 0 for g in demo.gpus[1:])  # increase() sees the first OOM
    diagnoses = got["vram_steward_diagnoses"]
    assert demo.diagnoses
    counted = Counter((d.kind, d.severity) for d in demo.diagnoses)
    for kind in KINDS:
        for severity in SEVERITIES:
            assert diagnoses[key(kind=kind, severity=severity)] == counted[(kind, severity)]


def test_the_demo_exposition_passes_promtool(demo):
    body, content_type = scrape(state_of(demo, {("0", demo.gpus[0].uuid): 2}))
    assert content_type.startswith("text/plain; version=0.0.4")
    promtool_lint(body)


def test_openmetrics_is_negotiated_by_accept(demo):
    body, content_type = scrape(state_of(demo), "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    families = {f.name: f for f in openmetrics_families(body.decode())}
    assert families["vram_steward_gpu_memory_used_bytes"].unit == "bytes"
    assert families["vram_steward_oom"].type == "counter"
    assert families["vram_steward_gpu"].type == "info"


# ------------------------------------------------------------- process_limit

def test_process_limit_keeps_the_largest_processes_on_the_host():
    snapshot = demo_snapshot((3, 5), seed=3)
    held: Counter = Counter()
    for g in snapshot.gpus:
        for p in g.processes:
            held[p.pid] += p.gpu_memory
    assert len(held) > 4
    largest = sorted(held, key=lambda pid: (-held[pid], pid))[:4]
    got = series(state_of(snapshot), process_limit=4)["vram_steward_process_gpu_memory_bytes"]
    assert {dict(k)["pid"] for k in got} == {str(pid) for pid in largest}
    every = series(state_of(snapshot))["vram_steward_process_gpu_memory_bytes"]
    assert {dict(k)["pid"] for k in every} == {str(pid) for pid in held}
    assert chosen_pids(snapshot, None) is None


def test_process_limit_zero_leaves_out_every_per_process_series(demo):
    got = series(state_of(demo), process_limit=0)
    for name in ("vram_steward_process_gpu_memory_bytes", "vram_steward_torch_reserved_bytes",
                 "vram_steward_model_bytes"):
        assert name not in got
    assert got["vram_steward_gpu_memory_used_bytes"]


def test_agent_series_follow_the_process_limit(demo):
    largest = max((p.gpu_memory, p.pid) for g in demo.gpus for p in g.processes)[1]
    got = series(state_of(demo), process_limit=1)
    for name in ("vram_steward_torch_allocated_bytes", "vram_steward_model_bytes"):
        assert {dict(k)["pid"] for k in got[name]} == {str(largest)}


def test_a_negative_process_limit_is_refused(demo):
    with pytest.raises(ValueError):
        metrics_registry(lambda: state_of(demo), process_limit=-1)


def test_gpu_series_off_keeps_processes_and_agents(demo):
    got = series(state_of(demo), gpu_series=False)
    assert not [name for name in got if name.startswith("vram_steward_gpu_")]
    assert got["vram_steward_process_gpu_memory_bytes"]
    assert got["vram_steward_torch_reserved_bytes"]
    assert got["vram_steward_oom_total"]


# -------------------------------------------------- hand-made: unknown is absent

def bare_gpu(**fields) -> GpuSample:
    base = dict(index=0, name="NVIDIA H100", uuid="GPU-aaaa", memory_total=80 * GiB,
                memory_used=10 * GiB + 12345, memory_free=70 * GiB - 12345)
    return GpuSample(**{**base, **fields})


def hand_snapshot(*gpus: GpuSample, agents=None, diagnoses=(), error=None) -> Snapshot:
    return Snapshot(timestamp=1.0, monotonic=1.0, source="test", driver_version="580.95.05",
                    gpus=gpus, error=error, sample_cost=0.004, agents=agents or {},
                    diagnoses=diagnoses)


def test_unknown_figures_have_no_series_never_zero():
    g = bare_gpu(memory_used=None, memory_reserved=None, utilization_gpu=None, temperature=None,
                 processes=(ProcessSample(pid=10, gpu_memory=None),),
                 notes={"processes": "n/a (no permission)"})
    got = series(state_of(hand_snapshot(g)))
    for name in ("vram_steward_gpu_memory_used_bytes", "vram_steward_gpu_memory_reserved_bytes",
                 "vram_steward_gpu_utilization_ratio", "vram_steward_gpu_temperature_celsius",
                 "vram_steward_gpu_power_watts", "vram_steward_gpu_unattributed_memory_bytes",
                 "vram_steward_gpu_processes", "vram_steward_process_gpu_memory_bytes"):
        assert name not in got, name
    assert got["vram_steward_gpu_memory_total_bytes"] == {gpu_key(g): 80 * GiB}


def test_a_lost_gpu_keeps_only_what_is_known():
    g = bare_gpu(memory_total=None, memory_used=None, memory_free=None,
                 state=DeviceState.LOST, message="GPU fell off the bus")
    got = series(state_of(hand_snapshot(g, bare_gpu(index=1, uuid="GPU-bbbb"))))
    assert list(got["vram_steward_gpu_memory_used_bytes"]) == [key(gpu="1", uuid="GPU-bbbb")]
    assert "vram_steward_gpu_unattributed_memory_bytes" in got
    assert gpu_key(g) not in got["vram_steward_gpu_unattributed_memory_bytes"]
    assert got["vram_steward_gpu_info"]  # both GPUs are still named


def test_mig_devices_are_series_of_their_own():
    parent = bare_gpu(mig_index=None, notes={"processes": "n/a (see MIG devices)"})
    mig = bare_gpu(mig_index=1, uuid="MIG-1111", memory_total=40 * GiB, memory_used=GiB,
                   processes=(ProcessSample(pid=77, gpu_memory=GiB - 4096),))
    got = series(state_of(hand_snapshot(parent, mig)))
    assert got["vram_steward_gpu_memory_total_bytes"] == {
        key(gpu="0", uuid="GPU-aaaa"): 80 * GiB, key(gpu="0/mig1", uuid="MIG-1111"): 40 * GiB}
    assert got["vram_steward_gpu_unattributed_memory_bytes"] == {
        key(gpu="0/mig1", uuid="MIG-1111"): 4096}


def test_labels_of_odd_processes_are_escaped_and_bounded():
    odd = 'python -c "print(\\"x\\")"\n --flag ' + "y" * 100
    procs = (ProcessSample(pid=5, gpu_memory=3 * GiB, command=odd, user="ü-user",
                           container=Container("docker", "f" * 64, name="trainer")),
             ProcessSample(pid=6, gpu_memory=GiB, name="Xorg"),
             ProcessSample(pid=6, gpu_memory=GiB, name="Xorg"))  # listed twice: one series
    snapshot = hand_snapshot(bare_gpu(processes=procs))
    got = series(state_of(snapshot))["vram_steward_process_gpu_memory_bytes"]
    labels = {dict(k)["pid"]: dict(k) for k in got}
    assert len(got) == 2
    assert labels["5"]["command"] == " ".join(odd.split())[:COMMAND_CHARS]
    assert labels["5"]["user"] == "ü-user" and labels["5"]["container"] == "docker trainer"
    assert labels["6"]["command"] == "Xorg" and labels["6"]["user"] == ""
    promtool_lint(scrape(state_of(snapshot))[0])


def agent(pid: int, *devices: DeviceMemory, models: tuple[ModelInfo, ...] = ()) -> AgentReport:
    return AgentReport(pid, ("python", "job.py"), "3.11", "2.5", "loaded", True, "native",
                       devices, models)


def model(mid: str, state: str, params: int | None, buffers: int | None) -> ModelInfo:
    return ModelInfo(mid, mid, "Net", 1, params, buffers, "cuda:0", "float16", False, None,
                     state=state)


def test_agent_figures_unknown_or_unplaced_are_absent():
    g = bare_gpu(uuid="GPU-0000aaaa", processes=(ProcessSample(pid=40, gpu_memory=5 * GiB),))
    report = agent(40, DeviceMemory(0, allocated=None, reserved=3 * GiB, uuid="0000aaaa"),
                   DeviceMemory(1, allocated=GiB, reserved=GiB, uuid="ffffffff"),  # no such GPU
                   models=(model("a", "resident", GiB, 100), model("b", "offloaded", 2 * GiB, None),
                           model("c", "offloaded", None, None)))
    got = series(state_of(hand_snapshot(g, agents={40: report})))
    k = key(gpu="0", uuid="GPU-0000aaaa", pid="40")
    assert got["vram_steward_torch_reserved_bytes"] == {k: 3 * GiB}
    assert "vram_steward_torch_allocated_bytes" not in got
    assert "vram_steward_torch_cache_bytes" not in got
    assert got["vram_steward_model_bytes"] == {key(pid="40", state="resident"): GiB + 100,
                                               key(pid="40", state="offloaded"): 2 * GiB}
    assert got["vram_steward_agents"] == {key(): 1}


def test_an_agent_nvml_does_not_list_ranks_by_its_reserved_bytes():
    g = bare_gpu(uuid="GPU-0000aaaa", processes=(ProcessSample(pid=1, gpu_memory=GiB),))
    report = agent(2, DeviceMemory(0, allocated=GiB, reserved=4 * GiB, uuid="0000aaaa"))
    snapshot = hand_snapshot(g, agents={2: report})
    assert chosen_pids(snapshot, 1) == {2}
    assert chosen_pids(snapshot, 5) == {1, 2}


def test_a_failing_source_is_down_and_before_the_first_tick_too():
    failing = hand_snapshot(error="NVML: driver not loaded")
    got = series(state_of(failing, {("0", "GPU-aaaa"): 2}))
    assert got["vram_steward_up"] == {key(): 0}
    assert got["vram_steward_oom_total"] == {key(gpu="0", uuid="GPU-aaaa"): 2}
    assert not [name for name in got if name.startswith("vram_steward_gpu_")]
    first = series(ServeState(None))
    assert first == {"vram_steward_up": {key(): 0}}


def test_unknown_diagnosis_kinds_still_count_and_lint():
    d = Diagnosis(kind="new_kind", severity="warning", title="t", evidence=())
    leak = Diagnosis(kind="leak", severity="warning", title="t", evidence=())
    snapshot = hand_snapshot(bare_gpu(), diagnoses=(d, leak, leak))
    got = series(state_of(snapshot))["vram_steward_diagnoses"]
    assert got[key(kind="new_kind", severity="warning")] == 1
    assert got[key(kind="leak", severity="warning")] == 2
    assert len(got) == len(KINDS) * len(SEVERITIES) + 1
    promtool_lint(scrape(state_of(snapshot))[0])
