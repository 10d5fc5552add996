"""Per-model state and the one hook that carries it: "last used" and
transparent reload.

A root model and each of its composite direct parts carry one permanent
forward pre-hook (``_PreHook``, registered with ``prepend=True`` so it runs
before the user's own pre-hooks), placed on the user's own thread
(``placement``).  While the model is resident it records the time of the call
(a float store).  When the model is offloaded it first brings it back (one
reload however many threads call; the others wait on the guard's Condition).

Each hook holds a ``Slot``; the slot's ``guard`` says which model the call
counts for (None: the hook is inert).  The agent thread only ever changes that
attribute, never the module's hook dicts, so dynamo, TorchScript and export
always see the same module.  There is no forward (post) hook: a second hook
doubles the cost of every call, and a hook registered with ``always_call``
makes dynamo recompile for every new instance of a model class.

Whether the model is running is read from the threads' stacks instead
(``running_threads``): a thread is inside the model while one of its frames
is ``Module._call_impl`` of the model or of any module below it (a deeper
submodule called directly included), or a method of one of their classes
called directly (``generate``, ``vae.decode``).  An unload sets UNLOADING
first (new calls wait in the hook) and then waits until no thread is inside;
a forward that passed its hook before that has its frame on the stack already.

The hook never raises into user code, with one exception: when a reload of a
model that the user or a policy unloaded fails, the call gets a
``RuntimeError`` saying so instead of running with weights in the wrong place.

Under torch.compile (``is_dynamo_compiling()``) the hook does nothing (dynamo
folds the check: no graph break).  Pickling turns a hook into a stdlib no-op
(``(0).__init__`` accepts any arguments) so ``torch.save(model)`` files load
where no agent exists; ``copy.deepcopy`` gives the copy an inert hook of its
own that announces the copy to the agent on its first call.
"""

from __future__ import annotations

import collections
import copy
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import figures as _fig
from . import forks

RESIDENT = "resident"
UNLOADING = "unloading"
OFFLOADED = "offloaded"
RELOADING = "reloading"

MAX_STACK_DEPTH = 4000
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
                 "draining", "transition", "__weakref__")

    def __init__(self, module: Any, model_id: str | None = None,
                 first_seen: float | None = None) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.state = RESIDENT
        self.cell: list = [None]  # last call, epoch seconds
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

    def _scope(self) -> _Scope | None:
        module = self.module_ref()
        return None if module is None else _Scope(_fig.subtree(module))

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
        frames = sys._current_frames()
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
        frame = sys._getframe(1)
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


#: torch's frames of a Module call (``model(x)``): their ``self`` is the module.
CALL_FRAMES = frozenset(("_call_impl", "_wrapped_call_impl"))


class _Scope:
    """What "running code of the model" means for one unload: a Module call
    of a module of its subtree (told exactly, from the ``self`` of torch's
    call frames), or a method of one of their classes that is not itself
    the forward of a call (``generate``, ``decode``, ``encode_text``: told
    from the code object alone, since reading a frame's locals on 3.11 and
    3.12 pins them until the frame returns; the same method running on
    another instance of the class counts too, which only delays)."""

    __slots__ = ("ids", "codes")

    def __init__(self, modules: list) -> None:
        self.ids = {id(m) for m in modules}
        self.codes = _method_codes({type(m) for m in modules})

    def runs(self, frame: Any) -> str | None:
        """The function of the model the stack from ``frame`` runs, or None."""
        depth = 0
        while frame is not None and depth < MAX_STACK_DEPTH:
            code = frame.f_code
            if code.co_name in CALL_FRAMES:
                try:
                    this = frame.f_locals.get("self")  # torch's frame: its locals live anyway
                except Exception:
                    return code.co_name  # cannot tell: assume it is running
                if id(this) in self.ids:
                    return "%s.forward" % type(this).__name__
            elif code in self.codes:
                back = frame.f_back
                if back is not None and back.f_code.co_name == "inner":  # _call_impl's closure
                    back = back.f_back
                if back is None or back.f_code.co_name not in CALL_FRAMES:
                    # not a forward: a method called directly ("Pipe.decode")
                    return code.co_qualname.rsplit(".<locals>.", 1)[-1]
            frame = frame.f_back
            depth += 1
        return None


_CODES_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _method_codes(types: set) -> set:
    """Code objects of the methods the classes define themselves (torch's
    own classes excluded: their methods run on every model)."""
    out: set = set()
    for cls in types:
        try:
            codes = _CODES_CACHE.get(cls)
        except TypeError:
            codes = None
        if codes is None:
            codes = set()
            for klass in getattr(cls, "__mro__", ()):
                mod = getattr(klass, "__module__", "") or ""
                if klass is object or mod == "torch" or mod.startswith("torch."):
                    continue
                for value in list(vars(klass).values()):
                    _add_codes(value, codes)
            try:
                _CODES_CACHE[cls] = codes
            except TypeError:
                pass
        out |= codes
    return out


def _add_codes(value: Any, codes: set) -> None:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    for _ in range(8):  # decorators (``torch.no_grad()``, functools.wraps) keep __wrapped__
        code = getattr(value, "__code__", None)
        if code is not None:
            codes.add(code)
        value = getattr(value, "__wrapped__", None)
        if value is None:
            break


class Slot:
    """What one module's hook reports to; the agent thread re-points it.

    ``guard`` None: inert.  ``used`` is set by the first call, ``seen`` keeps
    the time of calls made before the agent assigned a guard (a model built
    and run in one notebook cell), ``traced`` that torch.jit.trace recorded a
    call, ``captured`` that a CUDA graph did (its replays read the weights at
    their addresses, and call no hook).  ``announce(module)`` tells the agent about a module it has not met
    (a deep copy), once.
    """

    __slots__ = ("guard", "part", "used", "seen", "grad_seen", "traced", "captured",
                 "announce", "handle", "__weakref__")

    def __init__(self, announce: Callable[[Any], None] | None = None) -> None:
        self.guard: ModelGuard | None = None
        self.part = False  # the hook of a direct part of the model, not of the model itself
        self.used = False
        self.seen: float | None = None
        self.grad_seen: float | None = None  # a call with autograd on before a guard existed
        self.traced = False  # called while torch.jit.trace was recording
        self.captured = False  # called while a CUDA graph was being captured
        self.announce = announce
        self.handle: Any = None


class Checks:
    """torch's cheap checks the hook makes on each call (None: not available).

    ``tracing``: torch.jit.trace is recording; ``capturing``: a CUDA graph is
    being captured on the current stream (never initialises CUDA);
    ``grad_enabled``: autograd records this call."""

    __slots__ = ("tracing", "capturing", "grad_enabled")

    def __init__(self, tracing: Any = None, capturing: Any = None,
                 grad_enabled: Any = None) -> None:
        self.tracing = tracing
        self.capturing = capturing
        self.grad_enabled = grad_enabled


class _PreHook:
    """Forward pre-hook: transparent reload and last-used time.

    Pickled: a do-nothing stdlib callable, so the file loads anywhere.
    Deep-copied: an inert hook with a fresh slot, so the copy is a model of
    its own, never managed through the original's guard."""

    __slots__ = ("slot", "compiling", "checks", "__weakref__")
    __name__ = "vram_steward_pre"

    def __init__(self, slot: Slot, compiling: Any, checks: Checks | None = None) -> None:
        self.slot = slot
        self.compiling = compiling
        self.checks = checks if checks is not None else Checks()

    def __reduce__(self) -> Any:
        return (getattr, (0, "__init__"))

    def __deepcopy__(self, memo: dict) -> _PreHook:
        slot = memo.get(id(self.slot))
        if slot is None:
            slot = memo[id(self.slot)] = Slot(self.slot.announce)
        return _PreHook(slot, self.compiling, self.checks)

    def __call__(self, module: Any, args: Any) -> None:
        try:
            if self.compiling():
                return None
            slot = self.slot
            checks = self.checks
            if _check(checks.tracing):
                slot.traced = True  # its weights now live on in a traced ScriptModule
            if _check(checks.capturing):
                slot.captured = True
            g = slot.guard
            if g is None:
                slot.seen = _time()
                if _check(checks.grad_enabled):
                    slot.grad_seen = slot.seen
                if not slot.used:
                    slot.used = True
                    announce = slot.announce
                    if announce is not None:
                        announce(module)
                return None
            if g.state is not RESIDENT:
                with g.lock:
                    g.ensure_resident("forward", own_call=True, part=slot.part)
            now = _time()
            g.cell[0] = now
            if _check(checks.grad_enabled):
                g.grad_call = now  # autograd may keep the weights for a backward
            if not slot.used:
                slot.used = True
        except ReloadFailed as exc:
            raise RuntimeError(str(exc)) from None
        except Exception:
            pass
        return None


def _check(fn: Any) -> bool:
    """One of torch's checks; a check that fails counts as False (it must
    never keep the hook from reloading the model)."""
    if fn is None:
        return False
    try:
        return bool(fn())
    except Exception:
        return False


def slot_of(module: Any) -> Slot | None:
    """The slot of the agent's hook on ``module``, or None (reads, never writes)."""
    hook = hook_of(module)
    return hook.slot if hook is not None else None


def hook_of(module: Any) -> _PreHook | None:
    try:
        hooks = module.__dict__.get("_forward_pre_hooks")
        if not hooks:
            return None
        for hook in list(hooks.values()):
            if type(hook) is _PreHook:
                return hook
    except Exception:
        return None
    return None


def install(module: Any, slot: Slot, compiling: Any, checks: Checks | None = None) -> bool:
    """Register a new hook on ``module`` (the user's thread only); False: not placed."""
    return register(module, slot, _PreHook(slot, compiling, checks))


class HookDict(collections.OrderedDict):
    """A module's ``_forward_pre_hooks`` once the agent's hook is in it.

    Pickled (``torch.save(model)``, multiprocessing), it is a plain
    OrderedDict without the agent's hooks: a placeholder left in their place
    would make TorchScript and ``torch.compile(fullgraph=True)`` fail on the
    loaded model wherever it is loaded.  Deep-copied, it keeps them (each
    with a fresh slot: the copy is a model of its own)."""

    __slots__ = ()

    def __reduce__(self) -> Any:
        return (collections.OrderedDict,
                ([(k, v) for k, v in self.items() if type(v) is not _PreHook],))

    def __deepcopy__(self, memo: dict) -> HookDict:
        out = HookDict()
        memo[id(self)] = out
        for key, value in self.items():
            out[key] = copy.deepcopy(value, memo)
        return out


def register(module: Any, slot: Slot, hook: _PreHook) -> bool:
    """Register this hook object on ``module`` (the user's thread only).

    Only on a module with no forward pre-hooks of its own yet (while it is
    being built): its hook dict becomes a ``HookDict``, and a handle the user
    holds for an earlier hook would point at the dict replaced.  False:
    not placed."""
    d = module.__dict__
    hooks = d.get("_forward_pre_hooks")
    if type(hooks) is not HookDict:
        if type(hooks) is not collections.OrderedDict or hooks:
            return False
        d["_forward_pre_hooks"] = HookDict()
    slot.handle = module.register_forward_pre_hook(hook, prepend=True)
    return True


def uninstall(module: Any, slot: Slot) -> None:
    """Remove the hook (the user's thread, while the module is being built)."""
    handle, slot.handle = slot.handle, None
    hooks = module.__dict__.get("_forward_pre_hooks")
    removed = False
    if handle is not None:
        try:
            handle.remove()
            removed = True
        except Exception:
            pass
    if not removed:  # a deep copy's hook has no handle of its own: find it by type
        for key, hook in list((hooks or {}).items()):
            if type(hook) is _PreHook and hook.slot is slot:
                hooks.pop(key, None)
    if type(hooks) is HookDict and not hooks:
        module.__dict__["_forward_pre_hooks"] = collections.OrderedDict()


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
