"""The one hook that carries a model's state: "last used" and transparent
reload.

A root model and each of its composite direct parts (and the model a part
only wraps) carry one permanent forward pre-hook (``_PreHook``, registered
with ``prepend=True`` so it runs before the user's own pre-hooks), placed on
the user's own thread (``placement``).  While the model is resident it records the time of the call
(a float store) and, on the model itself (not a part), the ``Size`` of the call's first
tensor (a reference, no copy).  When the model is offloaded it first brings it back (one
reload however many threads call; the others wait on the guard's Condition).

Each hook holds a ``Slot``; the slot's ``guard`` says which model the call
counts for (None: the hook is inert).  The agent thread only ever changes that
attribute, never the module's hook dicts, so dynamo, TorchScript and export
always see the same module.  There is no forward (post) hook: a second hook
doubles the cost of every call, and a hook registered with ``always_call``
makes dynamo recompile for every new instance of a model class.

Whether the model is running is read from the threads' stacks instead
(``running``).  The model's state lives in its ``model_guard.ModelGuard``.

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
import time
from collections.abc import Callable
from typing import Any

from .model_guard import RESIDENT, ModelGuard, ReloadFailed

_time = time.time

class Slot:
    """What one module's hook reports to; the agent thread re-points it.

    ``guard`` None: inert.  ``used`` is set by the first call, ``seen`` keeps
    the time of calls made before the agent assigned a guard (a model built
    and run in one notebook cell), ``traced`` that torch.jit.trace recorded a
    call, ``captured`` that a CUDA graph did (its replays read the weights at
    their addresses, and call no hook).  ``announce(module)`` tells the agent
    about a module it has not met (a deep copy), once.
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
            if not slot.part:
                shape = _first_shape(module, args)
                if shape is not None:
                    g.shape = shape
        except ReloadFailed as exc:
            raise RuntimeError(str(exc)) from None
        except Exception:
            pass
        return None


#: Keyword arguments that carry a model's input, looked for in this order.
INPUT_NAMES = ("input_ids", "pixel_values", "sample", "inputs_embeds", "input_values",
               "input_features", "x", "input")


#: The functions of torch's ``Module`` that call forward pre-hooks.
_CALLERS = frozenset({"_call_impl", "inner"})


def _first_shape(module: Any, args: Any) -> Any:
    """The ``Size`` of a call's first tensor (the first positional argument),
    else of its first tensor keyword argument, or None.

    A hook registered without ``with_kwargs`` is handed the positional
    arguments only, so keyword ones are read from its caller's frame, torch's
    ``Module._call_impl`` (or the ``inner`` it runs its hooks in), checked to
    be this module's call (only for a call without positional arguments: a
    model called as ``model(**batch)``)."""
    if args:
        return _plain(getattr(args[0], "shape", None))
    frame = sys._getframe(2)
    if frame.f_code.co_name not in _CALLERS:
        return None
    local = frame.f_locals
    del frame
    kwargs = local.get("kwargs")
    if local.get("self") is not module or not isinstance(kwargs, dict) or not kwargs:
        return None
    for name in INPUT_NAMES:
        shape = getattr(kwargs.get(name), "shape", None)
        if isinstance(shape, tuple):
            return _plain(shape)
    for value in kwargs.values():
        shape = getattr(value, "shape", None)
        if isinstance(shape, tuple):
            return _plain(shape)
    return None


def _plain(shape: Any) -> Any:
    """``shape`` if every size is a plain int: a symbolic one (``torch.export``, dynamic
    shapes) is never kept, so nothing of the tracer outlives the call."""
    if isinstance(shape, tuple) and all(type(d) is int for d in shape):
        return shape
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
