"""Process colours on the graphs: one colour per process on every panel of a window,
kept while the ranking changes, never shared on one panel; the legend shows it."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor

from app.core.monitor.history import History, HistoryConfig
from app.core.monitor.plot_data import TOP_N, build_plot_data
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.units import GiB
from app.ui.gpu.panel import GpuPanel
from app.ui.style import palette as pal


def gpu(index: int, held: dict[int, float]) -> GpuSample:
    """GPU ``index`` with processes pid -> GiB (all created at t=1)."""
    procs = tuple(ProcessSample(pid, int(g * GiB), create_time=1.0) for pid, g in held.items())
    used = sum(p.gpu_memory for p in procs)
    return GpuSample(index=index, name="Test GPU", uuid=f"GPU-{index}", memory_total=96 * GiB,
                     memory_used=used, memory_free=None, processes=procs)


def key(pid: int) -> tuple[int, float]:
    return (pid, 1.0)


class Window:
    """Panels sharing one set of process colours, fed like the main window feeds them."""

    def __init__(self, qtbot, *display_ids: str) -> None:
        self.colors = pal.ProcessColors()
        self.history = History(HistoryConfig(period_s=1.0))
        self.t = 0.0
        self.panels = {}
        for did in display_ids:
            panel = GpuPanel(did, colors=self.colors)
            qtbot.addWidget(panel)
            panel.resize(900, 320)
            self.panels[did] = panel

    def show(self, *gpus: GpuSample) -> None:
        for _ in range(3):
            self.t += 1.0
            self.history.add(Snapshot(1_700_000_000.0 + self.t, self.t, "nvml", "550", gpus))
        for g in gpus:
            panel = self.panels[g.display_id]
            panel.update_sample(g)
            panel.set_plot_data(build_plot_data(self.history, g.display_id, 600.0,
                                                panel.plot_width_px(), panel.plot_inputs()),
                                600.0)

    def curve_colors(self, did: str) -> dict:
        panel = self.panels[did]
        return {k: panel.curve_for(k).opts["pen"].color().name() for k in panel.shown_keys()}


@pytest.fixture
def window(qtbot):
    return Window(qtbot, "0", "1")


def test_a_process_keeps_its_colour_when_the_ranking_changes(window):
    # Nine processes: pid 9 is summed into "other processes", then overtakes everyone
    # while pid 1 drops out of the top eight and the rest reverse their order.
    window.show(gpu(0, {pid: 20 - pid for pid in range(1, 10)}))
    before = window.curve_colors("0")
    assert set(before) == {key(pid) for pid in range(1, 9)}
    window.show(gpu(0, {1: 0.5, **{pid: pid for pid in range(2, 9)}, 9: 30}))
    after = window.curve_colors("0")
    assert set(after) == {key(pid) for pid in range(2, 10)}
    assert all(after[key(pid)] == before[key(pid)] for pid in range(2, 9))
    assert len(set(after.values())) == TOP_N  # the newcomer shares no colour


def test_no_two_processes_on_one_panel_share_a_colour(window):
    window.show(gpu(0, {pid: pid for pid in range(1, 13)}))
    colors = window.curve_colors("0")
    assert len(colors) == TOP_N
    assert len(set(colors.values())) == TOP_N


def test_a_process_on_two_gpus_has_the_same_colour_on_both_panels(window):
    window.show(gpu(0, {pid: pid for pid in range(1, 9)}),
                gpu(1, {5: 10, **{pid: 1 + pid / 100 for pid in range(20, 27)}}))
    on0, on1 = window.curve_colors("0"), window.curve_colors("1")
    assert on0[key(5)] == on1[key(5)]
    assert len(set(on1.values())) == len(on1) == TOP_N
    assert window.panels["1"].plot.colors is window.panels["0"].plot.colors


def test_the_table_swatch_is_the_curve_colour_or_none_in_other(window):
    window.show(gpu(0, {pid: 20 - pid for pid in range(1, 10)}), gpu(1, {1: 3}))
    curves = window.curve_colors("0")
    assert window.colors.color_of(key(1), "0").name() == curves[key(1)]
    assert window.colors.color_of(key(1), "1").name() == curves[key(1)]
    assert window.colors.color_of(key(9), "0") is None  # summed into "other processes"
    assert window.colors.color_of(key(2), "1") is None  # not on GPU 1


def test_the_legend_swatch_shows_the_curve_colour_and_other_stays_grey(window):
    window.show(gpu(0, {pid: 20 - pid for pid in range(1, 10)}))
    panel = window.panels["0"]
    curves = window.curve_colors("0")
    rows = dict(zip([k for k, _ in panel.legend.entries], panel.legend._rows))
    for k, name in curves.items():
        c = QColor(name)
        assert f"rgba({c.red()},{c.green()},{c.blue()},255)" in rows[k].swatch.styleSheet()
    other = pal.other_color(panel.palette())
    other_key = next(k for k, label in panel.legend.entries if label.startswith("Other"))
    assert (f"rgba({other.red()},{other.green()},{other.blue()},"
            in rows[other_key].swatch.styleSheet())


def test_a_closed_panel_frees_its_processes_colours(qtbot, window):
    window.show(gpu(1, {7: 2}))
    assert window.colors.color_of(key(7)) is not None
    window.panels.pop("1").deleteLater()
    qtbot.waitUntil(lambda: window.colors.color_of(key(7)) is None)


def test_a_panel_alone_has_colours_of_its_own(qtbot):
    a, b = GpuPanel("0"), GpuPanel("0")
    qtbot.addWidget(a)
    qtbot.addWidget(b)
    assert a.plot.colors is not b.plot.colors
