"""Which models a process holds: discovery, the root list, the model list.

* torch's global registration hooks (parameter / buffer / submodule) report
  each module that registers something: O(1) on the user's thread, never
  raising, installed once per process from the user's thread (``start()`` or
  the torch import hook) and never removed; when no agent runs they return at
  once.  They also drive where the per-model hooks sit (``placement``).
* Modules built before the agent started are found by one ``gc.get_objects()``
  pass in ``start()`` (``attach_existing``), on the thread that called it.
* Roots: tracked modules with weights (parameters, or the packs of
  quantized layers) that no user module holds as a child.  torch's machinery
  (an OptimizedModule, export's wrappers, fx and TorchScript modules) never
  hides the model under it: a model is listed once, as the user built it.  A
  machinery module is listed only when it holds weights no listed model holds
  (a traced module kept after its source was deleted).  When a root is
  freed, what it held is listed again at the next refresh.
* The agent thread only reads modules and re-points the hooks' slots
  (``guard.Slot``): it never adds or removes a hook.
* Per-model figures are cached ~1 s so 4 Hz polling stays cheap; the agent
  never holds strong references to user modules (weak containers).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from . import figures as _fig
from . import forks
from . import guard as _guard
from . import log as _log
from . import model_config as _config
from . import model_guard as _mg
from . import placement as _placement

FIGURES_TTL_S = 1.0
GROUP_MIN_INTERVAL_S = 5.0
GROUP_MAX_ROOTS = 256
RESCAN_NO_HOOKS_S = 10.0

_ACTIVE: ModelTracker | None = None  # the tracker the global hooks feed
_GLOBAL_HOOKS_INSTALLED = False
_TRACKERS: weakref.WeakSet = weakref.WeakSet()


def _on_parameter(module: Any, name: Any, value: Any) -> None:
    """Global parameter registration hook: O(1), never raises, returns None."""
    try:
        tracker = _ACTIVE
        if tracker is not None:
            tracker.placement.on_parameter(module, value)
    except Exception:
        pass
    return None


def _on_buffer(module: Any, name: Any, value: Any) -> None:
    try:
        tracker = _ACTIVE
        if tracker is not None:
            tracker.placement.on_buffer(module)
    except Exception:
        pass
    return None


def _on_module(module: Any, name: Any, value: Any) -> None:
    try:
        tracker = _ACTIVE
        if tracker is not None:
            tracker.placement.on_module(module, value)
    except Exception:
        pass
    return None


def install_global_hooks(torch: Any) -> bool:
    """Install the registration hooks (call from the user's thread only)."""
    global _GLOBAL_HOOKS_INSTALLED
    if _GLOBAL_HOOKS_INSTALLED:
        return True
    try:
        mod = torch.nn.modules.module
        param = getattr(mod, "register_module_parameter_registration_hook", None)
        module = getattr(mod, "register_module_module_registration_hook", None)
        buffer = getattr(mod, "register_module_buffer_registration_hook", None)
        if not callable(param) or not callable(module):
            return False
        param(_on_parameter)
        module(_on_module)
        if callable(buffer):
            buffer(_on_buffer)
        _GLOBAL_HOOKS_INSTALLED = True
        return True
    except Exception:
        _log.log_exc("installing module registration hooks failed")
        return False


def compiling_fn(torch: Any) -> Any:
    """torch's "is dynamo tracing now?" check (constant-folded by dynamo).

    Only dynamo traces Python: under non-strict export or jit.trace the
    agent's hooks run for real (they make no tensors), so they must not be
    switched off there (``is_compiling()`` is also true under export)."""
    for path in (("compiler", "is_dynamo_compiling"), ("compiler", "is_compiling"),
                 ("_dynamo", "is_compiling")):
        obj = torch
        try:
            for part in path:
                obj = getattr(obj, part)
            if callable(obj):
                return obj
        except Exception:
            continue
    return _never


def tracing_fn(torch: Any) -> Any:
    """torch's "is torch.jit.trace recording now?" check, or None."""
    fn = getattr(getattr(torch, "_C", None), "_is_tracing", None)
    return fn if callable(fn) else None


def capturing_fn(torch: Any) -> Any:
    """torch's "is a CUDA graph being captured?" check, or None (a CPU build).
    It returns False without creating a CUDA context where none exists."""
    version = getattr(torch, "version", None)
    if getattr(version, "cuda", None) is None and getattr(version, "hip", None) is None:
        return None
    fn = getattr(getattr(torch, "_C", None), "_cuda_isCurrentStreamCapturing", None)
    return fn if callable(fn) else None


def _never() -> bool:
    return False


class ModelTracker:
    """Tracks nn.Modules.  ``add`` and ``attach_existing`` run on user threads,
    everything else on the agent thread."""

    def __init__(self, last_used: bool = True) -> None:
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()  # the agent thread and an action's worker refresh
        self._seen: weakref.WeakSet = weakref.WeakSet()
        self._first_seen: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.dirty = True
        self._ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._next_id = 1
        self._roots: list = []  # weakref.ref to listed-candidate roots, in id order
        self._root_ids: tuple = ()
        self._user_roots: set = set()  # id() of the roots that are user models
        self._guards: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # m -> guard
        self._bound: weakref.WeakSet = weakref.WeakSet()  # slots pointed at a guard
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._groups: dict[str, str] = {}
        self._group_due = False
        self._group_last = 0.0
        self.scan_seconds: float | None = None
        self._last_scan = -1e9
        self.hooks = False  # the global registration hooks feed this tracker
        self.placement = _placement.Placement(self.add, _never, None, self.guard)
        self.placement.enabled = last_used
        #: called with a guard a stopped agent made, when this tracker takes it over
        self.on_adopt: Any = None
        self.configs = _config.ConfigCache()
        _TRACKERS.add(self)

    @property
    def last_used_enabled(self) -> bool:
        return self.placement.enabled

    # -- user threads ----------------------------------------------------
    def add(self, module: Any) -> None:
        with self._lock:
            if module not in self._seen:
                self._seen.add(module)
                self._first_seen[module] = time.time()
                self.dirty = True

    def activate(self) -> None:
        global _ACTIVE
        _ACTIVE = self

    def deactivate(self) -> None:
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None

    def use_torch(self, torch: Any) -> None:
        """Bind torch's checks (the user's thread, once torch is imported)."""
        self.placement.compiling = compiling_fn(torch)
        checks = self.placement.checks  # the object every hook holds: set in place
        checks.tracing = tracing_fn(torch)
        checks.capturing = capturing_fn(torch)
        grad = getattr(torch, "is_grad_enabled", None)
        checks.grad_enabled = grad if callable(grad) else None

    def attach_existing(self, torch: Any) -> None:
        """Find the modules built before the agent started and place their hooks
        (the thread that calls ``start()``: one heap pass)."""
        found, count, seconds = _placement.scan_modules(torch)
        placed = self.placement.attach_existing(found)
        del found
        self.scan_seconds = seconds
        self._last_scan = time.monotonic()
        _log.log("module scan: %d objects, %.3f s, hooks on %d modules" % (count, seconds, placed))

    # -- agent thread ----------------------------------------------------
    @property
    def method(self) -> str:
        if self.hooks:
            return "hooks+scan" if self.scan_seconds is not None else "hooks"
        return "scan"

    @property
    def tracked(self) -> int:
        return len(self._seen)

    def _rescan(self, torch: Any) -> None:
        """Without registration hooks (old torch): list new modules (no hooks)."""
        found, count, seconds = _placement.scan_modules(torch)
        for m in found:
            try:
                self.add(m)
            except TypeError:
                pass
        self.scan_seconds = seconds
        self._last_scan = time.monotonic()

    def _root_died(self, _ref: Any) -> None:
        self.dirty = True  # what it held may be a root now

    def refresh(self, torch: Any, allow_scan: bool = True) -> bool:
        """Recompute roots if anything changed; True when the list of roots changed."""
        with self._refresh_lock:
            return self._refresh(torch, allow_scan)

    def _refresh(self, torch: Any, allow_scan: bool) -> bool:
        if allow_scan and not self.hooks and time.monotonic() - self._last_scan > RESCAN_NO_HOOKS_S:
            self._rescan(torch)
        if not self.dirty:
            return False
        with self._lock:
            mods = list(self._seen)
            self.dirty = False
        kinds = {id(m): _placement.internal_kind(m) for m in mods}
        nonroot: set = set()
        for m in mods:
            if kinds[id(m)] is not None or id(m) in nonroot:
                continue
            stack = list(_fig.children(m))
            while stack:
                c = stack.pop()
                if c is None or id(c) in nonroot:
                    continue
                nonroot.add(id(c))
                stack.extend(_fig.children(c))
        roots = [m for m in mods if id(m) not in nonroot and _fig.has_weights(m)]
        for m in roots:
            if m not in self._ids:
                self._ids[m] = "m%d" % self._next_id
                self._next_id += 1
        roots.sort(key=lambda m: int(self._ids[m][1:]))
        self._user_roots = {id(m) for m in roots if kinds[id(m)] is None}
        self._bind([m for m in roots if id(m) in self._user_roots])
        self._roots = [weakref.ref(m, self._root_died) for m in roots]
        new_ids = tuple(self._ids[m] for m in roots)
        changed = new_ids != self._root_ids
        self._root_ids = new_ids
        if changed:
            self._group_due = True
        return changed

    def _bind(self, roots: list) -> None:
        """Point each model's slots (its own and its parts') at its guard."""
        bound: dict[int, Any] = {}
        for m in roots:
            g = self._guards.get(m)
            slot = _guard.slot_of(m)
            if g is None:
                old = slot.guard if slot is not None else None
                if old is not None and old.module_ref() is m:
                    g = old  # a stopped agent's guard: the model may be offloaded under it
                    g.model_id = self._ids.get(m)
                    if self.on_adopt is not None:
                        self.on_adopt(g)
                else:
                    g = _mg.ModelGuard(m, self._ids.get(m), self._first_seen.get(m))
                    if slot is not None:  # called before the agent listed it
                        g.cell[0] = slot.seen
                        g.grad_call = slot.grad_seen
                self._guards[m] = g
            if slot is not None:
                slot.part = False
                slot.guard = g
                bound[id(slot)] = slot
            parts = [p for c in _fig.children(m) if c is not None for p in _placement.level(c)]
            for part in parts:
                ps = _guard.slot_of(part)
                if ps is not None and id(ps) not in bound:
                    ps.part = True
                    ps.guard = g
                    bound[id(ps)] = ps
        for slot in list(self._bound):
            if id(slot) not in bound:
                g = slot.guard
                if g is None or g.state is _mg.RESIDENT:
                    slot.guard = None  # no longer a model or a part of one: inert
        self._bound = weakref.WeakSet(bound.values())

    def release(self) -> None:
        """Agent stop: every hook inert, except an offloaded model's (its next
        call must still bring it back)."""
        for slot in list(self._bound):
            g = slot.guard
            if g is None or g.state is _mg.RESIDENT:
                slot.guard = None

    def guard(self, module: Any) -> _mg.ModelGuard | None:
        return self._guards.get(module)

    def find(self, model_id: str) -> Any:
        """The root module with id ``model_id``, or None."""
        for m in self.roots():
            if self._ids.get(m) == model_id:
                return m
        return None

    def model_id(self, module: Any) -> str | None:
        return self._ids.get(module)

    def invalidate(self, module: Any) -> None:
        self._cache.pop(module, None)

    def roots(self) -> list:
        return [m for m in (r() for r in self._roots) if m is not None]

    def user_roots(self) -> list:
        return [m for m in self.roots() if id(m) in self._user_roots]

    def marks(self, root: Any, figures: dict | None = None) -> str | None:
        """What else reaches ``root``'s weights: "torch.compile", "torch.export",
        "torch.fx", "TorchScript", "CUDA graph" (never moved), or None."""
        marks = self.placement.marks
        for m in _fig.subtree(root):
            kind = marks.get(m)
            if kind is not None:
                return kind
            if m.__dict__.get("_compiled_call_impl") is not None:
                return "torch.compile"
        if figures is not None and figures.get("dynamo_traced"):
            return "torch.compile"
        for m in (root,) + _fig.children(root):
            slot = _guard.slot_of(m) if m is not None else None
            if slot is not None and slot.traced:
                return "TorchScript"
            if slot is not None and slot.captured:
                return "CUDA graph"
        return None

    def figures(self, module: Any) -> dict:
        now = time.monotonic()
        cached = self._cache.get(module)
        if cached is None or now - cached[0] > FIGURES_TTL_S:
            cached = (now, _fig.model_figures(module), _fig.friendly_name(module),
                      _fig.qualified_class(module))
            self._cache[module] = cached
        return cached[1]

    def maybe_group(self) -> None:
        """Find pipeline objects holding several roots (bounded, rate-limited)."""
        if not self._group_due or time.monotonic() - self._group_last < GROUP_MIN_INTERVAL_S:
            return
        self._group_due = False
        self._group_last = time.monotonic()
        roots = self.user_roots()
        if len(roots) < 2 or len(roots) > GROUP_MAX_ROOTS:
            self._groups = {}
            return
        try:
            self._groups = _fig.find_groups(roots, self._ids)
        except Exception:
            _log.log_exc("pipeline grouping failed")

    def shared_with(self, module: Any) -> str | None:
        """The id of another listed model holding some of ``module``'s tensors.

        The cached figures screen; an overlap is confirmed from fresh ones: a
        cached id may name a tensor freed since (``from_pretrained`` replaces
        the parameters it built), whose id a new tensor of another model took.
        """
        mine = self.figures(module)["tensor_ids"]
        fresh = None
        for other in self.user_roots():
            if other is module or mine.isdisjoint(self.figures(other)["tensor_ids"]):
                continue
            if fresh is None:
                fresh = _fig.model_figures(module)["tensor_ids"]
            if not fresh.isdisjoint(_fig.model_figures(other)["tensor_ids"]):
                return self._ids.get(other) or "?"
        return None

    def models(self, errors: list, annotate: Any = None) -> list[dict[str, Any]]:
        roots = self.roots()
        user_ids: set = set()
        for m in roots:
            if id(m) in self._user_roots:
                try:
                    user_ids |= self.figures(m)["tensor_ids"]
                except Exception:
                    pass
        out = []
        self.configs.start_report()
        for m in roots:
            try:
                figures = self.figures(m)
                if id(m) not in self._user_roots and figures["tensor_ids"] <= user_ids:
                    continue  # machinery over a listed model's weights: not a model of its own
                _, _, name, cls = self._cache[m]
                model_id = self._ids.get(m)
                info = {"id": model_id, "name": name, "class": cls}
                info.update({k: v for k, v in figures.items()
                             if k not in ("tensor_ids", "has_grad", "dynamo_traced", "unmovable")})
                info["bytes_by_device"] = {k: dict(v) for k, v in
                                           figures["bytes_by_device"].items()}
                info["training"] = bool(m.__dict__.get("training", False))
                g = self._guards.get(m)
                info["last_used"] = g.cell[0] if g is not None else None
                info["first_seen"] = g.first_seen if g is not None else None
                info["group"] = self._groups.get(model_id) if model_id is not None else None
                info["config"] = self.configs.get(m)
                info["input_shape"] = _config.shape_list(g.shape) if g is not None else None
                if annotate is not None:
                    annotate(m, info, figures)
                out.append(info)
            except Exception as exc:
                errors.append("model figures failed: %r" % (exc,))
        return out


def _reinit_after_fork() -> None:
    # Locks another thread held at fork time would stay held in the child.
    for t in list(_TRACKERS):
        t._lock = threading.Lock()
        t._refresh_lock = threading.Lock()


forks.in_child(_reinit_after_fork)
