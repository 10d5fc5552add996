"""Terminating a GPU process: which ones may be, and the signals themselves.

Only the user's own processes are terminated.  :func:`check` decides from the
latest snapshot (owner, pid reuse, the app itself, demo processes) on the
controller's owner thread; :func:`run` asks the OS again right before each
signal (real and effective uid, start time) on a worker thread: the snapshot
can be a second old, and a pid can name another process by then.

SIGTERM first, so the process can save and release cleanly; SIGKILL once
``grace_s`` has passed.  A zombie counts as ended: it holds no GPU memory, and
only its parent can reap it.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from app.core.control.measure import gpu_used, nvml_usage
from app.core.control.records import Outcome, TerminateAction, TerminateResult
from app.core.control.requests import Refusal, RequestError, Terminate
from app.core.control.targets import label_of
from app.core.monitor.samples import HostStatus, ProcessSample, Snapshot

#: Start times (epoch seconds) this close are the same process: /proc's clock ticks.
SAME_START_S = 0.05
#: How long to wait for a process to end after SIGKILL before calling it stuck.
KILL_WAIT_S = 5.0
ONLY_OWN = "only your own processes can be terminated"


@functools.cache
def current_user() -> str | None:
    """This app's user as ``ProcessSample.user`` spells owners (psutil's rule: the real
    uid's passwd name, else the uid as text).  Read from the passwd database, not
    psutil: it is called on the GUI thread."""
    try:
        import pwd
    except ImportError:  # no passwd database (Windows): nothing can be matched
        return None
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check(snapshot: Snapshot | None, req: Terminate, busy: set[int],
          user: str | None = None, here: bool = True) -> TerminateAction:
    """The action ``req`` asks for, or RequestError saying why not (nothing sent).

    ``busy``: pids a terminate is running on; ``user``: whose processes may be
    terminated (default :func:`current_user`; on a remote host, the user its
    server acts for); ``here``: the snapshot is this machine's."""
    if req.pid <= 1:
        raise RequestError(Refusal.PROTECTED, f"pid {req.pid} is the system's init: "
                           "it is never terminated")
    if here and req.pid == os.getpid():
        raise RequestError(Refusal.PROTECTED, "that is VRAM Steward itself")
    if snapshot is None:
        raise RequestError(Refusal.NO_SNAPSHOT, "no sample yet")
    samples = [(g.display_id, p) for g in snapshot.gpus for p in g.processes
               if p.pid == req.pid]
    if not samples:
        raise RequestError(Refusal.UNKNOWN_PROCESS,
                           f"no process {req.pid} on any GPU in the latest sample")
    label = label_of(snapshot, req.pid)
    sample = _best(p for _, p in samples)
    if snapshot.source == "demo" or sample.host_status is HostStatus.SIMULATED:
        raise RequestError(Refusal.SIMULATED,
                           f"{label} is a simulated process (demo): there is nothing to signal")
    if sample.host_status is HostStatus.NOT_VISIBLE:
        raise RequestError(Refusal.NOT_VISIBLE, f"{label}: its pid is from another PID "
                           "namespace (a container) and is not visible here")
    if sample.host_status is HostStatus.EXITED:
        raise RequestError(Refusal.GONE, f"{label} has exited")
    if req.create_time is not None and sample.create_time is not None \
            and abs(req.create_time - sample.create_time) > SAME_START_S:
        raise RequestError(Refusal.GONE, f"pid {req.pid} now belongs to another process")
    me = current_user() if user is None and here else user
    if sample.user is None:
        raise RequestError(Refusal.NOT_OWNED, f"{label}: its owner is not visible here "
                           f"(access denied): {ONLY_OWN}")
    if me is None or sample.user != me:
        raise RequestError(Refusal.NOT_OWNED, f"{sample.user}'s process: {ONLY_OWN}")
    if sample.create_time is None:
        raise RequestError(Refusal.UNKNOWN_PROCESS, f"{label}: its start time is unknown, "
                           "so a later process with the same pid could not be told apart")
    if req.pid in busy:
        raise RequestError(Refusal.BUSY, f"already terminating {label}")
    gpus = tuple(dict.fromkeys(did for did, _ in samples))
    return TerminateAction(req.pid, sample.create_time, req.grace_s, label, gpus,
                           nvml_usage(snapshot, req.pid),
                           {did: gpu_used(snapshot, did) for did in gpus})


def _best(samples: Any) -> ProcessSample:
    """The row with host details, when one GPU's row has them and another's not."""
    rows: list[ProcessSample] = list(samples)
    return next((p for p in rows if p.user is not None), rows[0])


def run(action: TerminateAction, uid: int | None = None, ps: Any = None,
        kill_wait_s: float = KILL_WAIT_S, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep) -> TerminateResult:
    """SIGTERM, SIGKILL after ``action.grace_s``: what happened.  Blocks up to the
    grace time plus ``kill_wait_s``; errors are answers, never raised.
    ``uid``: the user whose processes may be signalled (default: ours)."""
    if ps is None:
        import psutil

        ps = psutil
    uid = os.getuid() if uid is None else uid
    try:
        proc = ps.Process(action.pid)
        if abs(proc.create_time() - action.create_time) > SAME_START_S:
            return TerminateResult(Outcome.REFUSED,
                                   reason=f"pid {action.pid} now belongs to another process")
        uids = proc.uids()
        if uids.real != uid or uids.effective != uid:
            return TerminateResult(Outcome.REFUSED, reason=f"{_owner(proc, uids.real)}'s "
                                   f"process: {ONLY_OWN}")
        if proc.status() == ps.STATUS_ZOMBIE:
            return TerminateResult(Outcome.GONE, reason="it had exited (a zombie: its "
                                   "parent has not reaped it)")
    except ps.NoSuchProcess:  # ZombieProcess included
        return TerminateResult(Outcome.GONE, reason="it had exited")
    except ps.AccessDenied:
        return TerminateResult(Outcome.REFUSED, reason=f"its owner is not visible here "
                               f"(access denied): {ONLY_OWN}")
    started = clock()
    for sig, wait_s, outcome in ((signal.SIGTERM, action.grace_s, Outcome.EXITED),
                                 (signal.SIGKILL, kill_wait_s, Outcome.KILLED)):
        try:
            proc.send_signal(sig)  # psutil checks the start time again
        except ps.NoSuchProcess:
            if sig == signal.SIGTERM:
                return TerminateResult(Outcome.GONE, reason="it had exited")
            return TerminateResult(Outcome.EXITED, clock() - started)
        except ps.AccessDenied:
            return TerminateResult(Outcome.FAILED, None if sig == signal.SIGTERM
                                   else clock() - started,
                                   f"not permitted to send {sig.name}")
        if _wait_ended(proc, ps, wait_s, clock, sleep):
            return TerminateResult(outcome, clock() - started)
    return TerminateResult(Outcome.FAILED, clock() - started,
                           f"still running {kill_wait_s:g} s after SIGKILL "
                           "(stuck in the kernel, e.g. on a driver call)")


def _owner(proc: Any, uid: int) -> str:
    try:
        return str(proc.username())
    except Exception:
        return f"uid {uid}"


def _ended(proc: Any, ps: Any) -> bool:
    try:
        return not proc.is_running() or proc.status() == ps.STATUS_ZOMBIE
    except ps.NoSuchProcess:
        return True
    except ps.AccessDenied:
        return False


def _wait_ended(proc: Any, ps: Any, timeout_s: float, clock: Callable[[], float],
                sleep: Callable[[float], None]) -> bool:
    """Poll until ``proc`` has ended (True) or ``timeout_s`` passed (False).  psutil's
    own wait() would count a zombie as running until its parent reaps it."""
    deadline = clock() + timeout_s
    delay = 0.005
    while not _ended(proc, ps):
        left = deadline - clock()
        if left <= 0:
            return False
        sleep(min(delay, left))
        delay = min(delay * 2, 0.05)
    return True


__all__ = ["KILL_WAIT_S", "SAME_START_S", "check", "current_user", "run"]
