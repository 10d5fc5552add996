"""Nothing is drawn that nobody sees: a window in the tray or minimised still
records every sample, takes every event and lets the alerts fire, but updates no
view; shown again, every view catches up with the latest snapshot at once.  The
process table does the same behind another tab."""

from __future__ import annotations

import dataclasses

import pytest

from app.core.monitor.collector import Collector, default_agents_for
from app.core.monitor.demo_source import DemoSource
from app.core.monitor.history import History, HistoryConfig
from app.core.units import fmt_bytes
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import UiSettings
from app.ui.shell.desktop import DesktopShell
from app.ui.shell.notifier import PlatformAnswers
from app.ui.window.main_window import MainWindow
from app.ui.window.process_rows import COL_PID, COL_VRAM

TRAY = PlatformAnswers(tray=True, dbus=True, linux=True)


class Feed:
    """The demo with its agents and policy on a fake clock, 0.25 s a snapshot."""

    def __init__(self) -> None:
        self.t = [1000.0]
        self.source = DemoSource(clock=lambda: self.t[0])
        self.collector = Collector(self.source, agents=default_agents_for(self.source))
        self.last = None

    def step(self, *targets, seconds: float = 0.25) -> None:
        for _ in range(int(seconds / 0.25)):
            snap = self.collector.collect()
            self.last = snap = dataclasses.replace(
                snap, monotonic=self.t[0], timestamp=self.source._epoch + self.t[0] - 1000.0)
            for target in targets:
                target(snap)
            self.t[0] += 0.25


class FakeDbus:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def available(self) -> bool:
        return True

    def notify(self, summary, body, actions=(), **kw) -> int:
        self.calls.append((summary, body))
        return len(self.calls)


@pytest.fixture
def feed() -> Feed:
    return Feed()


@pytest.fixture
def window(qtbot):
    w = MainWindow(History(HistoryConfig()))
    w.idle_when_unseen = True  # as the app makes it
    w.display_timer.stop()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    return w


def table_rows(window) -> dict[int, str]:
    """pid -> the VRAM cell of every process row in the table."""
    model = window.table.model()
    return {int(model.index(r, COL_PID).data()): model.index(r, COL_VRAM).data()
            for r in range(model.rowCount()) if model.index(r, COL_PID).data()}


def latest_rows(snapshot) -> dict[int, str]:
    return {p.pid: fmt_bytes(p.gpu_memory) for g in snapshot.gpus for p in g.processes}


def caught_up(window, qtbot, snapshot) -> None:
    qtbot.waitUntil(lambda: table_rows(window) == latest_rows(snapshot), timeout=2000)
    panel = next(p for p in window.panels.values() if p.isVisible())
    gpu = next(g for g in snapshot.gpus if g.display_id == panel.display_id)
    assert panel.memory_text().startswith(fmt_bytes(gpu.memory_used))


def test_in_the_tray_it_records_and_alerts_but_draws_nothing_then_catches_up(
        window, feed, qtbot, qapp, tmp_path):
    dbus = FakeDbus()
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    shell = DesktopShell(qapp, window, None, store, None, dbus, None)
    window.settings = dataclasses.replace(UiSettings(), start_minimised=True)
    shell.start(minimised=True, answers=TRAY)
    try:
        assert not window.isVisible()  # start at login: in the tray only
        feed.step(window.on_snapshot, shell.on_snapshot, seconds=120)

        # Every sample is in the history, the alerts fired, events were taken ...
        assert window.history.gpus["0"].fine.count == 480
        assert any("of its memory" in summary for summary, _ in dbus.calls)
        assert any(e.event.startswith("Unloaded") for e in window.activity.entries)
        # ... and nothing was drawn: no plot, no table row, no status text.
        assert window.plot_refreshes == 0
        assert window.table.model().rowCount() == 0
        assert window.source_label.text() == "No source yet"

        shell.show_window()
        caught_up(window, qtbot, feed.last)
        assert window.plot_refreshes >= 1
        assert window.source_label.text() != "No source yet"
        panel = next(p for p in window.panels.values() if p.isVisible())
        # The plot shows the whole history recorded while hidden.
        assert panel.plot.data is not None and panel.plot.data.x[0] <= -100
    finally:
        if shell.tray is not None:
            shell.tray.hide()
        qapp.setQuitOnLastWindowClosed(True)


def test_minimised_it_draws_nothing_and_catches_up_when_restored(window, feed, qtbot):
    window.show()
    qtbot.waitExposed(window)
    feed.step(window.on_snapshot, seconds=5)
    before = table_rows(window)
    assert before == latest_rows(feed.last)
    window.showMinimized()
    qtbot.waitUntil(window.isMinimized, timeout=2000)
    drawn = window.plot_refreshes
    feed.step(window.on_snapshot, seconds=30)
    window.refresh(force=True)  # the display timer's call: nothing to draw for nobody
    assert window.plot_refreshes == drawn
    assert table_rows(window) == before != latest_rows(feed.last)
    assert window.history.gpus["0"].fine.count == 140
    window.showNormal()
    caught_up(window, qtbot, feed.last)
    assert window.plot_refreshes > drawn


def test_the_table_behind_another_tab_catches_up_when_its_tab_is_chosen(window, feed, qtbot):
    window.show()
    qtbot.waitExposed(window)
    feed.step(window.on_snapshot, seconds=2)
    before = table_rows(window)
    window.lower_tabs.setCurrentWidget(window.activity)
    feed.step(window.on_snapshot, seconds=20)
    assert table_rows(window) == before != latest_rows(feed.last)
    window.lower_tabs.setCurrentIndex(0)
    assert table_rows(window) == latest_rows(feed.last)


def test_a_window_driven_without_being_shown_draws_every_snapshot(qtbot, feed):
    """Tests and scripts drive a window they never show: it draws as it goes."""
    w = MainWindow(History(HistoryConfig()))
    qtbot.addWidget(w)
    w.display_timer.stop()
    feed.step(w.on_snapshot, seconds=2)
    w.refresh(force=True)
    assert table_rows(w) == latest_rows(feed.last)
    assert w.plot_refreshes == 1


def test_a_panel_the_overview_hides_takes_its_figures_when_shown(window, feed, qtbot):
    window.show()
    qtbot.waitExposed(window)
    feed.step(window.on_snapshot, seconds=5)
    area = window.gpu_area
    assert area.arrangement == "overview"
    first = area.selected or next(iter(area.panels))
    hidden = next(did for did in area.tiles if did != first)
    area.select_gpu(hidden)  # its panel is made, shown ...
    area.select_gpu(first)  # ... and hidden again by the overview
    panel = area.panels[hidden]
    assert panel.hidden_by_window()
    feed.step(window.on_snapshot, seconds=5)
    gpu = next(g for g in feed.last.gpus if g.display_id == hidden)
    assert not panel.memory_text().startswith(fmt_bytes(gpu.memory_used))  # not drawn
    area.select_gpu(hidden)
    assert panel.isVisible()
    assert panel.memory_text().startswith(fmt_bytes(gpu.memory_used))
    assert panel.plot_inputs().memory_used == gpu.memory_used  # its plot draws the latest


def test_an_open_detail_view_keeps_following_while_the_window_is_in_the_tray(window, feed,
                                                                             qtbot):
    window.show()
    qtbot.waitExposed(window)
    feed.step(window.on_snapshot, seconds=2)
    pid = next(iter(feed.last.agents))  # a process with an agent: it has details
    view = window.open_details(pid)
    qtbot.waitExposed(view)
    window.hide()  # closed to the tray; the detail view is a window of its own
    assert window.unseen() and view.isVisible()
    feed.step(window.on_snapshot, seconds=3)
    assert view.report is feed.last.agents[pid]
    assert window.table.model().rowCount() and table_rows(window) != latest_rows(feed.last)
