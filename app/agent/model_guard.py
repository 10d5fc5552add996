"""Per-model state shared by a model's hooks and the model manager.

States (per root model): resident -> unloading -> offloaded -> reloading ->
resident.  The hook (``guard``) reads the state on each call; a call of an
offloaded model brings it back first (one reload however many threads call;
the others wait on the guard's Condition).  In a child forked mid-move the
model goes back to where the move began.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

from . import figures as _fig
from . import forks
from .running import Scope, current_frames

RESIDENT = "resident"
UNLOADING = "unloading"
OFFLOADED = "offloaded"
RELOADING = "reloading"
IDLE_POLL_S = 0.02

_get_ident = threading.get_ident
_time = time.time

_ALL_GUARDS: weakref.WeakSet = weakref.WeakSet()


class ReloadFailed(Exception):
    """A transparent reload failed: surfaces to the caller as RuntimeError."""


class ModelGuard:
    """State shared by a model's hooks and the model manager.

    Holds no strong reference to the module (the module holds the hooks, the
    hooks hold the slot, the slot holds the guard).  ``reloader(guard,
    reason)`` performs a reload (set by the manager when the model is
    unloaded) and returns None or an error text; it runs without the lock held.
    """

    __slots__ = ("lock", "cond", "state", "cell", "module_ref", "model_id", "pinned", "offload",
                 "reloader", "target", "first_seen", "grad_seen", "grad_call", "waiters",
                 "draining", "transition", "reloaded_at", "reloaded_mono", "shape",
                 "__weakref__")

    def __init__(self, module: Any, model_id: str | None = None,
                 first_seen: float | None = None) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.state = RESIDENT
        self.cell: list = [None]  # last call, epoch seconds
        self.module_ref: Callable[[], Any]
        try:
            self.module_ref = weakref.ref(module)
        except TypeError:
            self.module_ref = lambda: None
        self.model_id = model_id
        self.pinned = False
        self.offload: Any = None  # the manager's record while offloaded
        self.reloader: Callable[[ModelGuard, str], str | None] | None = None
        self.target: str | None = None
        self.first_seen = _time() if first_seen is None else first_seen  # epoch seconds
        self.grad_seen: float | None = None  # epoch seconds gradients were last seen
        self.grad_call: float | None = None  # epoch seconds of the last call building a graph
        self.waiters: set = set()  # threads waiting in ensure_resident (not running the model)
        self.draining = False  # UNLOADING and still waiting for calls to leave the model
        #: while an unload or a reload changes the weights: what undoes it in a
        #: child forked meanwhile (``undo_in_child()``), else None
        self.transition: Any = None
        self.reloaded_at: float | None = None  # epoch seconds of the last completed reload
        self.reloaded_mono: float | None = None  # the same, monotonic (the grace counts on it)
        #: torch's ``Size`` of the first tensor of the model's last call (its hook keeps it)
        self.shape: Any = None
        _ALL_GUARDS.add(self)

    @property
    def last_used(self) -> float | None:
        return self.cell[0]

    @property
    def idle_since(self) -> float:
        """Epoch seconds the idle clock counts from: the last call, else first sight."""
        last = self.cell[0]
        return self.first_seen if last is None else last

    def ensure_resident(self, reason: str, own_call: bool = False,
                        part: bool = False) -> bool:
        """Call with ``lock`` held; returns with it held and the model resident,
        or with the weights still in place for a call the unload waits for.

        Returns True when this call performed the reload.  Only one thread
        reloads; the others wait.  Raises ReloadFailed when the reload failed.

        While an unload waits for the model's calls to leave (``draining``)
        the weights have not moved yet, and a call goes on (the unload then
        waits for it too) when this thread is already running code of the
        model (``own_call``: the hook of a call, whose own frames do not
        count), or when it is a call of a part (``part``: a forward may run
        its parts on worker threads, which must not wait for the very forward
        they serve).
        """
        did = False
        goes_on = None
        while self.state is not RESIDENT:
            if self.state is OFFLOADED:
                reloader = self.reloader
                if reloader is None:
                    raise ReloadFailed("model %s is offloaded and nothing can reload it"
                                       % (self.model_id,))
                self.state = RELOADING
                self.lock.release()
                try:
                    error = reloader(self, reason)
                except Exception as exc:
                    error = repr(exc)
                except BaseException:  # KeyboardInterrupt: never leave RELOADING behind
                    self.lock.acquire()
                    self._reload_ended("interrupted")
                    raise
                self.lock.acquire()
                self._reload_ended(error)
                if self.state is not RESIDENT:
                    raise ReloadFailed("vram-steward: reloading model %s failed (%s); the model "
                                       "stays offloaded" % (self.model_id, error))
                did = True
            else:
                if self.state is UNLOADING and self.draining:
                    if goes_on is None:
                        goes_on = part or self.inside(own_call)
                    if goes_on:
                        return did
                tid = _get_ident()
                self.waiters.add(tid)
                try:
                    self.cond.wait(0.5)
                finally:
                    self.waiters.discard(tid)
        return did

    def make_resident(self, reason: str) -> None:
        """Bring an offloaded model back from any user call site (no lock held).

        Used where the weights are reached without a forward: attribute access
        on an offloaded module, compilation, scripting.  A failed reload
        raises RuntimeError, as a forward would."""
        if self.state is RESIDENT:
            return
        try:
            with self.lock:
                self.ensure_resident(reason)
        except ReloadFailed as exc:
            raise RuntimeError(str(exc)) from None

    def _reload_ended(self, error: str | None) -> None:
        """Lock held.  Once the weights are home (``transition.done``) the
        model is resident, whatever failed or interrupted the bookkeeping
        after that."""
        t = self.transition
        if error is None or (t is not None and getattr(t, "done", False)):
            self.state = RESIDENT
            self.offload = None
            self.target = None
        else:
            self.state = OFFLOADED
        self.transition = None
        self.cond.notify_all()

    def _scope(self) -> Scope | None:
        module = self.module_ref()
        return None if module is None else Scope(_fig.subtree(module))

    def running_threads(self) -> list[int]:
        """Threads (other than this one) running code of the model: a call of
        it or of any module below it, or a method of their classes
        (``vae.decode``, ``clip.encode_text``, ``generate``), not counting
        those waiting in its hook for an unload to end.  Walks every thread's
        stack: for the unload path and a model the idle timer is about to
        unload, never per call."""
        return [tid for tid, _ in self.running()]

    def running(self) -> list[tuple[int, str]]:
        """(thread id, the function it runs of the model) for each such thread."""
        scope = self._scope()
        if scope is None:
            return []
        skip = set(self.waiters)
        skip.add(_get_ident())
        frames = current_frames()
        frame = None
        try:
            out = []
            for tid, frame in frames.items():
                if tid not in skip:
                    where = scope.runs(frame)
                    if where is not None:
                        out.append((tid, where))
            return out
        finally:
            # this thread's own frame is among them: no cycle through it
            del frames, frame

    def running_text(self) -> str:
        """Who runs the model, for a refusal: "thread 'MainThread' in generate"."""
        names = {t.ident: t.name for t in threading.enumerate()}
        return ", ".join("thread %r in %s" % (names.get(tid, tid), where)
                         for tid, where in self.running()[:3])

    def inside(self, own_call: bool = False) -> bool:
        """Is this thread running code of the model?  ``own_call``: called
        from the hook of a call of it, whose own frames do not count."""
        scope = self._scope()
        if scope is None:
            return False
        frame: FrameType | None = sys._getframe(1)
        if own_call:
            while frame is not None and frame.f_code.co_name != "_call_impl":
                frame = frame.f_back
            if frame is not None:
                frame = frame.f_back
            if frame is not None and frame.f_code.co_name == "_wrapped_call_impl":
                frame = frame.f_back
        return scope.runs(frame) is not None

    def wait_idle(self, timeout: float) -> bool:
        """Lock held, state UNLOADING (new calls wait in the hook, a thread
        already inside goes on): wait until no thread runs code of the model;
        False on timeout."""
        deadline = time.monotonic() + timeout
        self.draining = True
        try:
            while self.running_threads():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, IDLE_POLL_S))
            return True
        finally:
            self.draining = False


def _reinit_after_fork() -> None:
    # A lock held by another thread at fork time would stay held forever in
    # the child: give every guard fresh ones (only the forking thread exists).
    # A model caught mid-move goes back to where it was before the move began:
    # the thread moving it does not exist in the child.
    for g in list(_ALL_GUARDS):
        g.lock = threading.Lock()
        g.cond = threading.Condition(g.lock)
        g.waiters = set()
        g.draining = False
        transition, g.transition = g.transition, None
        if transition is not None:
            try:
                g.state = transition.undo_in_child()
            except BaseException:
                pass
        elif g.state is UNLOADING:
            g.state = RESIDENT  # the unload had not begun to move anything
        elif g.state is RELOADING:
            g.state = OFFLOADED  # nor had the reload


forks.in_child(_reinit_after_fork)
