"""A real X server (Xvfb) of its own for a test: the display number it picked."""

from __future__ import annotations

import os
import subprocess


def start_xvfb(size: str) -> tuple[subprocess.Popen, str] | None:
    """Xvfb on a free display with one screen of ``size`` ("1366x768"), no TCP;
    (the server, ":N"), or None when it did not start (it is stopped then)."""
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", f"{size}x24",
                               "-nolisten", "tcp"], pass_fds=(write,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as pipe:
        number = pipe.readline().strip()
    if not number:
        server.kill()
        server.wait()
        return None
    return server, f":{number}"
