"""The GPU area: panels that fill the room, an overview when they do not fit,
legend figures that follow the latest sample, and the SM utilisation strip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt

from app.core.monitor.plot_data import TOTAL_KEY
from app.core.units import fmt_bytes


def shown(window, qtbot, width: int, height: int) -> None:
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(20)  # the area re-arranges after its resize, once


def visible_panels(window) -> list[str]:
    return [did for did, p in window.panels.items() if p.isVisible()]


@pytest.mark.parametrize("size", [(1920, 1080), (2560, 1440)])
def test_the_panels_fill_the_area_without_an_empty_band(window, demo_feed, qtbot, size):
    shown(window, qtbot, *size)
    demo_feed.step(window, 8)
    qtbot.wait(20)
    area = window.gpu_area
    assert area.arrangement == "all"
    viewport = area.scroll.viewport()
    bottoms = [p.mapTo(viewport, QPoint(0, p.height())).y() for p in window.panels.values()]
    # The lowest panel ends at the area's bottom edge (give or take the margin).
    assert viewport.height() - max(bottoms) <= 16
    # The plots took the room: far taller than their minimum.
    for panel in window.panels.values():
        assert panel.plot.height() >= 1.5 * panel.plot.minimumHeight()


def test_plots_grow_with_the_window(window, demo_feed, qtbot):
    shown(window, qtbot, 1920, 900)
    demo_feed.step(window, 4)
    qtbot.wait(20)
    small = window.panels["0"].plot.height()
    window.resize(1920, 1300)
    qtbot.wait(50)
    assert window.panels["0"].plot.height() > small + 100


def test_more_gpus_than_fit_get_an_overview_of_tiles_and_one_full_panel(window, big_feed,
                                                                         qtbot):
    shown(window, qtbot, 1280, 720)
    big_feed.step(window, 8)
    qtbot.wait(20)
    area = window.gpu_area
    assert area.arrangement == "overview"
    assert area.tile_scroll.isVisible()
    assert [t.isVisible() for t in area.tiles.values()] == [True] * 8
    assert visible_panels(window) == ["0"]
    tile = area.tiles["5"]
    assert tile.memory_text.endswith("GiB") and "SM" in tile.util_text
    qtbot.mouseClick(tile, Qt.MouseButton.LeftButton)
    assert visible_panels(window) == ["5"] and area.selected == "5"
    assert tile.selected and not area.tiles["0"].selected


def test_behind_the_overview_a_gpu_costs_a_tile_not_a_panel(window, big_feed, qtbot):
    shown(window, qtbot, 1280, 720)
    big_feed.step(window, 8)
    window.refresh(force=True)
    assert set(window.panels) == {"0"} and len(window.gpu_area.tiles) == 8
    assert not window.panels["0"].plot_dirty
    window.gpu_area.tiles["3"].clicked.emit("3")
    qtbot.wait(20)
    panel = window.panels["3"]  # made when first shown, with the latest figures
    gpu = next(g for g in window.latest.gpus if g.display_id == "3")
    assert panel.memory_text().startswith(fmt_bytes(gpu.memory_used))
    assert not panel.plot_dirty  # and drawn as it was selected
    assert not window.panels["0"].isVisible()


def test_the_tiles_mini_history_follows_the_device_total(window, big_feed, qtbot):
    shown(window, qtbot, 1280, 720)
    big_feed.step(window, 40)
    window.refresh(force=True)
    tile = window.gpu_area.tiles["2"]
    snap = window.latest
    gpu = next(g for g in snap.gpus if g.display_id == "2")
    assert tile._x.size > 0
    assert tile._fractions[-1] == pytest.approx(gpu.memory_used / gpu.memory_total, rel=1e-6)


def test_selecting_a_process_on_a_hidden_gpu_shows_its_panel(window, big_feed, qtbot):
    shown(window, qtbot, 1280, 720)
    snap = big_feed.step(window, 4)
    proc = snap.gpus[6].processes[0]
    window._on_process_selected("6", proc.key)
    assert visible_panels(window) == ["6"]


def test_a_big_window_shows_every_gpu_again(window, big_feed, qtbot):
    shown(window, qtbot, 1280, 720)
    big_feed.step(window, 4)
    qtbot.wait(20)
    assert window.gpu_area.arrangement == "overview"
    window.resize(2560, 4000)
    qtbot.wait(50)
    assert window.gpu_area.arrangement == "all"
    assert len(visible_panels(window)) == 8


def test_legend_figures_follow_the_latest_sample_between_redraws(window, demo_feed, qtbot):
    shown(window, qtbot, 1920, 1080)
    window.set_span(86400.0)
    demo_feed.step(window, 4)
    window.refresh(force=True)
    panel = window.panels["0"]
    drawn = window.plot_refreshes
    snap = demo_feed.snapshot()
    gpu = dataclasses.replace(snap.gpus[0], memory_used=snap.gpus[0].memory_used + 3 * 2**30)
    window.on_snapshot(dataclasses.replace(snap, gpus=(gpu, *snap.gpus[1:])))
    assert window.plot_refreshes == drawn  # no redraw...
    row = next(r for r in panel.legend._rows if r.entry.key == TOTAL_KEY)
    assert row.value.text() == fmt_bytes(gpu.memory_used)  # ...yet the figure is new
    assert panel.memory_text().startswith(fmt_bytes(gpu.memory_used))


def test_the_utilisation_strip_shows_sm_percent_over_the_span(window, demo_feed, qtbot):
    shown(window, qtbot, 1920, 1080)
    snap = demo_feed.step(window, 30)
    window.refresh(force=True)
    strip = window.panels["0"].util_strip
    assert strip.isVisible()
    assert strip.now_percent == snap.gpus[0].utilization_gpu
    assert strip._y.size == strip._x.size > 10
    assert np.nanmax(strip._y) <= 100
    # Aligned with the plot's view box.
    left, width = strip.extent()
    vb = window.panels["0"].plot.getPlotItem().getViewBox()
    assert width == pytest.approx(vb.width(), abs=1)
    assert left > 30


def test_a_gap_in_sampling_is_shaded_and_the_history_start_is_marked(window, demo_feed, qtbot):
    shown(window, qtbot, 1920, 1080)
    demo_feed.step(window, 40)
    demo_feed.t[0] += 60.0  # the sampler was paused for a minute
    demo_feed.step(window, 40)
    window.refresh(force=True)
    marks = window.panels["0"].plot.history_marks
    (x0, x1), = marks.gaps_shown()
    assert x1 - x0 == pytest.approx(60.25, abs=0.01)
    assert -5 > x1 > x0 > -90
    assert marks.start_line.isVisible()
    assert marks.start_line.value() == pytest.approx(-(80 * 0.25 + 60.0 - 0.25), abs=0.01)


def test_a_process_row_carries_the_colour_of_its_curve(window, demo_feed, qtbot):
    shown(window, qtbot, 1920, 1080)
    snap = demo_feed.step(window, 8)
    window.refresh(force=True)
    from app.ui.window.process_rows import COL_COMMAND, KEY_ROLE

    model = window.table.model()
    checked = 0
    for r in range(model.rowCount()):
        did, key = model.index(r, 0).data(KEY_ROLE)
        if not isinstance(key, tuple):
            continue  # the unattributed rows
        swatch = model.index(r, COL_COMMAND).data(Qt.ItemDataRole.DecorationRole)
        curve = window.panels[did].curve_for(key)
        assert curve is not None
        assert swatch is not None
        image = swatch.pixmap(10, 10).toImage()
        assert image.pixelColor(5, 5).name() == curve.opts["pen"].color().name()
        checked += 1
    assert checked == sum(len(g.processes) for g in snap.gpus)
