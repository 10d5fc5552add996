"""Where the per-model hooks sit, decided on the user's own threads.

The agent thread never adds or removes a hook: a module's hook dicts change
only while the user's code builds it, so dynamo, TorchScript and export
always trace a stable module.  torch's global registration hooks call
``on_parameter`` / ``on_module`` on the thread that builds a module:

* a module gets the hook pair (``guard.install``) when its first parameter is
  registered, or when it adopts a child that has weights (parameters, or the
  packs of quantized layers);
* when a parent adopts a child, a composite child keeps its pair (it is now
  a direct part of the parent: its calls count as use of the parent, see
  ``is_part``), a plain layer loses it, and the child's own children lose
  theirs (they are now two levels down, where a hook would only cost time on
  every forward);
* a module adopted below a module that is itself adopted loses its pair;
* a pair that ever saw a call is never removed (the module was in use);
* a wrapper (no weights of its own, one child: peft's LoraModel, DDP) is
  transparent: the module it wraps counts at its level, so a model wrapped
  twice (PeftModel -> LoraModel -> the model) keeps its pair, and is a model
  with hooks again when the wrappers are dropped (``merge_and_unload()``).

So once a model is built, its root and its composite direct parts (and what
they wrap) carry hooks and nothing deeper does.  A model that was already in
use when something wrapped it keeps its hooks; the agent thread merely
re-points their slots.

The agent thread never places a hook either, not even on a model left
without one.  A ready hook dict put in place in one store would not break a
running ``_call_impl`` (it reads the dict, never sees it change), but a user
thread registering a hook of its own on the module at that moment would
keep a handle to the dict replaced (its ``remove()`` would do nothing), and a
compile tracing the module meanwhile would recompile.  Such a model is
refused with the one reason it has none (``hookless``).

torch's quantized layers are not announced while they build (a quantized
Linear adopting its ``LinearPackedParams``, a quantized norm registering its
parameters): ``convert`` and ``quantize_dynamic`` build them into a copy of
the model, which the agent meets at its first call, and each is a part, never
a model of its own.

Modules of torch's own machinery (torch.compile's OptimizedModule, export's
wrappers, fx GraphModules, TorchScript modules) never get hooks and never
adopt: the model they wrap stays the model the user knows.  What they wrap is
marked (``marks``): its weights are also reached by compiled, exported or
traced code, so the agent never moves them.  A model that is offloaded when
torch.compile wraps it is brought back first, on the same thread.

``attach_existing`` does the same for modules built before the agent started
(``start()`` from a notebook), on the thread that calls ``start()``.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import guard as _guard
from . import log as _log
from . import model_guard as _mg
from . import packed as _packed
from .figures import children as _children
from .figures import has_weights as _has_weights
from .figures import own_weights as _own_weights

#: Module classes from these packages are torch's machinery, not user models.
INTERNAL_KINDS = (
    ("torch._dynamo", "torch.compile"), ("torch._inductor", "torch.compile"),
    ("torch.export", "torch.export"), ("torch._export", "torch.export"),
    ("torch.fx", "torch.fx"), ("torch.jit", "TorchScript"),
    ("torch._functorch", "torch.func"), ("torch.func", "torch.func"),
    ("torch._higher_order_ops", "torch internals"), ("torch._subclasses", "torch internals"),
)
#: A bare ``torch.nn.Module()`` (export builds some): hidden like machinery, but
#: wrapping a model in one marks nothing.
BARE = "container"
#: Why a model has no hook (``Placement.hookless``).
HOOKS_OFF = "hooks off"
OWN_PRE_HOOKS = "pre-hooks of its own"
MODEL_GONE = "its model is gone"
NOT_SEEN_BUILT = "not seen built"

_kinds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def internal_kind(module: Any) -> str | None:
    """The machinery a module belongs to ("torch.compile", ...), None for user models."""
    cls = type(module)
    try:
        return _kinds[cls]
    except KeyError:
        pass
    except TypeError:
        return None
    name = getattr(cls, "__module__", "") or ""
    kind = None
    if name == "torch.nn.modules.module" and cls.__name__ == "Module":
        kind = BARE
    else:
        for prefix, label in INTERNAL_KINDS:
            if name == prefix or name.startswith(prefix + "."):
                kind = label
                break
    try:
        _kinds[cls] = kind
    except TypeError:
        pass
    return kind


def is_part(parent: Any, child: Any) -> bool:
    """Does ``child`` keep hooks as a part of ``parent``?  Composite children
    (``vae.decoder``, ``model.encoder``, ``resnet.layer1``) do: a method such
    as ``vae.decode`` uses the model through them.  Plain layers (a Linear, a
    norm) and the items of a container (``nn.Sequential``) do not: they are
    only called by the model's own forward, and every hook costs a few
    microseconds per call."""
    if type(parent).__module__ == "torch.nn.modules.container":
        return False
    return bool(_children(child))


def level(module: Any) -> list:
    """``module`` and what it wraps: while a module has no weights of its own and
    exactly one child, that child counts at its level (``LoraModel.model``)."""
    out = [module]
    seen = {id(module)}
    while True:
        kids = [c for c in _children(out[-1]) if c is not None]
        if len(kids) != 1 or id(kids[0]) in seen or _own_weights(out[-1]) \
                or internal_kind(out[-1]) is not None:
            return out
        seen.add(id(kids[0]))
        out.append(kids[0])


def _below(modules: list) -> list:
    """The children of ``modules`` that are not among them."""
    ids = {id(m) for m in modules}
    return [c for m in modules for c in _children(m) if c is not None and id(c) not in ids]


class Placement:
    """The user-thread side of model tracking: hooks, adoption, marks.

    ``announce(module)`` tells the tracker about a module (O(1), any thread);
    ``compiling()`` and ``checks`` are torch's own checks (shared by every
    hook placed); ``guard_of(module)`` returns the model's guard if the tracker
    made one.
    """

    def __init__(self, announce: Callable[[Any], None], compiling: Callable[[], bool],
                 tracing: Callable[[], bool] | None,
                 guard_of: Callable[[Any], Any]) -> None:
        self.announce = announce
        self.compiling = compiling
        self.checks = _guard.Checks(tracing)
        self.guard_of = guard_of
        self.enabled = True  # False: no hooks at all (VRAM_STEWARD_LAST_USED=0)
        self._adopted: weakref.WeakSet = weakref.WeakSet()  # has a user-module parent
        self._with_weights: weakref.WeakSet = weakref.WeakSet()  # weights in its subtree
        self._refused: weakref.WeakSet = weakref.WeakSet()  # had pre-hooks of its own
        #: module -> what reaches its weights besides the module ("torch.compile", ...)
        self.marks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # -- registration hooks (the user's threads) ----------------------------------
    def on_parameter(self, module: Any, value: Any) -> None:
        if self.compiling() or _packed.is_quantized_layer(module):
            return
        self.announce(module)
        if value is None or internal_kind(module) is not None:
            return
        self._with_weights.add(module)
        if self.enabled and module not in self._adopted and _guard.slot_of(module) is None:
            self._place(module)

    def on_buffer(self, module: Any) -> None:
        if not self.compiling() and not _packed.is_quantized_layer(module):
            self.announce(module)

    def on_module(self, parent: Any, child: Any) -> None:
        if self.compiling():
            return
        if _packed.is_quantized_layer(parent) or (child is not None and _packed.is_holder(child)):
            # a quantized layer building its pack: a part of some model, never one itself
            if child is not None and (child in self._with_weights or _own_weights(child)):
                self._with_weights.add(parent)
            return
        self.announce(parent)
        if child is None:
            return
        self.announce(child)
        kind = internal_kind(parent)
        if kind is not None:
            self._wrapped_by_machinery(child, kind)
            return
        has_weights = child in self._with_weights or _own_weights(child)
        if has_weights:
            self._with_weights.add(parent)
        self._adopted.add(child)
        if not self.enabled:
            return
        parent_is_root = parent not in self._adopted
        at_child = level(child)
        if not (parent_is_root and is_part(parent, child)):
            for m in at_child:  # two or more levels down now, or a mere layer
                self._prune(m)
        for grandchild in _below(at_child):
            for m in level(grandchild):
                self._prune(m)
        if parent_is_root and has_weights and _guard.slot_of(parent) is None:
            self._place(parent)

    # -- start() from a running program (the calling thread) ----------------------
    def attach_existing(self, modules: list) -> int:
        """Hooks on the roots (and their parts) among ``modules``; returns the count."""
        user = [m for m in modules if internal_kind(m) is None]
        for m in modules:
            self.announce(m)
            kind = internal_kind(m)
            if kind is not None and kind != BARE:
                for child in _children(m):
                    if child is not None and internal_kind(child) is None:
                        self.marks.setdefault(child, kind)
        child_ids: set = set()
        for m in user:
            for c in _children(m):
                if c is not None:
                    child_ids.add(id(c))
                    self._adopted.add(c)
        placed = 0
        if not self.enabled:
            return placed
        for m in user:
            if id(m) in child_ids or not _has_weights(m):
                continue
            parts = [p for c in _children(m) if c is not None and is_part(m, c)
                     for p in level(c)]
            for part in [m] + parts:
                if _guard.slot_of(part) is None and _has_weights(part) and self._place(part):
                    placed += 1
        return placed

    # -- the agent thread ---------------------------------------------------------
    def hookless(self, module: Any) -> str:
        """Why ``module`` carries no hook of the agent's: ``HOOKS_OFF``,
        ``OWN_PRE_HOOKS`` (it had some when its hook was to be placed),
        ``MODEL_GONE`` (it was placed inside a model, which holds the hooks, and
        that model is gone) or ``NOT_SEEN_BUILT`` (a copy of a hookless part,
        weights set without torch's registration)."""
        if not self.enabled:
            return HOOKS_OFF
        if module in self._refused:
            return OWN_PRE_HOOKS
        if module in self._adopted:
            return MODEL_GONE
        return NOT_SEEN_BUILT

    # -- internals ------------------------------------------------------------------
    def _place(self, module: Any) -> bool:
        try:
            slot = _guard.Slot(self.announce)
            if _guard.install(module, slot, self.compiling, self.checks):
                return True
            self._refused.add(module)
        except Exception as exc:
            _log.log("placing hooks on %s failed: %r" % (type(module).__name__, exc))
        return False

    def _prune(self, module: Any) -> None:
        if module is None:
            return
        slot = _guard.slot_of(module)
        if slot is not None and not slot.used:
            _guard.uninstall(module, slot)

    def _wrapped_by_machinery(self, child: Any, kind: str) -> None:
        if kind == BARE or internal_kind(child) is not None:
            return
        self.marks.setdefault(child, kind)
        g = self.guard_of(child)
        if g is not None and g.state is not _mg.RESIDENT:
            g.make_resident("compile")  # compiled code must see the weights at home


def scan_modules(torch: Any) -> tuple[list, int, float]:
    """Every live ``nn.Module`` (one read-only pass over the heap).

    Returns (modules, objects scanned, seconds)."""
    module_type = torch.nn.Module
    t0 = time.perf_counter()
    objects = gc.get_objects()
    found = []
    try:
        for obj in objects:
            if issubclass(type(obj), module_type):
                found.append(obj)
        count = len(objects)
    finally:
        del objects
    return found, count, time.perf_counter() - t0
