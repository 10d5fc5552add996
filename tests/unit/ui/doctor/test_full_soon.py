"""The "full in ~N min" warning: a notification or banner like the memory alert,
shown as a warning, and taken back once the trend no longer says so."""

from __future__ import annotations

from app.core.policies.alerts import Alert
from app.core.units import GiB
from app.ui.shell.notifier import Channel, PlatformAnswers
from tests.unit.ui.doctor.samples import feed, full_soon, later, snapshot
from tests.unit.ui.shell.test_desktop import FakeDbus

NO_TRAY_GNOME = PlatformAnswers(tray=False, dbus=True, linux=True)
NOTHING = PlatformAnswers(tray=False, dbus=False, linux=True)


class ClosingDbus(FakeDbus):
    def __init__(self):
        super().__init__()
        self.closed = []
        self.urgencies = []

    def notify(self, summary, body, actions=(), **kw):
        self.urgencies.append(kw.get("urgency"))
        return super().notify(summary, body, actions, **kw)

    def close(self, nid):
        self.closed.append(nid)
        return True


def full_soon_alert():
    return Alert("full_soon", "0", "GPU 0 will be full in ~9 min",
                 "Test GPU 0: 21.0 GiB of 24.0 GiB used, rising 5.6 MiB/s.",
                 used=21 * GiB, total=24 * GiB, freeable=2 * GiB)


def once(alert):
    sent = []

    def evaluate(_snap):
        if sent:
            return []
        sent.append(alert)
        return [alert]
    return evaluate


def test_full_soon_is_a_warning_banner_taken_back_when_it_no_longer_holds(shell):
    shell.start(answers=NOTHING)
    alert = full_soon_alert()
    shell.policy.evaluate = once(alert)
    s = snapshot([full_soon()])
    feed(shell, s)
    banner = shell.window.alert_banner
    assert not banner.isHidden() and banner.alert is alert
    assert banner.kind == "warning"  # the warning colour, not the critical one
    assert banner.title.text().startswith("GPU 0 will be full in ~9 min (at ")
    assert not banner.free_button.isHidden()  # it says what freeing would give
    row = shell.window.activity.rows()[0]
    assert row[3] == "GPU 0 will be full in ~9 min"
    # Still predicted: it stays.
    s = later(s)
    feed(shell, s)
    assert not banner.isHidden()
    # The trend no longer says so: taken back.
    feed(shell, later(s, diagnoses=()))
    assert banner.isHidden()


def test_full_soon_notification_is_normal_urgency_and_closed_when_cleared(shell):
    shell.dbus = dbus = ClosingDbus()
    shell.notifier.dbus = dbus
    shell.start(answers=NO_TRAY_GNOME)
    shell.policy.evaluate = once(full_soon_alert())
    s = snapshot([full_soon()])
    feed(shell, s)
    assert shell.notifier.sent[-1][0] is Channel.DBUS
    summary, _body, actions = dbus.calls[-1]
    assert summary == "GPU 0 will be full in ~9 min"
    assert dbus.urgencies[-1] == 1
    assert ("free", "Free caches") in actions
    feed(shell, later(s, diagnoses=()))
    assert dbus.closed == [len(dbus.calls)]
    feed(shell, later(s, dt=2, diagnoses=()))
    assert dbus.closed == [len(dbus.calls)]  # once
