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
* nothing: a banner at the top of the window (and the Activity log).

:class:`Notifier` sends an :class:`~app.core.policies.alerts.Alert` through the
chosen channel and reports clicks on its actions as signals.
"""

from __future__ import annotations

import enum
import sys
import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSystemTrayIcon,
    QVBoxLayout,
    QWidget,
)

from app.core.policies.alerts import Alert


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
SHOW_ACTION = "default"  # the spec's name for a click on the notification itself


class AlertBanner(QWidget):
    """A strip at the top of the window: the last resort for alerts, and one-time hints.

    Hidden, it takes no space (its margins are inside it)."""

    free_requested = Signal(str)  # display id ("" = every GPU)
    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(16, 10, 16, 0)
        self.frame = QFrame(self)
        self.frame.setObjectName("alertBanner")
        self.frame.setFrameShape(QFrame.Shape.StyledPanel)
        outer.addWidget(self.frame)
        lay = QHBoxLayout(self.frame)
        lay.setContentsMargins(12, 8, 8, 8)
        text = QVBoxLayout()
        text.setSpacing(2)
        self.title = QLabel("", self.frame)
        self.title.setObjectName("bannerTitle")
        f = self.title.font()
        f.setBold(True)
        self.title.setFont(f)
        self.body = QLabel("", self.frame)
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        text.addWidget(self.title)
        text.addWidget(self.body)
        lay.addLayout(text, 1)
        self.free_button = QPushButton("Free caches", self.frame)
        self.free_button.clicked.connect(lambda: self.free_requested.emit(self._display_id))
        self.close_button = QPushButton("Dismiss", self.frame)
        self.close_button.clicked.connect(self._dismiss)
        lay.addWidget(self.free_button, 0, Qt.AlignmentFlag.AlignVCenter)
        lay.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignVCenter)
        self._display_id = ""
        self.kind = ""
        self.hide()

    def show_message(self, title: str, body: str, kind: str = "alert",
                     free_display_id: str | None = None) -> None:
        """``free_display_id`` not None: offer "Free caches" for that GPU ("" = all)."""
        self.kind = kind
        self.title.setText(title)
        self.body.setText(body)
        self._display_id = free_display_id or ""
        self.free_button.setVisible(free_display_id is not None)
        critical = kind == "alert"
        self.frame.setStyleSheet(
            "QFrame#alertBanner { border-radius: 6px; border: 1px solid %s; background: %s; }"
            % (("#D55E00", "rgba(213, 94, 0, 40)") if critical
               else ("#2F7FD0", "rgba(47, 127, 208, 30)")))
        self.show()

    def _dismiss(self) -> None:
        self.hide()
        self.dismissed.emit()


class Notifier(QObject):
    """Sends alerts through one channel; the others stay unused until :meth:`set_channel`."""

    free_requested = Signal(str)  # display id ("" = every GPU)
    show_requested = Signal()

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
        if dbus is not None and hasattr(dbus, "action_invoked"):
            dbus.action_invoked.connect(self._on_dbus_action)
        if banner is not None:
            banner.free_requested.connect(self.free_requested)
        if tray is not None and hasattr(tray, "icon"):
            tray.icon.messageClicked.connect(self.show_requested)

    def set_channel(self, channel: Channel) -> None:
        self.channel = channel

    def notify(self, alert: Alert) -> Channel:
        """Show ``alert``; returns the channel that took it (a failed D-Bus call falls
        back to the tray, then the banner)."""
        channel = self.channel
        if channel is Channel.DBUS and not self._send_dbus(alert):
            channel = Channel.TRAY if self._tray_visible() else Channel.BANNER
        if channel is Channel.TRAY:
            if self._tray_visible():
                self.tray.message(alert.title, alert.message,
                                  critical=alert.kind != "memory" or (alert.level or 0) >= 0.95)
            else:
                channel = Channel.BANNER
        if channel is Channel.BANNER and self.banner is not None:
            free = alert.display_id if alert.freeable else None
            # A banner stays until dismissed: say when it was true.
            self.banner.show_message(f"{alert.title} (at {time.strftime('%H:%M')})",
                                     alert.message, "alert", free)
        self.sent.append((channel, alert))
        del self.sent[:-50]
        return channel

    def _tray_visible(self) -> bool:
        return self.tray is not None and self.tray.icon.isVisible()

    def _send_dbus(self, alert: Alert) -> bool:
        if self.dbus is None:
            return False
        actions: list[tuple[str, str]] = [(SHOW_ACTION, "Show VRAM Steward")]
        if alert.freeable and alert.display_id is not None:
            actions.insert(0, (FREE_ACTION, "Free caches"))
        key = f"{alert.kind}:{alert.display_id}:{alert.pid}"
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
        return True

    def _on_dbus_action(self, nid: int, key: str) -> None:
        if key == FREE_ACTION and nid in self._actions:
            self.free_requested.emit(self._actions[nid])
        elif key == SHOW_ACTION:
            self.show_requested.emit()


__all__ = ["AlertBanner", "Channel", "Notifier", "PlatformAnswers", "choose_channel",
           "probe_platform", "FREE_ACTION", "SHOW_ACTION"]
