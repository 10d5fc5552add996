"""One running app per user: a second launch raises the first window and exits.

The first instance listens on a per-user local socket (a named pipe on
Windows).  A later launch connects as a client, sends one line of JSON::

    {"v": 1, "cmd": "raise", "argv": [...]}

and waits for ``{"v": 1, "ok": true}``; if anything answers, it is the second
instance and should exit.  If nothing answers, it removes a stale socket left
by a crashed instance and listens itself.  The check-remove-listen sequence
runs under an inter-process file lock: ``QLocalServer.listen`` with
``UserAccessOption`` binds in a temporary directory and *renames* the socket
into place, replacing whatever is there, so without the lock two simultaneous
first launches could both end up listening.

The socket lives in a directory only this user can enter (0700, owned by us),
``$XDG_RUNTIME_DIR/vram-steward`` or ``<tmp>/vram-steward-<uid>`` (or, when
someone else holds that name, the agents' private fallback beside it); a
directory someone else controls is refused, never talked through.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Self

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from app.agent.paths import UnsafeDir, check_private_dir, claim_private_dir

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 4096
ENV_ADDRESS = "VRAM_STEWARD_INSTANCE"
SOCKET_NAME = "gui.sock"
CONNECT_TIMEOUT_MS = 500
#: The first instance may still be starting (its event loop not yet running),
#: so a connected client waits this long for the answer.
REPLY_TIMEOUT_MS = 3000
#: How long the server gives one client to send its line before dropping it.
CLIENT_TIMEOUT_MS = 2000
LOCK_TIMEOUT_S = 5.0
MAX_CLIENTS = 16

__all__ = ["ENV_ADDRESS", "PROTOCOL_VERSION", "Reply", "SingleInstance", "UnsafeDir",
           "instance_address", "raise_window", "send_raise"]


# ------------------------------------------------------------------ address


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


def _private_dir(path: str) -> str:
    """Create ``path`` 0700, or fix the mode of our own; refuse anyone else's (UnsafeDir)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == _uid() and st.st_mode & 0o077:
            os.chmod(path, 0o700)
    check_private_dir(path)
    return path


def _runtime_dir_is_ours(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == _uid()


def instance_address() -> str:
    """The per-user address of the running instance (creating its private directory).

    ``$VRAM_STEWARD_INSTANCE`` overrides it, used as given.  Raises UnsafeDir
    when ``$XDG_RUNTIME_DIR/vram-steward`` exists but belongs to someone else
    or is a symlink; in the temp dir, such a folder gives way to a private
    fallback beside it (``app.agent.paths.claim_private_dir``).
    """
    override = os.environ.get(ENV_ADDRESS)
    if override:
        return override
    if sys.platform == "win32":
        # A pipe name (\\.\pipe\...), one namespace for all users: name the user.
        user = re.sub(r"[^A-Za-z0-9_.-]", "_", getpass.getuser()) or "user"
        return f"vram-steward-{user}"
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and _runtime_dir_is_ours(runtime):
        base = _private_dir(os.path.join(runtime, "vram-steward"))
    else:
        # The agents' rule: a default someone else holds gives way to a private fallback.
        base, _refused = claim_private_dir(os.path.join(tempfile.gettempdir(),
                                                        f"vram-steward-{_uid()}"))
    return os.path.join(base, SOCKET_NAME)


def _lock_path(address: str) -> str:
    if sys.platform == "win32" or not os.path.isabs(address):
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", address)
        return os.path.join(tempfile.gettempdir(), f"{safe}.lock")
    return address + ".lock"


class _FileLock:
    """An exclusive inter-process lock on a file, held for a ``with`` block.

    Best effort: if the lock cannot be taken within ``timeout_s`` (or at all),
    the block runs unlocked and ``held`` is False.
    """

    def __init__(self, path: str, timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.held = False
        self._file: IO[bytes] | None = None

    def __enter__(self) -> Self:
        try:
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            self._file = os.fdopen(os.open(self.path, flags, 0o600), "r+b")
        except OSError as exc:
            log.warning("single instance: cannot open lock %s: %s", self.path, exc)
            return self
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self._try_lock()
                self.held = True
                return self
            except OSError:
                if time.monotonic() >= deadline:
                    log.warning("single instance: lock %s busy; going on without it", self.path)
                    return self
                time.sleep(0.01)

    def _try_lock(self) -> None:
        assert self._file is not None
        if sys.platform == "win32":
            import msvcrt

            self._file.seek(0)
            msvcrt.locking(self._file.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def __exit__(self, *exc: object) -> None:
        if self._file is None:
            return
        try:
            if self.held and sys.platform == "win32":
                import msvcrt

                self._file.seek(0)
                msvcrt.locking(self._file.fileno(), msvcrt.LK_UNLCK, 1)
        finally:
            self._file.close()  # closing releases a flock
            self._file = None
            self.held = False


# ------------------------------------------------------------------- client


@dataclass(frozen=True)
class Reply:
    """What the running instance answered (``ok`` False with ``error`` otherwise)."""

    ok: bool
    error: str = ""


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def send_raise(address: str, argv: list[str], connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
               reply_timeout_ms: int = REPLY_TIMEOUT_MS) -> Reply | None:
    """Ask the instance at ``address`` to raise its window (blocking).

    None when nothing listens there.  Once connected, the answer is a Reply
    even when the instance does not answer in time: it is running, and another
    copy should not start beside it.
    """
    sock = QLocalSocket()
    sock.connectToServer(address)
    if not sock.waitForConnected(connect_timeout_ms):
        sock.abort()
        return None
    try:
        message = _encode({"v": PROTOCOL_VERSION, "cmd": "raise", "argv": list(argv)})
        if len(message) > MAX_LINE_BYTES:
            return Reply(False, "command line too long to send")
        deadline = time.monotonic() + reply_timeout_ms / 1000
        sock.write(message)
        sock.waitForBytesWritten(reply_timeout_ms)
        data = b""
        while b"\n" not in data and len(data) <= MAX_LINE_BYTES:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            ready = sock.waitForReadyRead(remaining_ms)
            data += bytes(sock.readAll().data())
            if not ready and sock.state() != QLocalSocket.LocalSocketState.ConnectedState:
                break
        return _parse_reply(data)
    finally:
        sock.abort()


def _parse_reply(data: bytes) -> Reply:
    if b"\n" not in data:
        return Reply(False, "no answer from the running instance")
    try:
        reply = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return Reply(False, "unreadable answer from the running instance")
    if not isinstance(reply, dict) or reply.get("v") != PROTOCOL_VERSION:
        return Reply(False, "unreadable answer from the running instance")
    if reply.get("ok") is True:
        return Reply(True)
    return Reply(False, str(reply.get("error") or "refused"))


# ------------------------------------------------------------------- server


class _BadRequest(ValueError):
    pass


def _parse_request(line: bytes) -> list[str]:
    """The argv of a valid raise request; _BadRequest (its text is the reply) otherwise."""
    try:
        message = json.loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError both are
        raise _BadRequest("not JSON") from None
    if not isinstance(message, dict):
        raise _BadRequest("not a JSON object")
    if message.get("v") != PROTOCOL_VERSION:
        raise _BadRequest(f"unsupported version {message.get('v')!r}")
    if message.get("cmd") != "raise":
        raise _BadRequest(f"unknown command {message.get('cmd')!r}")
    argv = message.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise _BadRequest("argv must be a list of strings")
    return argv


class _Connection:
    """One client on the server side: reads one line, answers it, hangs up."""

    def __init__(self, owner: SingleInstance, sock: QLocalSocket, timeout_ms: int) -> None:
        self.owner = owner
        self.sock = sock
        self.buffer = b""
        self.answered = False
        self.timer = QTimer(sock)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self.on_timeout)
        self.timer.start(timeout_ms)
        sock.readyRead.connect(self.on_ready_read)
        sock.disconnected.connect(self.on_disconnected)

    def on_ready_read(self) -> None:
        try:
            if self.answered:
                self.sock.readAll()  # anything after the line is ignored
                return
            self.buffer += bytes(self.sock.readAll().data())
            line, newline, _ = self.buffer.partition(b"\n")
            if len(line) > MAX_LINE_BYTES:
                self.answer(error="line too long")
            elif newline:
                try:
                    argv = _parse_request(line.strip())
                except _BadRequest as exc:
                    self.answer(error=str(exc))
                else:
                    self.answer()
                    self.owner._deliver(argv)
        except Exception:  # never into Qt's event loop
            log.exception("single instance: error handling a client")
            self.drop()

    def on_timeout(self) -> None:
        try:
            if self.answered:
                self.drop()  # it does not read its answer: hang up hard
            else:
                self.answer(error="timed out waiting for a request")
        except Exception:
            log.exception("single instance: error timing out a client")
            self.drop()

    def answer(self, error: str | None = None) -> None:
        self.answered = True
        reply: dict[str, Any] = {"v": PROTOCOL_VERSION, "ok": error is None}
        if error is not None:
            reply["error"] = error
            log.info("single instance: refused a request: %s", error)
        self.sock.write(_encode(reply))
        self.sock.flush()  # now: a handler of the signal may quit the app right after
        self.timer.start(1000)  # the grace period for the client to read it
        self.sock.disconnectFromServer()  # after the pending write is flushed

    def drop(self) -> None:
        self.answered = True
        self.timer.stop()
        self.sock.abort()
        self.on_disconnected()

    def on_disconnected(self) -> None:
        if self.owner._connections.pop(id(self), None) is not None:
            self.timer.stop()
            self.sock.deleteLater()


class SingleInstance(QObject):
    """The single-instance guard: ``claim()`` once at start-up, ``close()`` at exit.

    ``raise_requested(argv)`` is emitted (on the GUI thread) when a later
    launch asks for the window; ``argv`` is that launch's command line.
    """

    raise_requested = Signal(list)

    def __init__(self, parent: QObject | None = None, *,
                 client_timeout_ms: int = CLIENT_TIMEOUT_MS,
                 connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
                 reply_timeout_ms: int = REPLY_TIMEOUT_MS) -> None:
        super().__init__(parent)
        self._address: str | None = None
        self.client_timeout_ms = client_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.reply_timeout_ms = reply_timeout_ms
        #: The running instance's answer, after ``claim()`` returned False.
        self.reply: Reply | None = None
        self._server: QLocalServer | None = None
        self._socket_id: tuple[int, int] | None = None
        self._connections: dict[int, _Connection] = {}

    @property
    def address(self) -> str | None:
        """The address claimed (None before ``claim``, or when none was safe)."""
        return self._address

    def is_listening(self) -> bool:
        return self._server is not None and self._server.isListening()

    def claim(self, address: str | None = None, argv: list[str] | None = None) -> bool:
        """True: this is the first instance, now listening.  False: another one runs.

        ``address`` defaults to :func:`instance_address`, ``argv`` (what the
        running instance is told) to ``sys.argv[1:]``.  On False, ``reply``
        says whether it acknowledged the raise.  Also True (with
        ``is_listening()`` False) when no safe address or socket can be had:
        the app then runs without the guard rather than not at all.
        """
        argv = list(sys.argv[1:] if argv is None else argv)
        if address is None:
            try:
                address = instance_address()
            except (OSError, UnsafeDir) as exc:
                log.warning("single instance: no safe address (%s); not guarding", exc)
                return True
        self._address = address
        if self._ask(address, argv):
            return False
        with _FileLock(_lock_path(address)):
            # Another launch may have started listening while this one waited.
            if self._ask(address, argv):
                return False
            if self._listen(address):
                return True
        # Only without the lock: another instance won the race; ask it once more.
        if self._ask(address, argv):
            return False
        log.warning("single instance: cannot listen on %s; not guarding", address)
        return True

    def _ask(self, address: str, argv: list[str]) -> bool:
        self.reply = send_raise(address, argv, self.connect_timeout_ms, self.reply_timeout_ms)
        return self.reply is not None

    def _listen(self, address: str) -> bool:
        QLocalServer.removeServer(address)  # a stale socket of a crashed instance
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        server.setMaxPendingConnections(MAX_CLIENTS)
        if not server.listen(address):
            log.info("single instance: listen on %s failed: %s", address, server.errorString())
            server.deleteLater()
            return False
        server.newConnection.connect(self._on_new_connection)
        self._server = server
        self._socket_id = _file_id(address)
        return True

    def _on_new_connection(self) -> None:
        try:
            server = self._server
            while server is not None and server.hasPendingConnections():
                sock = server.nextPendingConnection()
                if sock is None:
                    break
                conn = _Connection(self, sock, self.client_timeout_ms)
                self._connections[id(conn)] = conn
                if len(self._connections) > MAX_CLIENTS:
                    conn.answer(error="busy")
        except Exception:
            log.exception("single instance: error accepting a client")

    def _deliver(self, argv: list[str]) -> None:
        try:
            self.raise_requested.emit(argv)
        except Exception:
            log.exception("single instance: a raise_requested handler failed")

    def close(self) -> None:
        """Stop listening and remove the socket (only ours: never a newer instance's)."""
        for conn in list(self._connections.values()):
            conn.drop()
        server, self._server = self._server, None
        if server is None:
            return
        address = server.fullServerName()
        if self._socket_id is None or _file_id(address) == self._socket_id:
            server.close()  # unlinks the socket file
        else:
            with _FileLock(_lock_path(address), timeout_s=1.0):
                _close_keeping(server, address)
        server.deleteLater()
        self._socket_id = None


def _file_id(path: str) -> tuple[int, int] | None:
    if sys.platform == "win32":
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _close_keeping(server: QLocalServer, path: str) -> None:
    """Close ``server`` without letting Qt unlink the socket now at ``path`` (someone else's)."""
    aside = f"{path}.{os.getpid()}.keep"
    try:
        os.rename(path, aside)
    except OSError:
        server.close()
        return
    try:
        server.close()
    finally:
        os.rename(aside, path)


# ------------------------------------------------------------------- window


def raise_window(widget: QWidget) -> None:
    """Bring ``widget`` to the front: un-minimise, show if hidden, raise, activate.

    Un-minimising clears only the minimised state, so a maximised window comes
    back maximised.  The window manager may still refuse the activation (X11
    and Wayland focus-stealing prevention); then the taskbar entry usually
    flashes, and there is nothing more an application can do.
    """
    state = widget.windowState()
    if state & Qt.WindowState.WindowMinimized:
        widget.setWindowState((state & ~Qt.WindowState.WindowMinimized)
                              | Qt.WindowState.WindowActive)
    if not widget.isVisible():
        widget.show()
    widget.raise_()
    widget.activateWindow()

