"""This process's registry entry: ``<registry dir>/<pid>.json``.

Written atomically (temp file + ``os.replace``, mode 0600), removed on exit.
Stale entries (SIGKILL) are pruned by the app's reader, which compares
``create_time`` with the live process's start time to detect pid reuse.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from . import paths


def proc_text(path: str) -> str | None:
    """A small text file of /proc (None when it cannot be read)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None: no such process,
    or no ``/proc``)."""
    data = proc_text("/proc/%d/stat" % pid)
    if data is None:
        return None
    try:
        return int(data[data.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def boot_time() -> float | None:
    """This host's boot, epoch seconds (None where ``/proc/stat`` is missing)."""
    for line in (proc_text("/proc/stat") or "").splitlines():
        if line.startswith("btime"):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def process_create_time() -> float | None:
    """Process start, epoch seconds, computed exactly like psutil on Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        ticks, booted = start_ticks(os.getpid()), boot_time()
        if ticks is None or booted is None:
            return None
        return ticks / os.sysconf("SC_CLK_TCK") + booted
    except Exception:
        return None


def command_line() -> list[str]:
    """The full command line (like /proc/PID/cmdline)."""
    orig = getattr(sys, "orig_argv", None)
    if isinstance(orig, list) and orig:
        return [str(a) for a in orig]
    return [sys.executable] + [str(a) for a in sys.argv]


def torch_version() -> str | None:
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None) if torch is not None else None
    return str(version) if version is not None else None


def make_entry(address: str, transport: str, token: str | None, protocol: int,
               agent: str, started_at: float) -> dict[str, Any]:
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    return {
        "pid": os.getpid(), "create_time": process_create_time(), "argv": command_line(),
        "python": "%d.%d.%d" % tuple(sys.version_info[:3]), "torch": torch_version(),
        "protocol": protocol, "agent": agent, "address": address, "transport": transport,
        "token": token if transport == "tcp" else None, "started_at": started_at,
        "executable": sys.executable, "cwd": cwd,
    }


def entry_path(directory: str, pid: int | None = None) -> str:
    return os.path.join(directory, "%d.json" % (pid if pid is not None else os.getpid()))


def write_entry(directory: str, entry: dict[str, Any]) -> str:
    """Atomically write ``entry`` as ``<pid>.json`` in ``directory`` (0600)."""
    path = entry_path(directory, entry["pid"])
    paths.replace_private_file(path, json.dumps(entry, separators=(",", ":")).encode("utf-8"))
    return path


def remove_entry(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
