"""Stored history (``app.core.store.query``) reshaped for the window's rings.

The stored samples become one time grid per GPU on the monotonic axis the
:class:`~app.core.monitor.history.History` uses, with one row per process
aligned to it (NaN where the process was absent or its figure unknown): the
fine part (the last ``fine_span_s``) at the stored resolution, and every
sample as ``coarse_step_s`` peaks for the coarse ring.  Nothing is invented
between samples, so the time the app was not running stays a gap.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from app.core.monitor.samples import GpuSample, ProcessSample
from app.core.store.query import GpuSeries, ProcessSeries

ProcessKey = tuple[int, float | None]


@dataclass(frozen=True, slots=True)
class SeedPart:
    t: np.ndarray  # monotonic seconds, ascending
    used: np.ndarray
    util: np.ndarray
    rows: np.ndarray  # (processes, samples) bytes, NaN = absent or unknown
    proc_total: np.ndarray
    unattributed: np.ndarray


@dataclass(frozen=True, slots=True)
class SeedData:
    keys: list[ProcessKey]  # the rows' processes, in row order
    labels: dict[ProcessKey, ProcessSample]  # name and command, for the legend's label
    last_seen: dict[ProcessKey, float]  # monotonic seconds
    fine: SeedPart
    coarse: SeedPart
    memory_total: int | None


def epoch_to_monotonic_offset() -> float:
    """``monotonic = epoch - offset``."""
    return time.time() - time.monotonic()


def seed_data(gpu: GpuSeries, processes: list[ProcessSeries], fine_span_s: float,
              coarse_step_s: float, offset_s: float) -> SeedData | None:
    if gpu.t.size == 0:
        return None
    n = gpu.t.size
    keys: list[ProcessKey] = []
    labels: dict[ProcessKey, ProcessSample] = {}
    last_seen: dict[ProcessKey, float] = {}
    rows = np.full((len(processes), n), np.nan)
    present = np.zeros((len(processes), n), dtype=bool)
    for i, proc in enumerate(processes):
        key = (proc.pid, proc.create_time)
        at = np.clip(np.searchsorted(gpu.t, proc.t), 0, n - 1)
        hit = gpu.t[at] == proc.t
        rows[i, at[hit]] = proc.bytes[hit]
        present[i, at[hit]] = True
        keys.append(key)
        labels[key] = ProcessSample(proc.pid, None, name=proc.name, command=proc.command,
                                    user=proc.user, create_time=proc.create_time)
        last_seen[key] = float(proc.t[-1]) - offset_s if proc.t.size else -np.inf
    with np.errstate(all="ignore"):
        known = present & ~np.isnan(rows)
        proc_total = np.where(known.any(axis=0), np.nansum(np.where(known, rows, 0.0), axis=0),
                              np.nan)
        complete = ~(present & np.isnan(rows)).any(axis=0)
        unattributed = np.where(complete, np.maximum(0.0, gpu.used - np.nan_to_num(proc_total)),
                                np.nan)
    t = gpu.t - offset_s
    full = SeedPart(t, gpu.used, gpu.util, rows, proc_total, unattributed)
    fine = _select(full, t >= t[-1] - fine_span_s)
    total = gpu.total[~np.isnan(gpu.total)]
    return SeedData(keys, labels, last_seen, fine, _peaks(full, gpu.t, coarse_step_s),
                    int(total[-1]) if total.size else None)


def _select(part: SeedPart, keep: np.ndarray) -> SeedPart:
    return SeedPart(part.t[keep], part.used[keep], part.util[keep], part.rows[:, keep],
                    part.proc_total[keep], part.unattributed[keep])


def _peaks(part: SeedPart, epoch: np.ndarray, step_s: float) -> SeedPart:
    """The peak of each ``step_s`` bucket, stamped with its last sample's time
    (as the live coarse ring stamps a bucket when it closes)."""
    bucket = np.floor(epoch / step_s)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], bucket.size] - 1

    def peak(values: np.ndarray) -> np.ndarray:
        return np.fmax.reduceat(values, starts, axis=-1) if values.size else values

    return SeedPart(part.t[ends], peak(part.used), peak(part.util),
                    peak(part.rows) if part.rows.size else part.rows[:, :starts.size],
                    peak(part.proc_total), peak(part.unattributed))


def samples_after(series: GpuSeries, procs: list[ProcessSeries], offset: float,
                  newest: float | None) -> Iterator[tuple[float, GpuSample]]:
    """(monotonic time, sample) of each stored sample newer than ``newest``, in
    order: what a remote host's server kept while the window could not reach
    it, appended to rings that end before it."""
    if newest is None:
        return
    times = series.t - offset
    for i in np.flatnonzero(times > newest + 1e-3):
        at = float(series.t[i])
        held = []
        for p in procs:
            j = int(np.searchsorted(p.t, at))
            if j < p.t.size and abs(float(p.t[j]) - at) < 1e-6:
                value = float(p.bytes[j])
                held.append(ProcessSample(p.pid, None if np.isnan(value) else int(value),
                                          name=p.name, user=p.user, command=p.command,
                                          create_time=p.create_time))
        used, total, util = (float(series.used[i]), float(series.total[i]),
                             float(series.util[i]))
        yield float(times[i]), GpuSample(
            series.index or 0, series.name or "", series.uuid,
            None if np.isnan(total) else int(total), None if np.isnan(used) else int(used),
            None, utilization_gpu=None if np.isnan(util) else util, processes=tuple(held))
