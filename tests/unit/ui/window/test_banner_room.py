"""Banners take room above the content: they never cover the table's rows."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QLabel

from app.core.monitor.history import History, HistoryConfig
from app.ui.settings.values import UiSettings
from app.ui.window.main_window import MainWindow

LONG = ("Alerts arrive as a banner in this window, and closing the window quits VRAM "
        "Steward. On GNOME, the AppIndicator and KStatusNotifierItem Support extension "
        "adds a tray; VRAM Steward uses it as soon as it appears.")


def _on_window(window: MainWindow, widget) -> QRect:
    return QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())


def _shown_window(qtbot, width: int, height: int) -> MainWindow:
    window = MainWindow(History(HistoryConfig()), settings=UiSettings())
    qtbot.addWidget(window)
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    return window


def test_banners_push_the_table_down_and_the_window_still_fits_a_laptop(qapp, qtbot):
    window = _shown_window(qtbot, 1366, 768)
    table_before = _on_window(window, window.table.viewport())
    window.hint_banner.show_message("No system tray on this desktop", LONG, kind="info")
    window.folder_banner.show_message("A folder is not private", "/run/user/1000 is not "
                                      "yours: agents there are ignored", kind="warning")
    qtbot.waitUntil(lambda: _on_window(window, window.table.viewport()) != table_before)
    table = _on_window(window, window.table.viewport())
    for banner in (window.hint_banner, window.folder_banner):
        assert banner.isVisible()
        shown = _on_window(window, banner)
        assert not shown.intersects(table), (shown, table)
        assert shown.height() >= banner.heightForWidth(banner.width())  # its whole text
    assert window.height() == 768  # the banners' room came out of the content
    assert window.minimumSizeHint().height() <= 768 - 40
    window.hint_banner.retract()
    window.folder_banner.retract()
    qtbot.waitUntil(lambda: _on_window(window, window.table.viewport()) == table_before)


def test_a_long_result_in_the_status_bar_is_elided_never_over_its_neighbours(qapp, qtbot):
    window = _shown_window(qtbot, 1024, 640)
    window.period_label.setText("Sampling every 250 ms")
    long = "Auto-unload: GPU 0: unloaded 2 of 2 (pipe.text_encoder (235 MiB), " * 3
    window.action_label.setText(long)
    qtbot.wait(20)
    shown = window.action_label
    assert shown.text() == long  # the whole text for whoever reads it
    assert QLabel.text(shown).endswith("…") and len(QLabel.text(shown)) < len(long)
    right = shown.mapTo(window, QPoint(shown.width(), 0)).x()
    assert right <= window.period_label.mapTo(window, QPoint(0, 0)).x()
