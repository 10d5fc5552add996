"""Agent actions (free cache, gc) run off the GUI thread, and what NVML saw.

``AgentDirectory.free_cache`` blocks on a socket round trip (up to its
timeout), so :class:`AgentActionRunner` runs it in a :class:`QThreadPool`; each
process's result comes back on the GUI thread through a queued signal.

An :class:`AgentAction` also carries the NVML figures taken at the click, so
the window can compare what the agent *says* it freed with what the driver
*shows* was released: :meth:`AgentAction.measure` takes the first snapshot at
least :attr:`AgentActionRunner.settle_s` after the action finished.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.core.agents.types import FreeCacheResult
from app.core.monitor.samples import Snapshot
from app.ui.agents.action_runner import ActionJob, ActionRunner, DirectoryLike, error_text
from app.ui.style.format import fmt_bytes

FREE = "free_cache"
GC = "gc"

_ids = itertools.count(1)


def nvml_usage(snapshot: Snapshot | None, pid: int, display_id: str | None = None) -> int | None:
    """NVML bytes of ``pid`` in ``snapshot`` (on ``display_id``, or summed over its GPUs);
    None when the process is absent or its figure unknown."""
    if snapshot is None:
        return None
    total = None
    for gpu in snapshot.gpus:
        if display_id is not None and gpu.display_id != display_id:
            continue
        for p in gpu.processes:
            if p.pid == pid:
                if p.gpu_memory is None:
                    return None
                total = (total or 0) + p.gpu_memory
    return total


def gpu_used(snapshot: Snapshot | None, display_id: str | None) -> int | None:
    if snapshot is None or display_id is None:
        return None
    for gpu in snapshot.gpus:
        if gpu.display_id == display_id:
            return gpu.memory_used
    return None


@dataclass(eq=False)
class AgentAction:
    """One click: free the cache of ``pids`` (sequentially), or gc one process."""

    kind: str  # FREE or GC
    pids: tuple[int, ...]
    labels: dict[int, str] = field(default_factory=dict)  # pid -> "train.py (20417)"
    display_id: str | None = None  # set for "Free all caches" of one GPU
    baseline: dict[int, int | None] = field(default_factory=dict)  # NVML bytes at the click
    gpu_before: int | None = None  # the GPU's NVML used at the click
    id: int = field(default_factory=lambda: next(_ids))
    # Filled in as it runs.
    results: dict[int, FreeCacheResult] = field(default_factory=dict)
    gc_result: dict | None = None
    done_at: float | None = None  # time.monotonic() when the worker finished
    # Filled in by measure().
    measured: bool = False
    released: dict[int, int | None] = field(default_factory=dict)  # NVML bytes released
    gpu_released: int | None = None

    @classmethod
    def free(cls, pids, snapshot: Snapshot | None, labels: dict[int, str] | None = None,
             display_id: str | None = None) -> AgentAction:
        pids = tuple(pids)
        return cls(FREE, pids, dict(labels or {}), display_id,
                   {pid: nvml_usage(snapshot, pid) for pid in pids},
                   gpu_used(snapshot, display_id))

    @classmethod
    def gc(cls, pid: int, label: str | None = None) -> AgentAction:
        return cls(GC, (pid,), {pid: label} if label else {})

    # -- state ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.done_at is not None

    def label(self, pid: int) -> str:
        return self.labels.get(pid) or f"pid {pid}"

    @property
    def freed(self) -> int | None:
        """Bytes the agents say they freed (sum over the processes that answered)."""
        values = [r.freed for r in self.results.values() if r.ok and r.freed is not None]
        return sum(values) if values else None

    @property
    def errors(self) -> list[tuple[int, str]]:
        out = [(pid, r.error or "failed") for pid, r in self.results.items() if not r.ok]
        if self.kind == GC and self.gc_result is not None and not self.gc_result.get("ok", True):
            out.append((self.pids[0], str(self.gc_result.get("error") or "failed")))
        return out

    def measure(self, snapshot: Snapshot, now: float | None = None, settle_s: float = 0.5
                ) -> bool:
        """Compare NVML now with the click; True once measured (the first snapshot at
        least ``settle_s`` after the action finished)."""
        if self.kind != FREE or self.measured or self.done_at is None:
            return self.measured
        now = time.monotonic() if now is None else now
        if now - self.done_at < settle_s:
            return False
        for pid in self.pids:
            before = self.baseline.get(pid)
            after = nvml_usage(snapshot, pid)
            self.released[pid] = None if before is None or after is None else before - after
        before = self.gpu_before
        after = gpu_used(snapshot, self.display_id)
        self.gpu_released = None if before is None or after is None else before - after
        self.measured = True
        return True

    # -- text ---------------------------------------------------------------------------
    def summary(self) -> str:
        """One line for the status bar."""
        if self.kind == GC:
            return self._gc_text()
        if not self.done:
            return "Freeing caches…" if len(self.pids) > 1 else f"Freeing cache of {self.label(self.pids[0])}…"
        subject = (f"GPU {self.display_id}: " if self.display_id is not None
                   else f"{self.label(self.pids[0])}: ")
        ok = [pid for pid, r in self.results.items() if r.ok]
        errors = self.errors
        if not ok:
            pid, err = errors[0] if errors else (self.pids[0], "no answer")
            who = f" ({self.label(pid)})" if len(self.pids) > 1 else ""
            return f"{subject}free cache failed{who}: {err}"
        text = f"{subject}freed {fmt_bytes(self.freed)}"
        if len(self.pids) > 1:
            text += f" in {len(ok)} process{'es' if len(ok) != 1 else ''}"
        text += " — " + self._nvml_text()
        if errors:
            text += f" ({len(errors)} failed: {errors[0][1]})"
        return text

    def details(self) -> list[str]:
        """One line per process (tooltips, the detail view)."""
        if self.kind == GC:
            return [self._gc_text()]
        lines = []
        for pid in self.pids:
            r = self.results.get(pid)
            if r is None:
                lines.append(f"{self.label(pid)}: {'no answer' if self.done else 'waiting…'}")
            elif not r.ok:
                lines.append(f"{self.label(pid)}: failed: {r.error or 'no reason given'}")
            else:
                line = f"{self.label(pid)}: freed {fmt_bytes(r.freed)}"
                if self.measured:
                    line += f", NVML {_released_text(self.released.get(pid), pid in self.released)}"
                lines.append(line)
        return lines

    def _nvml_text(self) -> str:
        if not self.measured:
            return "measuring with NVML…"
        if self.display_id is not None:
            value = self.gpu_released
            where = f" on GPU {self.display_id}"
        else:
            value = self.released.get(self.pids[0])
            where = ""
            if value is None and self.baseline.get(self.pids[0]) is not None:
                return "NVML: the process has ended"
        if value is None:
            return "NVML release unknown"
        if value <= 0:
            return f"NVML shows nothing released{where}"
        return f"NVML shows {fmt_bytes(value)} released{where}"

    def _gc_text(self) -> str:
        who = self.label(self.pids[0])
        r = self.gc_result
        if r is None:
            return f"Running gc in {who}…"
        if not r.get("ok", True):
            return f"{who}: gc failed: {r.get('error') or 'no reason given'}"
        collected = r.get("collected")
        seconds = r.get("seconds")
        text = f"{who}: gc collected {collected if collected is not None else 'n/a'} objects"
        if isinstance(seconds, (int, float)):
            text += f" in {seconds * 1000:.0f} ms"
        return text


def _released_text(value: int | None, known_pid: bool) -> str:
    if value is None:
        return "ended" if known_pid else "n/a"
    if value <= 0:
        return "nothing released"
    return f"{fmt_bytes(value)} released"


class _Relay(QObject):
    """Created on the GUI thread; the worker emits through it (queued to the GUI)."""

    progress = Signal(object, object)  # action, FreeCacheResult
    finished = Signal(object)  # action


class _Job(ActionJob):
    def run(self) -> None:  # on a pool thread
        action = self._action
        directory = self._directory
        try:
            if action.kind == GC:
                try:
                    if directory is None:
                        raise RuntimeError("no agent connection")
                    result = directory.collect_garbage(action.pids[0], self._timeout_s)
                    action.gc_result = dict(result) if isinstance(result, dict) else {
                        "ok": False, "error": f"unexpected answer {result!r}"}
                except Exception as exc:  # shown, never raised
                    action.gc_result = {"ok": False, "error": error_text(exc)}
            else:
                for pid in action.pids:
                    try:
                        if directory is None:
                            raise RuntimeError("no agent connection")
                        result = directory.free_cache(pid, self._timeout_s)
                        if not isinstance(result, FreeCacheResult):
                            raise TypeError(f"unexpected answer {result!r}")
                    except Exception as exc:
                        result = FreeCacheResult(pid=pid, ok=False, error=error_text(exc))
                    self._relay.progress.emit(action, result)
        finally:
            self._relay.finished.emit(action)


class AgentActionRunner(ActionRunner):
    """Runs agent actions (free cache, gc) on a thread pool; every signal arrives on
    the GUI thread."""

    action_progress = Signal(object, object)  # AgentAction, FreeCacheResult (one process)

    def __init__(self, directory: DirectoryLike, parent: QObject | None = None,
                 timeout_s: float = 30.0, settle_s: float = 0.5) -> None:
        super().__init__(directory, parent, timeout_s, settle_s, threads=2)

    def busy_pids(self) -> set[int]:
        return {pid for action, _ in self._running.values() for pid in action.pids}

    def submit(self, action: AgentAction) -> None:
        relay = _Relay(self)
        relay.progress.connect(self._on_progress, Qt.ConnectionType.QueuedConnection)
        self._start(action, _Job, relay)

    @Slot(object, object)
    def _on_progress(self, action: AgentAction, result: FreeCacheResult) -> None:
        action.results[result.pid] = result
        self.action_progress.emit(action, result)


__all__ = ["AgentAction", "AgentActionRunner", "FREE", "GC", "nvml_usage", "gpu_used"]
