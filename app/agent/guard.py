"""Per-model safety hooks: "last used", in-flight forwards, transparent reload.

Each root model the tracker finds gets one ``ModelGuard`` and two hooks:

* a forward pre-hook (``_PreHook``, registered with ``prepend=True`` so it
  runs before the user's own pre-hooks) that, when the model is resident,
  counts the forward as in flight for the calling thread and records the time
  (a lock, a dict update and a float store); when the model is offloaded it
  first brings it back (one reload however many threads call; the others wait
  on the guard's Condition);
* a forward hook registered with ``always_call=True`` (``_PostHook``) that ends
  the in-flight count, also when the forward raised.

Counts are per thread: a thread re-entering the model (a nested call) counts
twice and ends twice; a thread whose pre-hook never ran (another pre-hook
raised first) does not decrement anything.  ``KeyboardInterrupt`` skips
torch's always-called hooks: such a stale count is detected at unload time by
looking for the module's ``_call_impl`` frame on that thread's stack.

The hooks never raise into user code, with one exception: when a reload of a
model that the user or a policy unloaded fails, the forward gets a
``RuntimeError`` saying so instead of running with weights in the wrong place.

Under torch.compile (``is_compiling()``) both hooks do nothing (dynamo folds
the check: no graph break).  Pickling / deepcopy turn the hooks into a stdlib
no-op (``(0).__init__`` accepts any arguments) so ``torch.save(model)`` files
load where no agent exists.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import Any, Callable

RESIDENT = "resident"
UNLOADING = "unloading"
OFFLOADED = "offloaded"
RELOADING = "reloading"

_get_ident = threading.get_ident
_time = time.time

_ALL_GUARDS: "weakref.WeakSet" = weakref.WeakSet()


class ReloadFailed(Exception):
    """A transparent reload failed: surfaces to the caller as RuntimeError."""


class ModelGuard:
    """State shared by a root model's hooks and the model manager.

    Holds no strong reference to the module (the module holds the hooks,
    the hooks hold the guard).  ``reloader(guard, reason)`` performs a reload
    (set by the manager when the model is unloaded) and returns None or an
    error text; it runs without the lock held.
    """

    __slots__ = ("lock", "cond", "state", "counts", "waiting", "cell", "module_ref",
                 "model_id", "pinned", "offload", "reloader", "target", "sub_handles",
                 "reloads", "__weakref__")

    def __init__(self, module: Any, model_id: str | None = None) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.state = RESIDENT
        self.counts: dict[int, int] = {}  # thread id -> forwards in flight
        self.waiting = 0  # threads waiting on cond for the counts to drain
        self.cell: list = [None]  # last forward, epoch seconds
        try:
            self.module_ref = weakref.ref(module)
        except TypeError:
            self.module_ref = lambda: None
        self.model_id = model_id
        self.pinned = False
        self.offload: Any = None  # the manager's record while offloaded
        self.reloader: Callable[["ModelGuard", str], str | None] | None = None
        self.target: str | None = None
        self.sub_handles: list = []
        self.reloads = 0
        _ALL_GUARDS.add(self)

    @property
    def last_used(self) -> float | None:
        return self.cell[0]

    def inflight(self) -> int:
        return sum(self.counts.values())

    def ensure_resident(self, reason: str) -> bool:
        """Call with ``lock`` held; returns with it held and the model resident.

        Returns True when this call performed the reload.  Only one thread
        reloads; the others wait.  Raises ReloadFailed when the reload failed.
        """
        did = False
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
                    self.state = OFFLOADED
                    self.cond.notify_all()
                    raise
                self.lock.acquire()
                self.state = RESIDENT if error is None else OFFLOADED
                self.cond.notify_all()
                if error is not None:
                    raise ReloadFailed("vram-steward: reloading model %s failed (%s); the model "
                                       "stays offloaded" % (self.model_id, error))
                did = True
            else:
                self.cond.wait(0.5)
        return did

    def end(self, tid: int) -> None:
        """One forward of ``tid`` ended (lock held)."""
        counts = self.counts
        n = counts.get(tid, 0)
        if n > 1:
            counts[tid] = n - 1
        elif n == 1:
            del counts[tid]
            if self.waiting and not counts:
                self.cond.notify_all()

    def stale_threads(self) -> list[int]:
        """Threads counted in flight that are not inside this module's forward.

        A KeyboardInterrupt skips torch's always-called forward hooks and
        leaves a count behind; a dead thread leaves one too.  Slow (walks
        stacks): only for the unload path.
        """
        module = self.module_ref()
        frames = sys._current_frames()
        stale = []
        for tid in list(self.counts):
            frame = frames.get(tid)
            if frame is None:
                stale.append(tid)
                continue
            found = False
            depth = 0
            while frame is not None and depth < 2000 and not found:
                code = frame.f_code
                if code.co_name in ("_call_impl", "_wrapped_call_impl") and module is not None:
                    try:
                        found = frame.f_locals.get("self") is module
                    except Exception:
                        found = True  # cannot tell: assume it is running
                frame = frame.f_back
                depth += 1
            if not found:
                stale.append(tid)
        del frames
        return stale

    def wait_idle(self, timeout: float) -> bool:
        """Lock held, state UNLOADING (new forwards wait, re-entries pass):
        wait until no forward is in flight; False on timeout."""
        if self.counts:
            for tid in self.stale_threads():
                self.counts.pop(tid, None)
        deadline = time.monotonic() + timeout
        while self.counts:
            left = deadline - time.monotonic()
            if left <= 0:
                for tid in self.stale_threads():
                    self.counts.pop(tid, None)
                return not self.counts
            self.waiting += 1
            try:
                self.cond.wait(min(left, 0.25))
            finally:
                self.waiting -= 1
        return True


class _Hook:
    """A hook holding its model's guard.  A copy or pickle of the model (deepcopy,
    torch.save of the whole module) gets a do-nothing callable in its place: the
    copy is not managed, and the guard (locks, weights) never travels with it."""

    __slots__ = ("guard", "compiling", "__weakref__")

    def __init__(self, guard: ModelGuard, compiling: Any) -> None:
        self.guard = guard
        self.compiling = compiling

    def __reduce__(self) -> Any:
        return (getattr, (0, "__init__"))


class _PreHook(_Hook):
    """Forward pre-hook: transparent reload, in-flight count, last-used time."""

    __slots__ = ()
    __name__ = "vram_steward_pre"

    def __call__(self, module: Any, args: Any) -> None:
        try:
            if self.compiling():
                return None
            g = self.guard
            tid = _get_ident()
            with g.lock:
                counts = g.counts
                if g.state is not RESIDENT and not (g.state is UNLOADING and counts.get(tid)):
                    # (a thread already inside this model's forward may re-enter
                    # while an unload drains: the copy starts only once all end)
                    g.ensure_resident("forward")
                counts[tid] = counts.get(tid, 0) + 1
            g.cell[0] = _time()
        except ReloadFailed as exc:
            raise RuntimeError(str(exc)) from None
        except Exception:
            pass
        return None


class _PostHook(_Hook):
    """Forward hook (always_call=True): the forward of this thread ended."""

    __slots__ = ()
    __name__ = "vram_steward_post"

    def __call__(self, module: Any, args: Any, output: Any) -> None:
        try:
            if self.compiling():
                return None
            g = self.guard
            tid = _get_ident()
            with g.lock:  # inlined ModelGuard.end (this runs on every forward)
                counts = g.counts
                n = counts.get(tid, 0)
                if n > 1:
                    counts[tid] = n - 1
                elif n == 1:
                    del counts[tid]
                    if g.waiting and not counts:
                        g.cond.notify_all()
        except Exception:
            pass
        return None


class SubmoduleReloadHook(_Hook):
    """Temporary pre-hook on every submodule while the root is offloaded.

    A model may be called through a submodule (``model.encoder(x)``), which
    the root's hooks never see: this hook reloads the root first.
    """

    __slots__ = ()
    __name__ = "vram_steward_submodule_reload"

    def __call__(self, module: Any, args: Any) -> None:
        try:
            if self.compiling():
                return None
            g = self.guard
            if g.state is RESIDENT:
                return None
            with g.lock:
                if g.state is UNLOADING and g.counts.get(_get_ident()):
                    return None  # inside the root's own forward while an unload drains
                g.ensure_resident("forward")
        except ReloadFailed as exc:
            raise RuntimeError(str(exc)) from None
        except Exception:
            pass
        return None


def install(module: Any, guard: ModelGuard, compiling: Any) -> list:
    """Register the two hooks on ``module``; returns their handles."""
    pre = module.register_forward_pre_hook(_PreHook(guard, compiling), prepend=True)
    try:
        post = module.register_forward_hook(_PostHook(guard, compiling), always_call=True)
    except TypeError:  # torch < 2.0: no always_call; the pre-hook alone still records time
        post = None
    except BaseException:
        pre.remove()
        raise
    return [h for h in (pre, post) if h is not None]


def _reinit_after_fork() -> None:
    # A lock held by another thread at fork time would stay held forever in
    # the child: give every guard fresh ones (only the forking thread exists).
    try:
        for g in list(_ALL_GUARDS):
            g.lock = threading.Lock()
            g.cond = threading.Condition(g.lock)
            g.counts = {}
            g.waiting = 0
    except BaseException:
        pass


try:
    os.register_at_fork(after_in_child=_reinit_after_fork)
except Exception:  # pragma: no cover
    pass
