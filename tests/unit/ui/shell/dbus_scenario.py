"""DbusNotifier against a real bus, run as a script; prints one ``RESULT {json}`` line.

``session``: run inside ``dbus-run-session`` (a private session bus); starts
fake notification servers (tests/fakes/notification_listener.py, in child
processes) and drives the notifier through a full round trip.
``no-bus``: run with DBUS_SESSION_BUS_ADDRESS pointing nowhere.

The pytest side (test_dbus_notify.py) asserts on the JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QEventLoop  # noqa: E402

from app.ui.shell.dbus_notify import DbusNotifier  # noqa: E402


def wait_until(app: QCoreApplication, done: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Run the event loop until ``done()`` (bus signals arrive through it) or time runs out."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.002)
    return True


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    value = fn()
    return value, time.monotonic() - t0


def naive_notify() -> list[Any]:
    """Notify with untyped Python arguments, straight through QDBusMessage."""
    from PySide6.QtDBus import QDBus, QDBusConnection, QDBusMessage

    msg = QDBusMessage.createMethodCall("org.freedesktop.Notifications",
                                        "/org/freedesktop/Notifications",
                                        "org.freedesktop.Notifications", "Notify")
    msg.setArguments(["naive", 0, "", "summary", "body", [], {"urgency": 2}, -1])
    reply = QDBusConnection.sessionBus().call(msg, QDBus.CallMode.Block, 2000)
    return [reply.type().name, reply.errorName()]


def session(app: QCoreApplication) -> dict[str, Any]:
    from tests.fakes.notification_listener import ListenerProcess

    res: dict[str, Any] = {}
    notifier = DbusNotifier(timeout_ms=2000)
    actions: list[list[Any]] = []
    closed: list[list[int]] = []
    notifier.action_invoked.connect(lambda nid, key: actions.append([nid, key]))
    notifier.closed.connect(lambda nid, reason: closed.append([nid, reason]))

    res["available_before"], res["available_before_s"] = timed(notifier.available)
    res["notify_without_server"] = notifier.notify("nobody", "listens")

    server = ListenerProcess(["actions", "body"]).start()
    try:
        res["available_after"] = notifier.available()
        res["capabilities"] = sorted(notifier.capabilities())

        nid = notifier.notify("GPU 0 is 95% full", "python train.py holds 20 GiB",
                              actions=[("free", "Free caches")], urgency=2)
        res["id"] = nid
        res["notify"] = server.event("notify")
        # A button press on someone else's notification must not reach us.
        server.command("action", id=(nid or 0) + 1000, key="free")
        server.command("action", id=nid, key="free")
        res["action_wait_ok"] = wait_until(app, lambda: bool(actions))
        res["actions"] = actions[:]

        big = 4_000_000_000  # above int32: must travel as uint32 both ways
        res["replaced_id"] = notifier.notify("again", "replaced", replaces_id=big, urgency=0)
        res["replace_notify"] = server.event("notify")

        # What PySide sends from plain Python values, to show the server really checks.
        res["naive_reply"] = naive_notify()
        res["naive_notify"] = server.event("notify")

        res["close_ok"] = notifier.close(nid)
        res["close_event"] = server.event("close")
        res["closed_wait_ok"] = wait_until(app, lambda: bool(closed))
        res["closed"] = closed[:]
    finally:
        res["server_calls"] = server.stop()

    # A server without buttons and with markup: the same notifier must notice.
    plain = ListenerProcess(["body", "body-markup"]).start()
    try:
        res["caps_refresh_ok"] = wait_until(
            app, lambda: "body-markup" in notifier.capabilities())
        res["capabilities_plain"] = sorted(notifier.capabilities())
        res["plain_id"] = notifier.notify("Low memory", "a < b & c",
                                          actions=[("free", "Free caches")])
        res["plain_notify"] = plain.event("notify")
    finally:
        res["plain_calls"] = plain.stop()
    res["available_after_stop"] = notifier.available()
    return res


def no_bus(app: QCoreApplication) -> dict[str, Any]:
    res: dict[str, Any] = {}
    notifier, res["construct_s"] = timed(lambda: DbusNotifier(timeout_ms=500))
    res["available"], res["available_s"] = timed(notifier.available)
    res["capabilities"] = sorted(notifier.capabilities())
    res["notify"], res["notify_s"] = timed(
        lambda: notifier.notify("s", "b", actions=[("free", "Free caches")]))
    res["close"] = notifier.close(1)
    return res


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "session"
    app = QCoreApplication.instance() or QCoreApplication([])
    res = {"session": session, "no-bus": no_bus}[mode](app)
    print("RESULT " + json.dumps(res, default=repr), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
