"""Driving the real child processes of the end-to-end tests: a line read
within a deadline, a server's ``listening on URL``, an end by signal then
SIGKILL, and waiting for a condition with a message that says which."""

from __future__ import annotations

import select
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any


def read_line(proc: subprocess.Popen, timeout: float) -> bytes:
    """The next line ``proc`` writes on stdout, b"" when none comes within ``timeout``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else b""


def serve_url(proc: subprocess.Popen, log: Callable[[], str], timeout: float = 30.0) -> str:
    """The URL of ``serve``'s first line, ``listening on URL``; AssertionError
    with what it said and its log (``proc`` ended) when it did not start."""
    line = read_line(proc, timeout).decode()
    if not line.startswith("listening on "):
        end(proc)
        raise AssertionError(f"serve did not start: {line!r}\n{log()}")
    return line.removeprefix("listening on ").strip()


def quit_child(proc: subprocess.Popen, wait_s: float = 30.0) -> None:
    """A test child that reads commands on stdin told ``quit``; killed if it cannot be."""
    try:
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(wait_s)
    except Exception:
        proc.kill()


def end(proc: subprocess.Popen, sig: int = signal.SIGTERM, wait_s: float = 10.0) -> None:
    """``sig`` (if still running), then SIGKILL after ``wait_s``; reaped either way."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 30.0,
             every: float = 0.2) -> Any:
    """``probe()``'s first truthy answer; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def agent_entry(runtime: str, pid: int, timeout: float = 30.0) -> Any:
    """The registry entry of process ``pid``'s agent in ``runtime``, once it has
    registered (an ``AgentEntry``); fails after ``timeout``."""
    from app.core.agents.registry import read_registry

    return wait_for(f"the agent of {pid} to register", lambda: next(
        (e for e in read_registry(runtime) if e.pid == pid), None), timeout, every=0.1)
