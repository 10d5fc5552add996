"""History.seed: the window opens with stored history, and the time the app
was not running stays a gap in the plot."""

from __future__ import annotations

import numpy as np

from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.plot_data import PlotInputs, build_plot_data
from app.core.store.aggregate import Aggregator
from app.core.store.query import read_history
from app.core.store.schema import open_writer
from app.core.store.tiers import Retention
from app.core.store.writer import HistoryWriter
from tests.fakes.history_stream import MiB, pid_of, snapshot_at

NOW = 1_800_000_000.0  # epoch "now" of the second run
OFFSET = NOW - 10_000.0  # monotonic = epoch - OFFSET: now is monotonic 10 000


def _stored(tmp_path, start: float, end: float):
    """A first run that sampled from ``start`` to ``end`` (epoch), stored."""
    db = tmp_path / "h.sqlite3"
    conn = open_writer(str(db))
    writer = HistoryWriter(conn, Retention())
    aggregator = Aggregator()
    t = start
    while t <= end:
        aggregator.add(snapshot_at(t, gpus=1, processes=2))
        t += 0.5
    writer.write(aggregator.take(everything=True))
    writer.prune(NOW)
    conn.close()
    return read_history(str(db), NOW - 86400)


def _live(history: History, seconds: float) -> None:
    for i in range(int(seconds / 0.25)):
        t = NOW + i * 0.25
        history.add(snapshot_at(t, gpus=1, processes=2, used=5 * (1 << 30),
                                monotonic=t - OFFSET))


def test_seeded_history_then_live_ticks_draws_the_gap(tmp_path):
    # The first run ended 10 min ago after 20 min; the app starts again now.
    stored = _stored(tmp_path, NOW - 1800, NOW - 600)
    history = History(HistoryConfig())
    history.seed(stored, offset_s=OFFSET)
    _live(history, 30)
    snapshot = snapshot_at(NOW + 30, gpus=1, processes=2)
    plot = build_plot_data(history, "0", 3600.0, 800, PlotInputs.from_gpu(snapshot.gpus[0]))
    # t is relative to the newest sample (now + ~30 s): the gap runs from the
    # first run's last second to the first live tick.
    assert len(plot.gaps) == 1
    start, end = plot.gaps[0]
    assert abs(start - (-600 - 30)) < 2 and abs(end - (-30)) < 2
    assert plot.history_start is not None and abs(plot.history_start - (-1800 - 30)) < 2
    # The stored processes have their names back.
    assert history.label("0", (pid_of(0, 1), 1e9 + pid_of(0, 1))) == f"train1.py ({pid_of(0, 1)})"


def test_long_span_comes_from_the_coarse_ring_after_a_seed(tmp_path):
    # A run 3 h ago, none since: the 24 h view shows it, the 1 h view does not.
    stored = _stored(tmp_path, NOW - 4 * 3600, NOW - 3 * 3600)
    history = History(HistoryConfig())
    history.seed(stored, offset_s=OFFSET)
    _live(history, 10)
    day = history.view("0", 86400.0)
    assert day.t[0] < -3 * 3600 and np.nanmax(day.used) == 5 * (1 << 30)
    assert set(np.round(np.diff(day.t[day.t < -3 * 3600 - 10]))) == {5.0}
    hour = history.view("0", 3600.0)
    assert hour.t[0] > -60
    key = (pid_of(0, 1), 1e9 + pid_of(0, 1))
    assert np.nanmax(day.processes[key]) == 200 * MiB


def test_seed_keeps_the_stored_resolution_in_the_fine_ring(tmp_path):
    stored = _stored(tmp_path, NOW - 120, NOW - 60)
    history = History(HistoryConfig())
    history.seed(stored, offset_s=OFFSET)
    view = history.view("0", 3600.0)
    assert np.all(np.diff(view.t) == 1.0) and view.t.size == 61
    assert np.all(view.used == 1 << 30)
    assert np.all(view.process_total == 300 * MiB)
    assert np.all(view.unattributed == (1 << 30) - 300 * MiB)


def test_seed_skips_gpus_already_sampled(tmp_path):
    stored = _stored(tmp_path, NOW - 120, NOW - 60)
    history = History(HistoryConfig())
    _live(history, 2)
    history.seed(stored, offset_s=OFFSET)
    assert history.view("0", 3600.0).t[0] > -3


def test_empty_store_seeds_nothing():
    history = History(HistoryConfig())
    history.seed(read_history("/nonexistent/h.sqlite3", 0))
    assert history.gpus == {}
