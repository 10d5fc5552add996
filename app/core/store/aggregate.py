"""Ticks to tier rows: the peak of each second and of each 5 s bucket.

Runs on the writer thread.  A row is complete when a tick of a later second
(bucket) arrives for its GPU; :meth:`Aggregator.take` hands over the complete
rows, and every open one too when the recorder closes.  A figure unknown in
every tick of a bucket stays None (NULL), never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeVar

from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.store.schema import COARSE, FINE
from app.core.store.tiers import COARSE_STEP_S, FINE_STEP_S

ProcessKey = tuple[int, float | None]  # (pid, create time)
TIERS = ((FINE, FINE_STEP_S), (COARSE, COARSE_STEP_S))


@dataclass(frozen=True, slots=True)
class GpuInfo:
    uuid: str
    index: int
    name: str
    display_id: str


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    name: str | None
    command: str | None
    user: str | None


@dataclass(slots=True)
class Row:
    """One (tier, GPU, time) sample: peaks over its ticks."""

    tier: int
    gpu: str  # GpuInfo.uuid
    t: int  # epoch seconds, the start of the second or bucket
    used: int | None = None
    total: int | None = None
    util: float | None = None
    procs: dict[ProcessKey, int | None] = field(default_factory=dict)

    def merge(self, gpu: GpuSample) -> None:
        self.used = _peak(self.used, gpu.memory_used)
        self.total = _peak(self.total, gpu.memory_total)
        self.util = _peak(self.util, gpu.utilization_gpu)
        procs = self.procs
        for proc in gpu.processes:
            key = (proc.pid, proc.create_time)
            procs[key] = _peak(procs.get(key), proc.gpu_memory)


N = TypeVar("N", int, float)


def _peak(old: N | None, new: N | None) -> N | None:
    if new is None or (isinstance(new, float) and math.isnan(new)):
        return old
    return new if old is None or new > old else old


def gpu_key(gpu: GpuSample) -> str:
    """The GPU's UUID; a GPU without one is keyed by its place ("index:0/mig1")."""
    return gpu.uuid or f"index:{gpu.display_id}"


class Aggregator:
    def __init__(self) -> None:
        self._open: dict[tuple[int, str], Row] = {}
        self._done: list[Row] = []
        self.gpus: dict[str, GpuInfo] = {}
        self.processes: dict[ProcessKey, ProcessInfo] = {}

    def add(self, snapshot: Snapshot) -> None:
        now = snapshot.timestamp
        for gpu in snapshot.gpus:
            if gpu.state is not DeviceState.OK:
                continue  # a lost GPU's figures are unknown: a gap, not a sample
            key = gpu_key(gpu)
            if key not in self.gpus:
                self.gpus[key] = GpuInfo(key, gpu.index, gpu.name, gpu.display_id)
            for proc in gpu.processes:
                pkey = (proc.pid, proc.create_time)
                if pkey not in self.processes:
                    self.processes[pkey] = ProcessInfo(proc.name, proc.command, proc.user)
            for tier, step in TIERS:
                start = int(now // step) * step
                row = self._open.get((tier, key))
                if row is None or row.t != start:
                    if row is not None:
                        self._done.append(row)
                    row = self._open[(tier, key)] = Row(tier, key, start)
                row.merge(gpu)

    def take(self, everything: bool = False) -> Batch:
        """The complete rows since the last call (and the open ones with
        ``everything``: the recorder is closing), with what names their GPUs
        and processes.  Names are kept only while a process is in an open row."""
        rows, self._done = self._done, []
        if everything:
            rows.extend(self._open.values())
            self._open.clear()
        named = {key for row in rows for key in row.procs}
        batch = Batch(rows, dict(self.gpus),
                      {key: info for key, info in self.processes.items() if key in named})
        live = {key for row in self._open.values() for key in row.procs}
        self.processes = {key: info for key, info in self.processes.items() if key in live}
        return batch


@dataclass(frozen=True, slots=True)
class Batch:
    rows: list[Row]
    gpus: dict[str, GpuInfo]
    processes: dict[ProcessKey, ProcessInfo]
