"""Themes: explicit light/dark palettes, and "system" following the desktop."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QPalette

from app.ui.style import theme as theme_mod
from app.ui.style.theme import ThemeManager, is_dark


@pytest.fixture
def themes(qapp):
    manager = ThemeManager(qapp)
    yield manager
    manager.apply("light")  # leave the shared QApplication light for the other tests
    manager.apply("system")


def test_dark_and_light_change_the_application_palette(qapp, themes):
    assert themes.apply("dark") == "dark"
    assert is_dark(qapp.palette())
    assert qapp.style().name().lower() == "fusion"
    # Text must stay readable: strong contrast between window and text.
    pal = qapp.palette()
    assert (pal.color(QPalette.ColorRole.WindowText).lightness()
            - pal.color(QPalette.ColorRole.Window).lightness()) > 150
    assert themes.apply("light") == "light"
    assert not is_dark(qapp.palette())


def test_system_follows_the_desktop_scheme(qapp, themes, monkeypatch):
    monkeypatch.setattr(theme_mod, "system_prefers_dark", lambda: True)
    assert themes.apply("system") == "dark"
    monkeypatch.setattr(theme_mod, "system_prefers_dark", lambda: False)
    themes._on_scheme_changed()  # what QStyleHints.colorSchemeChanged triggers
    assert themes.effective == "light"


def test_unknown_mode_means_system(qapp, themes, monkeypatch):
    monkeypatch.setattr(theme_mod, "system_prefers_dark", lambda: False)
    themes.apply("neon")
    assert themes.mode == "system" and themes.effective == "light"


def test_open_window_and_plots_switch_with_the_theme(qtbot, qapp, themes, demo_feed):
    from app.core.monitor.history import History, HistoryConfig
    from app.ui.window.main_window import MainWindow

    window = MainWindow(History(HistoryConfig()))
    qtbot.addWidget(window)
    window.show()
    demo_feed.step(window, 4)
    window.refresh(force=True)
    panel = next(iter(window.panels.values()))
    themes.apply("dark")
    qapp.processEvents()
    assert is_dark(window.palette())
    assert panel.plot.backgroundBrush().color().lightness() < 128
    themes.apply("light")
    qapp.processEvents()
    assert panel.plot.backgroundBrush().color().lightness() > 128
