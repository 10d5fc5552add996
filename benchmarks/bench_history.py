"""The cost of the persistent history (app/core/store).

* observe   -- ``HistoryRecorder.observe`` on the sampler thread, per tick;
* aggregate -- folding one tick into the tier rows, on the writer thread;
* commit    -- one commit of a second of ticks at 4 Hz (1 fine row per GPU,
               a 5 s coarse row every fifth commit), on the writer thread;
* load      -- ``read_history`` of 24 h stored at the default tiers;
* row bytes -- file bytes per stored row in that 24 h file (used pages x page size).

for 2 GPUs x 6 processes and 8 GPUs x 64 processes.  Medians of repeated runs.

    python -m benchmarks.bench_history [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from typing import Any

from app.core.store.aggregate import Aggregator
from app.core.store.query import read_history
from app.core.store.recorder import HistoryRecorder
from app.core.store.schema import open_writer
from app.core.store.tiers import Retention
from app.core.store.writer import HistoryWriter
from tests.fakes.history_stream import snapshot_at

SHAPES = ((2, 6), (8, 64))
PERIOD_S = 0.25


def _median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 2)


def bench_shape(gpus: int, processes: int, seconds: int = 120) -> dict[str, Any]:
    t0 = time.time() - 86400
    ticks = [snapshot_at(t0 + i * PERIOD_S, gpus, processes)
             for i in range(int(seconds / PERIOD_S))]
    with tempfile.TemporaryDirectory() as tmp:
        recorder = HistoryRecorder(os.path.join(tmp, "observe.sqlite3"))
        recorder.wait_ready()
        observe = []
        for snap in ticks:
            start = time.perf_counter()
            recorder.observe(snap)
            observe.append(time.perf_counter() - start)
        recorder.close()

        path = os.path.join(tmp, "h.sqlite3")
        conn = open_writer(path)
        writer = HistoryWriter(conn, Retention())
        aggregator = Aggregator()
        aggregate, commit = [], []
        per_commit = int(1 / PERIOD_S)
        for i, snap in enumerate(ticks):
            start = time.perf_counter()
            aggregator.add(snap)
            aggregate.append(time.perf_counter() - start)
            if (i + 1) % per_commit == 0:
                batch = aggregator.take()
                start = time.perf_counter()
                writer.write(batch)
                commit.append(time.perf_counter() - start)
        conn.close()
        load, row_bytes = _load_24h(tmp, gpus, processes)
    retention = Retention()
    rows_bound = retention.fine_s + retention.coarse_s / 5
    return {
        "gpus": gpus, "processes_per_gpu": processes,
        "observe_us_per_tick": _median_us(observe),
        "aggregate_us_per_tick": _median_us(aggregate),
        "commit_ms_median": round(statistics.median(commit) * 1e3, 3),
        "commit_ms_max": round(max(commit) * 1e3, 3),
        "writer_cpu_percent_of_core": round(
            100 * (sum(aggregate) + sum(commit)) / (len(ticks) * PERIOD_S), 3),
        "file_bytes_per_row": round(row_bytes, 1),
        "measured_bound_bytes": int(row_bytes * rows_bound * gpus),
        "stated_bound_bytes": retention.bound_bytes(gpus, processes),
        "load_24h_s": load,
    }


def _load_24h(tmp: str, gpus: int, processes: int) -> tuple[float, float]:
    """24 h as the tiers keep it (23 h of 5 s rows, 1 h of 1 s rows): the time
    ``read_history`` takes, and the file's bytes per row."""
    path = os.path.join(tmp, "day.sqlite3")
    conn = open_writer(path)
    writer = HistoryWriter(conn, Retention())
    aggregator = Aggregator()
    now = time.time()
    for i in range(int(23 * 3600 / 5)):  # one tick per coarse bucket
        aggregator.add(snapshot_at(now - 86400 + i * 5, gpus, processes))
    writer.write(aggregator.take(everything=True))
    conn.execute("DELETE FROM sample WHERE tier = 0")
    aggregator = Aggregator()
    for i in range(3600):
        aggregator.add(snapshot_at(now - 3600 + i, gpus, processes))
    writer.write(aggregator.take(everything=True))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rows = conn.execute("SELECT count(*) FROM sample").fetchone()[0]
    used_pages = (conn.execute("PRAGMA page_count").fetchone()[0]
                  - conn.execute("PRAGMA freelist_count").fetchone()[0])
    row_bytes = used_pages * conn.execute("PRAGMA page_size").fetchone()[0] / rows
    conn.close()
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        stored = read_history(path, now - 86400)
        runs.append(time.perf_counter() - start)
        assert stored.error is None
    return round(statistics.median(runs), 3), row_bytes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    results = [bench_shape(g, p) for g, p in SHAPES]
    for r in results:
        print(f"{r['gpus']}x{r['processes_per_gpu']}: observe {r['observe_us_per_tick']} µs, "
              f"aggregate {r['aggregate_us_per_tick']} µs/tick, commit "
              f"{r['commit_ms_median']} ms (max {r['commit_ms_max']}), writer "
              f"{r['writer_cpu_percent_of_core']} % of a core, {r['file_bytes_per_row']} B/row, "
              f"bound {r['measured_bound_bytes'] / 2**20:.1f} MiB measured / "
              f"{r['stated_bound_bytes'] / 2**20:.1f} MiB stated, 24 h load {r['load_24h_s']} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"sqlite": sqlite3.sqlite_version, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
