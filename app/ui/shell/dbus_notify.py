"""Desktop notifications through ``org.freedesktop.Notifications`` with QtDBus.

Used where there is no system tray (stock GNOME), and on Linux generally
because notification servers offer action buttons.

Servers (GNOME Shell through GDBus, dunst, KDE, mako) reject a ``Notify``
whose signature is not exactly ``susssasa{sv}i``, and dunst and mako read the
urgency hint only as a byte.  PySide turns a Python int into an int32 (or a
uint16 through ``QDBusArgument <<``), so neither the ``u`` of ``replaces_id``
nor a ``y`` inside a variant can be written from Python values.  Two QtDBus
mechanisms give exact types:

* The server's methods are called through a QDBusInterface whose meta-object
  comes from the introspection XML below.  QtDBus marshals each argument from
  the declared C++ type, so ``Q_ARG("uint", n)`` goes out as ``u`` and
  ``Q_ARG("QStringList", [])`` as ``as``.  QtDBus caches meta-objects by
  interface name per connection, so the XML is served once from a local
  object and the real server is never introspected (a hung server cannot
  stall start-up).
* The urgency byte is a read-only QDBusArgument standing on a single ``y``.
  A byte-array list (``aay``, writable from Python) is echoed through a local
  ``QVariant`` property, which QtDBus marshals and demarshals; stepping into
  both arrays leaves the argument on the byte, and QtDBus copies it verbatim
  as the hint's variant value.

Both local objects are registered only while this is set up, once per
connection, and unregistered straight after.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from PySide6.QtCore import (
    Q_ARG,
    Q_RETURN_ARG,
    SLOT,
    ClassInfo,
    Property,
    QByteArray,
    QMetaObject,
    QMetaType,
    QObject,
    Qt,
    Signal,
    Slot,
)
from PySide6.QtDBus import (
    QDBus,
    QDBusArgument,
    QDBusConnection,
    QDBusInterface,
    QDBusMessage,
    QDBusServiceWatcher,
    QDBusVariant,
    QDBusVirtualObject,
)

SERVICE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
INTERFACE = "org.freedesktop.Notifications"
NOTIFY_SIGNATURE = "susssasa{sv}i"
DESKTOP_ENTRY = "vram-steward"
APP_NAME = "VRAM Steward"

URGENCY_LOW, URGENCY_NORMAL, URGENCY_CRITICAL = 0, 1, 2
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1
_MAX_TRACKED_IDS = 256

_BUS = "org.freedesktop.DBus"
_BUS_PATH = "/org/freedesktop/DBus"
_HELPER_PATH = "/org/vramsteward/notify"
_SCHEMA_PATH = _HELPER_PATH + "/schema"
_ECHO_PATH = _HELPER_PATH + "/echo"
_ECHO_INTERFACE = "org.vramsteward.NotifyEcho"
_NOTIFY_METHOD = "Notify(QString,uint,QString,QString,QString,QStringList,QVariantMap,int)"

_SCHEMA_XML = """<interface name="org.freedesktop.Notifications">
  <method name="Notify">
    <arg name="app_name" type="s" direction="in"/>
    <arg name="replaces_id" type="u" direction="in"/>
    <arg name="app_icon" type="s" direction="in"/>
    <arg name="summary" type="s" direction="in"/>
    <arg name="body" type="s" direction="in"/>
    <arg name="actions" type="as" direction="in"/>
    <arg name="hints" type="a{sv}" direction="in"/>
    <arg name="expire_timeout" type="i" direction="in"/>
    <arg name="id" type="u" direction="out"/>
    <annotation name="org.qtproject.QtDBus.QtTypeName.In6" value="QVariantMap"/>
  </method>
  <method name="CloseNotification">
    <arg name="id" type="u" direction="in"/>
  </method>
  <method name="GetCapabilities">
    <arg name="capabilities" type="as" direction="out"/>
  </method>
  <signal name="ActionInvoked">
    <arg name="id" type="u"/>
    <arg name="action_key" type="s"/>
  </signal>
  <signal name="NotificationClosed">
    <arg name="id" type="u"/>
    <arg name="reason" type="u"/>
  </signal>
</interface>
"""


# -- Qt-free helpers ---------------------------------------------------------

def escape_markup(text: str) -> str:
    """Escape text for a server with "body-markup", which parses the body as XML-ish markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def body_text(text: str, capabilities: Iterable[str]) -> str:
    """The body as sent: plain text, escaped only where the server would read markup."""
    return escape_markup(text) if "body-markup" in capabilities else text


def action_list(actions: Iterable[tuple[str, str]], capabilities: Iterable[str]) -> list[str]:
    """``[(key, label), ...]`` as the spec's flat ``[key, label, ...]``; empty without "actions"."""
    if "actions" not in capabilities:
        return []
    flat: list[str] = []
    for key, label in actions:
        flat += [str(key), str(label)]
    return flat


def clamp_urgency(urgency: int) -> int:
    """The spec knows low (0), normal (1) and critical (2) only."""
    return min(max(int(urgency), URGENCY_LOW), URGENCY_CRITICAL)


def clamp_timeout(timeout_ms: int) -> int:
    """-1 (server default), 0 (never expire) or a positive int32."""
    return min(max(int(timeout_ms), -1), _INT32_MAX)


# -- exact D-Bus types from PySide -------------------------------------------

class _Schema(QDBusVirtualObject):
    """Serves the Notifications introspection XML from this process."""

    def introspect(self, path: str) -> str:
        return _SCHEMA_XML

    def handleMessage(self, message: QDBusMessage, connection: QDBusConnection) -> bool:  # noqa: N802
        return False


@ClassInfo({"D-Bus Interface": _ECHO_INTERFACE})
class _Echo(QObject):
    """A property that QtDBus marshals and demarshals, turning a written argument readable."""

    def __init__(self) -> None:
        super().__init__()
        self.held: object = None

    def _read(self) -> object:
        return self.held

    value = Property("QVariant", _read)


class _Wire:
    """What one connection needs to put exact types on the wire (set up once)."""

    def __init__(self, bus: QDBusConnection, timeout_ms: int) -> None:
        self.primed = self._prime(bus)
        self.urgency: dict[int, QDBusArgument] = {}
        echo = _Echo()
        if bus.registerObject(_ECHO_PATH, echo, QDBusConnection.RegisterOption.ExportAllProperties):
            try:
                for level in (URGENCY_LOW, URGENCY_NORMAL, URGENCY_CRITICAL):
                    arg = _byte_argument(bus, echo, level, timeout_ms)
                    if arg is not None:
                        self.urgency[level] = arg
            finally:
                bus.unregisterObject(_ECHO_PATH)

    @staticmethod
    def _prime(bus: QDBusConnection) -> bool:
        """Cache the typed meta-object for INTERFACE on this connection."""
        schema = _Schema()
        if not bus.registerVirtualObject(_SCHEMA_PATH, schema):
            return False
        try:
            probe = QDBusInterface(bus.baseService(), _SCHEMA_PATH, INTERFACE, bus)
            return probe.metaObject().indexOfMethod(_NOTIFY_METHOD) >= 0
        finally:
            bus.unregisterObject(_SCHEMA_PATH)


def _byte_argument(bus: QDBusConnection, echo: _Echo, value: int,
                   timeout_ms: int) -> QDBusArgument | None:
    """A read-only QDBusArgument standing on the byte ``value`` (see the module docstring)."""
    written = QDBusArgument()
    written.beginArray(QMetaType(QMetaType.Type.QByteArray))
    written.appendVariant(QByteArray(bytes([value])))  # ``<<`` would pick a list overload
    written.endArray()
    echo.held = written
    msg = QDBusMessage.createMethodCall(bus.baseService(), _ECHO_PATH,
                                        "org.freedesktop.DBus.Properties", "Get")
    msg.setArguments([_ECHO_INTERFACE, "value"])
    reply = bus.call(msg, QDBus.CallMode.Block, timeout_ms)
    echo.held = None
    args = reply.arguments()
    if reply.type() != QDBusMessage.MessageType.ReplyMessage or not args:
        return None
    read = args[0].variant() if isinstance(args[0], QDBusVariant) else None
    if not isinstance(read, QDBusArgument) or read.currentSignature() != "aay":
        return None
    read.beginArray()
    read.beginArray()
    return read if read.currentSignature() == "y" else None


_wires: dict[str, _Wire] = {}


def _wire_for(bus: QDBusConnection, timeout_ms: int) -> _Wire:
    wire = _wires.get(bus.name())
    if wire is None:
        wire = _wires[bus.name()] = _Wire(bus, timeout_ms)
    return wire


# -- the notifier -------------------------------------------------------------

class DbusNotifier(QObject):
    """Sends notifications and reports their buttons and closing, for ids it sent.

    Calls to the bus and to the notification server block for at most
    ``timeout_ms``; failures read as "not available" / ``None`` / False,
    never as exceptions.  Construction talks only to the bus daemon and to
    this process (one-time set-up per connection, see the module docstring).
    """

    # Ids are uint32 on the wire; "qlonglong" keeps those above 2**31 intact.
    action_invoked = Signal("qlonglong", str)          # notification id, action key
    # id, reason: 1 expired, 2 dismissed, 3 closed
    closed = Signal("qlonglong", "qlonglong")

    def __init__(self, parent: QObject | None = None, *, app_name: str = APP_NAME,
                 timeout_ms: int = 500, bus: QDBusConnection | None = None) -> None:
        super().__init__(parent)
        self._app_name = app_name
        self._timeout_ms = int(timeout_ms)
        self._bus = bus if bus is not None else QDBusConnection.sessionBus()
        self._caps: frozenset[str] | None = None
        self._sent: OrderedDict[int, None] = OrderedDict()
        self._iface: QDBusInterface | None = None
        self._wire: _Wire | None = None
        self._watcher: QDBusServiceWatcher | None = None
        if not self._bus.isConnected():
            return
        self._wire = _wire_for(self._bus, self._timeout_ms)
        if self._wire.primed:
            self._iface = QDBusInterface(SERVICE, PATH, INTERFACE, self._bus, self)
            self._iface.setTimeout(self._timeout_ms)
        self._watcher = QDBusServiceWatcher(SERVICE, self._bus,
                                            QDBusServiceWatcher.WatchModeFlag.WatchForOwnerChange,
                                            self)
        self._watcher.serviceOwnerChanged.connect(self._forget_server)
        for name, slot in (("ActionInvoked", "_on_action_invoked(QDBusMessage)"),
                           ("NotificationClosed", "_on_notification_closed(QDBusMessage)")):
            self._bus.connect(SERVICE, PATH, INTERFACE, name, self, SLOT(slot))

    def available(self) -> bool:
        """A session bus is connected and some process owns the notifications name."""
        if not self._bus.isConnected():
            return False
        msg = QDBusMessage.createMethodCall(_BUS, _BUS_PATH, _BUS, "NameHasOwner")
        msg.setArguments([SERVICE])
        reply = self._bus.call(msg, QDBus.CallMode.Block, self._timeout_ms)
        args = reply.arguments()
        return reply.type() == QDBusMessage.MessageType.ReplyMessage and bool(args and args[0])

    def capabilities(self) -> frozenset[str]:
        """The server's capabilities ("actions", "body-markup", ...); cached until it changes."""
        if self._caps is not None:
            return self._caps
        if not self._bus.isConnected():
            return frozenset()
        msg = QDBusMessage.createMethodCall(SERVICE, PATH, INTERFACE, "GetCapabilities")
        reply = self._bus.call(msg, QDBus.CallMode.Block, self._timeout_ms)
        args = reply.arguments()
        if reply.type() != QDBusMessage.MessageType.ReplyMessage or not args:
            return frozenset()
        self._caps = frozenset(str(c) for c in args[0])
        return self._caps

    def notify(self, summary: str, body: str, actions: Sequence[tuple[str, str]] = (),
               urgency: int = URGENCY_NORMAL, icon: str = DESKTOP_ENTRY, replaces_id: int = 0,
               timeout_ms: int = -1) -> int | None:
        """Show a notification; returns the server's id, or None if it could not be sent.

        Actions are sent only to a server that shows them; the body stays plain
        text (escaped where the server would parse markup).
        """
        if self._iface is None or self._wire is None:
            return None
        caps = self.capabilities()
        hints: dict[str, object] = {"desktop-entry": DESKTOP_ENTRY}
        byte = self._wire.urgency.get(clamp_urgency(urgency))
        if byte is not None:  # a wrongly typed urgency is worse than none
            hints["urgency"] = byte
        replaces = int(replaces_id) if 0 <= int(replaces_id) <= _UINT32_MAX else 0
        try:
            nid = QMetaObject.invokeMethod(
                self._iface, "Notify", Qt.ConnectionType.DirectConnection, Q_RETURN_ARG("uint"),
                Q_ARG("QString", self._app_name), Q_ARG("uint", replaces),
                Q_ARG("QString", icon), Q_ARG("QString", summary),
                Q_ARG("QString", body_text(body, caps)),
                Q_ARG("QStringList", action_list(actions, caps)),
                Q_ARG("QVariantMap", hints), Q_ARG("int", clamp_timeout(timeout_ms)))
        except RuntimeError:
            return None
        if self._iface.lastError().isValid() or not isinstance(nid, int):
            return None
        self._track(nid)
        return nid

    def close(self, notification_id: int) -> bool:
        """Ask the server to withdraw a notification; False if the call failed."""
        if self._iface is None or not 0 <= int(notification_id) <= _UINT32_MAX:
            return False
        try:
            QMetaObject.invokeMethod(self._iface, "CloseNotification",
                                     Qt.ConnectionType.DirectConnection,
                                     Q_ARG("uint", int(notification_id)))
        except RuntimeError:
            return False
        return not self._iface.lastError().isValid()

    # -- bus signals ----------------------------------------------------------

    def _track(self, nid: int) -> None:
        self._sent[nid] = None
        self._sent.move_to_end(nid)
        while len(self._sent) > _MAX_TRACKED_IDS:  # servers need not report every close
            self._sent.popitem(last=False)

    @Slot(str, str, str)
    def _forget_server(self, _name: str, _old: str, _new: str) -> None:
        """A new server may have other capabilities.

        Sent ids are kept: this can arrive after a notification already went
        to the new server, and stale ids only age out of the bounded list.
        """
        self._caps = None

    @Slot(QDBusMessage)
    def _on_action_invoked(self, msg: QDBusMessage) -> None:
        args = msg.arguments()
        if len(args) == 2 and isinstance(args[0], int) and args[0] in self._sent:
            self.action_invoked.emit(args[0], str(args[1]))

    @Slot(QDBusMessage)
    def _on_notification_closed(self, msg: QDBusMessage) -> None:
        args = msg.arguments()
        if len(args) == 2 and isinstance(args[0], int) and args[0] in self._sent:
            del self._sent[args[0]]
            self.closed.emit(args[0], int(args[1]))
