"""A fake StatusNotifierItem host on a real session bus.

Desktops without XEmbed (KDE, GNOME with the AppIndicator extension, most
Wayland panels) show tray icons through ``org.kde.StatusNotifierWatcher``: an
application asks the watcher whether a host is registered, and if so
registers its own ``org.kde.StatusNotifierItem``.  Qt does exactly that, so
owning the watcher name with a host "registered" is what makes
``QSystemTrayIcon.isSystemTrayAvailable()`` true on a bare X server, and the
registered item can then be read back the way a panel reads it: its tooltip,
its icon, and its menu over ``com.canonical.dbusmenu``.

Built on jeepney, independent of QtDBus.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from jeepney import (
    DBusAddress,
    HeaderFields,
    Properties,
    new_error,
    new_method_call,
    new_method_return,
)
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection

from tests.fakes.notification_listener import serve_method_calls

SERVICE = "org.kde.StatusNotifierWatcher"
PATH = "/StatusNotifierWatcher"
ITEM_INTERFACE = "org.kde.StatusNotifierItem"
MENU_INTERFACE = "com.canonical.dbusmenu"
_INTROSPECTION = """<node><interface name="org.kde.StatusNotifierWatcher">
<method name="RegisterStatusNotifierItem"><arg name="service" type="s" direction="in"/></method>
<method name="RegisterStatusNotifierHost"><arg name="service" type="s" direction="in"/></method>
<property name="RegisteredStatusNotifierItems" type="as" access="read"/>
<property name="IsStatusNotifierHostRegistered" type="b" access="read"/>
<property name="ProtocolVersion" type="i" access="read"/>
</interface></node>"""


class StatusNotifierWatcher:
    """Owns the watcher name from a thread; ``items`` lists (bus name, object path)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self._conn: DBusConnection | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._changed = threading.Condition()

    def start(self) -> StatusNotifierWatcher:
        conn = open_dbus_connection("SESSION")
        reply = conn.send_and_get_reply(message_bus.RequestName(SERVICE, 4), timeout=5)
        if reply.body[0] != 1:
            conn.close()
            raise RuntimeError(f"could not own {SERVICE}")
        self._conn = conn
        self._thread = threading.Thread(target=self._serve, name="sni-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def wait_for_item(self, timeout: float) -> tuple[str, str] | None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self.items:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(left)
            return self.items[0]

    def _serve(self) -> None:
        assert self._conn is not None
        serve_method_calls(self._conn, self._stop, self._answer, self._conn.send)

    def _answer(self, msg: Any) -> Any:
        fields = msg.header.fields
        member = fields.get(HeaderFields.member)
        props = {"IsStatusNotifierHostRegistered": ("b", True), "ProtocolVersion": ("i", 0),
                 "RegisteredStatusNotifierItems": ("as", [n for n, _ in self.items])}
        if member == "Introspect":
            return new_method_return(msg, "s", (_INTROSPECTION,))
        if member == "Get" and msg.body[1] in props:
            return new_method_return(msg, "v", (props[msg.body[1]],))
        if member == "GetAll":
            return new_method_return(msg, "a{sv}", (props,))
        if member == "RegisterStatusNotifierItem":
            service = msg.body[0]
            sender = fields.get(HeaderFields.sender)
            # The spec allows a bus name or an object path on the sender's connection.
            item = (sender, service) if service.startswith("/") else (service,
                                                                       "/StatusNotifierItem")
            with self._changed:
                self.items.append(item)
                self._changed.notify_all()
            return new_method_return(msg)
        if member == "RegisterStatusNotifierHost":
            return new_method_return(msg)
        return new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "s", (str(member),))


class PanelView:
    """Reads a registered item the way a panel does, over its own connection."""

    def __init__(self, item: tuple[str, str]) -> None:
        self.bus_name, self.path = item
        self.conn = open_dbus_connection("SESSION")

    def close(self) -> None:
        self.conn.close()

    def prop(self, name: str) -> Any:
        addr = DBusAddress(self.path, bus_name=self.bus_name, interface=ITEM_INTERFACE)
        reply = self.conn.send_and_get_reply(Properties(addr).get(name), timeout=5)
        return reply.body[0][1]

    def menu_labels(self) -> list[tuple[int, str, bool]]:
        """(id, label, enabled) of the menu's top-level entries, as dbusmenu serves them."""
        addr = DBusAddress(self.prop("Menu"), bus_name=self.bus_name, interface=MENU_INTERFACE)

        reply = self.conn.send_and_get_reply(
            new_method_call(addr, "GetLayout", "iias", (0, -1, [])), timeout=5)
        _revision, (_id, _props, children) = reply.body
        out = []
        for _sig, (cid, cprops, _sub) in children:
            label = cprops.get("label", ("s", ""))[1]
            enabled = cprops.get("enabled", ("b", True))[1]
            if cprops.get("type", ("s", ""))[1] != "separator":
                out.append((cid, label, enabled))
        return out

    def click(self, entry_id: int) -> None:

        addr = DBusAddress(self.prop("Menu"), bus_name=self.bus_name, interface=MENU_INTERFACE)
        self.conn.send_and_get_reply(new_method_call(
            addr, "Event", "isvu", (entry_id, "clicked", ("i", 0), 0)), timeout=5)
