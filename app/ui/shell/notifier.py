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
* nothing: a banner over the top of the window (and the Activity log).

:class:`Notifier` sends an :class:`~app.core.policies.alerts.Alert` through the
chosen channel and reports clicks on its actions as signals.
"""

from __future__ import annotations

import enum
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QColor, QPalette
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
from app.ui.style import palette as pal
from app.ui.style.text import plain_label


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


class AlertBanner(QWidget):
    """A panel over the bottom of its parent: the last resort for alerts, and one-time hints.

    An overlay, in no layout: it follows its parent's width (an event filter on the
    parent's resizes), sits above its siblings and below the banners made before it,
    so showing or hiding it moves nothing under it.  :meth:`retract` hides it when
    what it says no longer holds; Dismiss hides it at once."""

    free_requested = Signal(str)  # display id ("" = every GPU)
    dismissed = Signal()

    #: Gap to the parent's top and sides, and between two banners.
    MARGIN = 10
    #: The widest a banner gets (centred in a wider window).
    MAX_WIDTH = 860

    _made = itertools.count()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._order = next(self._made)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.frame = QFrame(self)
        self.frame.setObjectName("alertBanner")
        self.frame.setFrameShape(QFrame.Shape.StyledPanel)
        outer.addWidget(self.frame)
        lay = QHBoxLayout(self.frame)
        lay.setContentsMargins(12, 8, 8, 8)
        text = QVBoxLayout()
        text.setSpacing(2)
        # An alert names hosts, GPUs, processes and models.
        self.title = plain_label(QLabel("", self.frame))
        self.title.setObjectName("bannerTitle")
        f = self.title.font()
        f.setBold(True)
        self.title.setFont(f)
        self.body = plain_label(QLabel("", self.frame))
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
        #: The alert shown (None: a hint, or nothing).
        self.alert: Alert | None = None
        self._action_buttons: list[QPushButton] = []  # show_actions' own, until the next
        self.hide()
        if parent is not None:
            parent.installEventFilter(self)

    def show_message(self, title: str, body: str, kind: str = "alert",
                     free_display_id: str | None = None, alert: Alert | None = None) -> None:
        """``free_display_id`` not None: offer "Free caches" for that GPU ("" = all);
        ``alert``: the alert this message tells of (see :attr:`alert`)."""
        self.kind = kind
        self.alert = alert
        self._drop_actions()
        self.title.setText(title)
        self.body.setText(body)
        self._display_id = free_display_id or ""
        self.free_button.setVisible(free_display_id is not None)
        self._style()
        self.show()
        self._place_all()

    def retract(self) -> None:
        """Hide: what the banner says no longer holds."""
        self.alert = None
        self.hide()

    def _dismiss(self) -> None:
        self.retract()
        self.dismissed.emit()

    def show_actions(self, title: str, body: str,
                     actions: Sequence[tuple[str, Callable[[], None]]],
                     kind: str = "hint", alert: Alert | None = None) -> None:
        """A message with buttons of its own, before Dismiss: (label, what a click
        does); a click also hides the banner.  The next message drops them."""
        self.show_message(title, body, kind, alert=alert)
        lay = self.frame.layout()
        for label, run in actions:
            button = QPushButton(label, self.frame)
            button.clicked.connect(lambda *_args, run=run: run())
            button.clicked.connect(self._dismiss)
            lay.insertWidget(lay.indexOf(self.close_button), button, 0,
                             Qt.AlignmentFlag.AlignVCenter)
            button.show()  # now, not on the layout's queued show: its width counts below
            self._action_buttons.append(button)
        self._place_all()

    def action_labels(self) -> list[str]:
        """The labels of :meth:`show_actions`' buttons shown now."""
        return [b.text() for b in self._action_buttons]

    def _drop_actions(self) -> None:
        for button in self._action_buttons:
            button.hide()
            button.deleteLater()
        self._action_buttons.clear()

    def _style(self) -> None:
        # Opaque: the content under the banner must not show through its text.
        level = {"alert": pal.LEVEL_CRITICAL, "warning": pal.LEVEL_WARNING}.get(
            self.kind, pal.LEVEL_NORMAL)
        edge = QColor(pal.LEVEL_COLORS[level])
        base = self.palette().color(QPalette.ColorRole.Window)
        fill = pal.blend(base, edge, 0.16 if self.kind in ("alert", "warning") else 0.12)
        self.frame.setStyleSheet(
            "QFrame#alertBanner { border-radius: 6px; border: 1px solid %s; background: %s; }"
            % (pal.hex_color(edge), pal.hex_color(fill)))

    # -- placement --------------------------------------------------------------------------
    def _siblings(self) -> list[AlertBanner]:
        parent = self.parentWidget()
        if parent is None:
            return [self]
        return sorted((w for w in parent.children() if isinstance(w, AlertBanner)),
                      key=lambda b: b._order)

    def _place_all(self) -> None:
        # Stacked up from the bottom edge: the GPU headers the alert is about stay in
        # sight; the oldest banner sits lowest.
        parent = self.parentWidget()
        y = (parent.height() if parent is not None else 0) - self.MARGIN
        for banner in self._siblings():
            if not banner.isHidden():
                y = banner._place(y) - self.MARGIN

    def _place(self, bottom: int) -> int:
        """Put the banner over its parent, ending at ``bottom``, above its siblings;
        returns its top."""
        parent = self.parentWidget()
        if parent is None:
            return bottom - self.height()
        width = max(0, min(self.MAX_WIDTH, parent.width() - 2 * self.MARGIN))
        height = self._height_for(width)
        self.setGeometry((parent.width() - width) // 2, bottom - height, width, height)
        self.raise_()
        return bottom - height

    def _height_for(self, width: int) -> int:
        """The height that shows the whole text at ``width``: the buttons take their
        room first, the wrapped body gets the rest (Qt's own height-for-width of a
        label beside buttons comes out a line short)."""
        lay = self.frame.layout()
        m = lay.contentsMargins()
        buttons = [w for w in self.frame.findChildren(QPushButton) if not w.isHidden()]
        used = sum(b.sizeHint().width() + lay.spacing() for b in buttons)
        text_w = max(50, width - m.left() - m.right() - used)
        text_h = self.title.sizeHint().height()
        if self.body.text():
            text_h += 2 + self.body.heightForWidth(text_w)
        tallest = max((b.sizeHint().height() for b in buttons), default=0)
        return max(text_h, tallest) + m.top() + m.bottom() + 2

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        if obj is self.parentWidget() and event.type() == QEvent.Type.Resize \
                and not self.isHidden():
            self._place_all()
        return False

    def event(self, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.LayoutRequest, QEvent.Type.Show, QEvent.Type.Hide):
            self._place_all()  # its height changed, or the banners under it move
        elif kind == QEvent.Type.PaletteChange and self.kind:
            self._style()
        return super().event(event)


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
