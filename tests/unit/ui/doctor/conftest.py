"""A desktop shell around a main window, with a fake notification server."""

from __future__ import annotations

import pytest

from app.core.monitor.history import History, HistoryConfig
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import UiSettings
from app.ui.shell.desktop import DesktopShell
from app.ui.window.main_window import MainWindow
from tests.unit.ui.shell.test_desktop import FakeAutostart, FakeDbus, FakeSampler


@pytest.fixture
def shell(qtbot, qapp, tmp_path):
    window = MainWindow(History(HistoryConfig()), settings=UiSettings())
    window.display_timer.stop()
    qtbot.addWidget(window)
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    return DesktopShell(qapp, window, FakeSampler(), store, None, FakeDbus(), FakeAutostart())
