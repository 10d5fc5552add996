"""Which GPU a process's CUDA device is: the agent's ``cuda:N`` mapped to NVML's GPUs.

CUDA_VISIBLE_DEVICES renumbers devices inside a process, so ``cuda:0`` of one
process can be NVML's GPU 3: the agent reports each device's UUID, and the
UUID names the GPU.  Qt-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.agents.types import bare_uuid

if TYPE_CHECKING:
    from app.core.agents.types import AgentReport
    from app.core.monitor.samples import Snapshot


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
                want = bare_uuid(dev.uuid)
                for g in snapshot.gpus:
                    if g.uuid and bare_uuid(g.uuid) == want and g.mig_index is None:
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


__all__ = ["gpu_of_device"]
