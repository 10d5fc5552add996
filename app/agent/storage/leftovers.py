"""Whose an offload file is, and removing what dead processes left.

A disk unload's file has a name only where the system cannot do without one
(``files`` docstring), and only for as long as it must; a process killed in
that moment leaves it behind.  Its name starts with ``identity()``:

    <host>-<boot id>-<pid namespace>-<pid>-<start>-<model>-<k>.bin

(host: a short hash of the host name; start: the process's start time in
clock ticks since boot, so a reused pid is told apart).  The offload folder
may be shared by several hosts (a home folder on a network filesystem), so
``sweep`` removes a file only when it can prove its process is gone: same
host, boot and pid namespace, and the pid no longer running or running
another process; or same host and written before this host last booted.
Anything else (another host, another container's pid namespace, a name it
does not know) is left alone.  Without ``/proc`` (macOS) a file of this
host whose pid is not running is removed; on Windows, where a mapped file
keeps its name until the model comes back or the process exits, nothing is
removed.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from typing import NamedTuple

from .. import log as _log
from .. import paths
from ..registry import boot_time, proc_text, start_ticks


class Identity(NamedTuple):
    host: str
    boot: str
    pidns: int
    pid: int
    start: int

    def prefix(self) -> str:
        return "%s-%s-%d-%d-%d" % self


def pid_exists(pid: int) -> bool:
    """Is a process ``pid`` running?  (POSIX only: on Windows ``os.kill``
    terminates.)  Unknown counts as running: a file is never removed on doubt."""
    if sys.platform == "win32" or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, another user's
    return True


def _host() -> str:
    try:
        name = socket.gethostname()
    except OSError:
        name = ""
    return hashlib.sha1(name.encode("utf-8", "replace")).hexdigest()[:8]


def _boot() -> str:
    raw = proc_text("/proc/sys/kernel/random/boot_id") or ""
    boot = "".join(c for c in raw.strip().lower() if c in "0123456789abcdef")
    return boot or "0"


def _pidns() -> int:
    try:
        return int(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return 0


_cached: tuple[int, Identity] | None = None


def current() -> Identity:
    """This process's identity (computed once per pid: a forked child has its own)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[0] != pid:
        _cached = (pid, Identity(_host(), _boot(), _pidns(), pid, start_ticks(pid) or 0))
    return _cached[1]


def identity() -> str:
    return current().prefix()


def parse(name: str) -> Identity | None:
    """The identity at the start of an offload file's name, None if it has none."""
    if not name.endswith(".bin"):
        return None
    parts = name.split("-", 5)
    if len(parts) < 6:
        return None
    host, boot = parts[0], parts[1]
    if len(host) != 8 or not all(c in "0123456789abcdef" for c in host + boot):
        return None
    try:
        return Identity(host, boot, int(parts[2]), int(parts[3]), int(parts[4]))
    except ValueError:
        return None


def is_leftover(owner: Identity, me: Identity, mtime: float, booted: float | None) -> bool:
    """May a file of ``owner`` be removed by process ``me``?  Only when its
    process is provably gone (see the module docstring)."""
    if owner.host != me.host:
        return False
    if owner.boot == "0" and me.boot == "0":  # no /proc here (macOS): is the pid running?
        return owner.pid != me.pid and not pid_exists(owner.pid)
    if owner.boot != me.boot:
        return booted is not None and mtime < booted
    if owner.pidns != me.pidns or owner.boot == "0":
        return False
    started = me.start if owner.pid == me.pid else start_ticks(owner.pid)
    if started is None:
        return True  # no such process
    return owner.start != 0 and started != owner.start  # the pid runs another process


def sweep(directory: str) -> int:
    """Remove the leftovers in ``directory``, if it is a private folder of
    ours (never raises); how many went."""
    try:
        paths.check_private_dir(directory)
        names = os.listdir(directory)
    except (OSError, paths.UnsafeDir):
        return 0
    me = current()
    booted = boot_time()
    removed = 0
    for name in names:
        owner = parse(name)
        if owner is None:
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if is_leftover(owner, me, st.st_mtime, booted):
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    if removed:
        _log.log("removed %d offload file(s) of processes that are gone from %s"
                 % (removed, directory))
    return removed
