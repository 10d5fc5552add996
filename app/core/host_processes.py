"""Host-side details of GPU processes, through psutil.

Static fields (name, user, command line, start time) are read once per
(pid, create time); CPU % and RSS every tick.  ``psutil.Process`` objects are
kept between ticks because CPU % is a delta since the previous call.

What the OS will not tell us is reported as such, never guessed:

* ``AccessDenied`` (another user's process, hardened /proc): the fields that
  could be read are kept, the rest stay None, status ``access_denied``;
* ``NoSuchProcess`` for a pid we have never seen: the driver reported a host
  pid from outside our PID namespace (containers) → ``not_visible``; for a pid
  we saw before: it exited between the NVML call and ours → ``exited``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Iterable

from app.core.samples import HostStatus, ProcessSample


@dataclass(slots=True)
class _Entry:
    proc: object  # psutil.Process
    create_time: float | None
    name: str | None
    user: str | None
    command: str | None
    denied: bool
    fresh: bool = True  # CPU % needs a second reading before it means anything


class HostProcessReader:
    def __init__(self, psutil_module: ModuleType | None = None) -> None:
        if psutil_module is None:
            import psutil as psutil_module  # noqa: PLW0127 - lazy: status must stay fast
        self._ps = psutil_module
        self._entries: dict[int, _Entry] = {}
        self._known_pids: set[int] = set()  # pids psutil could once see

    def enrich(self, processes: Iterable[ProcessSample]) -> list[ProcessSample]:
        out = [self._enrich_one(p) for p in processes]
        return out

    def prune(self, live_pids: set[int]) -> None:
        """Forget pids the driver no longer reports (bounded cache)."""
        for pid in [pid for pid in self._entries if pid not in live_pids]:
            del self._entries[pid]
        self._known_pids &= live_pids

    def _enrich_one(self, sample: ProcessSample) -> ProcessSample:
        ps = self._ps
        pid = sample.pid
        entry = self._entries.get(pid)
        try:
            if entry is not None and self._reused(entry, pid):
                # pid reuse: a new process behind a known pid gets fresh static
                # fields (and a fresh CPU % baseline).
                del self._entries[pid]
                entry = None
            if entry is None:
                entry = self._open(pid)
            with entry.proc.oneshot():  # type: ignore[attr-defined]
                cpu = _maybe(entry.proc.cpu_percent, ps)  # type: ignore[attr-defined]
                mem = _maybe(entry.proc.memory_info, ps)  # type: ignore[attr-defined]
            if entry.fresh:
                entry.fresh = False
                cpu = None  # unknown until the next tick, not 0
        except ps.NoSuchProcess:
            gone = self._entries.pop(pid, None)
            if pid not in self._known_pids:
                return sample._replace(host_status=HostStatus.NOT_VISIBLE)
            if gone is None:
                return sample._replace(host_status=HostStatus.EXITED)
            # Keep what we knew: "python train.py (exited)" beats a blank row.
            return sample._replace(name=gone.name, user=gone.user, command=gone.command,
                                   create_time=gone.create_time, host_status=HostStatus.EXITED)
        except ps.AccessDenied:
            if entry is None:  # not even a handle on the process
                return sample._replace(host_status=HostStatus.ACCESS_DENIED)
            cpu = mem = None
            entry.denied = True
        denied = entry.denied or mem is None
        return sample._replace(
            name=entry.name, user=entry.user, command=entry.command,
            cpu_percent=None if cpu is None else round(cpu, 1),
            host_rss=None if mem is None else mem.rss,
            create_time=entry.create_time,
            host_status=HostStatus.ACCESS_DENIED if denied else HostStatus.OK)

    def _reused(self, entry: _Entry, pid: int) -> bool:
        """Whether ``pid`` now belongs to another process than ``entry``'s.

        Asks a new ``Process``: psutil caches ``create_time()`` on the object,
        so the cached one would never notice; NoSuchProcess propagates."""
        if entry.create_time is None:
            return False  # cannot tell
        current = _maybe(self._ps.Process(pid).create_time, self._ps)
        return current is not None and abs(current - entry.create_time) > 0.01

    def _open(self, pid: int) -> _Entry:
        ps = self._ps
        proc = ps.Process(pid)  # NoSuchProcess propagates
        self._known_pids.add(pid)
        denied = False
        values = {}
        for field, getter in (("create_time", proc.create_time), ("name", proc.name),
                              ("user", proc.username), ("cmdline", proc.cmdline)):
            try:
                values[field] = getter()
            except ps.AccessDenied:
                values[field] = None
                denied = True
            except (KeyError, OSError):  # uid without a passwd entry, odd /proc
                values[field] = None
        cmdline = values["cmdline"]
        command = " ".join(cmdline) if cmdline else None
        if cmdline == [] and values["name"]:
            command = f"[{values['name']}]"  # kernel threads and zombies have no argv
        entry = _Entry(proc, values["create_time"], values["name"], values["user"], command, denied)
        try:
            proc.cpu_percent()  # prime: the first call always returns 0.0
        except ps.AccessDenied:
            pass
        self._entries[pid] = entry
        return entry


def _maybe(getter, ps):  # type: ignore[no-untyped-def]
    """Value of one psutil getter, None when access is denied for it alone."""
    try:
        return getter()
    except ps.AccessDenied:
        return None
