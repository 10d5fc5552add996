"""The in-process model manager: unload / reload root models, and their events.

States (per root model, see ``guard``): resident -> unloading -> offloaded (to
"cpu" or "disk") -> reloading -> resident.  Every change is a model event
(``protocol`` docstring) kept in a ring of the last 64 and pushed to
subscribers as ``model_state``.

Unload (``unload {model, to, force, reason}``)
    Refused with ``managed``, whatever the reason and ``force``, in a model
    server that manages its own models (``managed``).  Else refused
    (``refused``, the model stays resident and usable) for what
    ``eligibility`` names: a blocker (compiled / exported / traced, shared
    tensors, weights shared with other processes, meta placeholders,
    unmovable tensors, no hooks) whatever ``force`` says; training evidence
    unless ``force`` (manual only); pinned, or reloaded less than a minute
    ago, for automatic reasons ("idle", "pressure"); a call or method of the
    model (``generate``, ``encode_text``) that does not end within 5 s;
    parameters swapped by ``torch.func.functional_call``; too little room on
    the disk for "disk" (the figures say how much).  ``busy`` while the
    model's recent moves took their share of its time (``churn``).

    Default target: "cpu" when a tensor is on CUDA, else "disk" (the only way
    to free host RAM for a CPU model).  ``moves`` runs the steps,
    ``storage`` does the copies.  Requests for models never interleave (one
    lock), and the page-locked buffers of a GPU model are made before it is
    held.  The
    order, against the user's threads: UNLOADING first (new calls wait in
    the hook), running calls leave the model (read from the stacks), the
    modules' weight dicts become ``OffloadedDict`` (from then on a read waits
    for the unload, then undoes it), the tensors are planned and their bytes
    copied, a tensor replaced meanwhile through a reference held outside the
    model refuses the unload, each tensor's ``.data`` becomes its copy
    (Parameter identity is kept, so optimizers and user references stay
    valid), then OFFLOADED.  A write through such a held reference while the
    bytes are copied is the one thing no step can see.  Any failure undoes
    every step: the model stays resident and bit-identical.  The old storages
    are dropped after ``RETIRE_S`` (an op another thread began on a weight it
    holds, outside the model, may still be reading them: one that runs longer
    than that is not covered; calls of the model wait meanwhile); for CUDA
    ``empty_cache()`` per affected device (selected explicitly) and
    ``bytes_released`` = reserved before - after (for a disk unload of CPU
    tensors: the process RSS drop, at most the bytes moved).

    Optimizer state (Adam's exp_avg, ...) is NOT moved: it stays where it is.
    Gradients are moved with their parameters and restored on reload.

Reload (``reload {model}``, the next call of the model or of a composite
direct part, any read of its weights, dynamo starting to compile anything,
torch.jit.script of it)
    Every storage comes back as it was (size, offsets, alignment) on its
    original device, with whatever was written into the offloaded copy
    meanwhile; a tensor the user replaced keeps the user's value.  All
    tensor work runs with the caller's modes suspended (``modes``): weights
    come back as ordinary tensors, exactly as they were, whether the call ran
    under inference_mode, autocast, a default device or a torch.func
    transform.  The offloaded copies are dropped by the tick,
    ``RETIRE_S`` later.

Events: ``model_events``; the grace of replaced storages: ``retirement``.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import Any

from . import (
    churn,
    eligibility,
    forks,
    managed,
    modes,
    moves,
    protocol,
    requests,
    retirement,
    sharing,
)
from . import figures as _fig
from . import log as _log
from . import model_guard as _guard
from .errors import ActionError
from .idle_policy import IdlePolicy
from .model_events import ModelEvents
from .retirement import RETIRE_S as RETIRE_S
from .storage import copies, devices, files, planning
from .storage.offloaded_dict import restore_dicts, swap_in_dicts

FORWARD_WAIT_S = 5.0
GRAD_CHECK_S = 2.0

_MANAGERS: weakref.WeakSet = weakref.WeakSet()


def _torch() -> Any:
    return sys.modules.get("torch")


class Manager:
    """Runs unload / reload for the agent; the hooks call ``_reload_work``."""

    def __init__(self, tracker: Any, emit: Any = None,
                 steps: eligibility.OptimizerSteps | None = None) -> None:
        self.tracker = tracker
        self.steps = steps if steps is not None else eligibility.OptimizerSteps()
        self.log = ModelEvents(emit)
        self._op_lock = threading.RLock()
        self._next_grad_check = 0.0
        self.retired = retirement.Retired()
        self.idle = IdlePolicy(self)
        self.moved = churn.Moves()  # each model's recent moves
        tracker.on_adopt = self._adopt
        #: an agent thread calls ``tick`` (else retired storages go by a timer)
        self.ticking = False
        self._swept = False
        _MANAGERS.add(self)

    def _adopt(self, g: Any) -> None:
        """A guard a stopped agent made: an offloaded model reloads through us."""
        if g.offload is not None:
            g.reloader = self._reload_work

    @property
    def idle_unload_s(self) -> float | None:
        return self.idle.ttl_s

    @idle_unload_s.setter
    def idle_unload_s(self, value: float | None) -> None:
        self.idle.ttl_s = value

    # -- events ----------------------------------------------------------
    def _event(self, g: Any, module: Any, action: str, state: str, target: str | None,
               moved: int | None, released: int | None, seconds: float | None, reason: str,
               ok: bool, error: str | None, copy_seconds: float | None = None) -> dict:
        return self.log.record(g, module, action, state, target, moved, released, seconds,
                               reason, ok, error, copy_seconds)

    def recent_events(self) -> list:
        return self.log.recent()

    # -- lookup ------------------------------------------------------------
    def _lookup(self, params: dict) -> tuple[Any, Any, str]:
        model_id = requests.model_id(params)
        torch = _torch()
        if torch is not None:
            try:
                self.tracker.refresh(torch)
            except Exception:
                _log.log_exc("model refresh failed")
        module = self.tracker.find(model_id)
        if module is None:
            raise ActionError(protocol.NOT_FOUND, "no model %s (it may have been "
                              "garbage-collected)" % model_id)
        g = self.tracker.guard(module)
        if g is None:
            raise ActionError(protocol.REFUSED, "model %s is %s" % (
                model_id, "part of torch's own machinery (it holds weights no model holds)"))
        if g.model_id is None:
            g.model_id = model_id
        return module, g, model_id

    # -- eligibility -----------------------------------------------------------
    def blocker(self, module: Any, g: Any, automatic_gpu: bool = True,
                figures: dict | None = None) -> str | None:
        """Why an automatic unload would be refused; None = eligible when idle."""
        if figures is None:
            figures = self.tracker.figures(module)
        return self._blockers(module, g, figures, automatic_gpu)[2]

    def _blockers(self, module: Any, g: Any, figures: dict, automatic_gpu: bool = True
                  ) -> tuple[str | None, str | None, str | None]:
        """(unload blocker, training evidence, automatic blocker)."""
        blocker = managed.blocker() or eligibility.unload_blocker(module, g, self.tracker,
                                                                  figures)
        evidence = eligibility.training_evidence(module, g, figures, self.steps) \
            if g is not None else None
        automatic = blocker or evidence
        if automatic is None and g.pinned:
            automatic = "pinned"
        if automatic is None:
            automatic = churn.recently_reloaded(g)
        if automatic is None and automatic_gpu and not eligibility.on_gpu(module, g):
            automatic = "not on a GPU"
        return blocker, evidence, automatic

    def annotate(self, module: Any, info: dict, figures: dict) -> None:
        """Add the manager's fields to one model entry of the report."""
        g = self.tracker.guard(module)
        rec = g.offload if g is not None else None
        state = g.state if g is not None else _guard.RESIDENT
        info["state"] = state
        info["pinned"] = bool(g.pinned) if g is not None else False
        info["reloaded_at"] = g.reloaded_at if g is not None else None
        info["offloaded_to"] = rec.target if rec is not None and state != _guard.RESIDENT else None
        info["home_device"] = rec.home if rec is not None else info.get("device")
        if rec is not None and rec.target == "disk" and state == _guard.OFFLOADED:
            by = info.get("bytes_by_device") or {}
            total = {"params": sum(v.get("params", 0) for v in by.values()),
                     "buffers": sum(v.get("buffers", 0) for v in by.values())}
            info["bytes_by_device"] = {"disk": total}
            info["device"] = "disk"
        try:
            blocker, evidence, automatic = self._blockers(module, g, figures)
            info["unload_blocker"] = blocker
            info["training_evidence"] = evidence
            info["auto_unload_blocker"] = automatic
            # Use through compiled or traced code never reaches the hooks.
            # (no hooks: its calls cannot be seen either; shared memory: they can)
            hidden = blocker in eligibility.REFUSALS and blocker != sharing.BLOCKER
            info["idle_since"] = None if g is None or hidden else g.idle_since
        except Exception as exc:
            info["auto_unload_blocker"] = "unknown (%r)" % (exc,)
            info.setdefault("idle_since", None)

    def policy(self) -> dict:
        return {"idle_unload_s": self.idle_unload_s}

    # -- requests --------------------------------------------------------------
    def handle_unload(self, params: dict) -> dict:
        req = requests.unload(params)
        module, g, _ = self._lookup(params)
        return self.unload(module, g, req.to, req.force, req.reason, FORWARD_WAIT_S)

    def handle_reload(self, params: dict) -> dict:
        module, g, model_id = self._lookup(params)
        before = self.log.last.get(model_id)
        with self._op_lock, g.lock:  # requests for a model never interleave
            try:
                did = g.ensure_resident("manual")
            except _guard.ReloadFailed as exc:
                raise ActionError(protocol.FAILED, str(exc)) from None
        ev = self.log.last.get(model_id)
        if did or (ev is not before and ev is not None and ev["action"] == "reload"):
            return dict(ev) if ev is not None else {}
        # resident all along: nothing was reloaded, and the reply says so as a refusal
        raise ActionError(protocol.REFUSED, protocol.not_offloaded(_guard.RESIDENT))

    def handle_pin(self, params: dict) -> dict:
        pinned = requests.pinned(params)
        module, g, model_id = self._lookup(params)
        g.pinned = pinned
        self.tracker.invalidate(module)
        return {"model": model_id, "pinned": pinned}

    def handle_set_policy(self, params: dict) -> dict:
        self.idle_unload_s = requests.idle_unload_s(params)
        return self.policy()

    # -- unload -----------------------------------------------------------------
    def unload(self, module: Any, g: Any, to: str | None, force: bool, reason: str,
               wait_s: float) -> dict:
        torch = _torch()
        if torch is None:
            raise ActionError(protocol.REFUSED, "torch is not loaded")
        server = managed.server()
        if server is not None:
            raise ActionError(protocol.MANAGED, managed.refusal(server))
        automatic = reason in requests.AUTOMATIC
        with self._op_lock:
            if g.state is not _guard.RESIDENT:
                raise ActionError(protocol.REFUSED, "model %s is %s%s" % (
                    g.model_id, g.state, " to %s" % g.target if g.target else ""))
            self.moved.refuse_if_moved_lately(g)
            figures = _fig.model_figures(module)  # fresh: this decides
            self._refuse_if_blocked(module, g, figures, force, automatic)
            buffers = devices.HostBuffers(torch)
            try:
                moves.prepare_buffers(torch, module, to, buffers)
                return self._unload_held(torch, module, g, to, reason, wait_s, buffers)
            finally:
                if buffers.made:
                    left = buffers.left()
                    buffers.clear()
                    if left or g.state is _guard.RESIDENT:  # some or all were not used
                        devices.host_empty_cache(torch)  # page-locked memory back

    def _unload_held(self, torch: Any, module: Any, g: Any, to: str | None, reason: str,
                     wait_s: float, buffers: Any) -> dict:
        """The unload once it is admitted (``_op_lock`` held): the model's calls
        wait from here until it is offloaded or stays resident."""
        rec = planning.Offload(reason)
        with g.lock:
            if g.state is not _guard.RESIDENT:
                raise ActionError(protocol.REFUSED, "model %s is %s" % (g.model_id, g.state))
            # UNLOADING first: new calls wait (they reload afterwards) while
            # the ones running finish; refused if they do not within wait_s.
            g.state = _guard.UNLOADING
            g.transition = moves.Transition(rec, unloading=True)
            held = time.monotonic()
            try:
                if not g.wait_idle(wait_s):
                    running = g.running_text()
                    raise ActionError(protocol.REFUSED, "it is running%s (waited %.1f s)"
                                      % (": " + running if running else "", wait_s))
            except BaseException:
                self._stays_resident(g)
                self.moved.note(g, held)
                raise
        # Whatever fails from here to the copy leaves it resident as it was.
        try:
            # A call that was running may have compiled, traced or captured
            # it; fresh figures also name a weight dict no unload can watch.
            blocker = eligibility.unload_blocker(module, g, self.tracker,
                                                 _fig.model_figures(module))
            if blocker is not None:
                raise ActionError(protocol.REFUSED, eligibility.refusal(blocker))
            # From here on a read of the weights waits for the unload, then
            # brings the model back: planned, copied and swapped, nothing
            # moves under the user's feet.
            modules = _fig.subtree(module)
            swap_in_dicts(modules, g, rec)
            moves.plan(torch, self.tracker, module, modules, rec, to)
        except BaseException:
            restore_dicts(rec)
            self._back_to_resident(g)
            self.moved.note(g, held)
            raise
        return self._offload(torch, module, g, rec, held, buffers)

    @staticmethod
    def _stays_resident(g: Any) -> None:
        """An unload that will not happen (``g.lock`` held)."""
        g.transition = None
        g.state = _guard.RESIDENT
        g.cond.notify_all()

    def _back_to_resident(self, g: Any) -> None:
        """The same, lock not held."""
        with g.lock:
            self._stays_resident(g)

    def _refuse_if_blocked(self, module: Any, g: Any, figures: dict, force: bool,
                           automatic: bool) -> None:
        blocker = eligibility.unload_blocker(module, g, self.tracker, figures)
        if blocker is not None:
            raise ActionError(protocol.REFUSED, eligibility.refusal(blocker))
        evidence = eligibility.training_evidence(module, g, figures, self.steps)
        if evidence is not None and (automatic or not force):
            raise ActionError(protocol.REFUSED, "it looks like it is training (%s)%s" % (
                evidence, "" if automatic else "; use force to unload it anyway"))
        if automatic and g.pinned:
            raise ActionError(protocol.REFUSED, "pinned: exempt from automatic unloading")
        recent = churn.recently_reloaded(g) if automatic else None
        if recent is not None:
            raise ActionError(protocol.REFUSED, "%s: automatic unloads wait %d s after a "
                              "reload" % (recent, churn.RELOAD_GRACE_S))

    def _offload(self, torch: Any, module: Any, g: Any, rec: planning.Offload, held: float,
                 buffers: Any) -> dict:
        t0 = time.perf_counter()
        to, reason = rec.target, rec.reason
        cuda_idx = moves.cuda_indices(rec)
        host_moved = any(not devices.is_cuda(gr.device) for gr in rec.moving)
        swaps = g.transition.swaps
        try:
            with modes.suspended(torch):
                reserved_before = {i: devices.reserved(torch, i) for i in cuda_idx}
                rss_before = devices.rss() if host_moved else None
                moves.move_out(torch, rec, g, cuda_idx, swaps, buffers)
        except BaseException as exc:
            moves.roll_back_out(rec, swaps)
            self._back_to_resident(g)
            self.moved.note(g, held)
            error = "%s: %s" % (type(exc).__name__, exc)
            _log.log("unloading %s failed, rolled back: %s" % (g.model_id, error))
            self._event(g, module, "unload", _guard.RESIDENT, to, 0, 0,
                        time.perf_counter() - t0, reason, False, error)
            if isinstance(exc, moves.Changed):
                raise ActionError(protocol.REFUSED, "%s; nothing moved" % exc) from None
            if isinstance(exc, Exception):
                raise ActionError(protocol.FAILED, "unload failed and was rolled back (the model "
                                  "is resident and unchanged): %s" % error) from None
            raise
        with g.lock:
            g.offload = rec
            g.target = to
            g.reloader = self._reload_work
            g.transition.done = True
        # The old storages go only after a grace: an op another thread started
        # on a weight it holds (outside any call of the model) may still read
        # them.  Calls keep waiting meanwhile.
        time.sleep(retirement.RETIRE_S)
        swaps.clear()
        released = moves.release(torch, cuda_idx, reserved_before, rss_before,
                                 moves.host_bytes(rec))
        seconds = time.perf_counter() - t0
        self.tracker.invalidate(module)
        with g.lock:
            # the event is recorded before a waiting call can reload (seq order)
            event = self._event(g, module, "unload", _guard.OFFLOADED, to, rec.bytes_moved,
                                released, seconds, reason, True, None, rec.copy_seconds)
            g.transition = None
            g.state = _guard.OFFLOADED
            g.cond.notify_all()
        self.moved.note(g, held)
        _log.log("unloaded %s to %s: %d bytes in %.3f s (%s)"
                 % (g.model_id, to, rec.bytes_moved, seconds, reason))
        return event

    # -- reload (any thread: a hook, an offloaded dict, the agent) ------------------
    def _reload_work(self, g: Any, reason: str) -> str | None:
        """Bring the weights back; None on success, else the error (undone)."""
        torch = _torch()
        rec = g.offload
        module = g.module_ref()
        t0 = time.perf_counter()
        started = time.monotonic()
        if torch is None or rec is None:
            return "nothing to reload from"
        transition = g.transition = moves.Transition(rec, unloading=False)
        swaps = transition.swaps
        try:
            with modes.suspended(torch):
                moves.move_back(torch, rec, swaps)
        except BaseException as exc:
            copies.undo(swaps)
            g.transition = None
            self.moved.note(g, started)
            error = "%s: %s" % (type(exc).__name__, exc)
            _log.log("reloading %s failed: %s" % (g.model_id, error))
            self._event(g, module, "reload", _guard.OFFLOADED, rec.target, 0, 0,
                        time.perf_counter() - t0, reason, False, error)
            if not isinstance(exc, Exception):
                raise
            return error
        restore_dicts(rec)
        transition.done = True
        # The offloaded copies go only after a grace (see RETIRE_S).
        # (pinned host copies of GPU weights: torch's host cache gets them
        # back when they are dropped)
        self.retired.keep([old for _, old in swaps], moves.pinned_copies(rec),
                          timer=not self.ticking)
        swaps.clear()
        moves.drop_copies(rec)
        g.offload = None
        g.target = None
        g.cell[0] = g.reloaded_at = time.time()  # brought back for a use: the idle clock restarts
        g.reloaded_mono = time.monotonic()
        self.moved.note(g, started)
        if module is not None:
            self.tracker.invalidate(module)
        self._event(g, module, "reload", _guard.RESIDENT, rec.target, rec.bytes_moved, None,
                    time.perf_counter() - t0, reason, True, None)
        return None

    def stop_ticking(self) -> None:
        """The agent stops: what is retired goes by a timer, as later ones will."""
        self.ticking = False
        self.retired.drop_later(True)

    # -- agent tick -----------------------------------------------------------------
    def tick(self) -> None:
        if not self._swept:  # once, on the agent thread: what dead processes left on disk
            self._swept = True
            files.sweep_leftovers()
        self.retired.drop()
        now = time.time()
        if now >= self._next_grad_check:
            self._next_grad_check = now + GRAD_CHECK_S
            for module in self.tracker.user_roots():
                g = self.tracker.guard(module)
                if g is not None and g.state is _guard.RESIDENT and \
                        eligibility.has_grad(module):
                    g.grad_seen = now
        self.idle.tick()


def _reinit_after_fork() -> None:
    # Locks another thread held at fork time would stay held in the child.
    for m in list(_MANAGERS):
        m.log.reinit_after_fork()
        m._op_lock = threading.RLock()
        m.retired.reinit_after_fork()


forks.in_child(_reinit_after_fork)
