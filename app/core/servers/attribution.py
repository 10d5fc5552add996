"""A recognised server joined with what NVML shows for its processes.

The server's API says what it holds; NVML says where: the GPUs its
processes (the server and its runner or worker children) have memory on,
and how busy their SMs are.  Pure functions of one snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.core.monitor.samples import Snapshot

#: A runner using at least this share of the SMs is generating.
BUSY_SM_PERCENT = 5.0


@dataclass(frozen=True, slots=True)
class Usage:
    """What NVML shows for a set of pids in one snapshot."""

    bytes_by_gpu: dict[int, int]  # NVML index -> bytes (only GPUs with a known figure)
    known: bool  # every listed row had a figure (False on WDDM, MIG without rights)
    sm_percent: float | None  # the highest SM % of those processes; None: no sample
    gpu_used: dict[int, int]  # NVML index -> the GPU's used bytes (a fallback measure)
    listed: bool = False  # any of the pids is in a GPU's process list
    listed_on: frozenset[int] = frozenset()  # the GPUs listing them, bytes known or not

    @property
    def total(self) -> int | None:
        return sum(self.bytes_by_gpu.values()) if self.known else None

    @property
    def only_gpu(self) -> int | None:
        """The one GPU they are on (listed there: WDDM lists a process without bytes)."""
        return next(iter(self.listed_on)) if len(self.listed_on) == 1 else None


def usage_of(snapshot: Snapshot, pids: Iterable[int]) -> Usage:
    wanted = set(pids)
    by_gpu: dict[int, int] = {}
    used: dict[int, int] = {}
    known = True
    sm: float | None = None
    listed = False
    on: set[int] = set()
    for gpu in snapshot.gpus:
        for p in gpu.processes:
            if p.pid not in wanted:
                continue
            listed = True
            on.add(gpu.index)
            if gpu.memory_used is not None:
                used[gpu.index] = gpu.memory_used
            if p.gpu_memory is None:
                known = False
            else:
                by_gpu[gpu.index] = by_gpu.get(gpu.index, 0) + p.gpu_memory
            if p.sm_util is not None:
                sm = p.sm_util if sm is None else max(sm, p.sm_util)
    if not listed:
        used = {g.index: g.memory_used for g in snapshot.gpus if g.memory_used is not None}
    return Usage(by_gpu, known, sm, used, listed, frozenset(on))


__all__ = ["BUSY_SM_PERCENT", "Usage", "usage_of"]
