"""What the controller reports about an action: the request's outcome per
process, as the agent answered it, and what NVML showed before and after.

Records are created when a request is accepted, filled in by the controller
on its owner's thread (never by a worker), and measured against the first
snapshot at least ``settle_s`` after the action finished (the driver lags
behind the allocator) other than the first one after the answer, which may
have been sampled while the action still ran.  ``freed`` is the agent's own
figure, taken once; a model action's figures are its :attr:`ModelAction.figures`.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.core.agents.recording import RecordResult
from app.core.agents.types import FreeCacheResult, ModelActionResult, ModelEvent
from app.core.agents.unload_reasons import overridable
from app.core.control.measure import (
    ActionFigures,
    allocator_cache,
    gpu_used,
    nvml_usage,
    released,
)
from app.core.monitor.samples import Snapshot

FREE = "free_cache"
GC = "gc"
UNLOAD = "unload"
RELOAD = "reload"
PIN = "pin"
IDLE_TTL = "idle_ttl"
TERMINATE = "terminate"
RECORD = "record"

_ids = itertools.count(1)


def _next_id() -> int:
    return next(_ids)


@dataclass(eq=False)
class CacheAction:
    """Free the cache of ``pids`` (one after another), or gc one process."""

    kind: str  # FREE or GC
    pids: tuple[int, ...]
    labels: dict[int, str] = field(default_factory=dict)  # pid -> "train.py (20417)"
    display_id: str | None = None  # set for "Free all caches" of one GPU
    baseline: dict[int, int | None] = field(default_factory=dict)  # NVML bytes at the click
    gpu_before: int | None = None  # the GPU's NVML used bytes at the click
    id: int = field(default_factory=_next_id)
    # Filled in as it runs.
    results: dict[int, FreeCacheResult] = field(default_factory=dict)
    gc_result: dict[str, Any] | None = None
    done_at: float | None = None  # time.monotonic() when the worker finished
    # Filled in by measure().
    measured: bool = False
    released: dict[int, int | None] = field(default_factory=dict)  # NVML bytes released
    gpu_released: int | None = None
    snapshots_after: int = 0  # snapshots offered to measure() since the answer
    host: str = ""  # the remote host it ran on ("" this machine; set when started)

    @classmethod
    def free(cls, pids: Any, snapshot: Snapshot | None, labels: dict[int, str] | None = None,
             display_id: str | None = None) -> CacheAction:
        pids = tuple(pids)
        return cls(FREE, pids, dict(labels or {}), display_id,
                   {pid: nvml_usage(snapshot, pid) for pid in pids},
                   gpu_used(snapshot, display_id))

    @classmethod
    def gc(cls, pid: int, label: str | None = None) -> CacheAction:
        return cls(GC, (pid,), {pid: label} if label else {})

    @property
    def done(self) -> bool:
        return self.done_at is not None

    def label(self, pid: int) -> str:
        return self.labels.get(pid) or f"pid {pid}"

    @property
    def ok(self) -> bool:
        """Some process did what was asked (free: at least one; gc: the one)."""
        if self.kind == GC:
            return self.gc_result is not None and bool(self.gc_result.get("ok", True))
        return any(r.ok for r in self.results.values())

    @property
    def freed(self) -> int | None:
        """Bytes the agents say they freed (their reported figure, summed over the
        processes that answered); None when none said."""
        values = [r.freed for r in self.results.values() if r.ok and r.freed is not None]
        return sum(values) if values else None

    @property
    def errors(self) -> list[tuple[int, str]]:
        out = [(pid, r.error or "failed") for pid, r in self.results.items() if not r.ok]
        if self.kind == GC and self.gc_result is not None and not self.gc_result.get("ok", True):
            out.append((self.pids[0], str(self.gc_result.get("error") or "failed")))
        return out

    @property
    def wants_measure(self) -> bool:
        return self.kind == FREE and self.ok

    def measure(self, snapshot: Snapshot, now: float | None = None, settle_s: float = 0.5
                ) -> bool:
        """Compare NVML now with the click; True once measured (the first snapshot at
        least ``settle_s`` after the action finished)."""
        if self.kind != FREE or self.measured or self.done_at is None:
            return self.measured
        self.snapshots_after += 1
        now = time.monotonic() if now is None else now
        if now - self.done_at < settle_s or self.snapshots_after < 2:
            return False
        for pid in self.pids:
            self.released[pid] = released(self.baseline.get(pid), nvml_usage(snapshot, pid))
        self.gpu_released = released(self.gpu_before, gpu_used(snapshot, self.display_id))
        self.measured = True
        return True


@dataclass(eq=False)
class ModelAction:
    """One model action: unload / reload / pin of one model, or a process's idle TTL."""

    kind: str
    pid: int
    model: str | None = None  # model id (None for IDLE_TTL)
    name: str = ""  # model name for texts
    label: str = ""  # process label, "notebook.py (123)"
    to: str = "cpu"
    force: bool = False
    reason: str = "manual"
    pinned: bool | None = None
    seconds: float | None = None  # IDLE_TTL: None = off
    size: int | None = None  # model bytes (for texts while running)
    display_id: str | None = None  # the model's GPU
    baseline: int | None = None  # NVML bytes of the process on that GPU at the click
    gpu_before: int | None = None
    #: False: a record of an unload the controller did not run (the pressure policy's),
    #: which nobody measures against NVML.
    nvml: bool = True
    id: int = field(default_factory=_next_id)
    started: float = field(default_factory=time.monotonic)
    # Filled in as it runs.
    result: ModelActionResult | None = None
    ttl_result: dict[str, Any] | None = None
    done_at: float | None = None
    # Filled in by measure().
    measured: bool = False
    released: int | None = None  # NVML bytes released by the process on its GPU
    gpu_released: int | None = None
    cache_after: int | None = None  # its allocator's cache in the same snapshot
    snapshots_after: int = 0  # snapshots offered to measure() since the answer
    host: str = ""  # the remote host it ran on ("" this machine; set when started)

    @property
    def key(self) -> tuple[int, str | None]:
        return (self.pid, self.model)

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def ok(self) -> bool:
        if self.kind == IDLE_TTL:
            return bool(self.ttl_result and self.ttl_result.get("ok", False))
        return bool(self.result and self.result.ok)

    @property
    def error(self) -> str | None:
        if not self.done or self.ok:
            return None
        if self.kind == IDLE_TTL:
            return str((self.ttl_result or {}).get("error") or "failed")
        r = self.result
        return (r.error if r is not None else None) or "failed"

    @property
    def refused(self) -> bool:
        r = self.result
        return bool(self.done and r is not None and not r.ok and (
            r.code in ("refused", "managed") or (r.code is None and overridable(r.error))))

    @property
    def can_force(self) -> bool:
        return self.kind == UNLOAD and not self.force and self.refused and overridable(self.error)

    @property
    def event(self) -> ModelEvent | None:
        return self.result.event if self.result is not None else None

    @property
    def wants_measure(self) -> bool:
        return self.kind in (UNLOAD, RELOAD) and self.ok and self.nvml

    def who(self) -> str:
        return self.name or self.model or "model"

    def measure(self, snapshot: Snapshot, now: float | None = None, settle_s: float = 0.5
                ) -> bool:
        """NVML now against the click: True once measured (first snapshot at least
        ``settle_s`` after the action finished).  Unload and reload only."""
        if self.kind not in (UNLOAD, RELOAD) or self.measured or self.done_at is None:
            return self.measured
        self.snapshots_after += 1
        now = time.monotonic() if now is None else now
        if now - self.done_at < settle_s or self.snapshots_after < 2:
            return False
        self.released = released(self.baseline, nvml_usage(snapshot, self.pid, self.display_id))
        self.gpu_released = released(self.gpu_before, gpu_used(snapshot, self.display_id))
        self.cache_after = allocator_cache(snapshot, self.pid, self.display_id)
        self.measured = True
        return True

    @property
    def figures(self) -> ActionFigures:
        """The agent's figures of this unload / reload and, once measured, NVML's."""
        f = ActionFigures.of_event(self.event)
        if self.measured:
            return ActionFigures(f.moved, f.released, self.released, self.cache_after,
                                 measured=True)
        return ActionFigures(f.moved, f.released, measuring=self.wants_measure)


@dataclass(frozen=True, slots=True)
class PolicyApplied:
    """The outcome of SetAutoUnload: the runner's config after it (None: no
    policy runs now; the settings are applied when one appears)."""

    config: Any  # app.core.policies.pressure.PressurePolicyConfig | None
    error: str | None = None


class Outcome(StrEnum):
    """How a terminate ended."""

    EXITED = "exited"  # it stopped after SIGTERM
    KILLED = "killed"  # it was still running after the grace time: SIGKILL
    GONE = "gone"  # it had exited before anything was sent
    REFUSED = "refused"  # nothing sent: not ours, or its pid names another process now
    FAILED = "failed"  # a signal could not be sent, or it survived SIGKILL


@dataclass(frozen=True, slots=True)
class TerminateResult:
    """What the worker saw; ``elapsed_s`` counts from SIGTERM (None: none sent)."""

    outcome: Outcome
    elapsed_s: float | None = None
    reason: str | None = None


@dataclass(eq=False)
class TerminateAction:
    """One process terminated: SIGTERM, SIGKILL after ``grace_s``; the VRAM it held
    at the click and what NVML shows released afterwards."""

    pid: int
    create_time: float
    grace_s: float
    label: str = ""  # "train.py (20417)"
    gpus: tuple[str, ...] = ()  # display ids of the GPUs it was on at the click
    vram_before: int | None = None  # its NVML bytes over those GPUs at the click
    gpu_before: dict[str, int | None] = field(default_factory=dict)  # each GPU's used bytes
    kind: str = TERMINATE
    id: int = field(default_factory=_next_id)
    # Filled in as it runs.
    result: TerminateResult | None = None
    done_at: float | None = None
    # Filled in by measure().
    measured: bool = False
    released: int | None = None  # its NVML bytes then, against the click (gone: all)
    gpu_released: int | None = None  # the GPUs' used bytes, summed
    snapshots_after: int = 0  # snapshots offered to measure() since the answer
    host: str = ""  # the remote host it ran on ("" this machine; set when started)

    @property
    def key(self) -> tuple[int, float]:
        return (self.pid, self.create_time)

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def outcome(self) -> Outcome | None:
        return self.result.outcome if self.result is not None else None

    @property
    def ok(self) -> bool:
        """It is no longer running because of our signal."""
        return self.outcome in (Outcome.EXITED, Outcome.KILLED)

    @property
    def wants_measure(self) -> bool:
        return self.ok

    def measure(self, snapshot: Snapshot, now: float | None = None, settle_s: float = 0.5
                ) -> bool:
        """NVML now against the click: True once measured (first snapshot at least
        ``settle_s`` after it ended, not the first one).  A process NVML no longer
        lists holds 0 bytes."""
        if not self.ok or self.measured or self.done_at is None:
            return self.measured
        self.snapshots_after += 1
        now = time.monotonic() if now is None else now
        if now - self.done_at < settle_s or self.snapshots_after < 2:
            return False
        listed = [p for g in snapshot.gpus for p in g.processes if p.key == self.key]
        after = 0 if not listed else (
            None if any(p.gpu_memory is None for p in listed)
            else sum(p.gpu_memory or 0 for p in listed))
        self.released = released(self.vram_before, after)
        drops = [released(before, gpu_used(snapshot, did))
                 for did, before in self.gpu_before.items()]
        self.gpu_released = (None if not drops or any(d is None for d in drops)
                             else sum(d or 0 for d in drops))
        self.measured = True
        return True


@dataclass(eq=False)
class RecordAction:
    """A recording of one process's CUDA allocations, ``seconds`` long; the
    agent's summary by call site once it has answered."""

    pid: int
    seconds: float
    max_entries: int | None = None
    label: str = ""
    started_at: float | None = None  # the controller's clock when it was started
    kind: str = RECORD
    id: int = field(default_factory=_next_id)
    # Filled in when the agent has answered.
    result: RecordResult | None = None
    done_at: float | None = None

    host: str = ""  # the remote host it ran on ("" this machine; set when started)
    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok

    @property
    def wants_measure(self) -> bool:
        return False  # a recording moves no memory

    def measure(self, snapshot: Snapshot, now: float | None = None, settle_s: float = 0.5
                ) -> bool:
        return True  # nothing to measure (see wants_measure)

    def seconds_left(self, now: float) -> float | None:
        """Seconds of recording still to go (0 once over, the file still being
        written); None when not started or done."""
        if self.started_at is None or self.done:
            return None
        return max(0.0, self.seconds - (now - self.started_at))


Action = CacheAction | ModelAction | TerminateAction | RecordAction

__all__ = ["FREE", "GC", "IDLE_TTL", "PIN", "RECORD", "RELOAD", "TERMINATE", "UNLOAD", "Action",
           "CacheAction", "ModelAction", "Outcome", "PolicyApplied", "RecordAction",
           "TerminateAction", "TerminateResult"]
