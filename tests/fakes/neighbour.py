"""A real second local user ("the neighbour") for the tests of what the app trusts.

As root, ``neighbour()`` creates the user ``vst-neighbour`` with ``useradd``
(once; no home) and returns its uid and gid; elsewhere it skips the test and
says why.  The neighbour's actions run in a forked child of the test that
drops to that uid and gid first (no exec: the interpreter may live where
only root can enter; for the same reason everything the child uses is
imported before the fork), so files, folders and sockets are really its own.

``FakeNeighbourAgent`` is the agent a neighbour plants: a ``FakeAgent`` whose
socket, registry entry and process are the neighbour's; it writes every
request it receives to a log the test reads (``requests()``).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable

import psutil  # noqa: F401 - imported before any fork: the neighbour may not read the venv
import pytest

from tests.fakes.fake_agent import FakeAgent

NAME = "vst-neighbour"


def neighbour() -> tuple[int, int]:
    """(uid, gid) of the second user, created when missing; skips without root or useradd."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("needs root: a second local user is created (useradd) and acted as")
    try:
        entry = pwd.getpwnam(NAME)
    except KeyError:
        if shutil.which("useradd") is None:
            pytest.skip("useradd is missing: no second local user can be created")
        done = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/false", NAME],
                              capture_output=True, text=True)
        if done.returncode not in (0, 9):  # 9: it exists (a test beside this one made it)
            pytest.skip(f"useradd {NAME} failed: {done.stderr.strip()}")
        entry = pwd.getpwnam(NAME)
    return entry.pw_uid, entry.pw_gid


def sticky_tmpdir() -> str:
    """A fresh temp dir like /tmp (mode 1777: everyone may create in it, nobody
    may remove or rename another's entries), short enough for socket paths."""
    path = os.path.realpath(tempfile.mkdtemp(prefix="vstn", dir="/tmp"))
    os.chmod(path, 0o1777)
    return path


def _become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    os.umask(0o022)


def as_neighbour(action: Callable[[], object], uid: int, gid: int, timeout_s: float = 30) -> None:
    """Run ``action`` in a child process as the neighbour; raises if it failed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            _become(uid, gid)
            action()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the neighbour's action did not finish")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0, "the neighbour's action failed"


class FakeNeighbourAgent:
    """An agent the neighbour plants: its socket in ``sock_dir``, its entry in
    ``<runtime>/agents/`` (as the neighbour makes them: readable by all), served
    by a process of the neighbour's that logs every request to ``log_path``."""

    def __init__(self, uid: int, gid: int, runtime: str | None, sock_dir: str,
                 log_path: str) -> None:
        self.log_path = log_path
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(read)
            try:
                _become(uid, gid)
                self._serve(runtime, sock_dir, write)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as ready:
            line = ready.readline().strip()
        if not line:
            os.waitpid(pid, 0)
            raise AssertionError("the neighbour's agent did not start")
        self.pid = pid
        self.entry_json = json.loads(line)

    def _serve(self, runtime: str | None, sock_dir: str, ready_fd: int) -> None:
        fake = FakeAgent(sock_dir=sock_dir).with_models()
        fake.reserved = 1_000_000 * 2**30  # "freed 909.5 TiB"
        entry = fake.entry_json()
        if runtime is not None:
            folder = os.path.join(runtime, "agents")
            os.makedirs(folder, exist_ok=True)
            os.chmod(folder, 0o777)
            path = os.path.join(folder, f"{fake.pid}.json")
            with open(path, "w") as fh:
                json.dump(entry, fh)
            os.chmod(path, 0o666)
        os.write(ready_fd, (json.dumps(entry) + "\n").encode())
        os.close(ready_fd)
        while True:  # until killed: the log always holds what came in so far
            data = json.dumps({"connections": fake.connections,
                               "requests": [method for method, _ in fake.requests]})
            tmp = self.log_path + ".tmp"
            with open(tmp, "w") as fh:
                fh.write(data)
            os.replace(tmp, self.log_path)
            time.sleep(0.02)

    def requests(self) -> list[str]:
        """The methods of every request the neighbour's agent received so far."""
        time.sleep(0.1)  # its last writes
        try:
            with open(self.log_path) as fh:
                return list(json.load(fh)["requests"])
        except FileNotFoundError:
            return []

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
