"""Where alerts go: the fallback chain tray → D-Bus notifications → in-window banner.

:func:`choose_channel` is the whole decision, from the platform's answers
(:class:`PlatformAnswers`, read from Qt by :func:`probe_platform`):

* Linux with an ``org.freedesktop.Notifications`` server: notifications over
  D-Bus, whether or not there is a tray.  A tray's own messages go to the same
  server on Linux, but without action buttons; direct D-Bus adds the
  "Free caches" button.
* a system tray (Windows, macOS, Linux desktops with a tray but no
  notification server): the tray icon's messages.
* no tray but a notification server (stock GNOME off Linux proper, BSDs): D-Bus.
* nothing: a banner in the window (:mod:`app.ui.shell.banner`), and the Activity log.

:class:`Notifier` sends an :class:`~app.core.policies.alerts.Alert` through the
chosen channel and reports clicks on its actions as signals.
"""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QSystemTrayIcon

from app.core.policies.alerts import Alert
from app.ui.shell.banner import AlertBanner


class Channel(str, enum.Enum):
    TRAY = "tray"
    DBUS = "dbus"
    BANNER = "banner"


@dataclass(frozen=True, slots=True)
class PlatformAnswers:
    tray: bool  # QSystemTrayIcon.isSystemTrayAvailable()
    dbus: bool  # org.freedesktop.Notifications has an owner on the session bus
    linux: bool


def choose_channel(answers: PlatformAnswers) -> Channel:
    if answers.dbus and (answers.linux or not answers.tray):
        return Channel.DBUS
    if answers.tray:
        return Channel.TRAY
    return Channel.BANNER


def probe_platform(dbus: Any) -> PlatformAnswers:
    """Ask Qt (and the session bus, briefly) what this desktop offers."""
    tray = bool(QSystemTrayIcon.isSystemTrayAvailable())
    has_dbus = False
    if dbus is not None:
        try:
            has_dbus = bool(dbus.available())
        except Exception:
            has_dbus = False
    return PlatformAnswers(tray=tray, dbus=has_dbus, linux=sys.platform.startswith("linux"))


FREE_ACTION = "free"
OPEN_REPORT_ACTION = "open-report"
SHOW_ACTION = "default"  # the spec's name for a click on the notification itself


def alert_key(kind: str, display_id: str | None, pid: int | None, host: str) -> str:
    """What makes an alert the same alert: a repeat replaces its notification.
    Pids are per host, so the host is part of it."""
    return f"{kind}:{display_id}:{host}:{pid}"


class Notifier(QObject):
    """Sends alerts through one channel; the others stay unused until :meth:`set_channel`."""

    free_requested = Signal(str)  # display id ("" = every GPU)
    show_requested = Signal()
    action_requested = Signal(str, str)  # a notice's key, the key of its action clicked
    report_requested = Signal(str)  # an OOM report's id: its "Open report" was clicked

    def __init__(self, channel: Channel, tray: Any = None, dbus: Any = None,
                 banner: AlertBanner | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.channel = channel
        self.tray = tray
        self.dbus = dbus
        self.banner = banner
        self.sent: list[tuple[Channel, Alert]] = []  # newest last, bounded
        self._ids: dict[str, int] = {}  # alert key -> server id, so a repeat replaces it
        self._actions: dict[int, str] = {}  # server id -> display id its Free button frees
        self._notices: dict[int, str] = {}  # server id -> key of a notify_actions notice
        self._reports: dict[int, str] = {}  # server id -> the OOM report it opens
        self._tray_report: str | None = None  # the report the last tray message tells of
        if dbus is not None and hasattr(dbus, "action_invoked"):
            dbus.action_invoked.connect(self._on_dbus_action)
        if banner is not None:
            banner.free_requested.connect(self.free_requested)
        if tray is not None and hasattr(tray, "icon"):
            tray.icon.messageClicked.connect(self.show_requested)

    def set_channel(self, channel: Channel) -> None:
        self.channel = channel

    def notify(self, alert: Alert, report_id: str | None = None) -> Channel:
        """Show ``alert``; returns the channel that took it (a failed D-Bus call falls
        back to the tray, then the banner).  ``report_id``: the OOM report it tells
        of, offered as "Open report" (a click on a tray message opens it)."""
        channel = self.channel
        if channel is Channel.DBUS and not self._send_dbus(alert, report_id):
            channel = Channel.TRAY if self._tray_visible() else Channel.BANNER
        if channel is Channel.TRAY:
            if self._tray_visible():
                self._tray_report = report_id
                self.tray.message(alert.title, alert.message,
                                  critical=alert.kind != "memory" or (alert.level or 0) >= 0.95)
            else:
                channel = Channel.BANNER
        if channel is Channel.BANNER and self.banner is not None:
            free = alert.display_id if alert.freeable else None
            kind = "warning" if alert.kind == "full_soon" else "alert"
            # A banner stays until dismissed: say when it was true.
            title = f"{alert.title} (at {time.strftime('%H:%M')})"
            if report_id is not None:
                self.banner.show_actions(title, alert.message, [(
                    "Open report", partial(self.report_requested.emit, report_id))],
                    kind, alert=alert)
            else:
                self.banner.show_message(title, alert.message, kind, free, alert=alert)
        self.sent.append((channel, alert))
        del self.sent[:-50]
        return channel

    def _tray_visible(self) -> bool:
        return self.tray is not None and self.tray.icon.isVisible()

    def tray_clicked(self) -> None:
        """A click on the tray's last message: its OOM report, if it told of one."""
        if self._tray_report is not None:
            self.report_requested.emit(self._tray_report)

    def retract(self, kind: str, display_id: str | None, pid: int | None = None,
                host: str = "") -> None:
        """What an alert of ``kind`` said no longer holds: its notification is
        closed and its banner hidden."""
        nid = self._ids.pop(alert_key(kind, display_id, pid, host), 0)
        if nid and self.dbus is not None and hasattr(self.dbus, "close"):
            try:
                self.dbus.close(nid)
            except Exception:
                pass
        shown = self.banner.alert if self.banner is not None else None
        if shown is not None and (shown.kind, shown.display_id, shown.pid, shown.host) == (
                kind, display_id, pid, host) and self.banner is not None:
            self.banner.retract()

    def _send_dbus(self, alert: Alert, report_id: str | None = None) -> bool:
        if self.dbus is None:
            return False
        actions: list[tuple[str, str]] = [(SHOW_ACTION, "Show VRAM Steward")]
        if alert.freeable and alert.display_id is not None:
            actions.insert(0, (FREE_ACTION, "Free caches"))
        if report_id is not None:
            actions.insert(0, (OPEN_REPORT_ACTION, "Open report"))
        key = alert_key(alert.kind, alert.display_id, alert.pid, alert.host)
        try:
            nid = self.dbus.notify(
                alert.title, alert.message, actions=actions,
                urgency=2 if alert.kind == "oom" else 1,
                replaces_id=self._ids.get(key, 0))
        except Exception:
            return False
        if not nid:
            return False
        self._ids[key] = nid
        if alert.freeable and alert.display_id is not None:
            self._actions[nid] = alert.display_id
        if report_id is not None:
            self._reports[nid] = report_id
            if len(self._reports) > 64:
                self._reports.pop(next(iter(self._reports)))
        return True

    def notify_actions(self, key: str, title: str, body: str,
                       actions: Sequence[tuple[str, str]]) -> Channel:
        """A notice with buttons ((action key, label)); a click emits
        ``action_requested(key, action key)``.  D-Bus notifications carry the
        buttons; a tray message cannot, so there (and when D-Bus fails) the
        window's banner shows the notice with them."""
        if self.channel is Channel.DBUS and self.dbus is not None:
            try:
                nid = self.dbus.notify(title, body,
                                       actions=[*actions, (SHOW_ACTION, "Show VRAM Steward")],
                                       urgency=1, replaces_id=self._ids.get(key, 0))
            except Exception:
                nid = 0
            if nid:
                self._ids[key] = nid
                self._notices[nid] = key
                return Channel.DBUS
        if self.banner is not None:
            self.banner.show_actions(
                f"{title} (at {time.strftime('%H:%M')})", body,
                [(label, partial(self.action_requested.emit, key, action))
                 for action, label in actions])
        return Channel.BANNER

    def _on_dbus_action(self, nid: int, key: str) -> None:
        if key == OPEN_REPORT_ACTION and nid in self._reports:
            self.report_requested.emit(self._reports[nid])
        elif nid in self._notices and key != SHOW_ACTION:
            self.action_requested.emit(self._notices[nid], key)
        elif key == FREE_ACTION and nid in self._actions:
            self.free_requested.emit(self._actions[nid])
        elif key == SHOW_ACTION:
            self.show_requested.emit()


__all__ = ["AlertBanner", "Channel", "Notifier", "PlatformAnswers", "choose_channel",
           "probe_platform", "FREE_ACTION", "OPEN_REPORT_ACTION", "SHOW_ACTION"]
