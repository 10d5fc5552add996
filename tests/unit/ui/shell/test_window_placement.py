"""The window fits the screen it opens on and comes back where it was left."""

from __future__ import annotations

from PySide6.QtCore import QMargins, QRect, QSize
from PySide6.QtGui import QGuiApplication

from app.core.monitor.history import History, HistoryConfig
from app.ui.settings.store import SettingsStore, open_settings
from app.ui.settings.values import UiSettings, WindowPlacement
from app.ui.shell.desktop import DesktopShell
from app.ui.shell.notifier import PlatformAnswers
from app.ui.shell.window_placement import (
    FRAME_ALLOWANCE,
    PREFERRED_SIZE,
    first_rect,
    remember,
    restored_rect,
)
from app.ui.window.main_window import MainWindow

NO_TRAY = PlatformAnswers(tray=False, dbus=False, linux=True)


def _framed(inner: QRect, frame: QMargins = FRAME_ALLOWANCE) -> QRect:
    return inner.marginsAdded(frame)


def test_first_start_on_a_laptop_screen_is_no_larger_than_its_room():
    for available in (QRect(0, 27, 1366, 741), QRect(0, 0, 1280, 800), QRect(0, 0, 1024, 640)):
        rect = first_rect(available)
        assert available.contains(_framed(rect)), (available, rect)
        # as large as the room allows, up to the preferred size
        assert rect.height() == min(PREFERRED_SIZE.height(),
                                    available.height() - 36), (available, rect)


def test_first_start_on_a_big_screen_is_the_preferred_size_centred():
    available = QRect(0, 0, 2560, 1400)
    rect = first_rect(available)
    assert rect.size() == PREFERRED_SIZE
    assert abs(_framed(rect).center().x() - available.center().x()) <= 1
    assert abs(_framed(rect).center().y() - available.center().y()) <= 1


def test_a_second_screen_keeps_its_window():
    left, right = QRect(0, 0, 1920, 1050), QRect(1920, 0, 2560, 1410)
    saved = WindowPlacement(2100, 100, 1500, 900)
    inner = restored_rect(saved, [left, right], left)  # the frame's corner was saved
    assert inner == QRect(2100 + FRAME_ALLOWANCE.left(), 100 + FRAME_ALLOWANCE.top(), 1500, 900)


def test_a_window_left_on_a_screen_that_is_gone_comes_back_on_the_primary_one():
    primary = QRect(0, 0, 1366, 768)
    saved = WindowPlacement(2100, 100, 1500, 900)  # its screen was unplugged
    rect = restored_rect(saved, [primary], primary)
    assert primary.contains(_framed(rect)), rect
    assert rect.width() == 1366 - 8 and rect.height() == 768 - 36  # clamped to the room


def test_a_window_half_off_its_screen_is_moved_on():
    screen = QRect(0, 0, 1920, 1080)
    rect = restored_rect(WindowPlacement(-300, 700, 1000, 600), [screen], screen)
    assert screen.contains(_framed(rect)) and rect.size() == QSize(1000, 600)


def test_placement_read_from_a_settings_file_is_checked():
    assert UiSettings.from_dict({"window": {"x": "12", "y": 40, "width": 900, "height": 700,
                                            "maximised": "true"}}).window == \
        WindowPlacement(12, 40, 900, 700, True)
    # garbage and windows too small to be real fall back to "never placed"
    for bad in ({"width": "wide", "height": 700}, {"width": 20, "height": 10},
                {"x": float("inf"), "width": 900, "height": 700}):
        placement = UiSettings.from_dict({"window": bad}).window
        assert not placement.placed or placement.x == 0, placement


def _shell(qapp, tmp_path, settings: UiSettings) -> tuple[DesktopShell, MainWindow]:
    window = MainWindow(History(HistoryConfig()), settings=settings)
    store = SettingsStore(open_settings(str(tmp_path / "s.ini")))
    return DesktopShell(qapp, window, None, store, None, None, None), window


def test_quit_keeps_the_size_and_position_and_the_next_start_restores_them(
        qapp, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(qapp, "quit", lambda: None)
    available = QGuiApplication.primaryScreen().availableGeometry()
    shell, window = _shell(qapp, tmp_path, UiSettings(no_tray_hint_shown=True))
    qtbot.addWidget(window)
    shell.start(answers=NO_TRAY)
    assert available.contains(window.geometry())  # the first start fits the screen
    wanted = QRect(available.x() + 20, available.y() + 40, 600, 450)
    window.setGeometry(wanted)
    shell.quit()
    stored = SettingsStore(open_settings(str(tmp_path / "s.ini"))).load()
    assert stored.window == remember(window) and stored.window.width == 600

    again, window2 = _shell(qapp, tmp_path, stored)
    qtbot.addWidget(window2)
    again.start(answers=NO_TRAY)
    assert window2.geometry().size() == QSize(600, 450)
    assert window2.geometry().topLeft() == wanted.topLeft()
    again.quitting = True


def test_a_maximised_window_starts_maximised_with_its_normal_size_kept(
        qapp, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(qapp, "quit", lambda: None)
    available = QGuiApplication.primaryScreen().availableGeometry()
    saved = WindowPlacement(available.x() + 10, available.y() + 30, 620, 430, maximised=True)
    shell, window = _shell(qapp, tmp_path, UiSettings(window=saved))
    qtbot.addWidget(window)
    shell.start(answers=NO_TRAY)
    qtbot.waitUntil(window.isMaximized, timeout=2000)
    shell.quit()
    kept = SettingsStore(open_settings(str(tmp_path / "s.ini"))).load().window
    assert kept.maximised and (kept.width, kept.height) == (620, 430)
