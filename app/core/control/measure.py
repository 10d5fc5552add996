"""NVML figures an action is judged by: a process's bytes, a GPU's used bytes,
and the GPU a model's ``"cuda:N"`` device is.  Read from snapshots only."""

from __future__ import annotations

from app.core.agents.types import AgentReport, _bare_uuid
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


def gpu_of_device(snapshot: Snapshot | None, report: AgentReport | None,
                  device: str | None, pid: int | None = None) -> str | None:
    """The display id of the NVML GPU behind a process's ``"cuda:N"`` (by UUID when
    the agent reports them); else the GPU the process runs on, if only one."""
    if snapshot is None:
        return None
    if device and device.startswith("cuda:") and report is not None:
        try:
            index: int | None = int(device.split(":", 1)[1])
        except ValueError:
            index = None
        if index is not None:
            dev = report.device(index)
            if dev is not None and dev.uuid:
                want = _bare_uuid(dev.uuid)
                for g in snapshot.gpus:
                    if g.uuid and _bare_uuid(g.uuid) == want and g.mig_index is None:
                        return g.display_id
            elif not any(d.uuid for d in report.devices):
                for g in snapshot.gpus:
                    if g.index == index and g.mig_index is None:
                        return g.display_id
    if pid is not None:
        found = [g.display_id for g in snapshot.gpus if any(p.pid == pid for p in g.processes)]
        if len(found) == 1:
            return found[0]
    return None


def released(before: int | None, after: int | None) -> int | None:
    """Bytes released between two readings; None when either is unknown."""
    return None if before is None or after is None else before - after


__all__ = ["gpu_of_device", "gpu_used", "nvml_usage", "released"]
