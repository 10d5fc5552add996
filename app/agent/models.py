"""Model discovery without a heap scan per request.

* Global registration hooks (parameter / buffer / submodule) add each module
  that registers something to a WeakSet: O(1), never raise, return None.
  They are installed ONLY from the user's thread (``start()`` or the torch
  import hook): torch iterates those global hook dicts with Python ``for``
  loops, so an insert from the agent thread could raise in user code.  They
  are installed once per process and never removed; when no agent runs
  (stopped, forked child) they return at once.
* Modules created before the agent started are found by ONE ``gc.get_objects()``
  scan on the agent thread at the first report (read-only; duration logged).
* Roots = tracked modules that are no module's child (via ``_modules``) and
  hold at least one parameter in their subtree; recomputed when the hooks saw
  changes; per-model figures cached ~1 s so 4 Hz polling stays cheap.
* Figures use tensor metadata only (device, dtype, numel, element_size).
* The agent never holds strong references to user modules (weak containers).
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
import time
import types
import weakref
from typing import Any

from . import guard as _guard
from . import log as _log

FIGURES_TTL_S = 1.0
GROUP_MIN_INTERVAL_S = 5.0
GROUP_MAX_ROOTS = 256
RESCAN_NO_HOOKS_S = 10.0

_ACTIVE: "ModelTracker | None" = None  # the tracker the global hooks feed
_GLOBAL_HOOKS_INSTALLED = False


def _registration_hook(module: Any, name: Any, value: Any) -> None:
    """Global registration hook: remember ``module``; O(1), never raises."""
    try:
        tracker = _ACTIVE
        if tracker is not None:
            tracker.add(module)
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
        names = ("register_module_parameter_registration_hook",
                 "register_module_module_registration_hook",
                 "register_module_buffer_registration_hook")
        funcs = [getattr(mod, n, None) for n in names]
        if not callable(funcs[0]) or not callable(funcs[1]):
            return False
        for func in funcs:
            if callable(func):
                func(_registration_hook)
        _GLOBAL_HOOKS_INSTALLED = True
        return True
    except Exception:
        _log.log_exc("installing module registration hooks failed")
        return False


def global_hooks_installed() -> bool:
    return _GLOBAL_HOOKS_INSTALLED


def _noop_hook_factory() -> Any:
    return (0).__init__  # accepts (module, args), returns None, no side effect


# The per-root hooks ("last used", in-flight forwards, transparent reload)
# live in ``guard``: tiny (a lock, a dict update, a float store), never raise
# (except a failed transparent reload), do nothing under torch.compile
# (``is_compiling()`` is constant-folded by dynamo, so no graph break,
# fullgraph=True keeps working), and pickle / deepcopy to a stdlib no-op so
# ``torch.save(model)`` still works and the file loads where no agent exists.
# ``torch.jit.script`` compiles a module's Python hooks and would reject
# ours, so the agent wraps ``torch.jit.script`` to lift them for the duration
# of the call (see ``_install_jit_guard``).  ``start(last_used=False)`` (or
# VRAM_STEWARD_LAST_USED=0) turns these hooks off altogether (and with them
# unload / reload).


_TRACKERS: "weakref.WeakSet" = weakref.WeakSet()  # every tracker whose hooks jit.script must lift


def _install_jit_guard(torch: Any, tracker: "ModelTracker") -> None:
    """Wrap ``torch.jit.script`` so scripting a module never sees our hooks.

    TorchScript compiles every forward pre-hook of the module it scripts and
    rejects ours (it is Python that records a time).  The wrapper removes the
    agent's hooks from the module tree for the duration of the call and puts
    them back afterwards; everything else passes through untouched, errors
    included.  Installed once per process.
    """
    _TRACKERS.add(tracker)
    jit = getattr(torch, "jit", None)
    original = getattr(jit, "script", None)
    if original is None or getattr(original, "_vram_steward_original", None) is not None:
        return

    def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
        lifted = [(t, t.lift_hooks(obj)) for t in list(_TRACKERS)]
        try:
            return original(obj, *args, **kwargs)
        finally:
            for t, hooks in lifted:
                t.restore_hooks(hooks)

    try:
        functools.update_wrapper(script, original)
        script._vram_steward_original = original  # type: ignore[attr-defined]
        jit.script = script
    except Exception as exc:  # a read-only torch.jit: keep the hooks, log it
        _log.log("could not guard torch.jit.script: %r" % (exc,))


def _compiling_fn(torch: Any) -> Any:
    for path in (("compiler", "is_compiling"), ("_dynamo", "is_compiling")):
        obj = torch
        try:
            for part in path:
                obj = getattr(obj, part)
            if callable(obj):
                return obj
        except Exception:
            continue
    return lambda: False


def _children(module: Any) -> tuple:
    try:
        mods = module.__dict__.get("_modules")
        return tuple(mods.values()) if mods else ()
    except Exception:
        return ()


def _values(module: Any, attr: str) -> tuple:
    try:
        d = module.__dict__.get(attr)
        return tuple(d.values()) if d else ()
    except Exception:
        return ()


def _subtree(root: Any) -> list:
    out, seen, stack = [], {id(root)}, [root]
    while stack:
        m = stack.pop()
        out.append(m)
        for c in _children(m):
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                stack.append(c)
    return out


def _has_params(root: Any) -> bool:
    for m in _subtree(root):
        for p in _values(m, "_parameters"):
            if p is not None:
                return True
    return False


def qualified_class(obj: Any) -> str:
    cls = type(obj)
    return "%s.%s" % (getattr(cls, "__module__", "?"), getattr(cls, "__qualname__", cls.__name__))


def _config_name(cfg: Any) -> str | None:
    if cfg is None:
        return None
    for attr in ("name_or_path", "_name_or_path"):
        try:
            value = cfg.get(attr) if isinstance(cfg, dict) else getattr(cfg, attr, None)
        except Exception:
            value = None
        if isinstance(value, str) and value:
            return value
    return None


def friendly_name(module: Any) -> str:
    try:
        cfg = module.__dict__.get("config")
        name = _config_name(cfg)
        if name:
            return name
        if cfg is not None:
            arch = getattr(cfg, "architectures", None)
            if isinstance(arch, (list, tuple)) and arch and isinstance(arch[0], str):
                return arch[0]
            mtype = getattr(cfg, "model_type", None)
            if isinstance(mtype, str) and mtype:
                return mtype
    except Exception:
        pass
    return type(module).__name__


def model_figures(root: Any) -> dict[str, Any]:
    """Sizes of ``root``'s subtree from tensor metadata (shared tensors once)."""
    params = param_bytes = buffer_bytes = 0
    by_device: dict[str, dict[str, int]] = {}
    dtypes: set = set()
    requires_grad = False
    seen: set = set()
    for m in _subtree(root):
        for kind, attr in (("params", "_parameters"), ("buffers", "_buffers")):
            for t in _values(m, attr):
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                n = int(t.numel())
                size = n * int(t.element_size())
                dev = str(t.device)
                slot = by_device.setdefault(dev, {"params": 0, "buffers": 0})
                slot[kind] += size
                if kind == "params":
                    params += n
                    param_bytes += size
                    dtypes.add(str(t.dtype).replace("torch.", ""))
                    if t.requires_grad:
                        requires_grad = True
                else:
                    buffer_bytes += size
    devices = sorted(by_device)
    return {
        "params": params, "param_bytes": param_bytes, "buffer_bytes": buffer_bytes,
        "bytes_by_device": by_device,
        "device": devices[0] if len(devices) == 1 else ("mixed" if devices else None),
        "dtype": dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else None),
        "requires_grad": requires_grad,
    }


class ModelTracker:
    """Tracks nn.Modules; all methods but ``add`` run on the agent thread."""

    def __init__(self, last_used: bool = True) -> None:
        self._lock = threading.Lock()
        self._seen: "weakref.WeakSet" = weakref.WeakSet()
        self.dirty = True
        self.last_used_enabled = last_used
        self._ids: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._next_id = 1
        self._roots: list = []  # weakref.ref to roots, in id order
        self._root_ids: tuple = ()
        self._hooks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # m -> (guard, handles)
        self._guards: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # m -> ModelGuard
        self._hook_lock = threading.RLock()  # hooks change on the agent thread and in jit.script
        self._lifted: "weakref.WeakSet" = weakref.WeakSet()  # hooks lifted while scripting
        self._cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._groups: dict[str, str] = {}
        self._group_due = False
        self._group_last = 0.0
        self.scan_needed = False
        self.scan_seconds: float | None = None
        self.scanned_objects = 0
        self._last_scan = -1e9
        self.hooks = False

    # -- user threads ----------------------------------------------------
    def add(self, module: Any) -> None:
        with self._lock:
            self._seen.add(module)
            self.dirty = True

    def activate(self) -> None:
        global _ACTIVE
        _ACTIVE = self

    def deactivate(self) -> None:
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None

    # -- agent thread ----------------------------------------------------
    @property
    def method(self) -> str:
        if self.hooks:
            return "hooks+scan" if self.scan_seconds is not None else "hooks"
        return "scan"

    @property
    def tracked(self) -> int:
        return len(self._seen)

    def scan(self, torch: Any) -> None:
        """One read-only pass over gc.get_objects() for pre-existing modules."""
        module_type = torch.nn.Module
        t0 = time.perf_counter()
        objects = gc.get_objects()
        found = []
        try:
            for obj in objects:
                if issubclass(type(obj), module_type):
                    found.append(obj)
            self.scanned_objects = len(objects)
        finally:
            del objects
        with self._lock:
            for m in found:
                try:
                    self._seen.add(m)
                except TypeError:
                    pass
            self.dirty = True
        del found
        self.scan_seconds = time.perf_counter() - t0
        self.scan_needed = False
        self._last_scan = time.monotonic()
        _log.log("one-time module scan: %d objects, %.3f s"
                 % (self.scanned_objects, self.scan_seconds))

    def refresh(self, torch: Any, allow_scan: bool = True) -> bool:
        """Recompute roots if dirty; True when the set of roots changed.

        ``allow_scan=False`` defers the heap scan (the agent's background tick
        does so right after start, so the scan does not compete for the GIL
        with the host while start() returns); a report always allows it."""
        if allow_scan and (self.scan_needed or (
                not self.hooks and time.monotonic() - self._last_scan > RESCAN_NO_HOOKS_S)):
            self.scan(torch)  # without registration hooks (old torch): rescan, rate-limited
        if not self.dirty:
            return False
        with self._lock:
            mods = list(self._seen)
            self.dirty = False
        nonroot: set = set()
        expanded: set = set()
        for m in mods:
            if id(m) in expanded:
                continue
            expanded.add(id(m))
            stack = [m]
            while stack:
                x = stack.pop()
                for c in _children(x):
                    if c is None:
                        continue
                    nonroot.add(id(c))
                    if id(c) not in expanded:
                        expanded.add(id(c))
                        stack.append(c)
        roots = [m for m in mods if id(m) not in nonroot and _has_params(m)]
        for m in roots:
            if m not in self._ids:
                self._ids[m] = "m%d" % self._next_id
                self._next_id += 1
        roots.sort(key=lambda m: int(self._ids[m][1:]))
        new_ids = tuple(self._ids[m] for m in roots)
        root_set = set(id(m) for m in roots)
        # last_used hooks: from the agent thread.  Safe: torch's _call_impl
        # snapshots the hook dicts with a C-level tuple unpack
        # ``(*_global_forward_pre_hooks.items(), *self._forward_pre_hooks.items())``
        # under the GIL, so a concurrent insert/remove cannot raise there.
        for old in list(self._hooks.keys()):
            if id(old) not in root_set:
                self._unhook(old, keep_offloaded=True)
        if self.last_used_enabled and roots:
            _install_jit_guard(torch, self)
            compiling = _compiling_fn(torch)
            script_type = getattr(getattr(torch, "jit", None), "ScriptModule", None)
            with self._hook_lock:
                for m in roots:
                    if m in self._hooks or m in self._lifted:
                        continue
                    if script_type is not None and isinstance(m, script_type):
                        continue
                    try:
                        g = self._guards.get(m)
                        if g is None:
                            g = _guard.ModelGuard(m, self._ids.get(m))
                            self._guards[m] = g
                        self._hooks[m] = (g, _guard.install(m, g, compiling))
                    except Exception as exc:
                        _log.log("forward hooks on %s failed: %r" % (qualified_class(m), exc))
        self._roots = [weakref.ref(m) for m in roots]
        changed = new_ids != self._root_ids
        self._root_ids = new_ids
        if changed:
            self._group_due = True
        return changed

    def _unhook(self, module: Any, keep_offloaded: bool = False) -> None:
        with self._hook_lock:
            entry = self._hooks.get(module)
            if entry is None:
                return
            if keep_offloaded and entry[0].state is not _guard.RESIDENT:
                return  # an offloaded model keeps its hooks: the next forward reloads it
            del self._hooks[module]
        for handle in entry[1]:
            try:
                handle.remove()
            except Exception:
                pass

    def guard(self, module: Any) -> "_guard.ModelGuard | None":
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

    def lift_hooks(self, obj: Any) -> list:
        """Remove our hooks from ``obj``'s module tree (user thread, jit.script)."""
        lifted: list = []
        try:
            modules = obj.modules() if callable(getattr(obj, "modules", None)) else ()
            with self._hook_lock:
                for m in modules:
                    entry = self._hooks.pop(m, None)
                    if entry is None:
                        continue
                    self._lifted.add(m)
                    lifted.append((m, entry[0]))
                    for handle in entry[1]:
                        handle.remove()
        except Exception as exc:
            _log.log("lifting hooks for jit.script failed: %r" % (exc,))
        return lifted

    def restore_hooks(self, lifted: list) -> None:
        """Put back what ``lift_hooks`` took, keeping each model's last-used time."""
        if not lifted:
            return
        torch = sys.modules.get("torch")
        compiling = _compiling_fn(torch) if torch is not None else (lambda: False)
        with self._hook_lock:
            for m, g in lifted:
                self._lifted.discard(m)
                try:
                    self._hooks[m] = (g, _guard.install(m, g, compiling))
                except Exception as exc:
                    _log.log("restoring a hook after jit.script failed: %r" % (exc,))

    def remove_hooks(self) -> None:
        """Agent stop: remove the hooks of resident models (offloaded ones keep
        theirs so that their next forward still reloads them)."""
        for m in list(self._hooks.keys()):
            self._unhook(m, keep_offloaded=True)

    def roots(self) -> list:
        return [m for m in (r() for r in self._roots) if m is not None]

    def maybe_group(self) -> None:
        """Find pipeline objects holding several roots (bounded, rate-limited)."""
        if not self._group_due or time.monotonic() - self._group_last < GROUP_MIN_INTERVAL_S:
            return
        self._group_due = False
        self._group_last = time.monotonic()
        roots = self.roots()
        if len(roots) < 2 or len(roots) > GROUP_MAX_ROOTS:
            self._groups = {}
            return
        try:
            self._groups = find_groups(roots, self._ids)
        except Exception:
            _log.log_exc("pipeline grouping failed")

    def models(self, errors: list, annotate: Any = None) -> list[dict[str, Any]]:
        now = time.monotonic()
        out = []
        for m in self.roots():
            try:
                cached = self._cache.get(m)
                if cached is None or now - cached[0] > FIGURES_TTL_S:
                    cached = (now, model_figures(m), friendly_name(m), qualified_class(m))
                    self._cache[m] = cached
                _, figures, name, cls = cached
                model_id = self._ids.get(m)
                info = {"id": model_id, "name": name, "class": cls}
                info.update(figures)
                info["training"] = bool(m.__dict__.get("training", False))
                g = self._guards.get(m)
                info["last_used"] = g.cell[0] if g is not None else None
                info["group"] = self._groups.get(model_id)
                if annotate is not None:
                    info["bytes_by_device"] = {k: dict(v) for k, v in
                                               info.get("bytes_by_device", {}).items()}
                    annotate(m, info)
                out.append(info)
            except Exception as exc:
                errors.append("model figures failed: %r" % (exc,))
        return out


def _instance_dict(obj: Any) -> dict | None:
    try:
        d = object.__getattribute__(obj, "__dict__")
        return d if isinstance(d, dict) else None
    except Exception:
        return None


def find_groups(roots: list, ids: Any) -> dict[str, str]:
    """{model id: group label} for objects (pipelines) holding >= 2 roots."""
    skip = (list, tuple, set, frozenset, types.FrameType, weakref.ref)
    root_ids = {id(r): r for r in roots}
    owners: list = []
    # Up to three bounded passes: roots <- instance dict / components dict <-
    # owner (or its instance dict <- owner).  Only when the roots changed,
    # rate-limited by the caller.
    targets: list = list(roots)
    exclude: set = {id(root_ids)}
    for _level in range(3):
        dicts: list = []
        for ref in gc.get_referrers(*targets):
            if id(ref) in exclude:
                continue
            if isinstance(ref, dict):
                if len(dicts) < 256:
                    dicts.append(ref)
            elif not isinstance(ref, skip):
                owners.append(ref)
        if not dicts:
            break
        exclude.update(id(d) for d in dicts)
        targets = dicts
    del targets
    groups: dict[str, str] = {}
    seen_owner: set = set()
    for owner in owners:
        if id(owner) in seen_owner or id(owner) in root_ids:
            continue
        seen_owner.add(id(owner))
        d = _instance_dict(owner)
        if d is None:
            continue
        cls_name = type(owner).__name__
        components = d.get("components")
        if not (cls_name.endswith("Pipeline") or isinstance(components, dict)):
            continue
        values = list(d.values())
        if isinstance(components, dict) and len(components) <= 1000:
            values += list(components.values())
        members = []
        for v in values:
            if id(v) in root_ids and not any(v is x for x in members):
                members.append(v)
        if len(members) < 2:
            continue
        cfg = d.get("_internal_dict")
        if cfg is None:
            cfg = d.get("config")
        name = _config_name(cfg)
        label = "%s (%s)" % (cls_name, name) if name else cls_name
        for m in members:
            model_id = ids.get(m)
            if model_id and model_id not in groups:
                groups[model_id] = label
    return groups
