"""The history on a disk that fills and frees while GPUs and processes appear.

A commit that fails takes the GPU and process rows it inserted with it; what
was stored after must still be under its own GPU UUID and pid, read back with
``read_history``.  The full disk is real: a small tmpfs filled to its last
byte (root), or SQLite's own page limit (``PRAGMA max_page_count``, anyone).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.store import recorder as recorder_module
from app.core.store.aggregate import Aggregator
from app.core.store.query import StoredHistory, read_history
from app.core.store.recorder import HistoryRecorder
from app.core.store.schema import FINE, open_writer
from app.core.store.tiers import Retention
from app.core.store.writer import HistoryWriter
from tests.fakes.full_disk import fill, free, small_disk, why_no_tmpfs

MiB = 1 << 20
GiB = 1 << 30
T0 = 1_700_000_000.0

Layout = dict[int, list[int]]  # GPU number -> the pids on it

# Every figure names its owner: GPU g uses (g + 1) GiB, process pid holds pid MiB.
BEFORE: Layout = {0: [100]}
DURING: tuple[Layout, ...] = ({0: [100], 1: [200, 201]}, {0: [100], 1: [200, 201], 2: [300]})
AFTER: Layout = {0: [101], 1: [200, 201], 2: [300], 3: [400]}


def uuid(g: int) -> str:
    return f"GPU-{g}"


def tick(t: float, layout: Layout) -> Snapshot:
    gpus = tuple(
        GpuSample(index=g, name="H100", uuid=uuid(g), memory_total=80 * GiB,
                  memory_used=(g + 1) * GiB, memory_free=None, utilization_gpu=10.0 * g,
                  processes=tuple(ProcessSample(pid, pid * MiB, name=f"p{pid}", user="alice",
                                                command=f"python job{pid}.py",
                                                create_time=1e9 + pid) for pid in pids))
        for g, pids in sorted(layout.items()))
    return Snapshot(timestamp=t, monotonic=t, source="nvml", driver_version="550", gpus=gpus)


def owners(layouts: list[Layout]) -> dict[int, str]:
    return {pid: uuid(g) for layout in layouts for g, pids in layout.items() for pid in pids}


def assert_attributed(stored: StoredHistory, gpu_of: dict[int, str]) -> None:
    """Every sample under its own GPU, every process's bytes under its own pid and GPU."""
    assert stored.error is None
    for key, series in stored.gpus.items():
        g = int(key.removeprefix("GPU-"))
        assert series.index == g
        assert np.all(series.used == (g + 1) * GiB), key
    for process in stored.processes:
        assert process.gpu_uuid == gpu_of[process.pid], process.pid
        assert np.all(process.bytes == process.pid * MiB), process.pid
        assert process.create_time == 1e9 + process.pid
        assert set(process.t) <= set(stored.gpus[process.gpu_uuid].t)


@pytest.fixture
def disk(tmp_path: Path):
    """A 8 MiB tmpfs for the database (root only: skipped elsewhere, with why)."""
    why = why_no_tmpfs()
    if why:
        pytest.skip(why)
    stack = contextlib.ExitStack()
    try:
        mounted = stack.enter_context(small_disk(tmp_path / "disk"))
    except OSError as exc:
        pytest.skip(f"no tmpfs here: {exc}")
    with stack:
        yield mounted


# -- the writer, one commit a second, driven by the test --------------------------------------

class Seconds:
    """Ticks one second at a time into a writer; remembers what each commit stored."""

    def __init__(self, writer: HistoryWriter) -> None:
        self.writer = writer
        self.aggregator = Aggregator()
        self.t = T0
        self.stored: dict[str, set[float]] = {}
        self.stored_pids: set[int] = set()
        self.failed_gpus: set[str] = set()
        self.failed_pids: set[int] = set()

    def second(self, layout: Layout) -> bool:
        """One tick; commits the second before it. True when that commit worked."""
        self.aggregator.add(tick(self.t, layout))
        self.t += 1
        batch = self.aggregator.take()
        rows = [row for row in batch.rows if row.tier == FINE]
        try:
            self.writer.write(batch)
        except sqlite3.OperationalError as exc:
            assert "full" in str(exc)
            self.failed_gpus.update(row.gpu for row in rows)
            self.failed_pids.update(pid for row in rows for pid, _ in row.procs)
            return False
        for row in rows:
            self.stored.setdefault(row.gpu, set()).add(float(row.t))
            self.stored_pids.update(pid for pid, _ in row.procs)
        return True


def outages(writer: HistoryWriter, make_full: Callable[[], None],
            make_room: Callable[[], None]) -> Seconds:
    """Two outages; in each, new GPUs and processes appear only while commits fail."""
    run = Seconds(writer)
    for _ in range(4):
        assert run.second(BEFORE)
    for cycle in range(2):
        make_full()
        for _ in range(200):  # a page or two may still have room
            if not run.second(BEFORE if cycle == 0 else AFTER):
                break
        else:
            pytest.fail("commits never failed")
        appearing = DURING if cycle == 0 else ({**AFTER, 4: [500]},)
        for layout in appearing:
            for _ in range(2):
                assert not run.second(layout)
        make_room()
        for _ in range(4):
            assert run.second(AFTER if cycle == 0 else {**AFTER, 4: [500]})
    assert {uuid(1), uuid(2), uuid(4)} <= run.failed_gpus  # each first seen in a failed commit
    assert {200, 300, 500} <= run.failed_pids
    return run


def check(db: Path, run: Seconds) -> None:
    stored = read_history(str(db), 0)
    assert {key: set(series.t) for key, series in stored.gpus.items()} == run.stored
    assert {p.pid for p in stored.processes} == run.stored_pids
    assert_attributed(stored, owners([BEFORE, *DURING, AFTER, {4: [500]}]))


def test_ids_match_the_database_after_a_disk_fills_and_frees(disk):
    db = disk / "history.sqlite3"
    conn = open_writer(str(db))
    try:
        run = outages(HistoryWriter(conn, Retention()), lambda: fill(disk), lambda: free(disk))
    finally:
        conn.close()
    check(db, run)


def test_ids_match_the_database_after_sqlite_runs_out_of_pages(tmp_path):
    db = tmp_path / "history.sqlite3"
    conn = open_writer(str(db))

    def make_full() -> None:  # no page beyond the ones the file has now
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        assert conn.execute(f"PRAGMA max_page_count = {pages}").fetchone()[0] == pages

    try:
        run = outages(HistoryWriter(conn, Retention()), make_full,
                      lambda: conn.execute("PRAGMA max_page_count = 1000000"))
    finally:
        conn.close()
    check(db, run)


# -- the recorder's thread on a real full disk ----------------------------------------------

def _thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user + system) the thread has used."""
    stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _feed_until(recorder: HistoryRecorder, t: float, layout: Layout,
                done: Callable[[], bool], timeout_s: float = 15.0) -> float:
    """One tick (a new second) every 20 ms until ``done``; returns the next second."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        recorder.observe(tick(t, layout))
        t += 1
        time.sleep(0.02)
    return t


def _has(db: Path, gpu: str, after: float = 0.0) -> bool:
    series = read_history(str(db), after).gpus.get(gpu)
    return series is not None and series.t.size > 0


def test_recorder_rides_out_a_full_disk(disk, caplog):
    caplog.set_level(logging.WARNING, logger=recorder_module.__name__)
    db = disk / "history.sqlite3"
    messages: list[str] = []
    recorder = HistoryRecorder(str(db), commit_every_s=0.05, on_message=messages.append)
    assert recorder.wait_ready()
    t = _feed_until(recorder, time.time() - 900, BEFORE, lambda: _has(db, uuid(0)))
    fill(disk)
    t = _feed_until(recorder, t, DURING[0], lambda: recorder.message is not None)
    full_from = t
    # While it stays full: ticks keep coming, GPUs and processes appear.
    thread = recorder._thread
    assert thread.native_id is not None
    cpu, wall = _thread_cpu_s(thread.native_id), time.monotonic()
    end = time.monotonic() + 1.5
    t = _feed_until(recorder, t, DURING[1], lambda: time.monotonic() > end)
    cpu, wall = _thread_cpu_s(thread.native_id) - cpu, time.monotonic() - wall
    free(disk)
    t = _feed_until(recorder, t, AFTER, lambda: _has(db, uuid(3)))
    recorder.close()

    stored = read_history(str(db), 0)
    assert set(stored.gpus) == {uuid(g) for g in range(4)}
    assert {p.pid for p in stored.processes} == {100, 101, 200, 201, 300, 400}
    assert_attributed(stored, owners([BEFORE, *DURING, AFTER]))
    # The outage is a gap; the seconds after it are kept.
    assert stored.gpus[uuid(0)].t.max() > full_from + 3
    assert not thread.is_alive()
    assert cpu < 0.5 * wall  # it waits between commits, full disk or not
    assert len(messages) == 1 and "database or disk is full" in messages[0]
    logged = [r.getMessage() for r in caplog.records if r.name == recorder_module.__name__]
    assert [m for m in logged if m.startswith("Writing the history failed")] == messages
    assert logged.count("Writing the history works again.") == 1


def test_a_full_disk_at_start_keeps_the_history_and_records_once_there_is_room(
        disk, monkeypatch):
    monkeypatch.setattr(recorder_module, "OPEN_RETRY_S", 0.1)
    db = disk / "history.sqlite3"
    first = HistoryRecorder(str(db), commit_every_s=0.05)
    assert first.wait_ready()
    t = _feed_until(first, time.time() - 900, BEFORE, lambda: _has(db, uuid(0)))
    first.close()
    kept = read_history(str(db), 0).gpus[uuid(0)].t
    wal, shm = (db.with_name(db.name + suffix) for suffix in ("-wal", "-shm"))
    assert not wal.exists() or wal.stat().st_size == 0  # the reader wrote nothing
    wal.unlink(missing_ok=True)  # as after a reboot: the file alone
    shm.unlink(missing_ok=True)
    fill(disk)
    messages: list[str] = []
    recorder = HistoryRecorder(str(db), commit_every_s=0.05, on_message=messages.append)
    assert not recorder.wait_ready()
    end = time.monotonic() + 0.5  # a few tries to open while the disk stays full
    t = _feed_until(recorder, t, AFTER, lambda: time.monotonic() > end)
    free(disk)
    _feed_until(recorder, t, AFTER, lambda: _has(db, uuid(3)))
    recorder.close()

    assert not [p for p in disk.iterdir() if ".corrupt-" in p.name]  # nothing moved aside
    assert len(messages) == 1 and "until there is space" in messages[0]
    stored = read_history(str(db), 0)
    assert set(kept) < set(stored.gpus[uuid(0)].t)
    assert_attributed(stored, owners([BEFORE, AFTER]))
