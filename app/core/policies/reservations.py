"""Memory a server reserves by design (vLLM, SGLang, TGI), set apart for alerts.

Such a server takes ~90 % of its GPU at start and keeps it for as long as it
lives: an alert at 90 % would fire at once and mean nothing.  For a GPU with
one, the near-limit alert watches what is left beside the reservation
instead, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.monitor.samples import GpuSample, Snapshot


@dataclass(frozen=True, slots=True)
class Reserved:
    bytes: int  # NVML bytes of the reserving servers' processes on the GPU
    text: str  # "vLLM (4242) reserves 71.3 GiB by design"
    usage: float | None  # the server's own fullness of its pool (KV cache), 0..1


def reserved_on(gpu: GpuSample, snapshot: Snapshot) -> Reserved | None:
    from app.core.units import fmt_bytes

    held: dict[int, int] = {p.pid: p.gpu_memory or 0 for p in gpu.processes}
    total, names, usage = 0, [], None
    for server in snapshot.servers:
        if server.reservation is None:
            continue
        mine = sum(held.get(pid, 0) for pid in server.pids)
        if mine:
            total += mine
            names.append(f"{server.label} ({server.pid}) reserves {fmt_bytes(mine)} by design")
            if server.reservation.usage is not None:
                usage = server.reservation.usage
    return Reserved(total, "; ".join(names), usage) if total else None


def level_beside(gpu: GpuSample, reserved: Reserved) -> float | None:
    """used / total of what the reservation leaves to everything else."""
    if gpu.memory_used is None or not gpu.memory_total:
        return None
    rest = gpu.memory_total - reserved.bytes
    return max(0.0, gpu.memory_used - reserved.bytes) / rest if rest > 0 else 1.0


__all__ = ["Reserved", "level_beside", "reserved_on"]
