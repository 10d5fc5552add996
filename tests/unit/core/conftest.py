"""Fixtures shared by the core tests that talk to (fake) agents over real sockets."""

from __future__ import annotations

import subprocess
import tempfile
import time

import pytest


@pytest.fixture
def runtime():
    # Short path: AF_UNIX socket paths are limited to ~107 bytes.
    path = tempfile.mkdtemp(prefix="vsrt-")
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


def wait_for(predicate, timeout=5.0):
    """Poll ``predicate`` until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
