"""Plot data: ranking, the "other" series, decimation to the pixel width and the legend,
shaped from real History data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.plot_data import (
    MIN_BUCKETS,
    OTHER_KEY,
    TOP_N,
    TOTAL_KEY,
    UNATTRIBUTED_KEY,
    PlotInputs,
    Role,
    Style,
    build_plot_data,
    device_series,
    peak_decimate,
    rank,
    shape,
)
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

MiB = 1024**2
GiB = 1024**3
CONFIG = HistoryConfig(period_s=1.0, fine_span_s=3600.0, coarse_step_s=5.0,
                       coarse_span_s=7200.0, max_process_rows=32)


def proc(pid: int, mem: int | None, name: str = "python") -> ProcessSample:
    return ProcessSample(pid=pid, gpu_memory=mem, name=name, create_time=float(pid))


AUTO = -1  # used memory: the processes' plus 300 MiB unattributed


def gpu(procs=(), used: int | None = AUTO, total: int | None = 24 * GiB) -> GpuSample:
    procs = tuple(procs)
    if used == AUTO:
        used = sum(p.gpu_memory or 0 for p in procs) + 300 * MiB
    return GpuSample(index=0, name="GPU", uuid="GPU-x", memory_total=total, memory_used=used,
                     memory_free=None, processes=procs)


def feed(ticks, history: History | None = None, start: float = 0.0) -> History:
    history = history or History(CONFIG)
    for i, g in enumerate(ticks):
        history.add(Snapshot(1.7e9 + start + i, start + i, "test", None, (g,)))
    return history


def build(history: History, last: GpuSample, span_s: float = 600.0, width_px: int = 1000,
          highlighted=None):
    return build_plot_data(history, "0", span_s, width_px,
                           PlotInputs.from_gpu(last, highlighted))


def labels(data) -> list[str]:
    return [e.label for e in data.legend]


# -- ranking -------------------------------------------------------------------------------

def test_running_processes_rank_by_current_vram_and_ties_keep_the_order_first_seen():
    a, b, c, d = proc(1, 2 * GiB), proc(2, 5 * GiB), proc(3, 2 * GiB), proc(4, None)
    last = gpu([d, c, a, b])  # listed in another order than first seen
    history = feed([gpu([a, b, c, d])] * 3 + [last])
    data = build(history, last)
    # d's memory was never known: no series at all (never drawn as 0).
    assert data.top_keys == [b.key, a.key, c.key]
    assert rank([a.key, b.key, c.key, d.key], PlotInputs.from_gpu(last).live,
                lambda ended: {}) == [b.key, a.key, c.key, d.key]  # unknown last


def test_a_process_that_exits_ranks_after_the_running_ones_and_reads_ended():
    big, small = proc(1, 10 * GiB, "big"), proc(2, 1 * GiB, "small")
    last = gpu([small])
    history = feed([gpu([big, small])] * 5 + [last] * 5)
    data = build(history, last)
    assert data.top_keys == [small.key, big.key]  # running first, however big the ended one
    gone = data.processes[1]
    assert np.isnan(gone.y[-5:]).all() and (gone.y[:5] == 10 * GiB).all()
    entry = next(e for e in data.legend if e.key == big.key)
    assert entry.ended and entry.value is None and entry.label == "big (1)"
    assert not next(e for e in data.legend if e.key == small.key).ended


def test_ended_processes_rank_by_peak_and_ties_put_the_most_recent_first():
    p1, p2, p3 = proc(1, 3 * GiB), proc(2, 3 * GiB), proc(3, 7 * GiB)
    keep = proc(9, 1 * GiB)
    ticks = [gpu([keep, p1])] * 2 + [gpu([keep, p2])] * 2 + [gpu([keep, p3])] * 2
    last = gpu([keep])
    history = feed(ticks + [last])
    data = build(history, last)
    # keep runs; then p3 (highest peak), then the tie p2 (seen last) before p1.
    assert data.top_keys == [keep.key, p3.key, p2.key, p1.key]


def test_only_the_top_n_are_copied_and_an_old_big_ended_process_beats_recent_small_ones():
    # More ended processes than free slots: ranked by peak over the span, not recency.
    old_big = proc(100, 20 * GiB)
    recent = [proc(200 + i, (i + 1) * MiB) for i in range(TOP_N + 2)]
    ticks = [gpu([old_big])] * 3 + [gpu([p]) for p in recent]
    last = gpu([])
    history = feed(ticks + [last])
    data = build(history, last)
    assert len(data.processes) == TOP_N
    assert data.top_keys[0] == old_big.key
    assert data.top_keys[1:] == [p.key for p in reversed(recent)][:TOP_N - 1]
    assert len(data.view.processes) == TOP_N  # the rest are never copied
    assert data.other is not None
    assert f"Other processes ({len(recent) - (TOP_N - 1)})" in labels(data)


# -- "other processes" -------------------------------------------------------------------

def test_everything_past_the_top_n_is_one_other_series_from_the_per_slot_total():
    procs = [proc(i, (i + 1) * GiB) for i in range(TOP_N + 4)]
    last = gpu(procs, total=200 * GiB)
    history = feed([last] * 4)
    data = build(history, last)
    assert len(data.processes) == TOP_N
    top = sorted(procs, key=lambda p: -p.gpu_memory)[:TOP_N]
    assert data.top_keys == [p.key for p in top]
    rest = [p for p in procs if p not in top]
    np.testing.assert_allclose(data.other.y, sum(p.gpu_memory for p in rest))
    entry = next(e for e in data.legend if e.key == OTHER_KEY)
    assert entry.label == "Other processes (4)" and entry.role is Role.OTHER
    assert entry.value == sum(p.gpu_memory for p in rest) and entry.style is Style.DASHED
    assert data.other.style is Style.DASHED


def test_no_other_series_when_every_process_has_its_own():
    procs = [proc(i, GiB) for i in range(3)]
    data = build(feed([gpu(procs)] * 3), gpu(procs))
    assert data.other is None
    assert not any(label.startswith("Other processes") for label in labels(data))


def test_other_is_a_gap_where_nothing_is_left_never_zero():
    procs = [proc(i, GiB) for i in range(TOP_N + 1)]
    fewer = procs[:TOP_N]
    last = gpu(fewer)
    history = feed([gpu(procs)] * 3 + [last] * 3)
    data = build(history, last)
    assert data.other is not None
    assert (data.other.y[:3] == GiB).all()
    assert np.isnan(data.other.y[3:]).all()  # the ninth exited: nothing left, a gap


# -- unknown memory ------------------------------------------------------------------------

def test_unknown_memory_is_a_gap_in_every_series_never_zero():
    a = proc(1, 2 * GiB)
    unknown = gpu([proc(1, None)], used=None)
    last = gpu([a])
    history = feed([gpu([a]), unknown, last])
    data = build(history, last)
    assert math.isnan(data.total.y[1]) and data.total.y[0] == 2 * GiB + 300 * MiB
    (series,) = data.processes
    assert math.isnan(series.y[1]) and series.y[0] == 2 * GiB
    assert not series.finite
    assert data.unattributed is not None and math.isnan(data.unattributed.y[1])
    assert data.unattributed.y[2] == 300 * MiB


def test_unattributed_is_drawn_only_while_above_zero_and_listed_with_the_device():
    a = proc(1, GiB)
    exact = gpu([a], used=GiB)  # every byte attributed
    data = build(feed([exact] * 3), exact)
    assert data.unattributed is None and UNATTRIBUTED_KEY not in [e.key for e in data.legend]
    last = gpu([a])
    data = build(feed([last] * 3), last)
    assert labels(data)[:3] == ["Device total", "Capacity", "Unattributed"]
    entry = data.legend[2]
    assert entry.value == 300 * MiB and entry.style is Style.DOTTED
    assert data.unattributed.style is Style.DOTTED


# -- highlight -------------------------------------------------------------------------------

def test_a_highlighted_process_outside_the_top_is_added_emphasised_and_the_rest_dimmed():
    procs = [proc(i, (i + 1) * GiB) for i in range(TOP_N + 3)]
    last = gpu(procs, total=200 * GiB)
    history = feed([last] * 3)
    smallest = procs[0]
    data = build(history, last, highlighted=smallest.key)
    assert smallest.key not in data.top_keys
    assert data.extra is not None and data.extra.key == smallest.key and data.extra.emphasised
    assert data.shown_keys == data.top_keys + [smallest.key]
    assert all(s.dimmed and not s.emphasised for s in data.processes)
    assert data.other.dimmed and not data.total.dimmed
    entry = data.legend[-1]
    assert entry.key == smallest.key and entry.emphasised and not entry.dimmed
    cleared = data.with_highlight(None)
    assert cleared.extra is None and not any(s.dimmed for s in cleared.processes)
    # Highlighting one of the top emphasises it in place.
    top = data.top_keys[2]
    again = cleared.with_highlight(top)
    assert again.extra is None and again.processes[2].emphasised
    assert sum(s.dimmed for s in again.processes) == TOP_N - 1


# -- legend ----------------------------------------------------------------------------------

def test_legend_entries_in_order_with_values_now():
    a, b = proc(1, 3 * GiB, "train.py"), proc(2, GiB, "eval.py")
    last = gpu([a, b])
    data = build(feed([last] * 2), last)
    assert [(e.key, e.role) for e in data.legend] == [
        (TOTAL_KEY, Role.TOTAL), ("__capacity__", Role.CAPACITY),
        (UNATTRIBUTED_KEY, Role.UNATTRIBUTED), (a.key, Role.PROCESS), (b.key, Role.PROCESS)]
    assert labels(data)[3:] == ["train.py (1)", "eval.py (2)"]
    assert data.legend[0].value == last.memory_used
    assert data.legend[1].value == 24 * GiB and data.legend[1].style is Style.DASHED
    assert data.legend[3].value == 3 * GiB


def test_no_capacity_entry_without_a_known_total():
    last = gpu([proc(1, GiB)], total=None)
    data = build(feed([last] * 2), last)
    assert "Capacity" not in labels(data) and data.capacity is None


def test_shape_counts_other_processes_that_were_not_copied_and_names_unknown_ones_by_pid():
    procs = [proc(i, (i + 1) * GiB) for i in range(3)]
    last = gpu(procs)
    view = feed([last] * 3).view("0", 600.0, [procs[2].key, procs[1].key])
    data = shape(view, PlotInputs.from_gpu(last), 1000, available_count=5)
    assert data.top_keys == [procs[2].key, procs[1].key]
    # Five with history in span, two with their own series.
    assert "Other processes (3)" in labels(data)
    assert labels(data)[3:5] == ["pid 2", "pid 1"]  # no labels given
    np.testing.assert_allclose(data.other.y, GiB)  # from the per-slot total
    assert data.legend[5].value == GiB  # the live figure of the one not shown


def test_an_empty_history_gives_nothing_to_draw():
    data = build(History(CONFIG), gpu([]))
    assert data.total is None and data.processes == () and data.legend == ()
    assert data.readout_at(-1.0) is None


# -- decimation ------------------------------------------------------------------------------

def test_decimation_to_the_pixel_width_keeps_every_peak_and_the_newest_sample():
    a = proc(1, GiB)
    ticks = [gpu([a])] * 3000
    spike_at = 1234
    ticks[spike_at] = gpu([proc(1, 9 * GiB)])
    last = ticks[-1]
    history = feed(ticks)
    data = build(history, last, span_s=3600.0, width_px=200)
    assert data.x.size <= 2 * 200 < 3000  # fewer points than samples: about two a pixel
    assert data.x[-1] == 0.0  # the right edge ("now") is exact
    (series,) = data.processes
    assert series.y.max() == 9 * GiB  # the one-sample spike survives
    assert series.y.min() == GiB
    assert data.total.y.max() == 9 * GiB + 300 * MiB


def test_a_narrow_plot_still_gets_min_buckets_and_small_spans_are_not_decimated():
    last = gpu([proc(1, GiB)])
    history = feed([last] * 1000)
    narrow = build(history, last, span_s=3600.0, width_px=10)
    assert narrow.x.size == 2 * (1000 // (1000 // MIN_BUCKETS))
    full = build(history, last, span_s=3600.0, width_px=1000)
    assert full.x.size == 1000  # under two samples a pixel: drawn as is


def test_peak_decimate_keeps_max_and_min_per_bucket_and_gaps_stay_gaps():
    t = np.arange(-11.0, 1.0)
    ys = np.array([[1, 5, 2, 0, 3, 3, np.nan, np.nan, np.nan, 7, 1, 4]], dtype=np.float32)
    x, out = peak_decimate(t, ys, 4)
    assert x.tolist() == [-9.0, -9.0, -6.0, -6.0, -3.0, -3.0, 0.0, 0.0]
    assert out[0, :2].tolist() == [5, 1]
    assert out[0, 2:4].tolist() == [3, 0]
    assert np.isnan(out[0, 4:6]).all()  # nothing known in the bucket: a gap, never 0
    assert out[0, 6:].tolist() == [7, 1]
    same_t, same = peak_decimate(t, ys, 8)  # under two samples a bucket: unchanged
    assert same_t is t and same is ys


# -- hover read-out --------------------------------------------------------------------------

def test_readout_reads_the_undecimated_sample_nearest_to_the_time():
    a, b = proc(1, GiB, "a"), proc(2, 2 * GiB, "b")
    ticks = [gpu([a, b])] * 5 + [gpu([a, proc(2, None, "b")])] + [gpu([a, b])] * 4
    last = ticks[-1]
    data = build(feed(ticks), last)
    r = data.readout_at(-4.2)
    assert r.t == -4.0 and r.used == GiB + 300 * MiB
    assert r.processes == (("a (1)", GiB),)  # b unknown there: left out, not 0
    assert r.has_unattributed and r.unattributed is None
    r = data.readout_at(0.0)
    assert r.processes == (("b (2)", 2 * GiB), ("a (1)", GiB))
    assert r.unattributed == 300 * MiB


@pytest.mark.parametrize("width_px", [0, 64, 333, 1920])
def test_series_and_time_axis_always_line_up(width_px):
    procs = [proc(i, (i + 1) * GiB) for i in range(TOP_N + 2)]
    last = gpu(procs, total=200 * GiB)
    data = build(feed([last] * 2500), last, span_s=3600.0, width_px=width_px)
    for s in (data.total, data.other, data.unattributed, *data.processes):
        assert s is not None and s.y.shape == data.x.shape


# -- one truth per number, gaps, history start, utilisation --------------------------------

def test_the_device_total_in_the_legend_is_the_latest_sample_not_a_coarse_peak():
    """Past the fine ring the newest slot holds a 5-second peak; the legend says "now"."""
    config = HistoryConfig(period_s=1.0, fine_span_s=20.0, coarse_step_s=5.0,
                           coarse_span_s=7200.0, max_process_rows=8)
    history = History(config)
    ticks = [gpu([proc(1, 20 * GiB)])] * 60 + [gpu([proc(1, 20 * GiB)])] * 3
    ticks += [gpu([proc(1, 2 * GiB)])]
    feed(ticks, history)
    assert history.view("0", 3600.0).used[-1] > 20 * GiB  # the bucket's peak
    data = build(history, ticks[-1], span_s=3600.0)
    assert data.legend[0].value == ticks[-1].memory_used == 2 * GiB + 300 * MiB


def test_a_stretch_without_samples_is_a_gap_the_curves_do_not_cross():
    before = [gpu([proc(1, 4 * GiB)])] * 30
    history = feed(before)
    feed([gpu([proc(1, 8 * GiB)])] * 30, history, start=30 + 120)  # 2 min with no samples
    data = build(history, gpu([proc(1, 8 * GiB)]))
    assert len(data.gaps) == 1
    x0, x1 = data.gaps[0]
    assert x1 - x0 == pytest.approx(121.0)
    inside = (data.x > x0) & (data.x < x1)
    assert inside.any()
    assert np.isnan(data.total.y[inside]).all()
    assert np.isnan(data.processes[0].y[inside]).all()
    assert data.x.size == data.total.y.size == data.processes[0].y.size


def test_late_samples_are_jitter_not_gaps():
    history = History(CONFIG)
    for t in [0, 1, 2, 3.9, 5, 6, 7, 8]:
        history.add(Snapshot(1.7e9 + t, t, "test", None, (gpu([proc(1, GiB)]),)))
    assert build(history, gpu([proc(1, GiB)])).gaps == ()


def test_a_history_younger_than_the_span_marks_where_it_starts():
    history = feed([gpu([proc(1, GiB)])] * 100)
    assert build(history, gpu([proc(1, GiB)]), span_s=600.0).history_start == pytest.approx(-99)
    assert build(history, gpu([proc(1, GiB)]), span_s=60.0).history_start is None
    hl = build(history, gpu([proc(1, GiB)]), span_s=600.0).with_highlight((1, 1.0))
    assert hl.history_start == pytest.approx(-99)


def test_utilisation_is_decimated_with_the_curves_and_unknown_stays_unknown():
    ticks = [GpuSample(index=0, name="GPU", uuid="GPU-x", memory_total=24 * GiB,
                       memory_used=GiB, memory_free=None, utilization_gpu=float(i % 100))
             for i in range(3000)]
    history = feed(ticks)
    data = build(history, ticks[-1], span_s=3600.0, width_px=200)
    assert data.util is not None and data.util.shape == data.x.shape
    assert np.nanmax(data.util) == 99 and np.nanmin(data.util) == 0
    blind = [GpuSample(index=0, name="GPU", uuid="GPU-x", memory_total=24 * GiB,
                       memory_used=GiB, memory_free=None, utilization_gpu=None)] * 10
    assert build(feed(blind), blind[-1]).util is None
    readout = build(history, ticks[-1], span_s=3600.0).readout_at(0.0)
    assert readout is not None and readout.util == 99.0


def test_the_overview_mini_history_is_the_device_total_decimated():
    ticks = [gpu([proc(1, (i % 7) * GiB)]) for i in range(2000)]
    history = feed(ticks)
    x, used = device_series(history, "0", 3600.0, 50)
    assert x.shape == used.shape and x.size <= 2 * 50
    assert np.nanmax(used) == 6 * GiB + 300 * MiB
    assert x[-1] == 0.0
    assert device_series(History(CONFIG), "0", 600.0, 50)[0].size == 0
