"""``main.py status --json`` must agree with nvidia-smi, the numbers users check.

Runs only on a machine with an NVIDIA GPU (see conftest.py).  When PyTorch
with CUDA is importable, a helper process holds 256 MiB on GPU 0 so the
process comparison has something to compare.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
HOLD_MIB = 256

_HOLDER = f"""
import sys
try:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA not available")
    block = torch.empty({HOLD_MIB} * 1024 * 1024, dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
except Exception as err:
    print("nocuda", err, flush=True)
    sys.exit(0)
print("ready", flush=True)
sys.stdin.read()  # hold the memory until the test closes stdin
"""


def smi(*args: str) -> list[list[str]]:
    done = subprocess.run(
        [shutil.which("nvidia-smi") or "nvidia-smi", *args, "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def smi_gpus() -> dict[str, dict[str, int]]:
    rows = smi("--query-gpu=index,uuid,memory.total,memory.used")
    return {uuid: {"index": int(i), "total": int(total), "used": int(used)} for i, uuid, total, used in rows}


def smi_apps() -> dict[tuple[str, int], int | None]:
    """(gpu uuid, pid) -> used MiB, or None where nvidia-smi says [N/A]."""
    out: dict[tuple[str, int], int | None] = {}
    for uuid, pid, used in smi("--query-compute-apps=gpu_uuid,pid,used_memory"):
        out[(uuid, int(pid))] = int(used) if used.isdigit() else None
    return out


def status_json() -> dict:
    done = subprocess.run(
        [sys.executable, "main.py", "status", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"status --json failed: {done.stderr}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def holder(nvidia_smi_available: tuple[bool, str]) -> Iterator[int | None]:
    """Pid of a process holding HOLD_MIB on GPU 0, or None without torch+CUDA."""
    if not nvidia_smi_available[0]:  # module fixtures run before the autouse skip
        pytest.skip(f"needs an NVIDIA GPU: {nvidia_smi_available[1]}")
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        yield proc.pid if line.startswith("ready") else None
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def within_mib(value_bytes: int | None, smi_mib: int) -> bool:
    return value_bytes is not None and abs(value_bytes / MiB - smi_mib) <= 1


def test_status_json_matches_nvidia_smi(holder: int | None) -> None:
    before = smi_gpus()
    report = status_json()
    after = smi_gpus()

    assert report["source"] == "nvml"
    smi_driver = smi("--query-gpu=driver_version")[0][0]
    assert report["driver_version"] == smi_driver

    full_gpus = [g for g in report["gpus"] if g["uuid"] in before]
    assert len(full_gpus) == len(before), "every GPU nvidia-smi lists must be reported"
    for gpu in full_gpus:
        ref = [before[gpu["uuid"]], after[gpu["uuid"]]]  # memory may move between calls
        assert gpu["index"] == ref[0]["index"]
        assert within_mib(gpu["memory_total"], ref[0]["total"])
        assert gpu["memory_used"] + gpu["memory_free"] <= gpu["memory_total"]
        # Depending on the driver, nvidia-smi's memory.used either excludes the
        # driver-reserved memory (like NVML's v2 ``used``, our memory_used) or
        # folds it in (like v1: total - free).  The JSON has no reserved field,
        # so accept either meaning, each within 1 MiB.
        assert any(
            within_mib(gpu["memory_used"], r["used"])
            or within_mib(gpu["memory_total"] - gpu["memory_free"], r["used"])
            for r in ref
        ), (gpu, ref)


def test_processes_match_nvidia_smi(holder: int | None) -> None:
    if holder is None:
        pytest.skip("PyTorch with CUDA not importable: no process to compare")
    apps_before = smi_apps()
    report = status_json()
    apps_after = smi_apps()

    by_key = {
        (gpu["uuid"], proc["pid"]): proc
        for gpu in report["gpus"] for proc in gpu["processes"]
    }
    gpu0 = next(g for g in report["gpus"] if g["index"] == 0)
    ours = {p["pid"]: p for p in gpu0["processes"]}
    assert holder in ours, f"holder pid {holder} missing from {sorted(ours)}"
    held = ours[holder]["gpu_memory"]
    assert held is None or held >= HOLD_MIB * MiB
    assert ours[holder]["name"], "the collector fills host details"

    # Every compute app nvidia-smi saw in both calls is reported with the same memory.
    stable = set(apps_before) & set(apps_after)
    for key in stable:
        assert key in by_key, f"{key} in nvidia-smi but not in status --json"
        smi_mib = apps_after[key]
        if smi_mib is None:  # [N/A] (WDDM, or no permission): must be n/a, never a number
            assert by_key[key]["gpu_memory"] is None
        else:
            assert within_mib(by_key[key]["gpu_memory"], smi_mib) or within_mib(
                by_key[key]["gpu_memory"], apps_before[key]
            ), (key, by_key[key], smi_mib)


def test_temperature_and_unattributed_memory_agree_with_nvidia_smi(holder: int | None) -> None:
    """Temperature (read through nvmlDeviceGetTemperatureV where the driver has
    it) within 2 °C of nvidia-smi's; unattributed memory is used minus what the
    listed processes hold, in the same JSON."""
    temps = {uuid: int(t) for uuid, t in smi("--query-gpu=uuid,temperature.gpu") if t.isdigit()}
    report = status_json()
    for gpu in report["gpus"]:
        if gpu["uuid"] in temps:
            assert gpu["temperature"] is not None and abs(gpu["temperature"] - temps[gpu["uuid"]]) <= 2
        held = [p["gpu_memory"] for p in gpu["processes"]]
        if gpu["memory_used"] is None or None in held or "processes" in gpu["notes"]:
            assert gpu["unattributed_memory"] is None
        else:
            assert gpu["unattributed_memory"] == max(0, gpu["memory_used"] - sum(held))
