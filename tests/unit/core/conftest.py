"""Fixtures shared by the core tests that talk to (fake) agents over real sockets."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import pytest


@pytest.fixture
def runtime():
    # Short path: AF_UNIX socket paths are limited to ~107 bytes.
    path = tempfile.mkdtemp(prefix="vsrt-")
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


@pytest.fixture
def sleeper():
    """Real processes to own the fake agents' pids (the registry checks them)."""
    procs = []

    def make():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        procs.append(proc)
        return proc

    yield make
    for proc in procs:
        proc.kill()
        proc.wait()


def wait_for(predicate, timeout=5.0):
    """Poll ``predicate`` until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
