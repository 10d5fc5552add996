"""MainWindow end to end with the demo source on a fake clock."""

from __future__ import annotations

import dataclasses
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QPushButton

from app.core.monitor.history import History
from app.core.monitor.plot_data import OTHER_KEY, TOP_N
from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample, Snapshot
from app.core.units import GiB
from app.ui.gpu.unattributed import UNATTRIBUTED_KEY
from app.ui.style import palette as pal
from app.ui.window.main_window import MainWindow
from app.ui.window.process_rows import COL_GPU, COL_PID, COL_RSS, COL_VRAM, KEY_ROLE


def table_rows(window):
    model = window.table.model()
    return [tuple(model.index(r, c).data() for c in range(model.columnCount()))
            for r in range(model.rowCount())]


def table_pids(window):
    """(GPU, pid) of every process row (not the per-GPU unattributed rows)."""
    model = window.table.model()
    return sorted((model.index(r, COL_GPU).data(), int(model.index(r, COL_PID).data()))
                  for r in range(model.rowCount())
                  if model.index(r, 0).data(KEY_ROLE)[1] != UNATTRIBUTED_KEY)


def snapshot_pids(snap):
    return sorted((g.display_id, p.pid) for g in snap.gpus for p in g.processes)


def test_default_demo_has_a_panel_per_gpu_and_every_process(window, demo_feed):
    snap = demo_feed.step(window, 20)
    assert set(window.panels) == {"0", "1"}
    assert window.windowTitle() == "VRAM Steward — demo"
    assert "Demo (simulated GPUs)" in window.source_label.text()
    assert table_pids(window) == snapshot_pids(snap)
    panel = window.panels["0"]
    g0 = snap.gpus[0]
    gib = g0.memory_used / GiB
    assert panel.memory_text().startswith(f"{gib:.1f} GiB / 24.0 GiB (")
    assert "reserved by driver" in panel.reserved_label.text()
    assert panel.gauge.level == pal.level_for(g0.memory_used / g0.memory_total)


def test_big_machine_eight_panels_and_aggregated_other(window, big_feed):
    snap = big_feed.step(window, 8)
    window.gpu_area.select_gpu("3")  # shown in the overview (eight do not fit)
    window.refresh()
    assert len(window.panels) == 8
    assert table_pids(window) == snapshot_pids(snap)
    panel = window.panels["3"]
    # Top N processes get their own curve; the rest are summed into one.
    assert len(panel.shown_keys()) == TOP_N
    assert panel.curve_for(OTHER_KEY) is not None
    biggest = max(snap.gpus[3].processes, key=lambda p: p.gpu_memory)
    assert biggest.key in panel.shown_keys()
    assert any(name.startswith("Other processes") for _, name in panel.legend.entries)
    assert f"worker.py ({biggest.pid})" in [name for _, name in panel.legend.entries]


def test_none_values_show_na(window):
    procs = (ProcessSample(4242, None),)
    g = GpuSample(index=0, name="Mystery GPU", uuid=None, memory_total=None, memory_used=None,
                  memory_free=None, processes=procs)
    window.on_snapshot(Snapshot(time.time(), 1.0, "nvml", "550.54", (g,)))
    assert window.windowTitle() == "VRAM Steward"
    assert window.source_label.text() == "NVML, driver 550.54"
    (row,) = table_rows(window)
    assert row[COL_PID] == "4242"
    assert row[COL_VRAM] == "n/a" and row[COL_RSS] == "n/a"
    panel = window.panels["0"]
    assert panel.memory_text() == "n/a"
    assert panel.util_label[1].text() == "n/a"
    assert panel.temp_label[1].text() == "n/a"
    assert panel.power_label[1].text() == "n/a"


def test_table_follows_exits_and_arrivals_keeping_selection(window, demo_feed):
    # Demo: on GPU 1, "eval.py" (pid 31002) lives 8 s..48 s then restarts as a new pid.
    demo_feed.step(window, 4 * 10)  # t = 10 s: eval.py running
    snap = demo_feed.snapshot()
    assert any(p.pid == 31002 for g in snap.gpus for p in g.processes)
    table = window.table
    train = next(p for p in snap.gpus[0].processes if p.pid == 20417)
    assert table.select_key("0", train.key)
    scroll = table.verticalScrollBar().value()
    demo_feed.step(window, 4 * 40)  # t = 50 s: eval.py has exited
    pids = {pid for _, pid in table_pids(window)}
    assert 31002 not in pids
    demo_feed.step(window, 4 * 40)  # t = 90 s: eval.py restarted under a new pid
    snap = demo_feed.snapshot()
    assert table_pids(window) == snapshot_pids(snap)
    assert {pid for _, pid in table_pids(window)} - pids  # someone new arrived
    assert table.selected_key() == ("0", train.key)
    assert table.verticalScrollBar().value() == scroll


def test_selecting_a_row_highlights_the_curve(window, demo_feed, qtbot):
    demo_feed.step(window, 40)
    window.refresh()
    table = window.table
    row = next(r for r in range(table.model().rowCount())
               if table.model().index(r, 0).data(KEY_ROLE)[1][0] == 9121)
    did, key = table.model().index(row, 0).data(KEY_ROLE)
    with qtbot.waitSignal(table.process_selected):
        table.selectRow(row)
    panel = window.panels[did]
    assert panel.highlighted_key == key
    assert window.panels["0"].highlighted_key is None
    chosen = panel.curve_for(key)
    assert chosen is not None and chosen.isVisible()
    assert chosen.opts["pen"].widthF() > 1
    others = [panel.curve_for(k) for k in panel.shown_keys() if k != key]
    assert others and all(c.opts["pen"].color().alpha() < 255 for c in others)
    table.clearSelection()
    assert panel.highlighted_key is None


def test_highlight_adds_a_process_outside_the_top(window, big_feed):
    snap = big_feed.step(window, 4)
    window.refresh()
    panel = window.panels["0"]
    smallest = min(snap.gpus[0].processes, key=lambda p: p.gpu_memory)
    assert smallest.key not in panel.shown_keys()
    assert window.table.select_key("0", smallest.key)
    assert panel.highlighted_key == smallest.key
    assert smallest.key in panel.shown_keys()
    assert panel.curve_for(smallest.key).isVisible()


def test_no_driver_shows_reason_and_demo_button(window, qtbot):
    reason = "NVIDIA driver not found (libnvidia-ml is not installed)"
    window.on_snapshot(Snapshot(time.time(), 1.0, "nvml", None, (), reason))
    window.show()
    assert window.stack.currentWidget() is window.no_driver_view
    assert window.no_driver_view.reason() == reason
    assert window.no_driver_view.title_label.text() == "No NVIDIA driver found"
    button = window.findChild(QPushButton, "showDemoButton")
    assert button is not None and button.isVisible()
    with qtbot.waitSignal(window.demo_requested, timeout=1000):
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    with qtbot.waitSignal(window.retry_requested, timeout=1000):
        qtbot.mouseClick(window.no_driver_view.retry_button, Qt.MouseButton.LeftButton)


def test_no_driver_then_demo_switches_back_to_monitor(window, demo_feed):
    window.on_snapshot(Snapshot(time.time(), 1.0, "nvml", None, (), "no driver"))
    demo_feed.step(window, 2)
    assert window.stack.currentWidget() is window.monitor_page
    assert set(window.panels) == {"0", "1"}


def test_lost_gpu_shows_its_message_not_stale_numbers(window, demo_feed):
    snap = demo_feed.step(window, 8)
    panel = window.panels["1"]
    assert panel.memory_text() != "n/a"
    lost = dataclasses.replace(snap.gpus[1], state=DeviceState.LOST, memory_used=None,
                               memory_free=None, processes=(),
                               message="GPU 1 has fallen off the bus")
    window.on_snapshot(dataclasses.replace(snap, monotonic=snap.monotonic + 0.25,
                                           gpus=(snap.gpus[0], lost)))
    window.show()
    assert panel.message_visible()
    assert panel.message_text() == "GPU 1 has fallen off the bus"
    assert "LOST" in panel.state_label.text()
    assert not panel.figures.isVisible()
    assert panel.memory_text() == "n/a"
    assert panel.gauge.used_fraction is None


def test_gpus_that_disappear_lose_their_panel(window, demo_feed):
    snap = demo_feed.step(window, 2)
    window.on_snapshot(dataclasses.replace(snap, monotonic=snap.monotonic + 1,
                                           gpus=snap.gpus[:1]))
    assert set(window.panels) == {"0"}


def test_span_combo_changes_the_plotted_range(window, demo_feed):
    demo_feed.step(window, 4 * 90)
    window.refresh()
    panel = window.panels["0"]
    assert panel.x_range() == pytest.approx((-600, 0))
    combo = window.findChild(QComboBox, "spanCombo")
    assert [combo.itemText(i) for i in range(combo.count())] == ["1 min", "10 min", "1 h", "24 h"]
    combo.setCurrentIndex(0)
    assert window.span_s == 60
    assert panel.x_range() == pytest.approx((-60, 0))
    x, _ = panel.total_curve.getData()
    assert x.min() >= -60.01 and x.max() == 0
    window.set_span(3600)
    assert combo.currentText() == "1 h"
    assert panel.x_range() == pytest.approx((-3600, 0))
    x, _ = panel.total_curve.getData()
    assert -90 <= x.min() < -85  # all 90 s of history (bucketed to about a pixel)


def test_refresh_draws_only_after_a_new_snapshot(window, demo_feed):
    window.set_span(60)
    drawn = window.plot_refreshes
    window.refresh()
    assert window.plot_refreshes == drawn  # nothing new
    demo_feed.step(window, 4)
    assert window.plot_refreshes == drawn  # on_snapshot never draws
    window.refresh()
    assert window.plot_refreshes == drawn + 1
    _, y = window.panels["0"].total_curve.getData()
    assert len(y) == 4
    window.refresh()
    assert window.plot_refreshes == drawn + 1
    demo_feed.step(window, 4)
    window.refresh()
    assert window.plot_refreshes == drawn + 2


def test_display_timer_runs_at_250_ms(qtbot):
    w = MainWindow(History())
    qtbot.addWidget(w)
    assert w.display_timer.isActive() and w.display_timer.interval() == 250


def test_hover_readout(window, demo_feed):
    demo_feed.step(window, 4 * 30)
    window.refresh()
    text = window.panels["0"].hover_text_at(-10.0)
    assert text.splitlines()[0] == "10 s ago"
    assert "Device total:" in text and "train.py (20417):" in text


def test_moving_the_mouse_over_a_plot_shows_the_readout(window, demo_feed, qtbot):
    window.resize(1280, 860)
    window.show()
    qtbot.waitExposed(window)
    demo_feed.step(window, 4 * 60)
    window.refresh(force=True)
    panel = window.panels["0"]
    vb = panel.plot.getPlotItem().getViewBox()
    # A point a third of the way into the plot area, in the scene, then in the viewport.
    rect = vb.sceneBoundingRect()
    scene_point = rect.topLeft() + (rect.bottomRight() - rect.topLeft()) / 3
    # The same path a real mouse move takes: the scene's sigMouseMoved, rate-limited.
    panel.plot.scene().sigMouseMoved.emit(scene_point)
    qtbot.waitUntil(lambda: panel.hover_text.isVisible(), timeout=2000)
    expected_x = vb.mapSceneToView(scene_point).x()
    assert panel.cursor_line.isVisible()
    assert abs(panel.cursor_line.value() - expected_x) < 1e-6
    text = panel.hover_text.textItem.toPlainText()
    assert "Device total:" in text and "ago" in text.splitlines()[0]
    # Leaving the plot area hides it.
    panel.plot.scene().sigMouseMoved.emit(rect.topLeft() - (rect.bottomRight() - rect.topLeft()))
    qtbot.waitUntil(lambda: not panel.hover_text.isVisible(), timeout=2000)


def test_long_legend_names_are_shortened_but_keep_the_pid(qtbot):
    from PySide6.QtWidgets import QLabel

    from app.ui.style.text import elide_keeping_pid as _elide_keeping_pid

    metrics = QLabel().fontMetrics()
    name = "vllm.entrypoints.openai.api_server (9121)"
    short = _elide_keeping_pid(metrics, name, 150)
    assert short.endswith(" (9121)") and short.startswith("vllm")
    assert metrics.horizontalAdvance(short) <= 150 + metrics.horizontalAdvance("…")
    assert _elide_keeping_pid(metrics, "Xorg (1843)", 150) == "Xorg (1843)"
