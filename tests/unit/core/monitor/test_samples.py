"""GpuSample.unattributed_memory and Container: one definition, used by the
window, the tray and ``status --json`` alike."""

from __future__ import annotations

from app.core.monitor.report import snapshot_to_json
from app.core.monitor.samples import Container, DeviceState, GpuSample, ProcessSample, Snapshot

MiB = 1024**2


def gpu_to_json(g: GpuSample) -> dict:
    """What ``status --json`` prints for ``g``."""
    return snapshot_to_json(Snapshot(0.0, 0.0, "nvml", None, (g,)))["gpus"][0]


def process_to_json(p: ProcessSample) -> dict:
    return gpu_to_json(gpu(processes=[p]))["processes"][0]


def gpu(used: int | None = 10_000 * MiB + 12_345, processes=(), **kwargs) -> GpuSample:
    return GpuSample(index=0, name="GPU", uuid="GPU-0", memory_total=24_000 * MiB,
                     memory_used=used, memory_free=None, processes=tuple(processes), **kwargs)


def test_unattributed_is_used_minus_what_the_listed_processes_hold():
    g = gpu(processes=[ProcessSample(1, 6_000 * MiB + 1), ProcessSample(2, 3_000 * MiB + 7)])
    assert g.unattributed_memory == 1_000 * MiB + 12_345 - 8
    assert gpu_to_json(g)["unattributed_memory"] == g.unattributed_memory


def test_unattributed_with_no_process_is_all_of_used():
    assert gpu().unattributed_memory == 10_000 * MiB + 12_345


def test_unattributed_is_unknown_when_either_side_is():
    assert gpu(used=None).unattributed_memory is None
    wddm = gpu(processes=[ProcessSample(1, None), ProcessSample(2, 5 * MiB)])
    assert wddm.unattributed_memory is None  # never a guess from the processes we can see
    assert gpu(notes={"processes": "n/a (no permission)"}).unattributed_memory is None
    assert gpu(state=DeviceState.LOST).unattributed_memory is None
    assert gpu_to_json(wddm)["unattributed_memory"] is None


def test_unattributed_never_goes_below_zero():
    # The process list is read a moment after the memory figure: a process that
    # allocated in between can make the sum exceed "used".
    g = gpu(used=100 * MiB, processes=[ProcessSample(1, 150 * MiB)])
    assert g.unattributed_memory == 0


def test_container_label_and_json():
    cid = "3f4e2a1b9c0d" + "0" * 52
    docker = Container("docker", cid, name="sd-webui")
    assert docker.label == "docker sd-webui"
    assert Container("podman", cid).label == "podman 3f4e2a1b9c0d"
    pod = Container("containerd", cid, pod="7d1c5f0e-1111-2222-3333-444455556666")
    assert pod.label == "containerd (k8s) 3f4e2a1b9c0d"
    assert Container("lxc", "build-box", name="build-box").short_id == "build-box"
    row = process_to_json(ProcessSample(7, 1, container=pod))
    assert row["container"] == {"runtime": "containerd", "id": cid, "name": None,
                                "pod": "7d1c5f0e-1111-2222-3333-444455556666"}
    assert process_to_json(ProcessSample(8, 1))["container"] is None
