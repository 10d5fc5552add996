"""Single instance: the local-socket protocol in-process, then real processes."""

from __future__ import annotations

import json
import os
import queue
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

from app.ui.shell import single_instance as si
from app.ui.shell.single_instance import (
    ENV_ADDRESS,
    Reply,
    SingleInstance,
    UnsafeDir,
    instance_address,
    raise_window,
)

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="unix sockets and modes")
DRIVER = Path(__file__).resolve().parents[3] / "fakes" / "single_instance_driver.py"
UID = os.getuid() if hasattr(os, "getuid") else 0


@pytest.fixture
def short_dir():
    """A private scratch directory with a short path (AF_UNIX paths are ~100 bytes)."""
    path = tempfile.mkdtemp(prefix="vsi-")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def address(short_dir, monkeypatch) -> str:
    addr = str(short_dir / "gui.sock")
    monkeypatch.setenv(ENV_ADDRESS, addr)
    return addr


@pytest.fixture
def server(qtbot, address):
    instance = SingleInstance(client_timeout_ms=300)
    assert instance.claim(address, ["--first"])
    assert instance.address == address
    assert instance.is_listening()
    raised: list[list[str]] = []
    instance.raise_requested.connect(raised.append)
    instance.raised = raised  # type: ignore[attr-defined]
    yield instance
    instance.close()


def exchange(qtbot, address: str, payload: bytes | list[bytes], timeout: int = 3000) -> dict:
    """Send ``payload`` (in chunks if a list), wait for the server to hang up, parse its reply."""
    sock = QLocalSocket()
    received = bytearray()
    closed: list[bool] = []
    sock.readyRead.connect(lambda: received.extend(bytes(sock.readAll().data())))
    sock.disconnected.connect(lambda: closed.append(True))
    sock.connectToServer(address)
    qtbot.waitUntil(lambda: sock.state() == QLocalSocket.LocalSocketState.ConnectedState)
    for chunk in payload if isinstance(payload, list) else [payload]:
        sock.write(chunk)
        sock.flush()
    qtbot.waitUntil(lambda: bool(closed), timeout=timeout)
    line, newline, _ = bytes(received).partition(b"\n")
    assert newline, received
    return json.loads(line)


# ----------------------------------------------------------------- address


def test_env_overrides_address(monkeypatch):
    monkeypatch.setenv(ENV_ADDRESS, "/somewhere/else.sock")
    assert instance_address() == "/somewhere/else.sock"


@posix_only
def test_address_in_xdg_runtime_dir_is_private(short_dir, monkeypatch):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    addr = instance_address()
    assert addr == str(short_dir / "vram-steward" / "gui.sock")
    assert stat.S_IMODE(os.stat(short_dir / "vram-steward").st_mode) == 0o700


@posix_only
def test_address_falls_back_to_private_temp_dir(short_dir, monkeypatch):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(short_dir))
    addr = instance_address()
    private = short_dir / f"vram-steward-{UID}"
    assert addr == str(private / "gui.sock")
    st = os.lstat(private)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == UID


@posix_only
def test_own_temp_dir_with_loose_mode_gives_way_to_a_private_fallback(short_dir, monkeypatch):
    """The agents' rule: a default that was open to others may hold anything
    they planted, so it is left alone and a private dir beside it is used."""
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(short_dir))
    loose = short_dir / f"vram-steward-{UID}"
    loose.mkdir()
    os.chmod(loose, 0o777)
    addr = Path(instance_address())
    assert addr.parent.parent == short_dir and addr.parent.name.startswith(f"{loose.name}-")
    st = os.lstat(addr.parent)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == UID
    assert instance_address() == str(addr)  # every launch finds the same one
    assert stat.S_IMODE(os.stat(loose).st_mode) == 0o777 and list(loose.iterdir()) == []


@posix_only
def test_symlinked_temp_dir_gives_way_to_a_private_fallback(short_dir, monkeypatch, qtbot):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(short_dir))
    target = short_dir / "elsewhere"
    target.mkdir(mode=0o700)
    (short_dir / f"vram-steward-{UID}").symlink_to(target)
    instance = SingleInstance()
    try:
        assert instance.claim(argv=[]) is True
        assert instance.is_listening()
        assert Path(instance.address).parent.name.startswith(f"vram-steward-{UID}-")
    finally:
        instance.close()
    assert list(target.iterdir()) == []


@posix_only
def test_symlinked_xdg_dir_is_refused_and_app_runs_unguarded(short_dir, monkeypatch, qtbot):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    target = short_dir / "elsewhere"
    target.mkdir(mode=0o700)
    (short_dir / "vram-steward").symlink_to(target)
    with pytest.raises(UnsafeDir, match="symlink"):
        instance_address()
    instance = SingleInstance()
    assert instance.claim(argv=[]) is True
    assert not instance.is_listening() and instance.address is None
    assert list(target.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_dirs_owned_by_someone_else_are_never_used(short_dir, monkeypatch):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(short_dir))
    foreign_runtime = short_dir / "run"
    foreign_runtime.mkdir(mode=0o700)
    os.chown(foreign_runtime, 65534, 65534)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(foreign_runtime))
    private = short_dir / f"vram-steward-{UID}"
    private.mkdir(mode=0o700)
    os.chown(private, 65534, 65534)
    # Not our XDG_RUNTIME_DIR: skipped; the temp dir's default is someone else's:
    # a private one of ours beside it.
    addr = Path(instance_address())
    assert addr.parent.name.startswith(f"{private.name}-")
    assert os.lstat(addr.parent).st_uid == UID
    assert not (foreign_runtime / "vram-steward").exists()
    assert list(private.iterdir()) == []


# ------------------------------------------------------------------ server


def test_raise_is_delivered_and_acknowledged(qtbot, server, address):
    request = {"v": 1, "cmd": "raise", "argv": ["--demo", "a b", "ünï"]}
    with qtbot.waitSignal(server.raise_requested, timeout=3000) as blocker:
        reply = exchange(qtbot, address, json.dumps(request).encode() + b"\n")
    assert reply == {"v": 1, "ok": True}
    assert blocker.args == [["--demo", "a b", "ünï"]]


def test_request_split_across_writes_and_without_argv(qtbot, server, address):
    reply = exchange(qtbot, address, [b'{"v": 1, ', b'"cmd": "raise"}', b"\r\n"])
    assert reply == {"v": 1, "ok": True}
    qtbot.waitUntil(lambda: server.raised == [[]])


@pytest.mark.parametrize("payload, error", [
    (b"not json\n", "not JSON"),
    (b"\xff\xfe{}\n", "not JSON"),
    (b"\n", "not JSON"),
    (b"[1, 2]\n", "not a JSON object"),
    (b'{"v": 2, "cmd": "raise", "argv": []}\n', "unsupported version 2"),
    (b'{"cmd": "raise", "argv": []}\n', "unsupported version None"),
    (b'{"v": 1, "cmd": "quit"}\n', "unknown command 'quit'"),
    (b'{"v": 1, "cmd": "raise", "argv": "--demo"}\n', "argv must be a list of strings"),
    (b'{"v": 1, "cmd": "raise", "argv": [1]}\n', "argv must be a list of strings"),
    (b'{"v": 1, "cmd": "raise", "argv": ["' + b"x" * 5000 + b'"]}\n', "line too long"),
    ([b"y" * 3000, b"y" * 3000], "line too long"),  # no newline yet, already oversize
])
def test_bad_request_gets_error_and_changes_nothing(qtbot, server, address, payload, error):
    reply = exchange(qtbot, address, payload)
    assert reply == {"v": 1, "ok": False, "error": error}
    assert server.raised == []
    assert server.is_listening()
    # The server still serves the next client.
    assert exchange(qtbot, address, b'{"v":1,"cmd":"raise","argv":["ok"]}\n')["ok"] is True
    qtbot.waitUntil(lambda: server.raised == [["ok"]])


def test_request_of_a_client_that_gave_up_still_raises(qtbot, server, address):
    # A second launch stops waiting after its reply timeout (the first one was
    # still starting); its request is in the socket and is still acted on.
    sock = QLocalSocket()
    sock.connectToServer(address)
    assert sock.waitForConnected(1000)
    sock.write(b'{"v":1,"cmd":"raise","argv":["late"]}\n')
    assert sock.waitForBytesWritten(1000)
    sock.abort()
    qtbot.waitUntil(lambda: server.raised == [["late"]])
    qtbot.waitUntil(lambda: not server._connections)
    assert server.is_listening()


@pytest.mark.parametrize("payload", [b"", b'{"v": 1, "cmd": "ra'])
def test_silent_client_is_dropped_after_timeout(qtbot, server, address, payload):
    reply = exchange(qtbot, address, payload, timeout=3000)
    assert reply == {"v": 1, "ok": False, "error": "timed out waiting for a request"}
    assert server.raised == []
    qtbot.waitUntil(lambda: not server._connections)


def test_many_clients_at_once(qtbot, server, address):
    socks = []
    for _ in range(5):
        sock = QLocalSocket()
        sock.connectToServer(address)
        assert sock.waitForConnected(1000)
        socks.append(sock)
    for i, sock in enumerate(socks):
        sock.write(json.dumps({"v": 1, "cmd": "raise", "argv": [str(i)]}).encode() + b"\n")
    qtbot.waitUntil(lambda: len(server.raised) == 5)
    assert sorted(server.raised) == [[str(i)] for i in range(5)]


@posix_only
def test_socket_is_private(server, address):
    st = os.lstat(address)
    assert stat.S_ISSOCK(st.st_mode)
    assert st.st_uid == UID
    assert stat.S_IMODE(st.st_mode) & 0o077 == 0


@posix_only
def test_default_socket_is_private(qtbot, short_dir, monkeypatch):
    monkeypatch.delenv(ENV_ADDRESS, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    instance = SingleInstance()
    try:
        assert instance.claim(argv=[]) and instance.is_listening()
        assert instance.address == str(short_dir / "vram-steward" / "gui.sock")
        dir_st, sock_st = os.lstat(short_dir / "vram-steward"), os.lstat(instance.address)
        assert stat.S_IMODE(dir_st.st_mode) == 0o700 and dir_st.st_uid == UID
        assert stat.S_ISSOCK(sock_st.st_mode) and stat.S_IMODE(sock_st.st_mode) & 0o077 == 0
    finally:
        instance.close()
    assert not os.path.exists(short_dir / "vram-steward" / "gui.sock")


@posix_only
def test_stale_socket_is_replaced(qtbot, address):
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(address)
    dead.close()  # the file stays: a crashed instance's socket
    assert stat.S_ISSOCK(os.lstat(address).st_mode)
    instance = SingleInstance()
    try:
        assert instance.claim(address, []) is True
        assert instance.is_listening() and instance.reply is None
        assert exchange(qtbot, address, b'{"v":1,"cmd":"raise"}\n') == {"v": 1, "ok": True}
    finally:
        instance.close()


@posix_only
def test_close_removes_socket(qtbot, address):
    instance = SingleInstance()
    assert instance.claim(address, [])
    assert os.path.exists(address)
    instance.close()
    assert not os.path.exists(address)
    assert not instance.is_listening()
    instance.close()  # twice is harmless


@posix_only
def test_close_keeps_a_newer_instances_socket(qtbot, address):
    old = SingleInstance()
    assert old.claim(address, [])
    newer = QLocalServer()
    newer.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
    assert newer.listen(address)  # renamed over the old socket, as Qt does
    old.close()
    assert os.path.exists(address)
    probe = QLocalSocket()
    probe.connectToServer(address)
    assert probe.waitForConnected(1000)
    probe.abort()
    newer.close()


# ------------------------------------------------------------------ client


_PEER = """
import socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(1)
print("up", flush=True)
conn, _ = listener.accept()
request = b""
while not request.endswith(b"\\n"):
    chunk = conn.recv(4096)
    if not chunk:
        break
    request += chunk
print(request.decode(), end="", flush=True)
if sys.argv[2]:
    conn.sendall(sys.argv[2].encode())
sys.stdin.read()  # hold the connection until the test is done
"""


class _UnixPeer:
    """A plain-socket stand-in for a running instance that answers ``answer`` (or nothing).

    A separate process: Qt's blocking waits in the client hold the GIL.
    """

    def __init__(self, address: str, answer: bytes | None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PEER, address, (answer or b"").decode()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "up\n"

    def close(self) -> str:
        request, _ = self.proc.communicate("", timeout=10)
        return request


@posix_only
@pytest.mark.parametrize("answer, expected", [
    (b'{"v":1,"ok":true}\n', Reply(True)),
    (b'{"v":1,"ok":false,"error":"nope"}\n', Reply(False, "nope")),
    (b"garbage\n", Reply(False, "unreadable answer from the running instance")),
    (None, Reply(False, "no answer from the running instance")),
])
def test_second_launch_asks_the_running_one(qtbot, address, answer, expected):
    peer = _UnixPeer(address, answer)
    try:
        instance = SingleInstance(reply_timeout_ms=300)
        assert instance.claim(address, ["--x", "y z"]) is False
        assert instance.reply == expected
        assert not instance.is_listening()
    finally:
        request = peer.close()
    assert json.loads(request) == {"v": 1, "cmd": "raise", "argv": ["--x", "y z"]}


def test_nothing_listening_means_none(address):
    assert si.send_raise(address, [], connect_timeout_ms=200) is None


# ------------------------------------------------------------------ window


def test_raise_window_restores_and_shows(qtbot):
    widget = QWidget()
    qtbot.addWidget(widget)
    raise_window(widget)  # hidden: shown
    assert widget.isVisible()
    widget.setWindowState(Qt.WindowState.WindowMaximized | Qt.WindowState.WindowMinimized)
    raise_window(widget)
    state = widget.windowState()
    assert not state & Qt.WindowState.WindowMinimized
    assert state & Qt.WindowState.WindowMaximized
    widget.hide()
    raise_window(widget)
    assert widget.isVisible()


# --------------------------------------------------------- real processes


class Driver:
    """The driver script as a real process, its stdout read line by line with timeouts."""

    def __init__(self, address: str, *args: str) -> None:
        env = dict(os.environ, **{ENV_ADDRESS: address, "QT_QPA_PLATFORM": "offscreen"})
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr = ""
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_line(self, timeout: float = 30) -> str | None:
        return self.lines.get(timeout=timeout)

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self, timeout: float = 30) -> int:
        rc = self.proc.wait(timeout)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@posix_only
def test_second_process_raises_the_first(short_dir):
    address = str(short_dir / "gui.sock")
    first = Driver(address, "--first")
    try:
        assert first.next_line() == "listening"
        env = dict(os.environ, **{ENV_ADDRESS: address, "QT_QPA_PLATFORM": "offscreen"})
        second = subprocess.run([sys.executable, str(DRIVER), "--demo", "two words"],
                                capture_output=True, text=True, check=False, timeout=30, env=env)
        assert (second.returncode, second.stdout) == (0, "second ok\n"), second.stderr
        assert first.next_line() == 'raised ["--demo", "two words"]'
        assert first.finish() == 0, first.stderr
        assert not os.path.exists(address)
    finally:
        first.kill()


@posix_only
def test_first_launch_after_a_crash(short_dir):
    address = str(short_dir / "gui.sock")
    crashed = Driver(address)
    try:
        assert crashed.next_line() == "listening"
        crashed.proc.kill()  # no clean-up: the socket file stays behind
        crashed.proc.wait(10)
        assert os.path.exists(address)
    finally:
        crashed.kill()
    relaunch = Driver(address)
    try:
        assert relaunch.next_line() == "listening"
        second = Driver(address, "again")
        try:
            assert second.next_line() == "second ok"
            assert second.finish() == 0
        finally:
            second.kill()
        assert relaunch.next_line() == 'raised ["again"]'
        assert relaunch.finish() == 0
    finally:
        relaunch.kill()


@posix_only
@pytest.mark.parametrize("round_", range(3))
def test_simultaneous_first_launches_end_with_one_server(short_dir, round_):
    address = str(short_dir / "gui.sock")
    drivers = [Driver(address, "--barrier", name) for name in ("a", "b")]
    try:
        for driver in drivers:
            assert driver.next_line() == "ready"
        for driver in drivers:
            driver.send("go\n")  # both claim at (nearly) the same instant
        outputs = {}
        for name, driver in zip("ab", drivers):
            outputs[name] = [driver.next_line(), driver.next_line()]
            assert driver.finish() == 0, driver.stderr
        servers = [n for n, out in outputs.items() if out[0] == "listening"]
        assert len(servers) == 1, outputs
        server = servers[0]
        other = "b" if server == "a" else "a"
        assert outputs[server] == ["listening", f'raised ["{other}"]']
        assert outputs[other] == ["second ok", None]
    finally:
        for driver in drivers:
            driver.kill()
