"""Bounded history of device and per-process VRAM, in numpy ring buffers.

Two resolutions per GPU:

* **fine**: every tick for ``fine_span_s`` (default 1 h at the sample period);
* **coarse**: the peak of each ``coarse_step_s`` bucket for ``coarse_span_s``
  (default 24 h at 5 s).  Peaks, not means, because the question the user asks
  of old history is "how close did we get to OOM?".

Per-process series are rows of one 2-D float32 array per GPU, aligned with the
GPU's tick slots, so appending a tick is one vectorised column write however
many processes there are.  A process that exits keeps its row (NaN from then on)
until its last value scrolls out of the coarse window, or until the row is
needed and it is the longest-gone one.  Process rows live in lazily committed
memory and are filled as time passes (a row's slots from before it was claimed
are masked on read, not cleared), so resident memory grows with the history
actually held, up to the bound and never past it.

Memory bound, per GPU: ``(fine + coarse slots) * (8 + 8 + 4 + 8 + 8 + 8)`` bytes
for the device series (used, utilisation, process total, unattributed), times
and slot serials plus ``(fine + coarse slots) * 4 + 16`` bytes
per process row, at most ``max_process_rows`` rows.  With the defaults (250 ms,
1 h, 24 h at 5 s, 128 rows) that is 0.85 MiB + 128 * 124 KiB ≈ 16.3 MiB per GPU.

Values are float32 bytes for processes (±5 KB precision at 80 GiB: plenty for a
graph; exact figures come from the latest sample) and float64 for the device.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from app.core.monitor.history_seed import (
    SeedData,
    SeedPart,
    epoch_to_monotonic_offset,
    samples_after,
    seed_data,
)
from app.core.monitor.naming import label_or_pid
from app.core.monitor.samples import GpuSample, Snapshot
from app.core.store.query import StoredHistory

ProcessKey = tuple[int, float | None]  # (pid, create time)


@dataclass(frozen=True, slots=True)
class HistoryConfig:
    period_s: float = 0.25
    fine_span_s: float = 3600.0
    coarse_step_s: float = 5.0
    coarse_span_s: float = 86400.0
    max_process_rows: int = 128  # per GPU

    @property
    def fine_slots(self) -> int:
        return max(2, math.ceil(self.fine_span_s / self.period_s))

    @property
    def coarse_slots(self) -> int:
        return max(2, math.ceil(self.coarse_span_s / self.coarse_step_s))

    def bound_bytes_per_gpu(self) -> int:
        # Per ring slot: time f8 + used f8 + util f4 + serial i8 + process total
        # f8 + unattributed f8; per process row: one f4 per slot plus its i8
        # ``row_since`` in each of the 2 rings.
        slots = self.fine_slots + self.coarse_slots
        return slots * (8 + 8 + 4 + 8 + 8 + 8) + self.max_process_rows * (slots * 4 + 2 * 8)


@dataclass(frozen=True, slots=True)
class SeriesView:
    """A time-ordered copy of one GPU's history over a span.

    ``t`` is seconds relative to the newest sample (<= 0), ``used`` bytes,
    ``util`` percent (NaN = unknown), ``processes`` maps a process key to its
    bytes per slot (NaN where the process was absent or its figure unknown);
    only the keys asked for when the view was made with ``keys``.
    ``process_total`` is the sum over *all* processes per slot (the peak of
    that sum in the coarse ring), so "everything else" needs no other rows.
    ``unattributed`` is ``GpuSample.unattributed_memory`` per slot (its peak
    in the coarse ring), NaN where unknown.
    """

    t: np.ndarray
    used: np.ndarray
    util: np.ndarray
    processes: dict[ProcessKey, np.ndarray]
    process_total: np.ndarray = field(default_factory=lambda: np.empty(0))
    unattributed: np.ndarray = field(default_factory=lambda: np.empty(0))


class _Ring:
    """Fixed-capacity time ring with a device series and process rows."""

    def __init__(self, slots: int, max_rows: int) -> None:
        self.slots = slots
        self.max_rows = max_rows
        self.time = np.empty(slots, dtype=np.float64)
        self.used = np.empty(slots, dtype=np.float64)
        self.util = np.empty(slots, dtype=np.float32)
        self.proc_total = np.empty(slots, dtype=np.float64)  # bytes, all processes
        self.unattributed = np.empty(slots, dtype=np.float64)  # bytes, NaN = unknown
        self.serial = np.empty(slots, dtype=np.int64)  # write number held by each slot
        # All rows up front, in lazily committed memory: a page becomes
        # resident only when a process's values are first written to it.
        self.rows = _lazy_array((max_rows, slots), np.float32)
        self.row_since = np.zeros(max_rows, dtype=np.int64)  # first valid write number per row
        self.count = 0  # slots written so far, capped at ``slots``
        self.head = 0  # next slot to write
        self.written = 0  # writes so far

    def claim_row(self, row: int) -> None:
        """Start a row afresh: whatever it held before reads as absent."""
        self.row_since[row] = self.written

    def row_series(self, row: int, order: np.ndarray,
                   serial: np.ndarray | None = None) -> np.ndarray:
        """Row ``row`` at slots ``order``; ``serial``: ``self.serial[order]``, when
        the caller took it once for many rows."""
        series = self.rows[row, order]
        stale = (self.serial[order] if serial is None else serial) < self.row_since[row]
        if stale.any():
            series = series.copy()
            series[stale] = np.nan
        return series

    def push(self, t: float, used: float, util: float, row_values: np.ndarray | None,
             active_rows: int, proc_total: float = float("nan"),
             unattributed: float = float("nan")) -> int:
        slot = self.head
        self.time[slot] = t
        self.used[slot] = used
        self.util[slot] = util
        self.proc_total[slot] = proc_total
        self.unattributed[slot] = unattributed
        self.serial[slot] = self.written
        self.written += 1
        if active_rows:
            column = self.rows[:active_rows, slot]
            if row_values is None:
                column[:] = np.nan
            else:
                column[:] = row_values[:active_rows]
        self.head = (slot + 1) % self.slots
        self.count = min(self.count + 1, self.slots)
        return slot

    def fill(self, part: SeedPart, rows: list[int | None]) -> None:
        """Start an empty ring with ``part``'s samples (its newest ``slots``);
        ``rows[i]``: the ring row of ``part.rows[i]`` (None: not kept)."""
        n = min(self.slots, part.t.size)
        cut = slice(part.t.size - n, part.t.size)
        self.time[:n] = part.t[cut]
        self.used[:n] = part.used[cut]
        self.util[:n] = part.util[cut]
        self.proc_total[:n] = part.proc_total[cut]
        self.unattributed[:n] = part.unattributed[cut]
        self.serial[:n] = np.arange(n)
        for source, row in enumerate(rows):
            if row is not None:
                self.rows[row, :n] = part.rows[source, cut]
        self.written = self.count = n
        self.head = n % self.slots

    def order(self) -> np.ndarray:
        """Slot indices oldest → newest."""
        if self.count < self.slots:
            return np.arange(self.count)
        return (np.arange(self.slots) + self.head) % self.slots

    def newest_time(self) -> float | None:
        if not self.count:
            return None
        return float(self.time[(self.head - 1) % self.slots])


class GpuHistory:
    """History of one GPU (or MIG device)."""

    def __init__(self, config: HistoryConfig) -> None:
        self.config = config
        self.fine = _Ring(config.fine_slots, config.max_process_rows)
        self.coarse = _Ring(config.coarse_slots, config.max_process_rows)
        self.row_of: dict[ProcessKey, int] = {}
        self.last_seen: dict[ProcessKey, float] = {}  # monotonic seconds
        self.labels: dict[ProcessKey, str] = {}
        self._free_rows: list[int] = []
        self._next_row = 0
        self._bucket_start: float | None = None
        self._bucket_first_slot = 0
        self.memory_total: int | None = None
        self._older_in_coarse = False  # seeded: the coarse ring reaches further back

    def seed(self, data: SeedData) -> None:
        """Fill the empty rings with stored history (before the first live tick)."""
        if self.fine.count or self.coarse.count:
            return
        newest = max(data.last_seen.values(), default=0.0)
        keep = sorted(data.keys, key=lambda k: data.last_seen[k], reverse=True)
        kept = set(keep[: self.config.max_process_rows])
        rows: list[int | None] = []
        for key in data.keys:
            row = self._row_for(key, newest, set()) if key in kept else None
            rows.append(row)
            if row is not None:
                self.last_seen[key] = data.last_seen[key]
                self.labels[key] = label_or_pid(data.labels[key])
        self.fine.fill(data.fine, rows)
        self.coarse.fill(data.coarse, rows)
        self.memory_total = data.memory_total
        self._older_in_coarse = data.coarse.t.size > 0 and (
            data.fine.t.size == 0 or data.coarse.t[0] < data.fine.t[0])

    # -- rows -----------------------------------------------------------------
    def _row_for(self, key: ProcessKey, now: float, live: set[ProcessKey]) -> int | None:
        row = self.row_of.get(key)
        if row is not None:
            return row
        if self._free_rows:
            row = self._free_rows.pop()
        elif self._next_row < self.config.max_process_rows:
            row = self._next_row
            self._next_row += 1
        else:
            row = self._evict_longest_gone(now, live)
            if row is None:
                return None  # every row holds a live process: drop the newcomer's history
        self.fine.claim_row(row)
        self.coarse.claim_row(row)
        self.row_of[key] = row
        return row

    def _evict_longest_gone(self, now: float, live: set[ProcessKey]) -> int | None:
        # ``live``: every process of the sample being added, including those
        # not yet processed (their ``last_seen`` is still the previous tick's).
        gone = [(seen, key) for key, seen in self.last_seen.items()
                if seen < now and key not in live]
        if not gone:
            return None
        _, key = min(gone, key=lambda item: item[0])
        return self._release(key)

    def _release(self, key: ProcessKey) -> int:
        row = self.row_of.pop(key)
        self.last_seen.pop(key, None)
        self.labels.pop(key, None)
        return row

    def _expire(self, now: float) -> None:
        horizon = now - self.config.coarse_span_s
        for key in [k for k, seen in self.last_seen.items() if seen < horizon]:
            self._free_rows.append(self._release(key))

    # -- appending ------------------------------------------------------------
    def add(self, gpu: GpuSample, now: float) -> None:
        self.memory_total = gpu.memory_total
        values = np.full(self._next_row, np.nan, dtype=np.float32) if self._next_row else None
        live = {proc.key for proc in gpu.processes}
        proc_total = 0
        known = False
        for proc in gpu.processes:
            key = proc.key
            if proc.gpu_memory is not None:
                proc_total += proc.gpu_memory
                known = True
            row = self._row_for(key, now, live)
            if row is None:
                continue
            if values is None or row >= values.shape[0]:
                grown = np.full(self._next_row, np.nan, dtype=np.float32)
                if values is not None:
                    grown[: values.shape[0]] = values
                values = grown
            if proc.gpu_memory is not None:
                values[row] = proc.gpu_memory
            self.last_seen[key] = now
            if key not in self.labels:
                self.labels[key] = label_or_pid(proc)
        used = float("nan") if gpu.memory_used is None else float(gpu.memory_used)
        util = float("nan") if gpu.utilization_gpu is None else float(gpu.utilization_gpu)
        total = float(proc_total) if known else float("nan")
        unattributed = gpu.unattributed_memory
        slot = self.fine.push(now, used, util, values, self._next_row, total,
                              float("nan") if unattributed is None else float(unattributed))
        self._roll_coarse(now, slot)

    def _roll_coarse(self, now: float, slot: int) -> None:
        if self._bucket_start is None:
            self._bucket_start = now
            self._bucket_first_slot = slot
            return
        if now - self._bucket_start < self.config.coarse_step_s:
            return
        fine = self.fine
        first = self._bucket_first_slot
        if first <= slot:
            cols = np.arange(first, slot + 1)
        else:  # wrapped around the ring
            cols = np.concatenate((np.arange(first, fine.slots), np.arange(0, slot + 1)))
        rows = self._next_row
        with np.errstate(all="ignore"), _nan_warnings_off():
            used = _nanmax(fine.used[cols])
            util = _nanmax(fine.util[cols])
            proc_total = _nanmax(fine.proc_total[cols])
            unattributed = _nanmax(fine.unattributed[cols])
            block = fine.rows[:rows][:, cols]
            stale = fine.serial[cols][None, :] < fine.row_since[:rows][:, None]
            block[stale] = np.nan
            row_peaks = np.nanmax(block, axis=1) if rows else None
        self.coarse.push(now, used, util, row_peaks, rows, proc_total, unattributed)
        self._bucket_start = now
        self._bucket_first_slot = (slot + 1) % fine.slots
        self._expire(now)

    # -- reading --------------------------------------------------------------
    def available(self, span_s: float) -> dict[ProcessKey, float]:
        """Processes with history in the last ``span_s``: key → when last seen,
        in seconds relative to the newest sample (<= 0)."""
        newest = self.fine.newest_time()
        if newest is None:
            return {}
        since = newest - span_s
        return {key: seen - newest for key, seen in self.last_seen.items() if seen >= since}

    def _span(self, span_s: float) -> tuple[_Ring, np.ndarray, float] | None:
        """The ring that serves ``span_s``, its slots in span (oldest first) and
        its newest time; None before the first sample."""
        # The fine ring also serves long spans until it has wrapped once: it then
        # still holds everything, at full resolution.
        fine_has_all = self.fine.count < self.fine.slots and not self._older_in_coarse
        ring = self.fine if span_s <= self.config.fine_span_s or fine_has_all else self.coarse
        newest = ring.newest_time()
        if newest is None:
            return None
        order = ring.order()
        keep = ring.time[order] >= newest - span_s
        return ring, order[keep], newest

    def peaks(self, span_s: float, keys: Iterable[ProcessKey]) -> dict[ProcessKey, float]:
        """Each process's highest VRAM in the last ``span_s`` (bytes; NaN when
        never known there), without copying the series into a view."""
        span = self._span(span_s)
        if span is None:
            return {}
        ring, order, _ = span
        serial = ring.serial[order]
        out: dict[ProcessKey, float] = {}
        with np.errstate(all="ignore"):
            for key in keys:
                row = self.row_of.get(key)
                if row is not None:
                    out[key] = float(np.fmax.reduce(ring.row_series(row, order, serial),
                                                    initial=np.nan))
        return out

    def view(self, span_s: float, keys: Iterable[ProcessKey] | None = None) -> SeriesView:
        """The last ``span_s`` seconds, from the fine ring when it covers them.

        ``keys`` limits the process series copied (a plot shows a handful of
        the up to 128 it could); None copies every process with data in span.
        """
        span = self._span(span_s)
        if span is None:
            empty = np.empty(0)
            return SeriesView(empty, empty, empty, {})
        ring, order, newest = span
        t = ring.time[order] - newest
        serial = ring.serial[order]  # once for every row
        procs: dict[ProcessKey, np.ndarray] = {}
        wanted = self.row_of.items() if keys is None else (
            (key, self.row_of[key]) for key in keys if key in self.row_of)
        for key, row in wanted:
            series = ring.row_series(row, order, serial)
            if not np.all(np.isnan(series)):
                procs[key] = series
        return SeriesView(t, ring.used[order], ring.util[order].astype(np.float64), procs,
                          ring.proc_total[order], ring.unattributed[order])


class History:
    """History of every GPU, keyed by ``GpuSample.display_id``."""

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        self.gpus: dict[str, GpuHistory] = {}
        self._host_keys: frozenset[str] = frozenset()

    def add(self, snapshot: Snapshot) -> None:
        """This machine's GPUs, and each remote host's (``Snapshot.hosts``):
        its stored history first, once, then each of its snapshots once."""
        self._add(snapshot.gpus, snapshot.monotonic)
        keys = frozenset(view.key for view in snapshot.hosts)
        if keys != self._host_keys:  # a host removed: its rings go (added again: seeded again)
            self._host_keys = keys
            for did in [d for d in self.gpus if "@" in d and d.partition("@")[2] not in keys]:
                del self.gpus[did]
        for view in snapshot.hosts:
            if view.seed is not None:
                self.seed(view.seed)
            if view.fresh and view.snapshot is not None:
                self._add(view.snapshot.gpus, view.snapshot.monotonic)

    def _add(self, gpus: tuple[GpuSample, ...], now: float) -> None:
        for gpu in gpus:
            hist = self.gpus.get(gpu.display_id)
            if hist is None:
                hist = self.gpus[gpu.display_id] = GpuHistory(self.config)
            hist.add(gpu, now)

    def seed(self, stored: StoredHistory, offset_s: float | None = None) -> None:
        """Open with stored history: each GPU not yet sampled gets its stored
        samples, one sampled already those newer than its rings (a host's
        server kept them while it could not be reached); epoch seconds moved
        to the monotonic axis: ``monotonic = epoch - offset_s``, now's offset
        by default."""
        offset = epoch_to_monotonic_offset() if offset_s is None else offset_s
        for uuid, series in stored.gpus.items():
            display_id = series.display_id or (None if series.index is None
                                               else str(series.index))
            if display_id is None:
                continue
            procs = [p for p in stored.processes if p.gpu_uuid == uuid]
            hist = self.gpus.get(display_id)
            if hist is not None:  # sampled already: only what came after its rings
                newest = hist.fine.newest_time()
                for t, sample in samples_after(series, procs, offset, newest):
                    hist.add(sample, t)
                continue
            data = seed_data(series, procs, self.config.fine_span_s,
                             self.config.coarse_step_s, offset)
            if data is not None:
                hist = self.gpus[display_id] = GpuHistory(self.config)
                hist.seed(data)

    def view(self, display_id: str, span_s: float,
             keys: Iterable[ProcessKey] | None = None) -> SeriesView:
        hist = self.gpus.get(display_id)
        if hist is None:
            empty = np.empty(0)
            return SeriesView(empty, empty, empty, {})
        return hist.view(span_s, keys)

    def available(self, display_id: str, span_s: float) -> dict[ProcessKey, float]:
        hist = self.gpus.get(display_id)
        return hist.available(span_s) if hist else {}

    def peaks(self, display_id: str, span_s: float,
              keys: Iterable[ProcessKey]) -> dict[ProcessKey, float]:
        hist = self.gpus.get(display_id)
        return hist.peaks(span_s, keys) if hist else {}

    def label(self, display_id: str, key: ProcessKey) -> str:
        hist = self.gpus.get(display_id)
        return (hist.labels.get(key) if hist else None) or f"pid {key[0]}"

    def bound_bytes(self) -> int:
        return self.config.bound_bytes_per_gpu() * max(1, len(self.gpus))


def _lazy_array(shape: tuple[int, int], dtype: type) -> np.ndarray:
    """A zeroed array whose pages are committed on first write.

    numpy's allocator asks Linux for transparent huge pages on big arrays, so
    one write per row (a tick writes a column across process rows) would make
    a whole 2 MiB region resident; an anonymous mmap is committed 4 KiB at a
    time, which keeps resident memory proportional to history actually held.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype=dtype)
    buffer = mmap.mmap(-1, nbytes)
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _nanmax(values: np.ndarray) -> float:
    if values.size == 0 or np.all(np.isnan(values)):
        return float("nan")
    return float(np.nanmax(values))


@contextlib.contextmanager
def _nan_warnings_off() -> Iterator[None]:
    """np.nanmax warns on all-NaN rows (a process absent for a whole bucket)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
