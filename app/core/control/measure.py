"""NVML figures an action is judged by: a process's bytes and a GPU's used
bytes, read from snapshots (``gpu_of_device``: app.core.agents.placement)."""

from __future__ import annotations

from app.core.monitor.samples import Snapshot


def nvml_usage(snapshot: Snapshot | None, pid: int, display_id: str | None = None) -> int | None:
    """NVML bytes of ``pid`` in ``snapshot`` (on ``display_id``, or summed over its GPUs);
    None when the process is absent or its figure unknown."""
    if snapshot is None:
        return None
    total = None
    for gpu in snapshot.gpus:
        if display_id is not None and gpu.display_id != display_id:
            continue
        for p in gpu.processes:
            if p.pid == pid:
                if p.gpu_memory is None:
                    return None
                total = (total or 0) + p.gpu_memory
    return total


def gpu_used(snapshot: Snapshot | None, display_id: str | None) -> int | None:
    """The GPU's NVML used bytes; None when unknown."""
    if snapshot is None or display_id is None:
        return None
    for gpu in snapshot.gpus:
        if gpu.display_id == display_id:
            return gpu.memory_used
    return None


def released(before: int | None, after: int | None) -> int | None:
    """Bytes released between two readings; None when either is unknown."""
    return None if before is None or after is None else before - after


__all__ = ["gpu_used", "nvml_usage", "released"]
