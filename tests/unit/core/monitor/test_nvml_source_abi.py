"""NVML truth through the real bindings: ``status --json`` against the ABI fake.

Each test writes the truth (GPUs, real helper processes, errors) into a
config for ``tests/fakes/nvml_abi/fake_nvml.c``, runs the real CLI or the
real collector in a child process whose ``libnvidia-ml.so.1`` is that fake,
and compares field by field.  The Python fake of pynvml stays for the fast
unit tests; this is the reference.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes import nvml_abi
from tests.fakes.nvml_abi import (
    GPU_IS_LOST,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeError,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeProcess,
    Helpers,
    chunks,
    expected_processes,
    kind_of,
    read_counts,
)

REPO = Path(__file__).resolve().parents[4]

pytestmark = pytest.mark.skipif(nvml_abi.unavailable_reason() is not None,
                                reason=nvml_abi.unavailable_reason() or "")


@pytest.fixture(scope="module")
def libs() -> dict[str, Path]:
    return {variant: nvml_abi.build(variant) for variant in nvml_abi.VARIANTS}


def run_cli(fake: FakeNvml, lib: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    config = fake.write(tmp_path / "nvml.conf")
    env = fake.env(lib, config, counts=tmp_path / "counts")
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def status(fake: FakeNvml, lib: Path, tmp_path: Path) -> dict:
    """``status --json`` with a second tick, so rates (SM %, CPU %) are known."""
    result = run_cli(fake, lib, tmp_path, "status", "--json", "--interval", "0.2")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def probe(fake: FakeNvml, lib: Path, tmp_path: Path, ticks: int, then: FakeNvml | None = None,
          interval: float = 0.05) -> dict:
    config = fake.write(tmp_path / "nvml.conf")
    env = fake.env(lib, config)
    env["PYTHONPATH"] = str(REPO)
    extra = ["--then", str(then.write(tmp_path / "then.conf"))] if then is not None else []
    result = subprocess.run([sys.executable, "-m", "tests.fakes.nvml_abi.probe", "--ticks", str(ticks),
                             "--interval", str(interval), *extra],
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_gpu_is_truth(gpu: dict, truth: FakeGpu, fake: FakeNvml, index: int, *,
                        v1_memory: bool = False, new_pids: frozenset[int] = frozenset()) -> None:
    """Every field of one GPU of ``status --json`` equals the configured truth."""
    assert gpu["state"] == "ok", gpu["message"]
    assert (gpu["index"], gpu["mig_index"]) == (index, None)
    assert (gpu["name"], gpu["uuid"]) == (truth.name, truth.uuid)
    assert gpu["memory_total"] == truth.total
    assert gpu["memory_free"] == truth.free
    if v1_memory:
        # Memory v1 folds driver-reserved memory into "used" and cannot split it.
        assert gpu["memory_used"] == truth.used + truth.reserved
        assert gpu["memory_reserved"] is None
    else:
        assert gpu["memory_used"] == truth.used
        assert gpu["memory_reserved"] == truth.reserved
    assert gpu["utilization_gpu"] == truth.util_gpu
    assert gpu["utilization_memory"] == truth.util_mem
    assert gpu["temperature"] == truth.temp
    assert gpu["power_draw"] == truth.power_mw / 1000  # mW -> W
    assert gpu["power_limit"] == truth.power_limit_mw / 1000
    assert gpu["notes"] == {}

    expected = expected_processes(fake, index)
    shown = {p["pid"]: p for p in gpu["processes"]}
    assert set(shown) == set(expected)
    assert len(gpu["processes"]) == len(expected)  # merged by pid: no duplicates
    for pid, want in expected.items():
        got = shown[pid]
        assert got["gpu_memory"] == want["gpu_memory"], pid
        assert got["kind"] == kind_of(want["kinds"]), pid
        assert got["sm_util"] == want["sm"], pid
        assert got["host_status"] == "ok"
        assert (got["name"], got["command"], got["user"]) == ("sleep", "sleep 3600", getpass.getuser())
        assert got["host_rss"] > 0
        # CPU % is a rate: known from a process's second reading on, unknown (not 0) before.
        assert (got["cpu_percent"] is None) == (pid in new_pids), pid
    held = sum(want["gpu_memory"] for want in expected.values())
    assert gpu["unattributed_memory"] == gpu["memory_used"] - held


@pytest.mark.parametrize("gpus, per_gpu", [(2, 5), (8, 64)], ids=["2x5", "8x64"])
def test_status_json_is_the_truth(libs, tmp_path, gpus, per_gpu):
    with Helpers(gpus * per_gpu) as pids:
        fake = nvml_abi.server(list(chunks(pids, per_gpu)), seed=gpus)
        report = status(fake, libs["current"], tmp_path)
    assert report["source"] == "nvml" and report["driver_version"] == fake.driver_version
    assert len(report["gpus"]) == gpus
    for index, (gpu, truth) in enumerate(zip(report["gpus"], fake.gpus)):
        assert_gpu_is_truth(gpu, truth, fake, index)
    # The scenario really exercises the merge: some pids are on both lists.
    kinds = {p["kind"] for g in report["gpus"] for p in g["processes"]}
    assert kinds == {"compute", "graphics", "compute+graphics"}


def test_old_and_new_drivers_give_the_same_figures(libs, tmp_path):
    with Helpers(10) as pids:
        fake = nvml_abi.server(list(chunks(pids, 5)), seed=3)
        reports = {variant: status(fake, lib, tmp_path) for variant, lib in libs.items()}
    for variant, report in reports.items():
        for index, (gpu, truth) in enumerate(zip(report["gpus"], fake.gpus)):
            assert_gpu_is_truth(gpu, truth, fake, index, v1_memory=variant == "old")
    calls = read_counts((tmp_path / "counts").read_text())  # the last run: no_deprecated
    assert "nvmlDeviceGetTemperatureV" in calls and "nvmlDeviceGetTemperature" not in calls


def test_temperature_reads_the_v_call_first_and_falls_back_on_an_old_driver(libs, tmp_path):
    with Helpers(2) as pids:
        fake = nvml_abi.server([pids], seed=4)
        for variant, used, unused in (("current", "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
                                      ("old", "nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV")):
            report = status(fake, libs[variant], tmp_path)
            assert report["gpus"][0]["temperature"] == fake.gpus[0].temp
            calls = read_counts((tmp_path / "counts").read_text())
            assert calls.get(used, 0) >= 2 and unused not in calls, (variant, calls)


def one_gpu(pids: list[int]) -> FakeNvml:
    return nvml_abi.server([pids], seed=5)


FIELD_OF = {  # error group in the fake -> (json field, note key)
    "temperature": ("temperature", "temperature"),
    "power": ("power_draw", "power_draw"),
    "utilization": ("utilization_gpu", "utilization_gpu"),
    "memory": ("memory_used", "memory"),
    "processes": ("processes", "processes"),
}
NOTE_OF = {NOT_SUPPORTED: "n/a (not supported)", NO_PERMISSION: "n/a (no permission)",
           UNKNOWN: "n/a (Unknown Error)"}


@pytest.mark.parametrize("code", [NOT_SUPPORTED, NO_PERMISSION, UNKNOWN])
@pytest.mark.parametrize("group", list(FIELD_OF))
def test_a_failing_field_shows_its_state_and_leaves_the_rest_exact(libs, tmp_path, group, code):
    with Helpers(3) as pids:
        fake = one_gpu(pids)
        fake.errors.append(FakeError(fn=group, code=code, gpu=0))
        report = status(fake, libs["current"], tmp_path)
    [gpu] = report["gpus"]
    truth = fake.gpus[0]
    field, note = FIELD_OF[group]
    assert gpu["state"] == "ok"
    assert gpu["notes"][note] == NOTE_OF[code]
    assert gpu[field] in (None, [])
    if group != "memory":
        assert (gpu["memory_used"], gpu["memory_total"]) == (truth.used, truth.total)
    if group != "temperature":
        assert gpu["temperature"] == truth.temp
    if group != "power":
        assert gpu["power_draw"] == truth.power_mw / 1000
    if group != "processes":
        assert {p["pid"]: p["gpu_memory"] for p in gpu["processes"]} == {
            pid: want["gpu_memory"] for pid, want in expected_processes(fake, 0).items()}
    if group in ("memory", "processes"):
        assert gpu["unattributed_memory"] is None  # one side unknown: unknown, not a guess


def test_process_utilization_error_leaves_sm_unknown_and_memory_exact(libs, tmp_path):
    with Helpers(3) as pids:
        fake = one_gpu(pids)
        fake.errors.append(FakeError(fn="process_utilization", code=UNKNOWN, gpu=0))
        report = status(fake, libs["current"], tmp_path)
    [gpu] = report["gpus"]
    assert gpu["notes"]["sm_util"] == "n/a (Unknown Error)"
    assert all(p["sm_util"] is None for p in gpu["processes"])
    assert {p["pid"]: p["gpu_memory"] for p in gpu["processes"]} == {
        pid: want["gpu_memory"] for pid, want in expected_processes(fake, 0).items()}


def test_gpu_lost_mid_run_marks_that_gpu_and_stops_asking_it(libs, tmp_path):
    with Helpers(4) as pids:
        fake = nvml_abi.server([pids[:2], pids[2:]], seed=6)
        lost = nvml_abi.server([pids[:2], pids[2:]], seed=6)
        lost.errors.append(FakeError(fn="all", code=GPU_IS_LOST, gpu=1))  # after the first tick
        out = probe(fake, libs["current"], tmp_path, ticks=4, then=lost)
    first, *later = out["snapshots"]
    assert [g["state"] for g in first["gpus"]] == ["ok", "ok"]
    for snap in later:
        gone = snap["gpus"][1]
        assert gone["state"] == "lost" and "fell off the bus" in gone["message"]
        assert gone["memory_used"] is None and gone["processes"] == []
        assert_gpu_is_truth(snap["gpus"][0], fake.gpus[0], fake, 0)
    # GPU 1 is asked once (its memory, which answers "lost"), then never again:
    # calls on a lost GPU can hang.  GPU 0 keeps its 7 calls a tick.
    assert out["calls"][1]["nvmlDeviceGetMemoryInfo_v2"] == 2
    assert sum(out["calls"][1].values()) == 7 + 1
    assert out["calls"][2] == out["calls"][3] and sum(out["calls"][3].values()) == 7


@pytest.mark.parametrize("code", ["RESET_REQUIRED", "TIMEOUT"])
def test_an_error_about_the_device_marks_the_device_not_its_fields(libs, tmp_path, code):
    with Helpers(2) as pids:
        fake = nvml_abi.server([pids[:1], pids[1:]], seed=14)
        fake.errors.append(FakeError(fn="all", code=code, gpu=1))
        report = status(fake, libs["current"], tmp_path)
    good, bad = report["gpus"]
    assert bad["state"] == "error" and bad["memory_used"] is None
    assert_gpu_is_truth(good, fake.gpus[0], fake, 0)


def test_a_config_the_fake_cannot_honour_fails_loudly(libs, tmp_path):
    fake = nvml_abi.server([[]], seed=15)
    fake.errors.append(FakeError(fn="no_such_field", code=UNKNOWN))
    result = run_cli(fake, libs["current"], tmp_path, "status", "--json")
    assert result.returncode != 0
    assert "error needs a known fn= and code=" in result.stderr


def test_minimum_nvml_calls_per_tick(libs, tmp_path):
    with Helpers(16) as pids:
        fake = nvml_abi.server(list(chunks(pids, 8)), seed=7)
        out = probe(fake, libs["current"], tmp_path, ticks=3)
    per_device = {
        "nvmlDeviceGetMemoryInfo_v2": 1, "nvmlDeviceGetUtilizationRates": 1,
        "nvmlDeviceGetTemperatureV": 1, "nvmlDeviceGetPowerUsage": 1,
        # One call per list: the buffer is kept between ticks, so no count query.
        "nvmlDeviceGetComputeRunningProcesses_v3": 1, "nvmlDeviceGetGraphicsRunningProcesses_v3": 1,
        "nvmlDeviceGetProcessUtilization": 1,
    }
    for calls in out["calls"][1:]:
        assert calls == {name: 2 * n for name, n in per_device.items()}


def test_mig_instances_are_devices_with_their_own_memory_and_processes(libs, tmp_path):
    with Helpers(5) as pids:
        fake = nvml_abi.server([[], pids[4:]], seed=8)
        parent = fake.gpus[0]
        parent.max_mig, parent.mig_mode = 7, True
        fake.migs = [FakeMig(gpu=0, slot=0, gi=1, total=42_949_672_960 - 7 * 4096, used=3_221_225_473,
                             reserved=123_456_789),
                     FakeMig(gpu=0, slot=2, gi=2, total=21_474_836_480 - 3 * 4096, used=1_073_741_827)]
        fake.processes += [
            FakeProcess(pid=pids[0], gpu=0, memory=1_610_612_741, gi=1, ci=0),
            FakeProcess(pid=pids[1], gpu=0, memory=805_306_369, gi=1, ci=0, lists="compute,graphics"),
            FakeProcess(pid=pids[2], gpu=0, memory=536_870_917, gi=2, ci=0),
            FakeProcess(pid=pids[3], gpu=0, memory=None, gi=2, ci=0),  # not reported to us
        ]
        report = status(fake, libs["current"], tmp_path)
    ids = [(g["index"], g["mig_index"]) for g in report["gpus"]]
    assert ids == [(0, None), (0, 0), (0, 2), (1, None)]
    whole, first, second, other = report["gpus"]
    assert whole["processes"] == [] and whole["notes"]["processes"] == "n/a (see MIG devices)"
    assert whole["unattributed_memory"] is None
    for dev, mig in ((first, fake.migs[0]), (second, fake.migs[1])):
        assert (dev["memory_total"], dev["memory_used"]) == (mig.total, mig.used)
        assert dev["memory_reserved"] == mig.reserved
        assert dev["temperature"] is None and dev["notes"]["temperature"] == "n/a (MIG device)"
    assert {p["pid"]: p["gpu_memory"] for p in first["processes"]} == {
        pids[0]: 1_610_612_741, pids[1]: 805_306_369}
    assert first["unattributed_memory"] == fake.migs[0].used - 1_610_612_741 - 805_306_369
    assert {p["pid"]: p["gpu_memory"] for p in second["processes"]} == {
        pids[2]: 536_870_917, pids[3]: None}
    assert second["unattributed_memory"] is None  # one process's memory is unknown
    assert_gpu_is_truth(other, fake.gpus[1], fake, 1)


def test_wddm_style_unavailable_process_memory_is_null_never_zero(libs, tmp_path):
    with Helpers(2) as pids:
        fake = one_gpu(pids)
        for p in fake.processes:
            p.memory = None
        report = status(fake, libs["current"], tmp_path)
    [gpu] = report["gpus"]
    assert [p["gpu_memory"] for p in gpu["processes"]] == [None, None]
    assert gpu["notes"]["process_memory"] == "n/a (WDDM)"
    assert gpu["unattributed_memory"] is None


def test_pid_from_another_namespace_keeps_its_row_and_memory(libs, tmp_path):
    missing = 4_194_304 + 4321  # above any pid_max: no such process here
    with Helpers(1) as pids:
        fake = one_gpu(pids)
        fake.processes.append(FakeProcess(pid=missing, gpu=0, memory=987_654_321))
        fake.gpus[0].used += 987_654_321
        report = status(fake, libs["current"], tmp_path)
    [gpu] = report["gpus"]
    row = next(p for p in gpu["processes"] if p["pid"] == missing)
    assert row["host_status"] == "not_visible" and row["gpu_memory"] == 987_654_321
    assert row["name"] is None and row["cpu_percent"] is None


def test_driver_not_loaded_is_a_clear_error(libs, tmp_path):
    fake = FakeNvml(gpus=[FakeGpu(name="x", uuid="GPU-x", total=1, used=0)],
                    errors=[FakeError(fn="init", code="DRIVER_NOT_LOADED")])
    result = run_cli(fake, libs["current"], tmp_path, "status", "--json")
    assert result.returncode != 0
    assert "NVIDIA driver not loaded" in result.stderr


def test_per_call_latency_is_spent_in_the_driver(libs, tmp_path):
    with Helpers(2) as pids:
        fake = one_gpu(pids)
        fake.latency_us = 5000.0
        started = time.perf_counter()
        out = probe(fake, libs["current"], tmp_path, ticks=2)
        elapsed = time.perf_counter() - started
    calls = sum(sum(tick.values()) for tick in out["calls"])
    assert calls >= 14
    assert elapsed >= calls * 0.005  # every call spun for its 5 ms


def test_processes_appearing_past_the_kept_buffer_are_all_listed(libs, tmp_path):
    with Helpers(60) as pids:
        before = nvml_abi.server([pids[:3]], seed=9)
        after = nvml_abi.server([pids], seed=9)  # 57 more processes arrive after the first tick
        out = probe(before, libs["current"], tmp_path, ticks=3, then=after)
    first, grown, steady = out["snapshots"]
    assert {p["pid"] for p in first["gpus"][0]["processes"]} == set(pids[:3])
    assert_gpu_is_truth(grown["gpus"][0], after.gpus[0], after, 0, new_pids=frozenset(pids[3:]))
    assert_gpu_is_truth(steady["gpus"][0], after.gpus[0], after, 0)
    # The buffer grows once (one call that reports the size, one that fills), then one call again.
    assert out["calls"][1]["nvmlDeviceGetComputeRunningProcesses_v3"] == 2
    assert out["calls"][2]["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_a_process_on_two_gpus_has_one_set_of_host_figures(libs, tmp_path):
    with Helpers(3) as pids:
        fake = nvml_abi.server([pids[:2], pids[2:]], seed=12)
        # A data-parallel worker: one process with a context on both GPUs.
        fake.processes.append(FakeProcess(pid=pids[0], gpu=1, memory=531_628_037, sm=17))
        fake.gpus[1].used += 531_628_037
        report = status(fake, libs["current"], tmp_path)
    gpu0, gpu1 = report["gpus"]
    a = next(p for p in gpu0["processes"] if p["pid"] == pids[0])
    b = next(p for p in gpu1["processes"] if p["pid"] == pids[0])
    assert (a["gpu_memory"], b["gpu_memory"]) == (expected_processes(fake, 0)[pids[0]]["gpu_memory"],
                                                  531_628_037)
    host = ("name", "command", "user", "cpu_percent", "host_rss", "create_time")
    assert {k: a[k] for k in host} == {k: b[k] for k in host}
    assert_gpu_is_truth(gpu1, fake.gpus[1], fake, 1)


@pytest.mark.parametrize("group, note", [("processes", "processes"), ("process_utilization", "sm_util")])
def test_a_driver_that_keeps_asking_for_a_bigger_buffer_gets_no_more_memory(libs, tmp_path, group, note):
    """INSUFFICIENT_SIZE without a larger count is a driver fault: the field is
    unknown for the tick, the buffer does not grow, the other GPU is exact."""
    with Helpers(4) as pids:
        fake = nvml_abi.server([pids[:2], pids[2:]], seed=16)
        fake.errors.append(FakeError(fn=group, code="INSUFFICIENT_SIZE", gpu=1))
        out = probe(fake, libs["current"], tmp_path, ticks=4)
    for snap in out["snapshots"]:
        good, bad = snap["gpus"]
        assert_gpu_is_truth(good, fake.gpus[0], fake, 0, new_pids=frozenset(pids[:2])
                            if snap is out["snapshots"][0] else frozenset())
        assert bad["state"] == "ok" and bad["notes"][note] == "n/a (Insufficient Size)"
        assert bad["memory_used"] == fake.gpus[1].used
    # One call per tick: asked once, not again with an ever larger buffer.
    name = ("nvmlDeviceGetComputeRunningProcesses_v3" if group == "processes"
            else "nvmlDeviceGetProcessUtilization")
    assert all(tick[name] <= 2 for tick in out["calls"])


def _place_in_cgroup(pid: int, relative: str) -> Path | None:
    """Move ``pid`` into a cgroup named like a container runtime's, where this
    machine lets us (root, a writable cgroup v1 pids hierarchy); else None."""
    path = Path("/sys/fs/cgroup/pids") / relative
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / "cgroup.procs").write_text(str(pid))
    except OSError:
        return None
    return path


def test_status_json_names_the_container_of_a_real_process(libs, tmp_path):
    docker_id = "3f4e2a1b9c0d" + "5e6f" * 13
    podman_id = "de9b9a136cce" + "a1b2" * 13
    with Helpers(3) as pids:
        made = [_place_in_cgroup(pids[0], f"docker/{docker_id}"),
                _place_in_cgroup(pids[1], f"machine.slice/libpod-{podman_id}.scope")]
        if None in made:
            pytest.skip("cannot create cgroups here (needs root and a writable cgroup v1 pids tree)")
        fake = nvml_abi.server([pids], seed=17)
        report = status(fake, libs["current"], tmp_path)
    for path in made:
        try:
            path.rmdir()  # empty once its process has exited
        except OSError:
            pass
    rows = {p["pid"]: p for p in report["gpus"][0]["processes"]}
    assert rows[pids[0]]["container"] == {"runtime": "docker", "id": docker_id, "name": None, "pod": None}
    assert rows[pids[1]]["container"]["runtime"] == "podman"
    assert rows[pids[1]]["container"]["id"] == podman_id
    assert rows[pids[2]]["container"] is None


def test_an_old_sample_repeated_by_the_driver_is_not_new_activity(libs, tmp_path):
    """Some drivers return a process's last utilisation sample again and again
    once it stops running kernels: after SM_IDLE_AFTER_S it reads 0 %, not its
    last busy figure."""
    from app.core.monitor.nvml_processes import SM_IDLE_AFTER_S

    with Helpers(2) as pids:
        fake = nvml_abi.server([pids], seed=18)
        idle, busy = fake.processes
        idle.sm, idle.sm_stamp = 88, 1_700_000_000_000_000
        out = probe(fake, libs["current"], tmp_path, ticks=2, interval=SM_IDLE_AFTER_S + 0.5)
    first, later = ({p["pid"]: p["sm_util"] for p in s["gpus"][0]["processes"]}
                    for s in out["snapshots"])
    assert first == {idle.pid: 88.0, busy.pid: float(busy.sm)}
    assert later == {idle.pid: 0.0, busy.pid: float(busy.sm)}
