"""Downsampling and pruning: each tier holds what its step and retention say."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from app.core.store.aggregate import Aggregator
from app.core.store.query import read_history
from app.core.store.schema import COARSE, FINE, open_writer
from app.core.store.tiers import Retention
from app.core.store.writer import HistoryWriter
from tests.fakes.history_stream import MiB, pid_of, snapshot_at

T0 = 1_700_000_000.0


def _record(path, times, retention=None, prune_at=None, **kw):
    conn = open_writer(str(path))
    writer = HistoryWriter(conn, retention or Retention())
    aggregator = Aggregator()
    for t in times:
        aggregator.add(snapshot_at(t, **{k: v(t) if callable(v) else v for k, v in kw.items()}))
    writer.write(aggregator.take(everything=True))
    if prune_at is not None:
        writer.prune(prune_at)
    conn.close()


def _count(path, tier):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM sample WHERE tier = ?", (tier,)).fetchone()[0]


def test_fine_tier_keeps_the_peak_of_each_second(tmp_path):
    db = tmp_path / "h.sqlite3"
    # 4 ticks a second for 10 s; used rises within each second.
    times = [T0 + i * 0.25 for i in range(40)]
    _record(db, times, used=lambda t: int((t - T0) * 4) * MiB)
    stored = read_history(str(db), T0 - 1)
    gpu = stored.gpus["GPU-0"]
    assert list(gpu.t) == [T0 + s for s in range(10)]
    # The peak of second s is its last tick: (4 s + 3) MiB.
    assert list(gpu.used) == [(4 * s + 3) * MiB for s in range(10)]
    assert _count(db, FINE) == 20 and _count(db, COARSE) == 4  # 2 GPUs; 10 s = 2 buckets


def test_coarse_tier_holds_5s_peaks_before_the_fine_tier(tmp_path):
    db = tmp_path / "h.sqlite3"
    times = [T0 + i for i in range(600)]  # 10 min at 1 s
    retention = Retention(fine_s=120, coarse_s=3600)
    _record(db, times, retention, prune_at=T0 + 600, used=lambda t: int(t - T0) * MiB)
    assert _count(db, FINE) == 2 * 120  # the last 2 min, both GPUs
    assert _count(db, COARSE) == 2 * 120
    gpu = read_history(str(db), T0).gpus["GPU-0"]
    steps = np.diff(gpu.t)
    fine_start = T0 + 600 - 120
    assert set(steps[gpu.t[1:] <= fine_start]) == {5.0}  # coarse before the fine tier
    assert set(steps[gpu.t[:-1] >= fine_start]) == {1.0}
    coarse = gpu.t < fine_start
    # Each 5 s bucket's peak is its last second's value.
    assert np.array_equal(gpu.used[coarse], (gpu.t[coarse] - T0 + 4) * MiB)


def test_pruning_keeps_the_bound(tmp_path):
    db = tmp_path / "h.sqlite3"
    retention = Retention(fine_s=60, coarse_s=300)
    times = [T0 + i for i in range(3600)]  # an hour of ticks
    conn = open_writer(str(db))
    writer = HistoryWriter(conn, retention or Retention())
    aggregator = Aggregator()
    for t in times:
        aggregator.add(snapshot_at(t, gpus=1, processes=2))
        if int(t) % 30 == 0:
            writer.write(aggregator.take())
            writer.prune(t)
            assert _count(db, FINE) <= 61 + 30
            assert _count(db, COARSE) <= 61 + 6
    conn.close()
    stored = read_history(str(db), 0)
    assert stored.gpus["GPU-0"].t[0] >= T0 + 3600 - 300 - 30


def test_pruning_drops_processes_without_samples(tmp_path):
    db = tmp_path / "h.sqlite3"
    conn = open_writer(str(db))
    writer = HistoryWriter(conn, Retention(fine_s=10, coarse_s=20))
    aggregator = Aggregator()
    aggregator.add(snapshot_at(T0, gpus=1, processes=3))
    aggregator.add(snapshot_at(T0 + 100, gpus=1, processes=1))
    writer.write(aggregator.take(everything=True))
    writer.prune(T0 + 100)
    pids = [row[0] for row in conn.execute("SELECT pid FROM process")]
    conn.close()
    assert pids == [pid_of(0, 0)]


def test_retention_must_be_positive():
    with pytest.raises(ValueError):
        Retention(fine_s=0)


def test_bound_grows_with_gpus_and_processes():
    retention = Retention()
    small = retention.bound_bytes(2, 3)
    big = retention.bound_bytes(8, 64)
    assert 0 < small < big
    assert Retention(fine_s=3600, coarse_s=86400).bound_bytes(8, 64) < big
