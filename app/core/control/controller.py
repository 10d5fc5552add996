"""The application controller: every verb the app offers, without Qt.

Views, the tray and notifications build a typed request
(:mod:`app.core.control.requests`) and call :meth:`AppController.submit`; the
controller checks it against the latest snapshot, keeps the busy set, runs the
blocking directory call on a worker thread and reports through listeners.

Threads: ``submit``, ``on_snapshot`` and ``poll`` belong to one owner thread
(the GUI's).  Workers never touch a record: they put their answers on a queue
and call ``wake`` (the Qt adapter turns that into a queued call of ``poll`` on
the GUI thread); ``poll`` fills the records in and notifies the listeners.

Busy set: a request for a process (free cache, gc) or a model (unload, reload,
pin; the idle timer is keyed (pid, None)) that an action is running on is
refused with ``Refusal.BUSY``; a "Free all caches" skips the busy processes
and frees the others.  A terminate needs no agent (nor an agent directory) and
is busy per pid (:mod:`app.core.control.terminate`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.agent.protocol import idle_unload_problem
from app.core.agents.directory import AgentDirectory
from app.core.agents.placement import gpu_of_device
from app.core.agents.types import ModelActionResult
from app.core.control import recording, targets, terminate
from app.core.control.measure import gpu_used, nvml_usage
from app.core.control.records import (
    IDLE_TTL,
    PIN,
    RELOAD,
    UNLOAD,
    Action,
    CacheAction,
    ModelAction,
    Outcome,
    PolicyApplied,
    RecordAction,
    TerminateAction,
    TerminateResult,
)
from app.core.control.requests import (
    CollectGarbage,
    FreeCache,
    Pin,
    RecordAllocations,
    Refusal,
    Reload,
    Request,
    RequestError,
    SetAutoUnload,
    SetIdleUnload,
    Terminate,
    Unload,
    UnloadIdle,
    policy_config,
)
from app.core.control.server_actions import server_action
from app.core.control.work import (
    DirectoryLike,
    error_text,
    resolve_directory,
    run_cache_action,
    run_model_action,
    run_record,
)
from app.core.monitor.samples import Snapshot

if TYPE_CHECKING:
    from app.core.policies.pressure import PolicyRunner

log = logging.getLogger(__name__)

PolicyGetter = Callable[[], "PolicyRunner | None"]

STARTED = "started"
PROGRESS = "progress"  # one process of a free answered
FINISHED = "finished"
MEASURED = "measured"  # NVML's before/after is in the record


@dataclass(frozen=True, slots=True)
class Update:
    """What a listener hears: an action ``stage``d (``pid``: the process that
    answered, for PROGRESS)."""

    stage: str
    action: Action
    pid: int | None = None


Listener = Callable[[Update], None]


class AppController:
    """Verbs, busy set and before/after measurement for one agent directory.

    ``directory``: an :class:`AgentDirectory`, a callable returning the current
    one (``lambda: sampler.agents``: it changes with the source), or None (actions
    unavailable: every request but SetAutoUnload is refused).  ``policy_runner``
    returns the app's PolicyRunner (or None); SetAutoUnload applies to it, and
    again to each new runner (a new source starts one from its defaults).
    """

    def __init__(self, directory: DirectoryLike = None, *,
                 policy_runner: PolicyGetter | None = None, timeout_s: float = 30.0,
                 model_timeout_s: float = 300.0, settle_s: float = 0.5,
                 wake: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, host: str = "",
                 user: Callable[[], str | None] | None = None,
                 run_terminate: Callable[[TerminateAction], TerminateResult] | None = None
                 ) -> None:
        """``host``, ``user``, ``run_terminate``: for a remote host's processes,
        its key (stamped on every action), the user its server acts for, and
        how a terminate is sent there."""
        self._directory = directory
        self.host = host
        self._user = user
        self._terminate = run_terminate or terminate.run
        self._policy_runner = policy_runner
        self.timeout_s = timeout_s  # free cache, gc
        self.model_timeout_s = model_timeout_s  # unload, reload
        #: Wait at least this long after an action before reading NVML's release.
        self.settle_s = settle_s
        self._wake = wake
        self._clock = clock
        self.latest: Snapshot | None = None
        self._listeners: list[Listener] = []
        self._done: queue.SimpleQueue[tuple[str, Action, Any]] = queue.SimpleQueue()
        # Free cache / gc on two threads; model moves may overlap (different processes)
        # and a pin or timer change must not wait behind a multi-second unload.
        self._cache_pool = concurrent.futures.ThreadPoolExecutor(2, "vram-steward-cache")
        self._model_pool = concurrent.futures.ThreadPoolExecutor(4, "vram-steward-model")
        self._kill_pool = concurrent.futures.ThreadPoolExecutor(2, "vram-steward-terminate")
        self._futures: set[concurrent.futures.Future[None]] = set()
        self._running: dict[int, Action] = {}  # id -> action
        self._ran_on: dict[int, AgentDirectory | None] = {}  # id -> its directory
        self._measuring: list[Action] = []
        self._last: dict[tuple[int, str | None], ModelAction] = {}
        self.auto_unload: SetAutoUnload | None = None  # the settings last asked for
        self.policy_error: str | None = None
        self._applied_to: object = None  # the runner the settings were last applied to

    # -- wiring --------------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """False without a directory source: the action buttons stay disabled."""
        return self._directory is not None

    def directory(self) -> AgentDirectory | None:
        return resolve_directory(self._directory)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def set_wake(self, wake: Callable[[], None] | None) -> None:
        """``wake`` is called on a worker thread once an answer is queued."""
        self._wake = wake

    def set_policy_runner(self, getter: PolicyGetter | None) -> None:
        self._policy_runner = getter
        self._applied_to = None
        self._reapply_policy()

    def policy_runner(self) -> PolicyRunner | None:
        if self._policy_runner is None:
            return None
        try:
            return self._policy_runner()
        except Exception:
            log.exception("looking up the pressure policy failed")
            return None

    # -- state ---------------------------------------------------------------------------------
    def running(self) -> list[Action]:
        return list(self._running.values())

    def busy_pids(self) -> set[int]:
        """Processes a free cache or gc is running in."""
        return {pid for a in self._running.values() if isinstance(a, CacheAction)
                for pid in a.pids}

    def terminating(self) -> set[int]:
        """Processes a terminate is running on."""
        return {a.pid for a in self._running.values() if isinstance(a, TerminateAction)}

    def recording(self) -> set[int]:
        """Processes whose allocations are being recorded."""
        return {a.pid for a in self._running.values() if isinstance(a, RecordAction)}

    def busy_models(self) -> set[tuple[int, str | None]]:
        """(pid, model id) of running model actions; (pid, None): the idle timer."""
        return {a.key for a in self._running.values() if isinstance(a, ModelAction)}

    def pending_models(self, pid: int) -> list[ModelAction]:
        return [a for a in self._running.values() if isinstance(a, ModelAction) and a.pid == pid]

    def last_model_actions(self, pid: int) -> dict[str, ModelAction]:
        """Model id -> the last finished action on it in process ``pid``."""
        return {m: a for (p, m), a in self._last.items() if p == pid and m is not None}

    # -- requests ------------------------------------------------------------------------------
    def submit(self, request: Request) -> Any:
        """Start ``request``: the action's record (a list of them for UnloadIdle, a
        PolicyApplied for SetAutoUnload).  Raises RequestError, changing nothing,
        when the latest snapshot does not allow it."""
        if isinstance(request, SetAutoUnload):
            return self._set_auto_unload(request)
        if isinstance(request, Terminate):  # needs no agent
            user = self._user() if self._user is not None else None
            action = terminate.check(self.latest, request, self.terminating(), user,
                                     here=not self.host)
            self._start(action)
            return action
        if isinstance(request, RecordAllocations) and self.available:
            rec = recording.check(self.latest, request, self.recording(), self._clock())
            self._start(rec)
            return rec
        if not self.available:
            raise RequestError(Refusal.UNAVAILABLE, "agent actions are not available")
        if isinstance(request, FreeCache):
            return self._free(request)
        if isinstance(request, CollectGarbage):
            return self._gc(request)
        if isinstance(request, UnloadIdle):
            return self._unload_idle(request)
        if isinstance(request, (Unload, Reload, Pin, SetIdleUnload)):
            return self._model(request)
        raise TypeError(f"not a request: {request!r}")

    def _snapshot(self) -> Snapshot:
        if self.latest is None:
            raise RequestError(Refusal.NO_SNAPSHOT, "no sample yet")
        return self.latest

    def _check_agent(self, pid: int) -> Snapshot:
        snap = self._snapshot()
        if pid in snap.agents:
            return snap
        if targets.on_any_gpu(snap, pid):
            raise RequestError(Refusal.NO_AGENT, f"process {pid} has no agent reporting")
        raise RequestError(Refusal.UNKNOWN_PROCESS, f"no process {pid} in the latest sample")

    def _free(self, req: FreeCache) -> CacheAction:
        snap = self._snapshot()
        if req.pids:
            for pid in req.pids:
                self._check_agent(pid)
            labels = {pid: targets.label_of(snap, pid) for pid in req.pids}
        elif req.display_id is not None:
            if not any(g.display_id == req.display_id for g in snap.gpus):
                raise RequestError(Refusal.UNKNOWN_GPU, f"no GPU {req.display_id}")
            labels = targets.freeable_on_gpu(snap, req.display_id)
        else:
            labels = {p: targets.label_of(snap, p) for p in sorted(snap.agents)}
        busy = self.busy_pids()
        pids = [pid for pid in labels if pid not in busy]
        if not pids:
            if labels:
                raise RequestError(Refusal.BUSY, "already freeing")
            raise RequestError(Refusal.NOTHING_TO_DO, "no process with cache to free")
        action = CacheAction.free(pids, snap, {p: labels[p] for p in pids},
                                  display_id=req.display_id)
        self._start(action)
        return action

    def _gc(self, req: CollectGarbage) -> CacheAction:
        snap = self._check_agent(req.pid)
        if req.pid in self.busy_pids():
            raise RequestError(Refusal.BUSY, f"an action is running in process {req.pid}")
        action = CacheAction.gc(req.pid, targets.label_of(snap, req.pid))
        self._start(action)
        return action

    def _model(self, req: Unload | Reload | Pin | SetIdleUnload) -> ModelAction:
        if isinstance(req, SetIdleUnload) and req.seconds is not None:
            problem = idle_unload_problem(req.seconds)
            if problem is not None:
                raise RequestError(Refusal.INVALID, f"the idle timer {problem}")
        served = server_action(self._snapshot(), req) \
            if isinstance(req, (Unload, Reload)) else None
        if served is not None:  # a model server's model: its own API unloads it
            return self._start_model(served)
        snap = self._check_agent(req.pid)
        report = snap.agents[req.pid]
        label = targets.label_of(snap, req.pid)
        if isinstance(req, SetIdleUnload):
            action = ModelAction(IDLE_TTL, req.pid, None, label=label, seconds=req.seconds)
        else:
            info = next((m for m in report.models if m.id == req.model), None)
            if info is None:
                raise RequestError(Refusal.UNKNOWN_MODEL,
                                   f"process {req.pid} reports no model {req.model!r}")
            name = req.name or req.model
            if isinstance(req, Pin):
                action = ModelAction(PIN, req.pid, req.model, name, label, pinned=req.pinned)
            else:
                if isinstance(req, Unload):
                    action = ModelAction(UNLOAD, req.pid, req.model, name, label, to=req.to,
                                         force=req.force, reason=req.reason, size=req.size)
                else:
                    action = ModelAction(RELOAD, req.pid, req.model, name, label)
                device = req.device
                if device is None:
                    device = info.home_device or info.device
                    if action.size is None and info.param_bytes is not None:
                        action.size = (info.param_bytes or 0) + (info.buffer_bytes or 0)
                action.display_id = gpu_of_device(snap, report, device, req.pid)
                action.baseline = nvml_usage(snap, req.pid, action.display_id)
                action.gpu_before = gpu_used(snap, action.display_id)
        return self._start_model(action)

    def _start_model(self, action: ModelAction) -> ModelAction:
        if action.key in self.busy_models():
            raise RequestError(Refusal.BUSY, f"{action.who()} is busy")
        self._start(action)
        return action

    def _unload_idle(self, req: UnloadIdle) -> list[ModelAction]:
        out = []
        for pid, model, name, device, size in targets.idle_models(self.latest, req.min_idle_s):
            try:
                out.append(self._model(Unload(pid, model, reason=req.reason, name=name,
                                              device=device, size=size)))
            except RequestError:
                continue  # busy already: its own action goes on
        return out

    # -- running -------------------------------------------------------------------------------
    def _start(self, action: Action) -> None:
        directory = self.directory()
        action.host = self.host
        self._running[action.id] = action
        self._ran_on[action.id] = directory
        self._notify(Update(STARTED, action))
        if isinstance(action, CacheAction):
            fut = self._cache_pool.submit(self._run_cache, action, directory)
        elif isinstance(action, TerminateAction):
            fut = self._kill_pool.submit(self._run_terminate, action)
        elif isinstance(action, RecordAction):  # as long as an unload may take
            fut = self._model_pool.submit(lambda: self._post(
                FINISHED, action, run_record(action, directory)))
        else:
            fut = self._model_pool.submit(self._run_model, action, directory)
        self._futures.add(fut)
        fut.add_done_callback(self._futures.discard)

    def _run_cache(self, action: CacheAction, directory: AgentDirectory | None) -> None:
        answer = None
        try:
            answer = run_cache_action(action, directory, self.timeout_s,
                                      lambda r: self._post(PROGRESS, action, r))
        finally:
            self._post(FINISHED, action, answer)

    def _run_model(self, action: ModelAction, directory: AgentDirectory | None) -> None:
        answer: Any = None
        try:
            answer = run_model_action(action, directory, self.model_timeout_s)
        finally:
            self._post(FINISHED, action, answer)

    def _run_terminate(self, action: TerminateAction) -> None:
        answer: Any = None
        try:
            answer = self._terminate(action)
        finally:
            self._post(FINISHED, action, answer)

    def _post(self, stage: str, action: Action, answer: Any) -> None:  # on a worker thread
        self._done.put((stage, action, answer))
        wake = self._wake
        if wake is not None:
            try:
                wake()
            except Exception:
                log.exception("waking the controller's owner failed")

    def poll(self) -> int:
        """Take the workers' answers in (on the owner thread); returns how many."""
        n = 0
        while True:
            try:
                stage, action, answer = self._done.get_nowait()
            except queue.Empty:
                return n
            n += 1
            if stage == PROGRESS:
                assert isinstance(action, CacheAction)
                action.results[answer.pid] = answer
                self._notify(Update(PROGRESS, action, answer.pid))
            else:
                self._finish(action, answer)

    def _finish(self, action: Action, answer: Any) -> None:
        action.done_at = self._clock()
        self._running.pop(action.id, None)
        directory = self._ran_on.pop(action.id, None)
        if isinstance(action, CacheAction):
            if answer is not None:
                action.gc_result = answer
        elif isinstance(action, TerminateAction):
            action.result = answer if isinstance(answer, TerminateResult) else (
                TerminateResult(Outcome.FAILED, reason="no answer"))
        elif isinstance(action, RecordAction):
            action.result = answer
        else:
            if action.kind == IDLE_TTL:
                action.ttl_result = answer if isinstance(answer, dict) else {
                    "ok": False, "error": "no answer"}
            else:
                action.result = answer if isinstance(answer, ModelActionResult) else (
                    ModelActionResult(action.pid, action.model or "", False, error="no answer"))
            self._last[action.key] = action
            if len(self._last) > 256:
                self._last.pop(next(iter(self._last)))
            event = action.event
            if event is not None and directory is not None:
                # Shown when it arrives with a snapshot, as every model event is.
                directory.note_reply(action.pid, event)
        if action.wants_measure:
            self._measuring.append(action)
        self._notify(Update(FINISHED, action))

    def _notify(self, update: Update) -> None:
        for listener in list(self._listeners):
            try:
                listener(update)
            except Exception:
                log.exception("a controller listener failed on %s", update.stage)

    # -- snapshots -----------------------------------------------------------------------------
    def on_snapshot(self, snapshot: Snapshot) -> None:
        """The latest sample: requests are checked against it, finished actions
        measured with it, the auto-unload settings re-applied to a new runner."""
        self.latest = snapshot
        self.poll()
        for action in list(self._measuring):
            if action.measure(snapshot, now=self._clock(), settle_s=self.settle_s):
                self._measuring.remove(action)
                self._notify(Update(MEASURED, action))
        self._reapply_policy()

    # -- the pressure policy -------------------------------------------------------------------
    def _set_auto_unload(self, req: SetAutoUnload) -> PolicyApplied:
        self.auto_unload = req
        runner = self.policy_runner()
        if runner is None:
            return PolicyApplied(None)
        self._apply_to(runner)
        return PolicyApplied(runner.config, self.policy_error)

    def _reapply_policy(self) -> None:
        if self.auto_unload is None:
            return
        runner = self.policy_runner()
        if runner is not None and runner is not self._applied_to:
            self._apply_to(runner)

    def _apply_to(self, runner: PolicyRunner) -> None:
        assert self.auto_unload is not None
        try:
            runner.set_config(policy_config(self.auto_unload, runner.config))
            self.policy_error = None
        except Exception as exc:
            log.exception("applying the auto-unload settings failed")
            self.policy_error = error_text(exc)
        self._applied_to = runner

    # -- shutting down -------------------------------------------------------------------------
    def wait(self, timeout_s: float = 3.0) -> bool:
        """Wait for the running directory calls (at exit, in tests); their answers
        are taken in. True when none is left."""
        deadline = time.monotonic() + timeout_s
        while True:
            futures = set(self._futures)
            if futures:
                concurrent.futures.wait(futures, max(0.0, deadline - time.monotonic()))
            self.poll()
            if not self._running or time.monotonic() >= deadline:
                return not self._running
            time.sleep(0.005)

    def close(self) -> None:
        for pool in (self._cache_pool, self._model_pool, self._kill_pool):
            pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["FINISHED", "MEASURED", "PROGRESS", "STARTED", "AppController", "DirectoryLike",
           "Listener", "Update", "resolve_directory"]
