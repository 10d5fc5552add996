"""A notice with action buttons: over D-Bus the server shows them; where the channel
has none (a tray message) or D-Bus fails, the window's banner shows them."""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton, QWidget

from app.core.policies.alerts import Alert
from app.ui.shell.notifier import AlertBanner, Channel, Notifier
from tests.unit.ui.shell.test_notifier import FakeDbus

GiB = 1024**3
ACTIONS = [("reload", "Reload now"), ("off", "Turn off auto-unload")]


def banner_buttons(banner: AlertBanner) -> dict[str, QPushButton]:
    return {b.text(): b for b in banner.frame.findChildren(QPushButton) if not b.isHidden()}


def test_dbus_notice_carries_its_actions_and_reports_their_clicks(qtbot):
    dbus = FakeDbus()
    notifier = Notifier(Channel.DBUS, dbus=dbus)
    assert notifier.notify_actions("auto", "Auto-unload freed 235 MiB", "body",
                                   ACTIONS) is Channel.DBUS
    [call] = dbus.calls
    assert call["actions"] == [*ACTIONS, ("default", "Show VRAM Steward")]
    with qtbot.waitSignal(notifier.action_requested) as sig:
        dbus.action_invoked.emit(101, "off")
    assert sig.args == ["auto", "off"]
    with qtbot.waitSignal(notifier.show_requested):
        dbus.action_invoked.emit(101, "default")
    # Another notification's "free" is not this notice's.
    notifier.notify(Alert("memory", "0", "GPU 0 at 95 %", "m", freeable=GiB))
    with qtbot.waitSignal(notifier.free_requested) as sig:
        dbus.action_invoked.emit(102, "free")
    assert sig.args == ["0"]


def test_without_actions_on_the_channel_the_banner_shows_them(qtbot):
    parent = QWidget()
    qtbot.addWidget(parent)
    banner = AlertBanner(parent)
    notifier = Notifier(Channel.TRAY, banner=banner)
    assert notifier.notify_actions("auto", "Auto-unload freed 235 MiB", "why", ACTIONS) \
        is Channel.BANNER
    assert not banner.isHidden() and banner.title.text().startswith("Auto-unload freed 235 MiB")
    assert banner.action_labels() == ["Reload now", "Turn off auto-unload"]
    buttons = banner_buttons(banner)
    assert "Free caches" not in buttons and "Dismiss" in buttons
    with qtbot.waitSignal(notifier.action_requested) as sig:
        buttons["Turn off auto-unload"].click()
    assert sig.args == ["auto", "off"]
    assert banner.isHidden()  # a click answers the notice
    # The next message drops the notice's buttons.
    banner.show_message("GPU 0 at 95 %", "m", "alert", "0")
    assert banner.action_labels() == []
    assert "Reload now" not in banner_buttons(banner)


def test_a_failed_dbus_call_falls_back_to_the_banner(qtbot):
    parent = QWidget()
    qtbot.addWidget(parent)
    banner = AlertBanner(parent)
    notifier = Notifier(Channel.DBUS, dbus=FakeDbus(fail=True), banner=banner)
    assert notifier.notify_actions("auto", "t", "b", ACTIONS) is Channel.BANNER
    assert banner.action_labels() == ["Reload now", "Turn off auto-unload"]
