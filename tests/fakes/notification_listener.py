"""A fake ``org.freedesktop.Notifications`` server on a real session bus.

Built on jeepney (pure-Python D-Bus), not QtDBus, so what it records is what
actually went over the wire: the message signature and the decoded body, with
every hint kept as its ``(signature, value)`` pair.  Like GNOME Shell (GDBus),
dunst and KDE, it rejects a ``Notify`` whose signature is not exactly
``susssasa{sv}i`` (``strict=True``), so a mis-marshalled call fails here the
way it would on a desktop.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Self

from jeepney import (
    DBusAddress,
    HeaderFields,
    MessageType,
    new_error,
    new_method_return,
    new_signal,
)
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection

SERVICE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
INTERFACE = "org.freedesktop.Notifications"
NOTIFY_SIGNATURE = "susssasa{sv}i"

_REQUEST_NAME_DO_NOT_QUEUE = 4
_PRIMARY_OWNER = 1
_EMITTER = DBusAddress(PATH, interface=INTERFACE)


def serve_method_calls(conn: DBusConnection, stop: threading.Event,
                       answer: Callable[[Any], Any], send: Callable[[Any], None]) -> None:
    """Answer every method call on ``conn`` with ``answer(msg)`` until ``stop`` is set
    or the connection drops (what each fake D-Bus service runs on its thread)."""
    while not stop.is_set():
        try:
            msg = conn.receive(timeout=0.05)
        except TimeoutError:
            continue
        except OSError:
            return
        if msg.header.message_type is MessageType.method_call:
            send(answer(msg))


class NotificationListener:
    """Owns the notifications name and answers the spec's methods from a thread.

    ``notifications`` holds one dict per ``Notify`` received (the rejected
    ones too, with ``accepted`` False); ``calls`` lists every method name.
    ``on_notify`` / ``on_close``, if set, are called from the serving thread
    with each Notify record / each id passed to CloseNotification.
    """

    def __init__(self, capabilities: Iterable[str] = ("actions", "body"),
                 *, strict: bool = True, bus: str = "SESSION") -> None:
        self.capabilities = list(capabilities)
        self.strict = strict
        self.bus = bus
        self.notifications: list[dict[str, Any]] = []
        self.closed_ids: list[int] = []
        self.calls: list[str] = []
        self.on_notify: Callable[[dict[str, Any]], None] | None = None
        self.on_close: Callable[[int], None] | None = None
        self._next_id = 1
        self._conn: DBusConnection | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._send_lock = threading.Lock()
        self._changed = threading.Condition()

    # -- lifetime ---------------------------------------------------------

    def start(self) -> Self:
        """Connect, take the name (fails if someone else has it) and serve."""
        conn = open_dbus_connection(self.bus)
        reply = conn.send_and_get_reply(
            message_bus.RequestName(SERVICE, _REQUEST_NAME_DO_NOT_QUEUE), timeout=5)
        if reply.body[0] != _PRIMARY_OWNER:
            conn.close()
            raise RuntimeError(f"could not own {SERVICE}: RequestName -> {reply.body[0]}")
        self._conn = conn
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="notification-listener",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, give the name back (acknowledged, so a successor can
        take it at once) and disconnect."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._conn is not None:
            try:
                self._conn.send_and_get_reply(message_bus.ReleaseName(SERVICE), timeout=5)
            except (OSError, TimeoutError):
                pass  # the bus drops the name with the connection anyway
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests drive -------------------------------------------------

    def emit_action_invoked(self, notification_id: int, action_key: str) -> None:
        """Broadcast ``ActionInvoked(u id, s key)``, as a server does on a button click."""
        self._send(new_signal(_EMITTER, "ActionInvoked", "us", (notification_id, action_key)))

    def emit_closed(self, notification_id: int, reason: int = 2) -> None:
        """Broadcast ``NotificationClosed(u id, u reason)`` (2 = dismissed by the user)."""
        self._send(new_signal(_EMITTER, "NotificationClosed", "uu", (notification_id, reason)))

    def wait_for_notifications(self, count: int, timeout: float = 5.0) -> bool:
        """Block until ``count`` Notify calls arrived (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.notifications) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    # -- serving ----------------------------------------------------------

    def _send(self, msg: Any) -> None:
        conn = self._conn
        if conn is None:
            raise RuntimeError("listener is not running")
        with self._send_lock:
            conn.send(msg)

    def _serve(self) -> None:
        assert self._conn is not None
        serve_method_calls(self._conn, self._stop, self._answer, self._send)

    def _answer(self, msg: Any) -> Any:
        fields = msg.header.fields
        member = fields.get(HeaderFields.member, "")
        interface = fields.get(HeaderFields.interface)
        signature = fields.get(HeaderFields.signature, "")
        with self._changed:
            self.calls.append(member)
        if fields.get(HeaderFields.path) != PATH or interface not in (None, INTERFACE):
            return new_error(msg, "org.freedesktop.DBus.Error.UnknownObject", "s",
                             (f"no {interface}.{member} at {fields.get(HeaderFields.path)}",))
        if member == "GetCapabilities":
            return new_method_return(msg, "as", (list(self.capabilities),))
        if member == "GetServerInformation":
            return new_method_return(msg, "ssss", ("fake-notifications", "vram-steward tests",
                                                   "1.0", "1.2"))
        if member == "Notify":
            return self._notify(msg, signature)
        if member == "CloseNotification":
            if signature != "u":
                return _invalid_args(msg, f"CloseNotification expects 'u', got {signature!r}")
            with self._changed:
                self.closed_ids.append(msg.body[0])
                self._changed.notify_all()
            if self.on_close is not None:
                self.on_close(msg.body[0])
            self._send(new_signal(_EMITTER, "NotificationClosed", "uu", (msg.body[0], 3)))
            return new_method_return(msg)
        return new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "s",
                         (f"unknown method {member}",))

    def _notify(self, msg: Any, signature: str) -> Any:
        accepted = signature == NOTIFY_SIGNATURE or not self.strict
        record: dict[str, Any] = {"signature": signature, "accepted": accepted,
                                  "raw_body": list(msg.body)}
        reply: Any
        if accepted and signature == NOTIFY_SIGNATURE:
            app_name, replaces_id, icon, summary, body, actions, hints, timeout = msg.body
            nid = replaces_id or self._next_id
            if not replaces_id:
                self._next_id += 1
            record.update(id=nid, app_name=app_name, replaces_id=replaces_id, icon=icon,
                          summary=summary, body=body, actions=list(actions),
                          hints={k: [sig, val] for k, (sig, val) in hints.items()},
                          timeout=timeout)
            reply = new_method_return(msg, "u", (nid,))
        else:
            reply = _invalid_args(msg, f"Notify expects {NOTIFY_SIGNATURE!r}, got {signature!r}")
        with self._changed:
            self.notifications.append(record)
            self._changed.notify_all()
        if self.on_notify is not None:
            self.on_notify(record)
        return reply


def _invalid_args(msg: Any, text: str) -> Any:
    return new_error(msg, "org.freedesktop.DBus.Error.InvalidArgs", "s", (text,))


def main(argv: list[str] | None = None) -> int:
    """Serve from a separate process, driven by JSON lines on stdin/stdout.

    A Qt client blocked in a D-Bus call holds the GIL, so a listener thread in
    the same interpreter could not answer it; a child process can.  Prints
    ``{"event": "ready"}`` once the name is owned, ``{"event": "notify", ...}``
    per Notify, ``{"event": "close", "id": n}`` per CloseNotification and
    ``{"event": "stopped", "calls": [...]}`` (every method called) at the end;
    reads ``{"cmd": "action", "id", "key"}``, ``{"cmd": "closed", "id",
    "reason"}`` and ``{"cmd": "stop"}``, answering each with ``{"event": "done"}``.
    """
    parser = argparse.ArgumentParser(description="fake org.freedesktop.Notifications server")
    parser.add_argument("--capabilities", default="actions,body",
                        help="comma-separated GetCapabilities answer")
    parser.add_argument("--lenient", action="store_true",
                        help="accept a Notify with a wrong signature")
    args = parser.parse_args(argv)
    caps = [c for c in args.capabilities.split(",") if c]
    out_lock = threading.Lock()

    def emit(obj: dict[str, Any]) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj, default=repr) + "\n")
            sys.stdout.flush()

    listener = NotificationListener(caps, strict=not args.lenient)
    listener.on_notify = lambda rec: emit({"event": "notify", **rec})
    listener.on_close = lambda nid: emit({"event": "close", "id": nid})
    listener.start()
    emit({"event": "ready", "capabilities": caps})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "action":
            listener.emit_action_invoked(int(cmd["id"]), str(cmd["key"]))
        elif cmd["cmd"] == "closed":
            listener.emit_closed(int(cmd["id"]), int(cmd.get("reason", 2)))
        elif cmd["cmd"] == "stop":
            break
        emit({"event": "done", "cmd": cmd["cmd"]})
    listener.stop()
    emit({"event": "stopped", "calls": listener.calls})
    return 0


class ListenerProcess:
    """Runs :func:`main` in a child process (same bus) and talks to it.

    ``start()`` returns once the child owns the name; ``event(kind)`` waits
    for the next event of that kind, keeping the others for later calls.
    """

    def __init__(self, capabilities: Iterable[str] = ("actions", "body"), *,
                 lenient: bool = False, python: str = sys.executable) -> None:
        root = Path(__file__).resolve().parents[2]
        self.argv = [python, "-m", "tests.fakes.notification_listener",
                     "--capabilities", ",".join(capabilities)] + (["--lenient"] if lenient else [])
        self.cwd = str(root)
        self.proc: subprocess.Popen[str] | None = None
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._held: list[dict[str, Any]] = []

    def start(self, timeout: float = 10.0) -> Self:
        env = dict(os.environ, PYTHONPATH=self.cwd + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        self.event("ready", timeout)
        return self

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._events.put(json.loads(line))
        self._events.put({"event": "eof"})

    def event(self, kind: str, timeout: float = 10.0) -> dict[str, Any]:
        """The next event of ``kind``; raises TimeoutError if none comes in time."""
        for i, ev in enumerate(self._held):
            if ev["event"] == kind:
                return self._held.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                ev = self._events.get(timeout=max(left, 0))
            except queue.Empty:
                raise TimeoutError(f"no {kind!r} event from the listener in {timeout} s") from None
            if ev["event"] == kind:
                return ev
            if ev["event"] == "eof":
                raise RuntimeError(f"listener exited while waiting for {kind!r}")
            self._held.append(ev)

    def command(self, cmd: str, timeout: float = 10.0, **fields: Any) -> None:
        """Send one command and wait until the child has carried it out."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.proc.stdin.flush()
        self.event("done", timeout)

    def stop(self, timeout: float = 10.0) -> list[str]:
        """Release the name, wait for the child to exit; returns the methods it served."""
        proc, self.proc = self.proc, None
        if proc is None:
            return []
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
            proc.stdin.close()
            calls = self.event("stopped", timeout).get("calls", [])
            proc.wait(timeout)
            return calls
        except (OSError, TimeoutError, RuntimeError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout)
            return []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    raise SystemExit(main())
