"""The process list as recognition reads it, from real processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from app.core.servers.host import read_host
from app.core.servers.recognise import recognise
from tests.fakes.processes import read_line

LISTEN = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    print(s.getsockname()[1], flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_server_shaped_process_gets_its_folder_and_ports_and_others_do_not(tmp_path):
    comfy = tmp_path / "ComfyUI"
    comfy.mkdir()
    (comfy / "main.py").write_text(LISTEN)
    server = subprocess.Popen([sys.executable, "main.py", "--listen", "127.0.0.1"], cwd=comfy,
                              stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
    try:
        port = int(read_line(server, 20))
        read_line(other, 20)
        procs = {p.pid: p for p in read_host()}
        mine, theirs = procs[server.pid], procs[other.pid]
        assert mine.cwd == str(comfy) and mine.ports == (port,)
        assert mine.cmdline == (sys.executable, "main.py", "--listen", "127.0.0.1")
        assert mine.user and mine.ppid is not None
        assert theirs.cwd is None and theirs.ports == ()  # not read: nothing server-like
        (found,) = [f for f in recognise(list(procs.values())) if f.pid == server.pid]
        assert found.kind == "comfyui" and found.endpoint == f"http://127.0.0.1:{port}"
    finally:
        for p in (server, other):
            p.kill()
            p.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_reader_keeps_what_cannot_change_and_sees_an_exec():
    from app.core.servers.host import HostReader

    reader = HostReader()
    shell = subprocess.Popen(["sh", "-c", "read go; exec sleep 30"], stdin=subprocess.PIPE)
    try:
        first = {p.pid: p for p in reader()}
        assert first[shell.pid].cmdline[:2] == ("sh", "-c")
        again = {p.pid: p for p in reader()}
        assert again[shell.pid] == first[shell.pid]
        shell.stdin.write(b"go\n")
        shell.stdin.flush()
        deadline = time.monotonic() + 10
        while reader_sees(reader, shell.pid) != ("sleep", "30"):
            assert time.monotonic() < deadline, "the exec was never seen"
            time.sleep(0.05)
    finally:
        shell.kill()
        shell.wait()
    assert shell.pid not in {p.pid for p in reader()}


def reader_sees(reader, pid: int) -> tuple[str, ...]:
    return next((p.cmdline for p in reader() if p.pid == pid), ())
