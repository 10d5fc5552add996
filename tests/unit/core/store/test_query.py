"""read_history: ranges, filters, tiers joined, and files it cannot read."""

from __future__ import annotations

import os
import sqlite3

import numpy as np

from app.core.store.aggregate import Aggregator
from app.core.store.query import read_history
from app.core.store.schema import open_writer
from app.core.store.tiers import Retention
from app.core.store.writer import HistoryWriter
from tests.fakes.history_stream import pid_of, snapshot_at

T0 = 1_700_000_000.0


def _db(tmp_path, seconds=120, gpus=2, processes=3):
    db = tmp_path / "h.sqlite3"
    conn = open_writer(str(db))
    writer = HistoryWriter(conn, Retention(fine_s=60, coarse_s=86400))
    aggregator = Aggregator()
    for i in range(seconds):
        aggregator.add(snapshot_at(T0 + i, gpus=gpus, processes=processes))
    writer.write(aggregator.take(everything=True))
    writer.prune(T0 + seconds)
    conn.close()
    return str(db)


def test_range_is_inclusive_and_ordered(tmp_path):
    db = _db(tmp_path)
    stored = read_history(db, T0 + 100, T0 + 110)
    assert list(stored.gpus["GPU-0"].t) == [T0 + s for s in range(100, 111)]
    assert all(np.all(np.diff(p.t) > 0) for p in stored.processes)


def test_older_range_comes_from_the_coarse_tier(tmp_path):
    db = _db(tmp_path)
    t = read_history(db, T0, T0 + 40).gpus["GPU-0"].t
    assert list(t) == [T0 + s for s in range(0, 41, 5)]


def test_gpu_filter(tmp_path):
    db = _db(tmp_path)
    stored = read_history(db, T0, gpu_uuid="GPU-1")
    assert list(stored.gpus) == ["GPU-1"]
    assert {p.gpu_uuid for p in stored.processes} == {"GPU-1"}
    assert len(stored.processes) == 3


def test_pid_filter_keeps_gpus_and_one_process(tmp_path):
    db = _db(tmp_path)
    stored = read_history(db, T0, pid=pid_of(1, 2))
    assert [(p.pid, p.gpu_uuid) for p in stored.processes] == [(pid_of(1, 2), "GPU-1")]
    assert set(stored.gpus) == {"GPU-0", "GPU-1"}


def test_unknown_pid_or_gpu_gives_nothing(tmp_path):
    db = _db(tmp_path)
    assert read_history(db, T0, pid=99999).processes == []
    assert read_history(db, T0, gpu_uuid="GPU-9").gpus == {}


def test_reader_never_writes(tmp_path):
    db = _db(tmp_path)
    os.chmod(db, 0o400)
    try:
        assert read_history(db, T0).error is None
    finally:
        os.chmod(db, 0o600)


def test_truncated_file_reports_an_error(tmp_path):
    db = _db(tmp_path)
    with open(db, "r+b") as fh:
        fh.truncate(4096)
    stored = read_history(db, T0)
    assert stored.error is not None and stored.processes == []


def test_garbage_reports_an_error(tmp_path):
    db = tmp_path / "h.sqlite3"
    db.write_bytes(b"\x00garbage" * 1000)
    stored = read_history(str(db), 0)
    assert stored.empty and stored.error is not None


def test_foreign_database_reports_an_error(tmp_path):
    db = tmp_path / "h.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert read_history(str(db), 0).error is not None
