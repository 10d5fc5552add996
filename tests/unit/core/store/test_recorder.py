"""The recorder against real SQLite files: round trip, unknown figures, a
damaged or foreign file, two instances, and a SIGKILL mid-write."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from app.core.store.query import read_history
from app.core.store.recorder import READ_ONLY_MESSAGE, HistoryRecorder
from app.core.store.schema import APPLICATION_ID
from tests.fakes.history_stream import GiB, MiB, pid_of, snapshot_at

ROOT = Path(__file__).resolve().parents[4]


def _record(db: Path, times, **kw) -> HistoryRecorder:
    recorder = HistoryRecorder(str(db))
    assert recorder.wait_ready()
    for t in times:
        recorder.observe(snapshot_at(t, **kw))
    recorder.close()
    return recorder


def _integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


def test_round_trip_keeps_gpus_processes_and_unknowns(tmp_path):
    db = tmp_path / "history.sqlite3"
    now = time.time()
    recorder = _record(db, [now - 3 + i * 0.5 for i in range(6)], util=None, unknown_last=True)
    assert recorder.message is None
    stored = read_history(str(db), now - 10)
    assert stored.error is None
    assert set(stored.gpus) == {"GPU-0", "GPU-1"}
    gpu = stored.gpus["GPU-1"]
    assert gpu.index == 1 and gpu.name == "H100" and gpu.display_id == "1"
    assert np.all(gpu.used == GiB * 2) and np.all(gpu.total == 80 * GiB)
    assert np.all(np.isnan(gpu.util))  # unknown stays unknown, never 0
    by_pid = {(p.pid, p.gpu_uuid): p for p in stored.processes}
    first = by_pid[(pid_of(1, 0), "GPU-1")]
    assert first.create_time == 1e9 + pid_of(1, 0)
    assert first.command == "python train0.py" and first.user == "alice"
    assert first.name == "proc0"
    assert np.all(first.bytes == 100 * MiB)
    assert np.array_equal(first.t, gpu.t)
    assert np.all(np.isnan(by_pid[(pid_of(1, 2), "GPU-1")].bytes))


def test_demo_snapshots_are_not_recorded(tmp_path):
    db = tmp_path / "history.sqlite3"
    _record(db, [time.time()], source="demo")
    assert read_history(str(db), 0).empty


def test_garbage_file_is_moved_aside_with_one_message(tmp_path):
    db = tmp_path / "history.sqlite3"
    db.write_bytes(b"not a database at all" * 100)
    messages: list[str] = []
    recorder = HistoryRecorder(str(db), on_message=messages.append)
    recorder.wait_ready()
    recorder.observe(snapshot_at(time.time()))
    recorder.close()
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("history.sqlite3.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"not a database")
    assert len(messages) == 1 and str(aside[0]) in messages[0]
    assert recorder.take_message() == messages[0]
    assert recorder.take_message() is None  # shown once
    assert _integrity(db) == "ok"
    assert not read_history(str(db), 0).empty


def test_damaged_sqlite_file_is_moved_aside(tmp_path):
    db = tmp_path / "history.sqlite3"
    _record(db, [time.time() - i for i in range(30)])
    data = bytearray(db.read_bytes())
    data[200:4096 * 3] = os.urandom(4096 * 3 - 200)  # keep the header, break the pages
    db.write_bytes(bytes(data))
    recorder = _record_after_damage(db)
    assert recorder.message is not None and "moved to" in recorder.message
    assert _integrity(db) == "ok"


def _record_after_damage(db: Path) -> HistoryRecorder:
    recorder = HistoryRecorder(str(db))
    recorder.wait_ready()
    recorder.observe(snapshot_at(time.time()))
    recorder.close()
    return recorder


def test_foreign_sqlite_database_is_moved_aside(tmp_path):
    db = tmp_path / "history.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('someone else''s data')")
    conn.close()
    assert read_history(str(db), 0).error is not None  # the reader refuses it, empty
    recorder = _record_after_damage(db)
    assert recorder.message is not None
    aside = next(tmp_path.glob("history.sqlite3.corrupt-*"))
    with sqlite3.connect(aside) as conn:
        assert conn.execute("SELECT text FROM notes").fetchone() == ("someone else's data",)
    conn.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    conn.close()
    assert not read_history(str(db), 0).empty


def test_missing_file_reads_empty_without_error(tmp_path):
    stored = read_history(str(tmp_path / "none.sqlite3"), 0)
    assert stored.empty and stored.error is None and not (tmp_path / "none.sqlite3").exists()


def _child(db: Path, seconds: float = 60.0, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.history_stream", str(db),
         "--seconds", str(seconds), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_committed(db: Path, predicate, timeout_s: float = 15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stored = read_history(str(db), 0)
        if predicate(stored):
            return stored
        time.sleep(0.2)
    pytest.fail("the child committed nothing in time")


def test_sigkill_mid_write_keeps_everything_committed(tmp_path, children):
    db = tmp_path / "history.sqlite3"
    child = _child(db)
    children.procs.append(child)
    assert child.stdout is not None
    assert child.stdout.readline().startswith("ready writer")
    # A reader while the child writes (WAL): wait for 3 s of committed samples.
    before = _wait_committed(db, lambda s: "GPU-0" in s.gpus and s.gpus["GPU-0"].t.size >= 3)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(5)
    ticks = [float(line.split()[1]) for line in child.stdout if line.startswith("tick")]
    assert _integrity(db) == "ok"
    after = read_history(str(db), 0)
    seen = before.gpus["GPU-0"].t
    kept = after.gpus["GPU-0"].t
    assert set(seen) <= set(kept)  # nothing committed was lost
    # At most a few seconds lost: the newest stored second is near the last tick.
    assert ticks and ticks[-1] - kept[-1] < 4.0
    # The file is healthy: a new recorder opens it without a message and appends.
    recorder = HistoryRecorder(str(db))
    assert recorder.wait_ready()
    recorder.observe(snapshot_at(time.time() + 5))
    recorder.close()
    assert recorder.message is None
    assert read_history(str(db), 0).gpus["GPU-0"].t.size > kept.size


def test_a_second_instance_reads_but_never_writes(tmp_path, children):
    db = tmp_path / "history.sqlite3"
    first = _child(db, seconds=4.0)
    children.procs.append(first)
    assert first.stdout is not None and first.stdout.readline().startswith("ready writer")
    second = _child(db, 1.5, "--used-mib", "777")
    children.procs.append(second)
    assert second.stdout is not None
    assert second.stdout.readline().strip() == f"ready read-only {READ_ONLY_MESSAGE}"
    # The second one can read what the first wrote.
    _wait_committed(db, lambda s: "GPU-0" in s.gpus and s.gpus["GPU-0"].t.size >= 1)
    assert second.wait(15) == 0 and first.wait(15) == 0
    first_ticks = [float(x.split()[1]) for x in first.stdout if x.startswith("tick")]
    second.stdout.read()
    assert second.stderr is not None and "Traceback" not in second.stderr.read()
    assert _integrity(db) == "ok"
    stored = read_history(str(db), 0).gpus["GPU-0"]
    # Everything stored is the first instance's: its seconds and its figures.
    assert set(stored.t) == {float(int(t)) for t in first_ticks}
    assert 777 * MiB not in set(stored.used) and np.all(stored.used == GiB)
