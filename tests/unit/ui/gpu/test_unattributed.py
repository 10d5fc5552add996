"""Unattributed memory on the graphs: its recorded series, its curve, legend and hover,
and the same figure in the table, the legend and the core everywhere."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.plot_data import shape
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB, MiB, fmt_bytes
from app.ui.gpu.panel import GpuPanel
from app.ui.gpu.unattributed import UNATTRIBUTED_KEY
from app.ui.style import palette as pal
from app.ui.window.process_rows import COL_VRAM, KEY_ROLE

PID = 101


def gpu(used, held=2 * GiB, total=24 * GiB, processes=None, **kw):
    procs = (ProcessSample(PID, held, create_time=1.0),) if processes is None else processes
    return GpuSample(index=0, name="Test GPU", uuid="GPU-0", memory_total=total,
                     memory_used=used, memory_free=None, processes=tuple(procs), **kw)


def snapshot(t, *gpus):
    return Snapshot(1_700_000_000.0 + t, t, "nvml", "550.54", tuple(gpus))


# Unattributed per tick: known, known, unknown (a process's memory n/a), known, ...
TICKS = [gpu(2 * GiB + 300 * MiB), gpu(2 * GiB + 310 * MiB),
         gpu(3 * GiB, processes=(ProcessSample(PID, None, create_time=1.0),)),
         gpu(2 * GiB + 330 * MiB), gpu(2 * GiB + 340 * MiB)]


def fed(config=None):
    history = History(config or HistoryConfig(period_s=1.0))
    for i, g in enumerate(TICKS):
        history.add(snapshot(float(i), g))
    return history


# -- the recorded series -------------------------------------------------------------------

def test_series_follows_the_history_view_with_gaps_where_unknown():
    history = fed()
    view = history.view("0", 600.0)
    values = view.unattributed
    assert values.shape == view.t.shape == (5,)
    expected = [g.unattributed_memory for g in TICKS]
    assert expected[2] is None
    assert [None if v != v else int(v) for v in values] == expected  # NaN, never 0


def test_series_of_a_gpu_never_seen_is_empty():
    history = fed()
    view = history.view("7", 600.0)
    assert view.unattributed.size == 0 == view.t.size


def test_coarse_view_holds_each_bucket_peak_at_the_history_bucket_times():
    # A fine ring of 12 s: once it wraps, a 10 min view reads the coarse ring (5 s buckets, peaks).
    config = HistoryConfig(period_s=1.0, fine_span_s=12.0, coarse_step_s=5.0)
    history = History(config)
    values = {}
    for i in range(40):
        unknown = i in range(11, 16)  # one whole bucket unknown
        held = None if unknown else 2 * GiB
        mem = (300 + (i * 37) % 50) * MiB
        g = gpu(2 * GiB + mem, processes=(ProcessSample(PID, held, create_time=1.0),))
        values[float(i)] = None if unknown else mem
        history.add(snapshot(float(i), g))
    view = history.view("0", 600.0)
    got = view.unattributed
    assert view.t.size == got.size and view.t.size >= 6
    # Bucket k ends at tick 5k and holds ticks (5(k-1), 5k] (the first also tick 0).
    newest = 35.0
    for t, v in zip(view.t, got):
        end = newest + t
        first = 0.0 if end == 5.0 else end - 4.0
        known = [m for s, m in values.items() if first <= s <= end and m is not None]
        if known:
            assert v == max(known)
        else:
            assert np.isnan(v)  # a bucket with nothing known is a gap, not 0
    assert np.isnan(got).any()


# -- the curve, legend and hover -------------------------------------------------------------

@pytest.fixture
def panel(qtbot):
    p = GpuPanel("0")
    qtbot.addWidget(p)
    p.resize(900, 320)
    return p


def refresh_plot(panel, view):
    """Shape ``view`` with the panel's latest figures and draw it."""
    panel.set_plot_data(shape(view, panel.plot_inputs(), panel.plot_width_px()), span_s=600.0)


def draw(panel, rest=True):
    history = fed()
    panel.update_sample(TICKS[-1])
    view = history.view("0", 600.0)
    if not rest:
        view = dataclasses.replace(view, unattributed=np.empty(0))
    refresh_plot(panel, view)
    return view


def test_unattributed_curve_has_a_gap_where_unknown(panel):
    draw(panel)
    curve = panel.curve_for(UNATTRIBUTED_KEY)
    assert curve is not None and curve.isVisible()
    y = curve.yData
    assert np.isnan(y[2])  # unknown: a gap, never plotted as 0
    assert y[0] == pytest.approx((300 * MiB) / GiB)
    assert y[-1] == pytest.approx((340 * MiB) / GiB)
    assert curve.opts["connect"] == "finite"


def test_unattributed_curve_has_its_own_colour_dash_and_legend_entry(panel):
    draw(panel)
    curve = panel.curve_for(UNATTRIBUTED_KEY)
    pen = curve.opts["pen"]
    assert pen.style() == Qt.PenStyle.DotLine
    assert pen.color() == pal.unattributed_color(panel.palette())
    assert pen.color() != pal.other_color(panel.palette())
    names = [name for _, name in panel.legend.entries]
    assert names[:3] == ["Device total", "Capacity", "Unattributed"]  # with the device
    row = panel.legend._rows[2]
    assert row.value.text() == fmt_bytes(TICKS[-1].unattributed_memory)
    assert "held by no process listed here" in row.name.toolTip()
    assert "other containers" in row.name.toolTip()


def test_hover_reads_the_unattributed_figure_or_na(panel):
    view = draw(panel)
    assert "Unattributed: 340 MiB" in panel.hover_text_at(float(view.t[-1]))
    assert "Unattributed: n/a" in panel.hover_text_at(float(view.t[2]))


def test_no_curve_without_anything_unattributed(panel):
    view = draw(panel, rest=False)
    assert panel.curve_for(UNATTRIBUTED_KEY) is None
    refresh_plot(panel, dataclasses.replace(view, unattributed=np.full(view.t.size, np.nan)))
    assert panel.curve_for(UNATTRIBUTED_KEY) is None  # never known: nothing to draw
    refresh_plot(panel, dataclasses.replace(view, unattributed=np.zeros(view.t.size)))
    assert panel.curve_for(UNATTRIBUTED_KEY) is None  # always 0: no line along the floor
    assert "Unattributed" not in [name for _, name in panel.legend.entries]


def test_unattributed_curve_dims_while_a_process_is_highlighted(panel):
    draw(panel)
    panel.highlight((PID, 1.0))
    assert panel.curve_for(UNATTRIBUTED_KEY).opts["pen"].color().alpha() < 255


# -- the main window: one figure everywhere --------------------------------------------------

def test_demo_window_shows_the_same_unattributed_figure_in_table_legend_and_core(
        window, demo_feed):
    snap = demo_feed.step(window, 40)
    window.refresh(force=True)
    model = window.table.model()
    for g in snap.gpus:
        assert g.unattributed_memory and g.unattributed_memory > 0
        row = next(r for r in range(model.rowCount())
                   if model.index(r, 0).data(KEY_ROLE) == (g.display_id, UNATTRIBUTED_KEY))
        assert model.index(row, COL_VRAM).data() == fmt_bytes(g.unattributed_memory)
        panel = window.panels[g.display_id]
        curve = panel.curve_for(UNATTRIBUTED_KEY)
        assert curve is not None
        assert curve.yData[-1] == pytest.approx(g.unattributed_memory / GiB)
        i = [k for k, _ in panel.legend.entries].index(UNATTRIBUTED_KEY)
        assert panel.legend._rows[i].value.text() == fmt_bytes(g.unattributed_memory)


def test_window_graph_leaves_a_gap_for_ticks_with_unattributed_unknown(window):
    t0 = time.monotonic()
    for i, g in enumerate(TICKS):
        window.on_snapshot(snapshot(t0 + i, g))
    window.refresh(force=True)
    y = window.panels["0"].curve_for(UNATTRIBUTED_KEY).yData
    assert len(y) == len(TICKS)
    assert np.isnan(y[2]) and not np.isnan(y[[0, 1, 3, 4]]).any()
