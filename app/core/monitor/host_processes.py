"""Host-side details of GPU processes: user, command, CPU %, RSS, container.

The sampler asks for these every tick for every GPU process, so the per-tick
part must be cheap.  On Linux each pid costs one read of ``/proc/<pid>/stat``
per tick: it holds the CPU times, the resident set size and the start time,
and the start time is what detects pid reuse.  Everything that cannot change
while a process lives (name, user, command line, container) is read once per
(pid, start time), through psutil, and cached.  Elsewhere psutil's
``oneshot()`` does the per-tick reads.

What the OS will not tell us is reported as such, never guessed:

* ``AccessDenied`` (another user's process, hardened /proc): the fields that
  could be read are kept, the rest stay None, status ``access_denied``;
* no such process for a pid we have never seen: the driver reported a host
  pid from outside our PID namespace (containers) → ``not_visible``; for a pid
  we saw before: it exited between the NVML call and ours → ``exited``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from app.core.monitor.containers import ContainerNames, read_container
from app.core.monitor.samples import Container, HostStatus, ProcessSample


@dataclass(slots=True)
class _Entry:
    """What is cached about one live process between ticks."""

    proc: Any  # psutil.Process on the psutil path, None on the /proc path
    start: int | None  # /proc start time in clock ticks since boot (pid-reuse key)
    create_time: float | None  # epoch seconds
    name: str | None
    user: str | None
    command: str | None
    container: Container | None
    denied: bool
    cpu_ticks: int | None = None  # utime + stime at the previous tick (/proc path)
    cpu_at: float = -1.0  # monotonic seconds of that reading: the tick it belongs to
    fresh: bool = True  # CPU % needs a second reading before it means anything
    cpu: float | None = None  # this tick's figures, for the same pid on another GPU
    rss: int | None = None
    gone: bool = False  # found exited this tick (kept so its other GPUs' rows agree)
    # The driver's row last joined from these figures, and the joined row: an
    # unchanged row between reads is answered without building it again.
    raw: ProcessSample | None = None
    out: ProcessSample | None = None


class _Gone(Exception):
    """The pid has no process (exited, or never visible to us)."""


class HostProcessReader:
    """Joins host details to GPU processes; one instance per sampler thread.

    ``psutil_module`` replaces psutil (tests); ``proc_root`` selects the
    ``/proc`` path: by default it is used on Linux with the real psutil, and
    a test may point it at a directory laid out like ``/proc``.
    """

    def __init__(self, psutil_module: ModuleType | None = None,
                 proc_root: str | None = None, names: ContainerNames | None = None,
                 refresh_s: float = 0.0) -> None:
        """``refresh_s``: a process read less than this long ago keeps the
        figures of that read (0: read every tick).  A headless server reads
        its processes once a second while it samples NVML four times."""
        self.refresh_s = refresh_s
        # driver rows -> (when the oldest of their reads was made, the joined rows)
        self._joined: dict[tuple[ProcessSample, ...], tuple[float, tuple[ProcessSample, ...]]] = {}
        if proc_root is None and psutil_module is None and sys.platform.startswith("linux") \
                and os.path.exists("/proc/self/stat"):
            proc_root = "/proc"
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._ps: ModuleType = psutil_module
        self._proc_root = proc_root
        self._entries: dict[int, _Entry] = {}
        self._known_pids: set[int] = set()  # pids we could once see
        self._names = names if names is not None else ContainerNames()
        self._clk_tck = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._tick_s = 1.0 / self._clk_tck
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    def enrich(self, processes: Iterable[ProcessSample], now: float | None = None
               ) -> list[ProcessSample]:
        """Host details joined to ``processes``.  ``now`` (monotonic seconds)
        names the tick: a pid listed on several GPUs in one tick is read once
        and shows the same figures on each (a second CPU % over microseconds
        would be noise)."""
        if now is None:
            now = time.monotonic()
        if self.refresh_s <= 0:
            return self._join(processes, now)
        # The same driver rows as a moment ago, none of them due for a read:
        # the same joined rows (one comparison instead of a join per process).
        key = tuple(processes)
        hit = self._joined.get(key)
        if hit is not None and now - hit[0] < self.refresh_s:
            return list(hit[1])
        out = self._join(key, now)
        reads = [self._entries[p.pid].cpu_at for p in key if p.pid in self._entries]
        due_from = min(reads) if len(reads) == len(key) else now - self.refresh_s
        self._joined = {k: v for k, v in self._joined.items() if now - v[0] < self.refresh_s}
        self._joined[key] = (due_from, tuple(out))
        return out

    def _join(self, processes: Iterable[ProcessSample], now: float) -> list[ProcessSample]:
        if self._proc_root is None:
            return [self._enrich_psutil(p, now) for p in processes]
        return [self._enrich_procfs(p, now) for p in processes]

    def cached(self) -> int:
        """Processes held in the cache."""
        return len(self._entries)

    def prune(self, live_pids: set[int]) -> None:
        """Forget pids the driver no longer reports (bounded cache)."""
        for pid in [pid for pid in self._entries if pid not in live_pids]:
            del self._entries[pid]
        self._known_pids &= live_pids

    # ------------------------------------------------------------ shared
    def _read_lately(self, entry: _Entry, now: float) -> bool:
        """Read this tick (a pid on several GPUs), or within ``refresh_s``."""
        return entry.cpu_at == now or (entry.cpu_at >= 0 and 0 <= now - entry.cpu_at
                                       < self.refresh_s)

    def _gone(self, sample: ProcessSample, now: float) -> ProcessSample:
        pid = sample.pid
        gone = self._entries.get(pid)
        if gone is not None:
            # Kept, marked, until the driver stops listing the pid (prune): the
            # same pid on another GPU this tick, and later ticks, say the same.
            gone.gone, gone.cpu_at = True, now
        if pid not in self._known_pids:
            return sample._replace(host_status=HostStatus.NOT_VISIBLE)
        if gone is None:
            return sample._replace(host_status=HostStatus.EXITED)
        # Keep what we knew: "python train.py (exited)" beats a blank row.
        return sample._replace(name=gone.name, user=gone.user, command=gone.command,
                               create_time=gone.create_time, container=gone.container,
                               host_status=HostStatus.EXITED)

    def _static(self, pid: int, start: int | None, create_time: float | None) -> _Entry:
        """Name, user, command line and container, read once per process."""
        ps = self._ps
        proc = ps.Process(pid)  # NoSuchProcess / AccessDenied propagate
        self._known_pids.add(pid)
        denied = False
        values: dict[str, Any] = {}
        getters = [("name", proc.name), ("user", proc.username), ("cmdline", proc.cmdline)]
        if create_time is None:
            getters.insert(0, ("create_time", proc.create_time))
        for field, getter in getters:
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
        if create_time is None:
            create_time = values["create_time"]
        entry = _Entry(proc, start, create_time, values["name"], values["user"], command,
                       read_container(pid, self._proc_root or "/proc", self._names), denied)
        self._entries[pid] = entry
        return entry

    def _again(self, sample: ProcessSample, entry: _Entry, denied: bool) -> ProcessSample:
        """The figures of the last read joined to ``sample``."""
        if entry.raw == sample and entry.out is not None:
            return entry.out
        entry.raw = sample
        entry.out = self._sample(sample, entry, entry.cpu, entry.rss, denied)
        return entry.out

    @staticmethod
    def _sample(sample: ProcessSample, entry: _Entry, cpu: float | None,
                rss: int | None, denied: bool) -> ProcessSample:
        # Built whole (``_replace`` costs three times as much, 500 times a tick).
        return ProcessSample(
            sample.pid, sample.gpu_memory, sample.sm_util, sample.kind, entry.name,
            entry.user, entry.command, None if cpu is None else round(cpu, 1), rss,
            entry.create_time, HostStatus.ACCESS_DENIED if denied else HostStatus.OK,
            entry.container)

    # ------------------------------------------------------- /proc path
    def _enrich_procfs(self, sample: ProcessSample, now: float) -> ProcessSample:
        pid = sample.pid
        entry = self._entries.get(pid)
        if entry is not None and self._read_lately(entry, now):
            if entry.gone:
                return self._gone(sample, now)
            return self._again(sample, entry, entry.denied)
        ps = self._ps
        try:
            start, cpu_ticks, rss_pages = self._read_stat(pid)
        except _Gone:
            return self._gone(sample, now)
        except PermissionError:  # /proc mounted with hidepid=1
            if entry is None:
                return sample._replace(host_status=HostStatus.ACCESS_DENIED)
            return self._sample(sample, entry, None, None, True)
        except (OSError, ValueError, IndexError):
            # An odd /proc answer for this one pid (EIO, a malformed line): its
            # figures are unknown this tick; the other processes are unaffected.
            if entry is None:
                return sample
            return self._sample(sample, entry, None, None, entry.denied)
        self._known_pids.add(pid)  # it existed: if it is gone a moment later, it exited
        if entry is not None and (entry.start != start or entry.gone):
            del self._entries[pid]  # pid reuse: a new process behind a known pid
            entry = None
        if entry is None:
            try:
                entry = self._static(pid, start, self._create_time(start))
            except ps.NoSuchProcess:
                return self._gone(sample, now)
            except ps.AccessDenied:
                return sample._replace(host_status=HostStatus.ACCESS_DENIED)
        cpu = None
        if entry.cpu_ticks is not None and now > entry.cpu_at:
            cpu = (cpu_ticks - entry.cpu_ticks) * self._tick_s / (now - entry.cpu_at) * 100.0
        entry.cpu_ticks, entry.cpu_at = cpu_ticks, now
        entry.cpu, entry.rss, entry.raw = cpu, rss_pages * self._page, None
        return self._sample(sample, entry, cpu, entry.rss, entry.denied)

    def _read_stat(self, pid: int) -> tuple[int, int, int]:
        """(start time, utime + stime, rss pages) from one read of /proc/<pid>/stat."""
        try:
            fd = os.open(f"{self._proc_root}/{pid}/stat", os.O_RDONLY)
        except (FileNotFoundError, ProcessLookupError) as err:
            raise _Gone from err
        try:
            data = os.read(fd, 4096)
        except ProcessLookupError as err:  # exited between open and read
            raise _Gone from err
        finally:
            os.close(fd)
        # The command name is in parentheses and may itself hold ") ".
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) < 22:
            raise ValueError(f"/proc/{pid}/stat has {len(fields)} fields after the name")
        # proc(5): utime=14, stime=15, starttime=22, rss=24 (1-based; ours start at 3).
        return int(fields[19]), int(fields[11]) + int(fields[12]), int(fields[21])

    def _create_time(self, start: int) -> float | None:
        """Epoch seconds of a start time, computed as psutil does (same value).
        The boot time is read afresh, as psutil does: a clock step moves it."""
        try:
            with open(f"{self._proc_root}/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"btime"):
                        return start / self._clk_tck + float(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return None

    # ------------------------------------------------------ psutil path
    def _enrich_psutil(self, sample: ProcessSample, now: float) -> ProcessSample:
        ps = self._ps
        pid = sample.pid
        entry = self._entries.get(pid)
        if entry is not None and self._read_lately(entry, now):
            if entry.gone:
                return self._gone(sample, now)
            return self._again(sample, entry, entry.denied or entry.rss is None)
        try:
            if entry is not None and self._reused(entry, pid):
                # pid reuse: a new process behind a known pid gets fresh static
                # fields (and a fresh CPU % baseline).
                del self._entries[pid]
                entry = None
            if entry is None:
                entry = self._static(pid, None, None)
                try:
                    entry.proc.cpu_percent()  # prime: the first call always returns 0.0
                except ps.AccessDenied:
                    pass
            with entry.proc.oneshot():
                cpu = _maybe(entry.proc.cpu_percent, ps)
                mem = _maybe(entry.proc.memory_info, ps)
            if entry.fresh:
                entry.fresh = False
                cpu = None  # unknown until the next tick, not 0
        except ps.NoSuchProcess:
            return self._gone(sample, now)
        except ps.AccessDenied:
            if entry is None:  # not even a handle on the process
                return sample._replace(host_status=HostStatus.ACCESS_DENIED)
            cpu = mem = None
            entry.denied = True
        entry.cpu_at, entry.cpu, entry.rss = now, cpu, None if mem is None else mem.rss
        entry.raw = None
        return self._sample(sample, entry, cpu, entry.rss, entry.denied or mem is None)

    def _reused(self, entry: _Entry, pid: int) -> bool:
        """Whether ``pid`` now belongs to another process than ``entry``'s.

        Asks a new ``Process``: psutil caches ``create_time()`` on the object,
        so the cached one would never notice; NoSuchProcess propagates."""
        if entry.create_time is None:
            return False  # cannot tell
        current = _maybe(self._ps.Process(pid).create_time, self._ps)
        return current is not None and abs(current - entry.create_time) > 0.01


def _maybe(getter, ps):  # type: ignore[no-untyped-def]
    """Value of one psutil getter, None when access is denied for it alone."""
    try:
        return getter()
    except ps.AccessDenied:
        return None
