"""The xcb probes: libraries ``ldd`` cannot find, X servers nobody runs."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.cli import xcb

ROOT = Path(__file__).resolve().parents[3]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux probes")


def _put_ldd(folder: Path, script: str, monkeypatch) -> None:
    ldd = folder / "ldd"
    ldd.write_text("#!/bin/sh\n" + script)
    ldd.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))


@linux_only
def test_missing_libraries_from_ldd_in_order_once_each(tmp_path, monkeypatch):
    _put_ldd(tmp_path, "echo '\tlibQt6XcbQpa.so.6 => /q/libQt6XcbQpa.so.6 (0x7f)'\n"
                       "echo '\tlibxcb-cursor.so.0 => not found'\n"
                       "echo '\tlibxcb-icccm.so.4 => not found'\n"
                       "echo '\tlibxcb-cursor.so.0 => not found'\n", monkeypatch)
    assert xcb.missing_libraries(Path("/q/libqxcb.so")) == ["libxcb-cursor.so.0",
                                                            "libxcb-icccm.so.4"]


def test_no_ldd_is_no_finding(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no ldd
    assert xcb.missing_libraries(Path("/q/libqxcb.so")) == []


@linux_only
def test_a_failing_or_hanging_ldd_is_no_finding(tmp_path, monkeypatch):
    _put_ldd(tmp_path, "exit 1\n", monkeypatch)
    assert xcb.missing_libraries(Path("/q/libqxcb.so")) == []
    _put_ldd(tmp_path, "exec sleep 30\n", monkeypatch)
    assert xcb.missing_libraries(Path("/q/libqxcb.so"), timeout_s=0.3) == []


@pytest.mark.parametrize(("soname", "package"), [
    ("libxcb-cursor.so.0", "libxcb-cursor0"),
    ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
    ("libX11-xcb.so.1", "libx11-xcb1"),
    ("libxcb-render-util.so.0", "libxcb-render-util0"),
    ("libEGL.so.1", "libegl1"),
    ("libfoo.so", "libfoo"),
])
def test_debian_package_names(soname, package):
    assert xcb.debian_package(soname) == package


def test_plugin_path_prefers_qts_own_override(tmp_path):
    (tmp_path / xcb.PLUGIN).write_bytes(b"")
    assert xcb.plugin_path({"QT_QPA_PLATFORM_PLUGIN_PATH": str(tmp_path)}) == \
        tmp_path / xcb.PLUGIN


def test_plugin_path_finds_pyside6s_plugin_without_importing_qt():
    pytest.importorskip("PySide6")
    code = ("import sys; from app.cli.xcb import plugin_path; found = plugin_path({})\n"
            "print(found is not None and found.parts[-3:] == ('plugins', 'platforms', "
            "'libqxcb.so'), any(m.startswith('PySide6') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    found, imported = done.stdout.split()
    assert imported == "False", done.stderr
    if sys.platform.startswith("linux"):
        assert found == "True"  # the wheel ships the plugin on Linux


def _listen(sock: socket.socket) -> threading.Thread:
    sock.listen(1)

    def accept_one() -> None:
        try:
            conn, _ = sock.accept()
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    return thread


@linux_only
def test_local_display_without_server_refuses():
    assert xcb.server_refuses(":4711") is True
    assert xcb.server_refuses("unix:4711") is True


@linux_only
def test_local_display_with_a_listening_abstract_socket():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind("\0/tmp/.X11-unix/X4712")
        _listen(server)
        assert xcb.server_refuses(":4712") is False
        assert xcb.server_refuses(":4712.0") is False


def test_forwarded_display_probes_its_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        port = next(p for p in range(6100, 6400) if _bind(server, p))
        accepting = _listen(server)
        assert xcb.server_refuses(f"localhost:{port - xcb.X_TCP_PORT}") is False
        accepting.join(5)  # a thread still in accept() would keep the port listening
    assert xcb.server_refuses(f"127.0.0.1:{port - xcb.X_TCP_PORT}") is True


def _bind(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("display", ["remote.example:0", "nonsense", "/tmp/launch/x:0"])
def test_what_cannot_be_told_passes(display):
    assert xcb.server_refuses(display) is False
