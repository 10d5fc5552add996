"""Which processes and models a request names, read from the latest snapshot:
labels, the agent processes a GPU's "Free all caches" frees, the models the
auto-unload rules call idle."""

from __future__ import annotations

from app.core.agents.types import VramBreakdown
from app.core.monitor.naming import label_or_pid, process_label
from app.core.monitor.samples import Snapshot


def label_of(snapshot: Snapshot | None, pid: int) -> str:
    """"train.py (20417)", or "pid 20417" when the process is not named."""
    if snapshot is not None:
        for gpu in snapshot.gpus:
            for p in gpu.processes:
                if p.pid == pid and (p.name or p.command):
                    return process_label(p)
    return f"pid {pid}"


def on_any_gpu(snapshot: Snapshot, pid: int) -> bool:
    return any(p.pid == pid for g in snapshot.gpus for p in g.processes)


def freeable_on_gpu(snapshot: Snapshot, display_id: str) -> dict[int, str]:
    """pid -> label of the agent processes on GPU ``display_id`` whose allocator
    holds cache (what the panel's "Free all caches" button frees), largest first."""
    gpu = next((g for g in snapshot.gpus if g.display_id == display_id), None)
    if gpu is None:
        return {}
    out: dict[int, str] = {}
    for p in sorted(gpu.processes, key=lambda p: -(p.gpu_memory or 0)):
        report = snapshot.agents.get(p.pid)
        if report is None:
            continue
        b = VramBreakdown.of(p.gpu_memory, report.device_for_gpu(gpu.index, gpu.uuid),
                             report.param_bytes_for_gpu(gpu.index, gpu.uuid))
        if b.cache is not None and b.cache > 0:
            out[p.pid] = label_or_pid(p)
    return out


def idle_models(snapshot: Snapshot | None, min_idle_s: float
                ) -> list[tuple[int, str, str, str, int]]:
    """(pid, model id, name, device, bytes) of every model the auto-unload rules would
    unload now from any GPU, whatever the GPU's level."""
    if snapshot is None or not (snapshot.agents or snapshot.servers):
        return []
    from app.core.policies.pressure import PressurePolicy, PressurePolicyConfig

    policy = PressurePolicy(PressurePolicyConfig(min_idle_s=min_idle_s))
    out: list[tuple[int, str, str, str, int]] = []
    seen: set[tuple[int, str]] = set()
    for gpu in snapshot.gpus:
        eligible, _skipped = policy.candidates(snapshot, gpu)
        for a in eligible:
            if (a.pid, a.model) not in seen:
                seen.add((a.pid, a.model))
                out.append((a.pid, a.model, a.name, a.device, a.bytes))
    return out


__all__ = ["freeable_on_gpu", "idle_models", "label_of", "on_any_gpu"]
