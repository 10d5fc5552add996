"""The app's memory-pressure policy: unload idle models when a GPU fills up.

Qt-free.  ``PressurePolicy`` is pure logic: it looks at one ``Snapshot`` (NVML
figures per GPU plus every agent's report) and decides; ``PolicyRunner`` is the
small driver that the ``Collector`` feeds every snapshot, which carries the
decided unloads out through an ``AgentDirectory`` on a worker thread of its
own (an unload takes seconds) and keeps a log of every decision for the GUI.

The rule (per GPU, NVML ``memory_used / memory_total``):

* When the fraction reaches ``threshold`` (90 %) while the GPU is *armed*, the
  policy acts once: it unloads idle models that live on that GPU, longest idle
  first, until the projected usage (used minus the bytes those models hold on
  that GPU) is below ``rearm`` (85 %).  Then the GPU is disarmed.
* A disarmed GPU is re-armed when its usage drops below ``rearm``: hysteresis,
  so a GPU hovering around 90 % costs one action per crossing, not one a tick.
* ``min_interval_s`` (30 s) must pass between two actions on the same GPU; a
  crossing sooner is deferred (logged once) and acted on once it has passed,
  if the GPU is still above the threshold.
* A model is eligible when it is resident, not pinned, its agent names no
  ``auto_unload_blocker``, and it has been idle for at least ``min_idle_s``
  (5 min) on the agent's idle clock (``idle_since``: the last forward, or
  before any forward when the agent first saw it; an older agent's last
  forward).  The agent has watched the model all along, so its clock is
  trusted from the app's first sight: an app started after two idle hours
  does not wait five more minutes.  A model server's model, whose idle
  figure is the server's own or the app's, must also have been in this
  policy's view that long.  Nor is a model reloaded less than ``RELOAD_GRACE_S`` (60 s, the
  agent's own rule too) ago: it was just wanted back.  The agent alone says
  what blocks an automatic unload (training evidence, torch.compile, shared
  tensors, ...): the policy never re-derives that from ``training`` or
  ``requires_grad``, and a model whose idle time is unknown is never chosen.
  A model belongs to a GPU when its home device is the CUDA device that the
  process's agent maps to that GPU's UUID (``AgentReport.device_for_gpu``;
  CUDA_VISIBLE_DEVICES renumbers devices inside a process).
* Every decision is logged (``PolicyDecision``), "nothing eligible" and
  "deferred" included, with its reason; an unload's decision is updated with
  the agents' answers and the bytes really released once it has run.

The projection counts only the models' own bytes: the agent also empties the
allocator cache after an unload, so the real drop is usually larger.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.agent.protocol import RELOAD_GRACE_S
from app.core.agents.types import ModelActionResult
from app.core.control.measure import ActionFigures, released_text
from app.core.policies.server_models import SERVER_DEVICE, server_model_key
from app.core.policies.server_models import candidates as server_candidates
from app.core.policies.thresholds import ALERT_AT, REARM_AT
from app.core.units import fmt_bytes, fmt_duration

if TYPE_CHECKING:
    from app.core.agents.directory import AgentDirectory
    from app.core.agents.types import AgentReport, ModelInfo
    from app.core.monitor.samples import GpuSample, Snapshot

log = logging.getLogger(__name__)

UNLOAD, NOTHING_ELIGIBLE, DEFERRED = "unload", "nothing eligible", "deferred"
IDLE_UNKNOWN = "idle time unknown"


@dataclass(frozen=True, slots=True)
class PressurePolicyConfig:
    enabled: bool = True
    threshold: float = ALERT_AT  # act when used / total reaches this
    rearm: float = REARM_AT  # unload until projected usage is below this; re-arm below it
    min_idle_s: float = 300.0  # seconds on a model's idle clock (see ModelInfo.idle_since)
    min_interval_s: float = 30.0  # between two actions on the same GPU
    target: str = "cpu"  # where unloaded weights go: "cpu" (pinned host memory) or "disk"

    def __post_init__(self) -> None:
        if not 0.0 < self.rearm <= self.threshold <= 1.0:
            raise ValueError("need 0 < rearm <= threshold <= 1")
        if self.target not in ("cpu", "disk"):
            raise ValueError("target must be 'cpu' or 'disk'")


@dataclass(frozen=True, slots=True)
class UnloadAction:
    """Unload one model because its GPU is under pressure."""

    pid: int
    model: str  # the agent's model id
    name: str
    gpu: int  # NVML index
    gpu_uuid: str | None
    device: str  # the model's home device inside its process, "cuda:0"
    bytes: int  # what it holds on that GPU (parameters + buffers)
    idle_s: float  # seconds on the agent's idle clock when decided


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """One decision for one GPU: what was seen, what was done, and why."""

    seq: int
    time: float  # epoch seconds (the snapshot's)
    gpu: int
    gpu_uuid: str | None
    used: int  # bytes, NVML
    total: int
    kind: str  # UNLOAD, NOTHING_ELIGIBLE or DEFERRED
    reason: str  # one line for people
    actions: tuple[UnloadAction, ...] = ()
    projected_used: int | None = None  # used minus the actions' bytes
    skipped: tuple[tuple[int, str, str, str], ...] = ()  # (pid, model id, name, why not)
    threshold: float | None = None  # the config's threshold when decided
    # Filled in once the unloads have run (UNLOAD only):
    done: bool = False
    results: tuple[ModelActionResult, ...] = ()
    bytes_released: int | None = None

    @property
    def fraction(self) -> float:
        return self.used / self.total if self.total else 0.0

    @property
    def unloaded(self) -> tuple[tuple[UnloadAction, ActionFigures], ...]:
        """The unloads that went through, each with its agent's figures."""
        done = {(r.pid, r.model): r for r in self.results if r.ok}
        return tuple((a, ActionFigures.of_event(done[a.pid, a.model].event))
                     for a in self.actions if (a.pid, a.model) in done)

    @property
    def freed(self) -> int | None:
        """What the unloads gave back for the models themselves: each model's own
        share of its allocator's release (cache held before is not the models');
        None when no agent said."""
        own = [f.own for _, f in self.unloaded if f.own is not None]
        return sum(own) if own else None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq, "time": self.time, "gpu": self.gpu, "gpu_uuid": self.gpu_uuid,
            "used": self.used, "total": self.total, "fraction": round(self.fraction, 4),
            "kind": self.kind, "reason": self.reason,
            "actions": [dataclasses.asdict(a) for a in self.actions],
            "projected_used": self.projected_used,
            "skipped": [{"pid": p, "model": m, "name": n, "why": w}
                        for p, m, n, w in self.skipped],
            "threshold": self.threshold,
            "done": self.done, "results": [r.to_json() for r in self.results],
            "bytes_released": self.bytes_released,
        }


def _why_not(model: ModelInfo, idle_s: float | None, min_idle_s: float, seen_at: float
             ) -> str | None:
    """Why ``model`` may not be unloaded automatically (None: it may); ``seen_at``:
    epoch seconds of its report."""
    if model.state != "resident":
        return model.state + (f" to {model.offloaded_to}" if model.offloaded_to else "")
    if model.pinned:
        return "pinned"
    if model.auto_unload_blocker:
        return model.auto_unload_blocker
    if model.reloaded_at is not None:
        reloaded_s = max(0.0, seen_at - model.reloaded_at)  # a clock ahead: just now
        if reloaded_s < RELOAD_GRACE_S:
            return f"reloaded {reloaded_s:.0f} s ago (< {RELOAD_GRACE_S:g} s)"
    if idle_s is None:
        return IDLE_UNKNOWN
    if idle_s < min_idle_s:
        return f"idle {idle_s:.0f} s (< {min_idle_s:g} s)"
    return None


class PressurePolicy:
    """Decides; does nothing else.  Keeps only its hysteresis state per GPU.

    Not thread-safe: one thread feeds it snapshots (``PolicyRunner`` does).
    """

    def __init__(self, config: PressurePolicyConfig | None = None) -> None:
        self.config = config or PressurePolicyConfig()
        self._armed: dict[str, bool] = {}
        self._last_action: dict[str, float] = {}
        self._deferred: set[str] = set()
        self._seq = 0
        #: (pid, model id) -> monotonic seconds this policy first saw the model.
        self._found: dict[tuple[int, str], float] = {}

    def set_config(self, config: PressurePolicyConfig) -> None:
        if config.enabled and not self.config.enabled:
            self.reset()  # a fresh start: every GPU armed
        self.config = config

    def reset(self) -> None:
        self._armed.clear()
        self._deferred.clear()

    def armed(self, gpu: GpuSample) -> bool:
        return self._armed.get(self._key(gpu), True)

    def decide(self, snapshot: Snapshot, now: float | None = None) -> list[UnloadAction]:
        """The unloads to do now (empty: none).  ``now`` is monotonic seconds
        (default the snapshot's) for the minimum interval."""
        return [a for d in self.evaluate(snapshot, now) for a in d.actions]

    def evaluate(self, snapshot: Snapshot, now: float | None = None) -> list[PolicyDecision]:
        """Every decision this snapshot calls for, with its reason."""
        cfg = self.config
        now = snapshot.monotonic if now is None else now
        self._note_models(snapshot, now)
        decisions = []
        for gpu in snapshot.gpus:
            if gpu.memory_used is None or not gpu.memory_total:
                continue
            key = self._key(gpu)
            fraction = gpu.memory_used / gpu.memory_total
            if fraction < cfg.rearm:
                if not self._armed.get(key, True):
                    log.debug("GPU %s re-armed at %.1f %%", gpu.display_id, fraction * 100)
                self._armed[key] = True
                self._deferred.discard(key)
                continue
            if not cfg.enabled or fraction < cfg.threshold or not self._armed.get(key, True):
                continue
            last = self._last_action.get(key)
            if last is not None and now - last < cfg.min_interval_s:
                if key not in self._deferred:
                    self._deferred.add(key)
                    decisions.append(self._decision(
                        snapshot, gpu, DEFERRED,
                        f"{fraction:.0%} used; the last unload on this GPU was "
                        f"{now - last:.0f} s ago (minimum interval {cfg.min_interval_s:g} s)"))
                continue
            self._deferred.discard(key)
            self._armed[key] = False  # once per crossing, whatever comes of it
            decisions.append(self._plan(snapshot, gpu, fraction, now))
            if decisions[-1].kind == UNLOAD:
                self._last_action[key] = now
        for d in decisions:
            log.info("pressure policy, GPU %s: %s: %s", d.gpu, d.kind, d.reason)
        return decisions

    # -- internals
    @staticmethod
    def _key(gpu: GpuSample) -> str:
        return gpu.uuid or f"#{gpu.display_id}"

    def _note_models(self, snapshot: Snapshot, now: float) -> None:
        """When each model server's model was first seen (an agent's idle clock
        needs no second opinion); a server gone forgets its models."""
        found = self._found
        for server in snapshot.servers:
            for sm in server.models:
                found.setdefault((server.pid, server_model_key(sm.id)), now)
        if len(found) > 4 * sum(len(s.models) for s in snapshot.servers) + 64:
            live = {p for s in snapshot.servers for p in s.pids}
            self._found = {k: t for k, t in found.items() if k[0] in live}

    def watched_s(self, pid: int, model: str, now: float) -> float:
        """Seconds this policy has seen model ``model`` of ``pid`` (0: never)."""
        first = self._found.get((pid, model))
        return 0.0 if first is None else max(0.0, now - first)

    def _decision(self, snapshot: Snapshot, gpu: GpuSample, kind: str, reason: str,
                  **fields: Any) -> PolicyDecision:
        self._seq += 1
        return PolicyDecision(seq=self._seq, time=snapshot.timestamp, gpu=gpu.index,
                              gpu_uuid=gpu.uuid, used=int(gpu.memory_used or 0),
                              total=int(gpu.memory_total or 0), kind=kind, reason=reason,
                              threshold=self.config.threshold, **fields)

    def candidates(self, snapshot: Snapshot, gpu: GpuSample, now: float | None = None
                   ) -> tuple[list[UnloadAction], list[tuple[int, str, str, str]]]:
        """(eligible models on ``gpu``, longest idle first; the others with why not).
        ``now``: monotonic seconds for how long each model has been seen (None:
        seen long enough)."""
        eligible: list[UnloadAction] = []
        skipped: list[tuple[int, str, str, str]] = []
        agents: Mapping[int, AgentReport] = snapshot.agents or {}
        for pid, report in sorted(agents.items()):
            dev = report.device_for_gpu(gpu.index, gpu.uuid)
            if dev is None:
                continue  # this process has nothing on that GPU
            cuda = f"cuda:{dev.index}"
            seen_at = report.received_at or snapshot.timestamp
            for m in report.models:
                home = m.home_device or m.device
                if home != cuda:
                    continue
                idle = m.idle_s(seen_at)
                why = _why_not(m, idle, self.config.min_idle_s, seen_at)
                if why is not None or idle is None:
                    skipped.append((pid, m.id, m.name, why or IDLE_UNKNOWN))
                    continue
                nbytes = m.bytes_on(cuda) or (m.param_bytes or 0) + (m.buffer_bytes or 0)
                eligible.append(UnloadAction(pid, m.id, m.name, gpu.index, gpu.uuid, cuda,
                                             nbytes, idle))
        for server, sm, nbytes, idle, why in server_candidates(
                snapshot, gpu, self.config.min_idle_s,
                lambda pid, key: math.inf if now is None else self.watched_s(pid, key, now)):
            if why is not None or idle is None:
                skipped.append((server.pid, sm.id, sm.name, why or IDLE_UNKNOWN))
            else:
                eligible.append(UnloadAction(server.pid, sm.id, f"{sm.name} ({server.label})",
                                             gpu.index, gpu.uuid, SERVER_DEVICE, nbytes, idle))
        eligible.sort(key=lambda a: (-a.idle_s, -a.bytes, a.pid, a.model))
        return eligible, skipped

    def _plan(self, snapshot: Snapshot, gpu: GpuSample, fraction: float, now: float
              ) -> PolicyDecision:
        cfg = self.config
        used, total = int(gpu.memory_used or 0), int(gpu.memory_total or 0)
        goal = cfg.rearm * total
        eligible, skipped = self.candidates(snapshot, gpu, now)
        chosen: list[UnloadAction] = []
        projected = used
        for action in eligible:
            if projected < goal:
                break
            chosen.append(action)
            projected -= action.bytes
        if not chosen:
            why = "; ".join(f"{name} ({pid}): {w}" for pid, _, name, w in skipped[:6])
            more = f"; {len(skipped) - 6} more" if len(skipped) > 6 else ""
            return self._decision(
                snapshot, gpu, NOTHING_ELIGIBLE,
                f"{fraction:.0%} used, nothing eligible to unload"
                + (f": {why}{more}" if skipped else ": no models on this GPU"),
                projected_used=used, skipped=tuple(skipped))
        names = ", ".join(
            f"{a.name} ({a.pid}, idle {fmt_duration(a.idle_s)}, {fmt_bytes(a.bytes)})"
            for a in chosen)
        short = "" if projected < goal else \
            f"; still {projected / total:.0%} projected: nothing else is eligible"
        return self._decision(
            snapshot, gpu, UNLOAD,
            f"{fraction:.0%} used >= {cfg.threshold:.0%}: unloading {names} to {cfg.target}, "
            f"projected {projected / total:.0%} (< {cfg.rearm:.0%} re-arms){short}",
            actions=tuple(chosen), projected_used=projected, skipped=tuple(skipped))


class PolicyRunner:
    """Feeds snapshots to a PressurePolicy and runs its unloads off the caller's thread.

    ``observe(snapshot)`` costs microseconds and never blocks or raises: the
    Collector calls it on the sampler thread.  Unloads run one after another
    on a worker thread through ``directory.unload(..., reason="pressure")``.
    ``decisions_since(cursor)`` gives the log to the Collector's EventFeed
    (any thread), which hands each decision to the views with the snapshots.
    """

    def __init__(self, directory: AgentDirectory, config: PressurePolicyConfig | None = None,
                 synchronous: bool = False, max_log: int = 256,
                 timeout_s: float = 300.0, clock: Callable[[], float] | None = None) -> None:
        """``synchronous`` runs unloads inside ``observe`` (tests, the CLI's demo
        replay); ``clock`` (monotonic seconds) replaces the snapshots' for the
        minimum interval (a demo on a simulated clock)."""
        self.directory = directory
        self._clock = clock
        self.policy = PressurePolicy(config)
        self.timeout_s = timeout_s
        self._sync = synchronous
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._log: list[tuple[int, PolicyDecision]] = []  # (version, decision), by seq
        self._version = 0
        self._max_log = max_log
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self._closed = False

    # -- configuration (any thread)
    @property
    def config(self) -> PressurePolicyConfig:
        return self.policy.config

    @property
    def enabled(self) -> bool:
        return self.policy.config.enabled

    def set_enabled(self, enabled: bool) -> None:
        self.set_config(dataclasses.replace(self.policy.config, enabled=bool(enabled)))

    def set_config(self, config: PressurePolicyConfig) -> None:
        with self._lock:
            self.policy.set_config(config)

    # -- driving
    def observe(self, snapshot: Snapshot) -> list[PolicyDecision]:
        """Decide on ``snapshot`` and start the unloads decided; returns the decisions."""
        if self._closed:
            return []
        try:
            with self._lock:
                decisions = self.policy.evaluate(
                    snapshot, None if self._clock is None else self._clock())
                for d in decisions:
                    self._record(d)
                    if d.actions:
                        self._pending += 1
        except Exception:  # a bug must not stop sampling
            log.exception("pressure policy failed")
            return []
        for d in decisions:
            if d.actions:
                if self._sync:
                    self._execute(d)
                else:
                    self._executor().submit(self._execute, d)
        return decisions

    def decisions_since(self, cursor: int = 0) -> tuple[list[PolicyDecision], int]:
        """Decisions added or updated (an unload's results) since ``cursor``,
        by seq; pass the returned cursor next time (start with 0)."""
        with self._lock:
            return [d for v, d in self._log if v >= cursor], self._version + 1

    def decisions(self) -> list[PolicyDecision]:
        return self.decisions_since(0)[0]

    def wait_idle(self, timeout_s: float = 10.0) -> bool:
        """Wait until no unload is in flight (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
        return True

    def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # -- internals
    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pressure-policy")
        return self._pool

    def _record(self, decision: PolicyDecision) -> None:
        """Add, or replace the one with the same seq (call under the lock)."""
        self._version += 1
        self._log = [(v, d) for v, d in self._log if d.seq != decision.seq]
        self._log.append((self._version, decision))
        self._log.sort(key=lambda vd: vd[1].seq)
        del self._log[:-self._max_log]

    def _execute(self, decision: PolicyDecision) -> None:
        results = []
        try:
            for action in decision.actions:
                if self._closed:
                    break
                try:
                    results.append(self.directory.unload(
                        action.pid, action.model, to=self.policy.config.target, force=False,
                        reason="pressure", timeout_s=self.timeout_s))
                except Exception as exc:  # a directory bug: record it, go on
                    log.exception("pressure unload failed")
                    results.append(ModelActionResult(action.pid, action.model, False,
                                                     error=f"{type(exc).__name__}: {exc}",
                                                     code="internal"))
            figures = ActionFigures.total(ActionFigures.of_event(r.event)
                                          for r in results if r.ok)
            released = (figures.released or 0) + sum(r.freed_bytes or 0 for r in results)
            ok = sum(1 for r in results if r.ok)
            failed = "; ".join(f"{r.model}: {r.code or 'failed'}: {r.error}"
                               for r in results if not r.ok)
            said = "".join(f"; {r.note}" for r in results if r.ok and r.note)  # servers
            outcome = (f" -> unloaded {ok} of {len(decision.actions)}, "
                       f"{released_text(figures)}") + said + (f"; {failed}" if failed else "")
            done = dataclasses.replace(decision, done=True, results=tuple(results),
                                       bytes_released=released,
                                       reason=decision.reason + outcome)
            log.info("pressure policy, GPU %s:%s", decision.gpu, outcome)
            with self._lock:
                self._record(done)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()
