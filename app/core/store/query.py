"""Reading the stored history: for the window's loader, the CLI and the doctor.

:func:`read_history` opens the file read-only (it works while another
instance writes: WAL), uses the fine tier where it covers the range and the
coarse tier before that, and never raises: a missing file reads as empty, a
damaged or foreign one, or one in a folder that is not private (ours, 0700),
as empty with ``error`` set.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

import numpy as np

from app.agent.paths import dir_problem
from app.core.store.packing import ENTRY, to_bytes
from app.core.store.schema import COARSE, FINE, ForeignDatabase, open_reader
from app.core.store.tiers import COARSE_STEP_S


@dataclass(frozen=True)
class GpuSeries:
    """One GPU's stored samples, oldest first: epoch seconds and bytes /
    percent as float64, NaN where unknown."""

    uuid: str
    index: int | None
    name: str | None
    t: np.ndarray
    used: np.ndarray
    total: np.ndarray
    util: np.ndarray
    display_id: str | None = None  # the window's key for the GPU ("0", "0/mig1")


@dataclass(frozen=True)
class ProcessSeries:
    """One process on one GPU: the samples it appears in (``bytes`` NaN where
    its figure was unknown), oldest first."""

    pid: int
    create_time: float | None
    gpu_uuid: str
    command: str | None
    user: str | None
    t: np.ndarray
    bytes: np.ndarray
    name: str | None = None  # the process name as the host reported it


@dataclass(frozen=True)
class StoredHistory:
    gpus: dict[str, GpuSeries] = field(default_factory=dict)
    processes: list[ProcessSeries] = field(default_factory=list)
    error: str | None = None

    @property
    def empty(self) -> bool:
        return not any(series.t.size for series in self.gpus.values())


def read_history(db_path: str, since: float, until: float | None = None,
                 gpu_uuid: str | None = None, pid: int | None = None) -> StoredHistory:
    """Samples with ``since <= t <= until`` (epoch seconds; ``until`` None: now
    and on), for one GPU (``gpu_uuid``) or all, and the processes of one
    ``pid`` or all.  Never raises."""
    if not os.path.exists(db_path):
        return StoredHistory()
    folder = os.path.dirname(os.path.abspath(db_path))
    problem = dir_problem(folder)
    if problem is not None:  # someone else's file, or one someone else could swap
        return StoredHistory(error=f"history {db_path} not read: {folder} {problem}")
    try:
        conn = open_reader(db_path)
    except (sqlite3.Error, ForeignDatabase, OSError) as exc:
        return StoredHistory(error=f"history {db_path} could not be read: {exc}")
    try:
        return _read(conn, since, float("inf") if until is None else until, gpu_uuid, pid)
    except (sqlite3.Error, ValueError) as exc:
        return StoredHistory(error=f"history {db_path} could not be read: {exc}")
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, since: float, until: float, gpu_uuid: str | None,
          pid: int | None) -> StoredHistory:
    gpus = conn.execute("SELECT id, uuid, idx, name, display_id FROM gpu").fetchall()
    if gpu_uuid is not None:
        gpus = [row for row in gpus if row[1] == gpu_uuid]
    wanted: set[int] | None = None
    if pid is not None:
        wanted = {row[0] for row in conn.execute("SELECT id FROM process WHERE pid = ?", (pid,))}
    series: dict[str, GpuSeries] = {}
    found: dict[tuple[int, int], tuple[list[np.ndarray], list[np.ndarray]]] = {}
    lo = int(np.floor(since))
    hi = int(min(until, 2**62))
    for gpu_id, uuid, index, name, display_id in gpus:
        rows = _rows(conn, gpu_id, lo, hi)
        t = np.array([r[0] for r in rows], dtype=np.float64)
        series[uuid] = GpuSeries(uuid, index, name, t, _floats(rows, 1), _floats(rows, 2),
                                 _floats(rows, 3), display_id)
        _collect_processes(rows, gpu_id, t, wanted, found)
    processes = _process_series(conn, found, {g[0]: g[1] for g in gpus})
    return StoredHistory(series, processes)


def _rows(conn: sqlite3.Connection, gpu_id: int, lo: int, hi: int) -> list[tuple]:
    """Fine rows where the fine tier covers the range, coarse ones before."""
    first_fine = conn.execute("SELECT min(t) FROM sample WHERE tier = ? AND gpu = ?",
                              (FINE, gpu_id)).fetchone()[0]
    query = "SELECT t, used, total, util, procs FROM sample WHERE tier = ? AND gpu = ? " \
            "AND t >= ? AND t <= ? ORDER BY t"
    if first_fine is None:
        return conn.execute(query, (COARSE, gpu_id, lo, hi)).fetchall()
    # A coarse bucket that reaches into the fine tier is left to the fine rows.
    coarse = conn.execute(query, (COARSE, gpu_id, lo,
                                  min(hi, first_fine - COARSE_STEP_S))).fetchall()
    fine = conn.execute(query, (FINE, gpu_id, max(lo, first_fine), hi)).fetchall()
    return coarse + fine


def _floats(rows: list[tuple], column: int) -> np.ndarray:
    return np.array([np.nan if r[column] is None else r[column] for r in rows],
                    dtype=np.float64)


def _collect_processes(rows: list[tuple], gpu_id: int, t: np.ndarray, wanted: set[int] | None,
                       found: dict[tuple[int, int], tuple[list[np.ndarray], list[np.ndarray]]]
                       ) -> None:
    """Every row's blob decoded at once, then grouped by process."""
    blobs = [r[4] or b"" for r in rows]
    counts = np.array([len(b) // ENTRY.itemsize if len(b) % ENTRY.itemsize == 0 else 0
                       for b in blobs], dtype=np.int64)
    if not counts.sum():
        return
    entries = np.frombuffer(b"".join(b for b, n in zip(blobs, counts, strict=True) if n),
                            dtype=ENTRY)
    times = np.repeat(t, counts)
    ids = entries["process"].astype(np.int64)
    values = to_bytes(entries["kib"])
    order = np.argsort(ids, kind="stable")  # stable: each process's times stay sorted
    ids, times, values = ids[order], times[order], values[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], ids.size]
    for start, end in zip(starts, ends, strict=True):
        process = int(ids[start])
        if wanted is not None and process not in wanted:
            continue
        ts, vs = found.setdefault((gpu_id, process), ([], []))
        ts.append(times[start:end])
        vs.append(values[start:end])


def _process_series(conn: sqlite3.Connection,
                    found: dict[tuple[int, int], tuple[list[np.ndarray], list[np.ndarray]]],
                    uuids: dict[int, str]) -> list[ProcessSeries]:
    if not found:
        return []
    info = {row[0]: row[1:] for row in conn.execute(
        "SELECT id, pid, create_time, command, user, name FROM process")}
    out = []
    for (gpu_id, process), (ts, vs) in sorted(found.items()):
        known = info.get(process)
        if known is None:
            continue
        pid, create_time, command, user, name = known
        out.append(ProcessSeries(pid, create_time, uuids[gpu_id], command, user,
                                 np.concatenate(ts), np.concatenate(vs), name))
    return out
