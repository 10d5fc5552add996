"""The fallback chain: which channel an alert takes, from the platform's answers."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QSystemTrayIcon

from app.core.policies.alerts import Alert
from app.ui.shell.notifier import (
    AlertBanner,
    Channel,
    Notifier,
    PlatformAnswers,
    choose_channel,
    probe_platform,
)
from app.ui.shell.tray import TrayController

GiB = 1024**3


@pytest.mark.parametrize("tray,dbus,linux,expected", [
    (True, True, True, Channel.DBUS),  # Linux: same server as tray messages, plus actions
    (False, True, True, Channel.DBUS),  # stock GNOME: no tray, notifications over D-Bus
    (True, False, True, Channel.TRAY),  # a tray but no notification server
    (True, False, False, Channel.TRAY),  # Windows / macOS
    (True, True, False, Channel.TRAY),  # elsewhere a tray's own messages come first
    (False, True, False, Channel.DBUS),
    (False, False, True, Channel.BANNER),  # nothing: the in-window banner
    (False, False, False, Channel.BANNER),
])
def test_choose_channel(tray, dbus, linux, expected):
    assert choose_channel(PlatformAnswers(tray=tray, dbus=dbus, linux=linux)) is expected


class FakeDbus(QObject):
    """Stands in for DbusNotifier at the Qt boundary: answers and records."""

    action_invoked = Signal(int, str)

    def __init__(self, available=True, fail=False, raises=False):
        super().__init__()
        self._available = available
        self.fail = fail
        self.raises = raises
        self.calls: list[dict] = []

    def available(self):
        if self.raises:
            raise RuntimeError("bus went away")
        return self._available

    def notify(self, summary, body, actions=(), urgency=1, replaces_id=0, **_kw):
        if self.raises:
            raise RuntimeError("bus went away")
        self.calls.append(dict(summary=summary, body=body, actions=list(actions),
                               urgency=urgency, replaces_id=replaces_id))
        return None if self.fail else 100 + len(self.calls)


@pytest.mark.parametrize("tray_answer", [True, False])
def test_probe_reads_qt_and_the_bus(qapp, monkeypatch, tray_answer):
    monkeypatch.setattr(QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(
        lambda: tray_answer))
    answers = probe_platform(FakeDbus(available=True))
    assert answers.tray is tray_answer and answers.dbus is True
    assert probe_platform(FakeDbus(raises=True)).dbus is False  # a broken bus is no bus
    assert probe_platform(None).dbus is False


def _memory_alert(freeable=2 * GiB) -> Alert:
    return Alert("memory", "0", "GPU 0 at 93 % of its memory",
                 "RTX 4090: 22.3 GiB of 24.0 GiB used.", level=0.93, freeable=freeable)


def test_dbus_alert_carries_free_action_and_reports_its_click(qtbot):
    dbus = FakeDbus()
    n = Notifier(Channel.DBUS, dbus=dbus, banner=AlertBanner())
    assert n.notify(_memory_alert()) is Channel.DBUS
    call = dbus.calls[0]
    assert call["summary"] == "GPU 0 at 93 % of its memory"
    assert ("free", "Free caches") in call["actions"]
    with qtbot.waitSignal(n.free_requested, timeout=1000) as blocker:
        dbus.action_invoked.emit(101, "free")
    assert blocker.args == ["0"]
    with qtbot.waitSignal(n.show_requested, timeout=1000):
        dbus.action_invoked.emit(101, "default")


def test_no_free_action_without_agents_and_repeat_replaces(qapp):
    dbus = FakeDbus()
    n = Notifier(Channel.DBUS, dbus=dbus)
    n.notify(_memory_alert(freeable=None))
    n.notify(_memory_alert(freeable=None))
    assert all(a[0] != "free" for a in dbus.calls[0]["actions"])
    assert dbus.calls[1]["replaces_id"] == 101  # the same GPU's alert replaces the last one
    oom = Alert("oom", "0", "train.py ran out of GPU memory", "...", pid=42, count=1)
    n.notify(oom)
    assert dbus.calls[2]["urgency"] == 2 and dbus.calls[2]["replaces_id"] == 0


def test_action_from_someone_elses_notification_is_ignored(qtbot):
    dbus = FakeDbus()
    n = Notifier(Channel.DBUS, dbus=dbus)
    got = []
    n.free_requested.connect(got.append)
    dbus.action_invoked.emit(999, "free")
    assert got == []


@pytest.mark.parametrize("fake", [FakeDbus(fail=True), FakeDbus(raises=True)])
def test_failed_dbus_falls_back_to_the_banner(qtbot, fake):
    banner = AlertBanner()
    qtbot.addWidget(banner)
    n = Notifier(Channel.DBUS, dbus=fake, banner=banner)
    assert n.notify(_memory_alert()) is Channel.BANNER
    assert not banner.isHidden()
    assert banner.title.text().startswith("GPU 0 at 93 % of its memory (at ")
    with qtbot.waitSignal(n.free_requested, timeout=1000) as blocker:
        banner.free_button.click()
    assert blocker.args == ["0"]


def test_tray_channel_uses_tray_messages(qapp, monkeypatch):
    tray = TrayController()
    tray.show()
    shown = []
    monkeypatch.setattr(tray, "message", lambda *a, **k: shown.append((a, k)))
    n = Notifier(Channel.TRAY, tray=tray, banner=AlertBanner())
    assert n.notify(_memory_alert()) is Channel.TRAY
    assert shown[0][0][0] == "GPU 0 at 93 % of its memory"
    tray.hide()  # the tray went away: the banner takes it
    assert n.notify(_memory_alert()) is Channel.BANNER


def test_banner_hides_free_button_without_agents(qtbot):
    banner = AlertBanner()
    qtbot.addWidget(banner)
    Notifier(Channel.BANNER, banner=banner).notify(_memory_alert(freeable=None))
    assert banner.free_button.isHidden()
    banner.close_button.click()
    assert banner.isHidden()



# -- the banner as an overlay --------------------------------------------------------------

@pytest.fixture
def page(qtbot):
    """A window with a button at its bottom, and two banners over it."""
    from PySide6.QtWidgets import QPushButton, QVBoxLayout, QWidget

    parent = QWidget()
    lay = QVBoxLayout(parent)
    lay.setContentsMargins(0, 0, 0, 0)
    button = QPushButton("Under the banner", parent)
    lay.addStretch(1)
    lay.addWidget(button)
    alert, hint = AlertBanner(parent), AlertBanner(parent)
    qtbot.addWidget(parent)
    parent.resize(800, 500)  # narrower than a banner's widest
    parent.show()
    qtbot.waitExposed(parent)
    return parent, button, alert, hint


def test_banner_overlays_the_bottom_without_moving_what_is_under_it(page, qtbot):
    parent, button, alert, _hint = page
    before = button.geometry()
    Notifier(Channel.BANNER, banner=alert).notify(_memory_alert())
    qtbot.wait(10)
    assert alert.isVisible()
    assert button.geometry() == before  # nothing moved
    assert alert.geometry().bottom() + 1 == parent.height() - AlertBanner.MARGIN
    assert alert.height() > 0
    assert alert.geometry().intersects(button.geometry())  # over it, on top
    assert parent.childAt(alert.geometry().center()) is not button
    alert.close_button.click()
    assert button.geometry() == before
    assert parent.childAt(before.center()) is button


def test_banners_follow_the_width_and_stack(page, qtbot):
    parent, _button, alert, hint = page
    hint.show_message("No system tray", "Alerts arrive as a banner.", kind="hint")
    qtbot.wait(10)
    bottom = parent.height() - AlertBanner.MARGIN
    assert hint.geometry().bottom() + 1 == bottom  # alone: at the bottom
    assert hint.width() == parent.width() - 2 * AlertBanner.MARGIN
    alert.show_message("GPU 0 at 93 %", "…", free_display_id="0")
    qtbot.wait(10)
    assert alert.geometry().bottom() + 1 == bottom  # made first: lowest in the stack
    assert hint.geometry().bottom() + 1 == alert.y() - AlertBanner.MARGIN
    parent.resize(2400, 500)
    qtbot.wait(10)
    assert alert.width() == AlertBanner.MAX_WIDTH
    assert alert.geometry().center().x() in range(1199, 1202)  # centred
    alert.retract()
    qtbot.wait(10)
    assert hint.geometry().bottom() + 1 == 500 - AlertBanner.MARGIN  # the one left moves down
