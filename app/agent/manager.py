"""The in-process model manager: unload / reload root models, idle policy, events.

States (per root model, see ``guard``): resident -> unloading -> offloaded (to
"cpu" or "disk") -> reloading -> resident.  Every change is a model event
(``protocol`` docstring) kept in a ring of the last 64 and pushed to
subscribers as ``model_state``.

Unload (``unload {model, to, force, reason}``)
    Refused (``refused``, model stays resident and usable) when a forward is
    running and does not end within 5 s; the model is in training mode or a
    parameter requires grad (unless ``force``); the model was never seen in a
    forward (it may be used through a submodule only; unless ``force``); it is
    used through torch.compile (never, even with force: a move would force a
    recompilation and CUDA graphs record addresses); it shares tensors with
    another root model; it holds tensors we cannot move (meta, sparse,
    quantized, tensor subclasses, devices other than cpu / cuda).  Automatic
    reasons ("idle", "pressure") also refuse pinned models and never use force.

    Default target: "cpu" when a tensor is on CUDA, else "disk" (the only way
    to free host RAM for a CPU model).  Split models are fine: every storage is
    handled with its own device; dtypes never change (bytes are copied).

    (a) copy: one copy per storage (tied / shared tensors and views of one
    storage stay shared after reload); cpu target -> pinned host buffer
    (plain memory where pinning fails) filled with ``copy_(non_blocking=True)``
    and the devices synchronised; disk target -> one file per storage
    ``$XDG_CACHE_HOME/vram-steward/offload/<pid>-<model>-<n>.bin`` (dir 0700,
    files 0600), written through ``UntypedStorage.from_file(shared=True)``
    into the page cache (no fsync: the bytes must outlive the process's use of
    them, not a crash of the machine).  (b) swap: each Parameter / buffer /
    gradient gets ``.data`` = its copy (Parameter identity is kept, so
    optimizers and user references stay valid); disk: a view of a private
    (copy-on-write) mapping of the file, so nothing is resident until read and
    anything that reads the weights while offloaded (``state_dict``,
    ``torch.save``) gets their true values.  Any failure in (a) or
    (b) undoes every swap: the model stays resident and bit-identical.  (c) the
    old storages are dropped; for CUDA ``empty_cache()`` per affected device
    (selected explicitly) and ``bytes_released`` = reserved before - after
    (for a disk unload of CPU tensors: the process RSS drop).

    Optimizer state (Adam's exp_avg, ...) is NOT moved: it stays where it is.
    Gradients are moved with their parameters and restored on reload.

Reload (``reload {model}`` or the next forward, reason "forward")
    Every storage goes back to its original device; from disk, out of the
    mapping the tensors already view (writes made meanwhile are kept): CUDA
    storages are copied up, CPU storages stay memory-mapped (zero copy).  The file is then
    unlinked (POSIX: a mapping keeps the inode alive until the model is
    unloaded again or the process exits); elsewhere it is removed at exit.

While offloaded, every submodule carries a temporary pre-hook so a direct
submodule call also reloads the model first.  torch.compile of a *function*
that closes over a model cannot be seen; compiling a model while it is
offloaded is not supported (the hooks do nothing under dynamo).

Policies: ``set_policy {idle_unload_s}`` (or VRAM_STEWARD_IDLE_UNLOAD=seconds
at start): on each tick, resident models on a GPU, in eval mode, with no
parameter requiring grad, not pinned, seen in a forward and idle >= TTL are
unloaded to "cpu" (reason "idle").  CPU models are left alone by the TTL
(``on_gpu`` is the predicate; tests monkeypatch it).  ``unload`` with reason
"pressure" obeys the same rules except the GPU one.
"""

from __future__ import annotations

import collections
import gc
import os
import sys
import threading
import time
import weakref
from typing import Any

from . import guard as _guard
from . import log as _log
from . import paths, protocol
from .models import _compiling_fn, _subtree, _values, friendly_name
from .server import ActionError, BadParams

FORWARD_WAIT_S = 5.0
EVENTS_KEPT = 64
REASONS = ("manual", "pressure")
AUTOMATIC = ("idle", "pressure")
REFERRER_LIMIT = 256
COMPILE_RECHECK_S = 30.0

COMPILE_MESSAGE = ("used through torch.compile: moving it would force recompilation; "
                   "not supported")


def _torch() -> Any:
    return sys.modules.get("torch")


# -- seams the tests monkeypatch ---------------------------------------------

def is_cuda(device: Any) -> bool:
    """True for a CUDA device (the CUDA path's tests fake it for CPU tensors)."""
    return getattr(device, "type", None) == "cuda"


def copy_bytes(dst: Any, src: Any, non_blocking: bool) -> None:
    """One storage copy (uint8 views); a failure here is undone by the caller."""
    dst.copy_(src, non_blocking=non_blocking)


def on_gpu(module: Any, guard: Any) -> bool:
    """The idle TTL applies only to models with weights on a GPU (home device)."""
    rec = guard.offload if guard is not None else None
    if rec is not None:
        return any(is_cuda(g.device) for g in rec.groups)
    for t in _module_tensors(module, grads=False):
        if is_cuda(t.device):
            return True
    return False


# -- tensors and storages ----------------------------------------------------

def _module_tensors(module: Any, grads: bool = True) -> list:
    seen: set = set()
    out: list = []
    for m in _subtree(module):
        for attr in ("_parameters", "_buffers"):
            for t in _values(m, attr):
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                out.append(t)
                if grads and attr == "_parameters":
                    try:
                        g = t.grad
                    except Exception:
                        g = None
                    if g is not None and id(g) not in seen:
                        seen.add(id(g))
                        out.append(g)
    return out


class _View:
    __slots__ = ("tensor", "dtype", "size", "stride", "rel", "esize")

    def __init__(self, tensor: Any, rel: int) -> None:
        self.tensor = tensor
        self.dtype = tensor.dtype
        self.size = tuple(tensor.size())
        self.stride = tuple(tensor.stride())
        self.esize = int(tensor.element_size())
        self.rel = rel  # byte offset from the group's start (a multiple of esize)


class _Group:
    """Tensors sharing one storage: copied once, views recreated on reload."""

    __slots__ = ("device", "start", "span", "views", "copy", "file_off", "items", "mapped")

    def __init__(self, device: Any) -> None:
        self.device = device
        self.start = 0
        self.span = 0
        self.views: list = []
        self.copy: Any = None  # host buffer (cpu target)
        self.file_off = 0
        self.mapped: Any = None  # disk: private (copy-on-write) mapping of its own file
        self.items: list = []  # (tensor, byte offset in storage, extent) while planning


class _Offload:
    __slots__ = ("target", "groups", "moving", "path", "total", "home", "bytes_moved",
                 "finalizer", "reason", "mapped", "paths")

    def __init__(self) -> None:
        self.target = "cpu"
        self.groups: list = []
        self.moving: list = []
        self.path: str | None = None
        self.total = 0
        self.home: str | None = None
        self.bytes_moved = 0
        self.finalizer: Any = None
        self.reason = "manual"
        self.mapped: Any = None  # unused: each group holds its own mapping
        self.paths: list = []  # disk: one file per storage


def _plan(torch: Any, tensors: list) -> list:
    groups: dict = {}
    for t in tensors:
        if getattr(t, "is_meta", False) or t.device.type == "meta":
            raise ActionError(protocol.REFUSED, "holds meta tensors (weights not materialised)")
        if t.layout is not torch.strided or getattr(t, "is_quantized", False):
            raise ActionError(protocol.REFUSED, "holds sparse or quantized tensors: not supported")
        if type(t.data) is not torch.Tensor:
            raise ActionError(protocol.REFUSED, "holds tensor subclasses (%s): not supported"
                              % type(t.data).__name__)
        if t.device.type != "cpu" and not is_cuda(t.device):
            raise ActionError(protocol.REFUSED, "holds tensors on %s: only cpu and cuda are "
                              "supported" % t.device)
        st = t.untyped_storage()
        esize = int(t.element_size())
        off = int(t.storage_offset()) * esize
        if t.numel() == 0:
            extent = 0
        else:
            extent = (sum((s - 1) * d for s, d in zip(t.size(), t.stride())) + 1) * esize
        key = (str(t.device), st.data_ptr()) if st.nbytes() and extent else ("0", id(t))
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(t.device)
        g.items.append((t, off, extent))
    out = []
    for g in groups.values():
        start = min(off for _, off, _ in g.items)
        start -= start % 16  # keeps every view's offset a multiple of its element size
        end = max(off + ext for _, off, ext in g.items)
        g.start, g.span = start, max(0, end - start)
        g.views = [_View(t, off - start) for t, off, _ in g.items]
        g.items = []
        out.append(g)
    return out


def _bytes_view(torch: Any, tensor: Any, start: int, span: int) -> Any:
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(
        tensor.untyped_storage(), start, (span,), (1,))


def _view_on(torch: Any, storage: Any, device: Any, base: int, v: _View) -> Any:
    return torch.empty(0, dtype=v.dtype, device=device).set_(
        storage, (base + v.rel) // v.esize, v.size, v.stride)


_SCALARS: dict = {}


def _placeholder(torch: Any, v: _View) -> Any:
    """Holds no memory but keeps shape and dtype: a 0-stride expand of a scalar."""
    scalar = _SCALARS.get(v.dtype)
    if scalar is None:
        scalar = _SCALARS[v.dtype] = torch.zeros((), dtype=v.dtype)
    return scalar.expand(v.size)


def _host_buffer(torch: Any, nbytes: int, pin: bool) -> Any:
    if pin:
        try:
            return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=True)
        except Exception as exc:  # pinning can fail (limits, no driver): plain memory
            _log.log("pinned host buffer of %d bytes failed (%r): pageable" % (nbytes, exc))
    return torch.empty(nbytes, dtype=torch.uint8, device="cpu")


def _index(device: Any) -> int:
    return 0 if device.index is None else int(device.index)


def _synchronize(torch: Any, indices: Any) -> None:
    for i in sorted(set(indices)):
        torch.cuda.synchronize(i)


def _reserved(torch: Any, index: int) -> int | None:
    try:
        value = (torch.cuda.memory_stats(index) or {}).get("reserved_bytes.all.current")
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        return None


def _malloc_trim() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        pass


def _host_empty_cache(torch: Any) -> None:
    for path in (("accelerator", "empty_host_cache"), ("_C", "_accelerator_emptyHostCache"),
                 ("_C", "_host_emptyCache")):
        fn: Any = torch
        try:
            for part in path:
                fn = getattr(fn, part)
        except AttributeError:
            continue
        try:
            fn()
        except Exception as exc:
            _log.log("emptying the pinned host cache failed: %r" % (exc,))
        return


def offload_dir() -> str:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.makedirs(base, exist_ok=True)
    top = paths.ensure_private_dir(os.path.join(base, "vram-steward"))
    return paths.ensure_private_dir(os.path.join(top, "offload"))


def _unlink_all(paths: list) -> None:
    for path in paths:
        _unlink_quiet(path)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _new_file(model_id: str) -> tuple[str, int]:
    directory = offload_dir()
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(
        os, "O_BINARY", 0)
    for n in range(100):
        name = "%d-%s%s.bin" % (os.getpid(), model_id, "" if n == 0 else "-%d" % n)
        path = os.path.join(directory, name)
        try:
            return path, os.open(path, flags, 0o600)
        except FileExistsError:
            continue
    raise OSError("no free offload file name in %s" % directory)


def compiled(module: Any, deep: bool) -> bool:
    """Used through torch.compile?  ``module.compile()`` sets
    ``_compiled_call_impl``; ``torch.compile(module)`` wraps it in an
    OptimizedModule holding it as ``_orig_mod`` (bounded referrer search)."""
    try:
        for m in _subtree(module):
            d = m.__dict__
            if d.get("_compiled_call_impl") is not None:
                return True
        if type(module).__name__ == "OptimizedModule" or "_orig_mod" in (
                module.__dict__.get("_modules") or {}):
            return True
        if not deep:
            return False
        for ref in gc.get_referrers(module)[:REFERRER_LIMIT]:
            if type(ref).__name__ == "OptimizedModule":
                return True
            if isinstance(ref, dict) and ref.get("_orig_mod") is module:
                return True  # an OptimizedModule's ``_modules``: only dynamo uses that key
    except Exception:
        return False
    return False


def _requires_grad(module: Any) -> bool:
    for m in _subtree(module):
        for p in _values(m, "_parameters"):
            if p is not None and p.requires_grad:
                return True
    return False


def _home(groups: list) -> str | None:
    devices = sorted({str(g.device) for g in groups})
    return devices[0] if len(devices) == 1 else ("mixed" if devices else None)


# -- the manager ---------------------------------------------------------------

class Manager:
    """Runs unload / reload for the agent; the hooks call ``_reload_work``."""

    def __init__(self, tracker: Any, emit: Any = None) -> None:
        self.tracker = tracker
        self.emit = emit
        self.events: collections.deque = collections.deque(maxlen=EVENTS_KEPT)
        self._seq = 0
        self._ev_lock = threading.Lock()
        self._op_lock = threading.RLock()
        self._last: dict[str, dict] = {}
        self._idle_thread: threading.Thread | None = None
        self._compile_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.idle_unload_s: float | None = None
        env = os.environ.get("VRAM_STEWARD_IDLE_UNLOAD")
        if env:
            try:
                value = float(env)
                self.idle_unload_s = value if value > 0 else None
            except ValueError:
                _log.log("ignoring VRAM_STEWARD_IDLE_UNLOAD=%r" % env)

    # -- events ----------------------------------------------------------
    def _event(self, g: Any, module: Any, action: str, state: str, target: str | None,
               moved: int | None, released: int | None, seconds: float | None, reason: str,
               ok: bool, error: str | None) -> dict:
        name = friendly_name(module) if module is not None else (g.model_id or "?")
        with self._ev_lock:
            self._seq += 1
            ev = {"seq": self._seq, "time": time.time(), "model": g.model_id, "name": name,
                  "action": action, "state": state, "target": target, "bytes_moved": moved,
                  "bytes_released": released, "seconds": seconds, "reason": reason, "ok": ok,
                  "error": error}
            self.events.append(ev)
            self._last[g.model_id or "?"] = ev
        emit = self.emit
        if emit is not None:
            try:
                emit("model_state", dict(ev))
            except Exception:
                pass
        return dict(ev)

    def recent_events(self) -> list:
        with self._ev_lock:
            return [dict(e) for e in self.events]

    # -- lookup ------------------------------------------------------------
    def _lookup(self, params: dict) -> tuple[Any, Any, str]:
        model_id = params.get("model")
        if not isinstance(model_id, str) or not model_id:
            raise BadParams("model must be a model id string")
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
            raise ActionError(protocol.REFUSED, "model %s has no agent hooks (last-used hooks "
                              "are off: VRAM_STEWARD_LAST_USED=0 or start(last_used=False))"
                              % model_id)
        if g.model_id is None:
            g.model_id = model_id
        return module, g, model_id

    # -- report --------------------------------------------------------------
    def blocker(self, module: Any, g: Any, automatic_gpu: bool = True,
                live: bool = False, figures: dict | None = None) -> str | None:
        """Why an automatic unload would be refused; None = eligible when idle."""
        if g is None:
            return "no hooks"
        if self._compiled(module, deep=live):
            return "torch.compile"
        if module.__dict__.get("training", False):
            return "training mode"
        rg = figures.get("requires_grad") if figures is not None and not live else None
        if rg is None:
            rg = _requires_grad(module)
        if rg:
            return "requires grad"
        if g.pinned:
            return "pinned"
        if g.cell[0] is None:
            return "never used"
        if automatic_gpu and not on_gpu(module, g):
            return "not on a GPU"
        return None

    def _compiled(self, module: Any, deep: bool) -> bool:
        """Cheap checks every time; the referrer search (O(heap)) at most every
        COMPILE_RECHECK_S per model (a wrapper made since is normally seen by
        the tracker anyway: it becomes the root)."""
        if compiled(module, False):
            return True
        cached = self._compile_cache.get(module)
        if deep and (cached is None or time.monotonic() - cached[0] > COMPILE_RECHECK_S):
            cached = (time.monotonic(), compiled(module, True))
            self._compile_cache[module] = cached
        return bool(cached[1]) if cached is not None else False

    def annotate(self, module: Any, info: dict) -> None:
        """Add the manager's fields to one model entry of the report."""
        g = self.tracker.guard(module)
        rec = g.offload if g is not None else None
        state = g.state if g is not None else _guard.RESIDENT
        info["state"] = state
        info["pinned"] = bool(g.pinned) if g is not None else False
        info["offloaded_to"] = rec.target if rec is not None and state != _guard.RESIDENT else None
        info["home_device"] = rec.home if rec is not None else info.get("device")
        if rec is not None and rec.target == "disk" and state == _guard.OFFLOADED:
            by = info.get("bytes_by_device") or {}
            total = {"params": sum(v.get("params", 0) for v in by.values()),
                     "buffers": sum(v.get("buffers", 0) for v in by.values())}
            info["bytes_by_device"] = {"disk": total}
            info["device"] = "disk"
        try:
            info["auto_unload_blocker"] = self.blocker(module, g, figures=info)
        except Exception as exc:
            info["auto_unload_blocker"] = "unknown (%r)" % (exc,)

    def policy(self) -> dict:
        return {"idle_unload_s": self.idle_unload_s}

    # -- requests --------------------------------------------------------------
    def handle_unload(self, params: dict) -> dict:
        module, g, model_id = self._lookup(params)
        to = params.get("to")
        if to is not None and to not in ("cpu", "disk"):
            raise BadParams('to must be "cpu" or "disk"')
        force = params.get("force", False)
        if not isinstance(force, bool):
            raise BadParams("force must be true or false")
        reason = params.get("reason", "manual")
        if reason not in REASONS:
            raise BadParams('reason must be "manual" or "pressure"')
        if reason != "manual" and force:
            raise BadParams("force is for manual unloads only")
        return self.unload(module, g, to, force, reason, FORWARD_WAIT_S)

    def handle_reload(self, params: dict) -> dict:
        module, g, model_id = self._lookup(params)
        before = self._last.get(model_id)
        with g.lock:
            try:
                did = g.ensure_resident("manual")
            except _guard.ReloadFailed as exc:
                raise ActionError(protocol.FAILED, str(exc)) from None
        ev = self._last.get(model_id)
        if did or (ev is not before and ev is not None and ev["action"] == "reload"):
            return dict(ev) if ev is not None else {}
        with self._ev_lock:
            seq = self._seq
        return {"seq": seq, "time": time.time(), "model": model_id, "name": friendly_name(module),
                "action": "reload", "state": _guard.RESIDENT, "target": None, "bytes_moved": 0,
                "bytes_released": 0, "seconds": 0.0, "reason": "manual", "ok": True,
                "error": None, "note": "already resident"}

    def handle_pin(self, params: dict) -> dict:
        module, g, model_id = self._lookup(params)
        pinned = params.get("pinned", True)
        if not isinstance(pinned, bool):
            raise BadParams("pinned must be true or false")
        g.pinned = pinned
        self.tracker.invalidate(module)
        return {"model": model_id, "pinned": pinned}

    def handle_set_policy(self, params: dict) -> dict:
        if "idle_unload_s" not in params:
            raise BadParams("idle_unload_s is required (seconds or null)")
        value = params.get("idle_unload_s")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value > 0 or value != value):
            raise BadParams("idle_unload_s must be a positive number of seconds or null")
        self.idle_unload_s = float(value) if value is not None else None
        return self.policy()

    # -- unload -----------------------------------------------------------------
    def unload(self, module: Any, g: Any, to: str | None, force: bool, reason: str,
               wait_s: float) -> dict:
        torch = _torch()
        if torch is None:
            raise ActionError(protocol.REFUSED, "torch is not loaded")
        automatic = reason in AUTOMATIC
        with self._op_lock:
            if g.state is not _guard.RESIDENT:
                raise ActionError(protocol.REFUSED, "model %s is %s%s" % (
                    g.model_id, g.state, " to %s" % g.target if g.target else ""))
            if self._compiled(module, deep=True):
                raise ActionError(protocol.REFUSED, COMPILE_MESSAGE)
            if not force:
                if module.__dict__.get("training", False):
                    raise ActionError(protocol.REFUSED, "the model is in training mode "
                                      "(model.train()); use force to unload it anyway")
                if _requires_grad(module):
                    raise ActionError(protocol.REFUSED, "parameters require grad (it may be "
                                      "training); use force to unload it anyway")
                if g.cell[0] is None:
                    raise ActionError(protocol.REFUSED, "never seen in a forward: it may be used "
                                      "through a submodule only, which the agent cannot see; "
                                      "use force to unload it anyway")
            if automatic and g.pinned:
                raise ActionError(protocol.REFUSED, "pinned: exempt from automatic unloading")
            tensors = _module_tensors(module)
            self._check_shared(module, tensors)
            groups = _plan(torch, tensors)
            del tensors
            if to is None:
                to = "cpu" if any(is_cuda(gr.device) for gr in groups) else "disk"
            moving = [gr for gr in groups if to == "disk" or is_cuda(gr.device)]
            if not moving:
                raise ActionError(protocol.REFUSED, "nothing to move: the weights are already "
                                  "on the CPU (use to=disk to free host RAM)")
            with g.lock:
                if g.state is not _guard.RESIDENT:
                    raise ActionError(protocol.REFUSED, "model %s is %s" % (g.model_id, g.state))
                # UNLOADING first: new forwards wait (they reload afterwards) while
                # the ones in flight finish; refused if they do not within wait_s.
                g.state = _guard.UNLOADING
                if not g.wait_idle(wait_s):
                    g.state = _guard.RESIDENT
                    g.cond.notify_all()
                    raise ActionError(protocol.REFUSED, "a forward is running (waited %.1f s)"
                                      % wait_s)
            return self._offload(torch, module, g, groups, moving, to, reason)

    def _check_shared(self, module: Any, tensors: list) -> None:
        mine = {id(t) for t in tensors}
        for other in self.tracker.roots():
            if other is module:
                continue
            for t in _module_tensors(other, grads=False):
                if id(t) in mine:
                    raise ActionError(protocol.REFUSED, "shares tensors with model %s"
                                      % (self.tracker.model_id(other) or "?"))

    def _install_sub_hooks(self, torch: Any, module: Any, g: Any) -> None:
        if g.sub_handles:
            return  # still there from the last unload (the tick removes them)
        compiling = _compiling_fn(torch)
        handles = []
        for m in _subtree(module)[1:]:
            try:
                handles.append(m.register_forward_pre_hook(
                    _guard.SubmoduleReloadHook(g, compiling), prepend=True))
            except Exception as exc:
                _log.log("submodule reload hook failed: %r" % (exc,))
        g.sub_handles.extend(handles)

    @staticmethod
    def _remove_sub_hooks(g: Any) -> None:
        handles, g.sub_handles = g.sub_handles, []
        for h in handles:
            try:
                h.remove()
            except Exception:
                pass

    def _offload(self, torch: Any, module: Any, g: Any, groups: list, moving: list, to: str,
                 reason: str) -> dict:
        t0 = time.perf_counter()
        cuda_idx = sorted({_index(gr.device) for gr in moving if is_cuda(gr.device)})
        host_moved = any(not is_cuda(gr.device) for gr in moving)
        rec = _Offload()
        rec.target, rec.groups, rec.moving, rec.reason = to, groups, moving, reason
        rec.home = _home(groups)
        swaps: list = []
        try:
            self._install_sub_hooks(torch, module, g)
            reserved_before = {i: _reserved(torch, i) for i in cuda_idx}
            rss_before = _rss() if host_moved else None
            _synchronize(torch, cuda_idx)  # pending kernels may still use the weights
            if to == "disk":
                # One file per storage, so the offloaded tensors keep the model's
                # own sharing structure (torch.save of a state_dict refuses one
                # storage viewed as several dtypes).
                for k, gr in enumerate(moving):
                    path, gfd = _new_file("%s-%d" % (g.model_id or "m", k))
                    rec.paths.append(path)
                    try:
                        os.ftruncate(gfd, max(gr.span, 1))
                    finally:
                        os.close(gfd)
                rec.finalizer = weakref.finalize(g, _unlink_all, list(rec.paths))
            # (a) copy phase
            for k, gr in enumerate(moving):
                src = _bytes_view(torch, gr.views[0].tensor, gr.start, gr.span)
                if to == "cpu":
                    gr.copy = _host_buffer(torch, gr.span, pin=is_cuda(gr.device))
                    copy_bytes(gr.copy, src, True)
                elif gr.span:
                    shared = torch.UntypedStorage.from_file(rec.paths[k], shared=True,
                                                             nbytes=gr.span)
                    copy_bytes(torch.empty(0, dtype=torch.uint8).set_(shared), src, False)
                    del shared  # the page cache now holds the bytes; no fsync needed:
                    # they only have to outlive this process, not the machine
                rec.bytes_moved += gr.span
                del src
            _synchronize(torch, cuda_idx)
            if to == "disk":
                # Offloaded tensors view a private (copy-on-write) mapping of
                # their file: nothing is resident until read, and whatever reads
                # them meanwhile (state_dict, torch.save, a direct parameter
                # access) gets the true values, never a placeholder.
                for k, gr in enumerate(moving):
                    gr.mapped = (torch.UntypedStorage.from_file(rec.paths[k], shared=False,
                                                                nbytes=gr.span)
                                 if gr.span else None)
            # (b) swap phase
            for gr in moving:
                storage = gr.copy.untyped_storage() if to == "cpu" else gr.mapped
                for v in gr.views:
                    new = (_view_on(torch, storage, "cpu", 0, v) if storage is not None
                           else _placeholder(torch, v))
                    old = v.tensor.data
                    v.tensor.data = new
                    swaps.append((v.tensor, old))
        except BaseException as exc:
            for t, old in reversed(swaps):
                try:
                    t.data = old
                except Exception:
                    _log.log_exc("undoing a swap failed")
            swaps = []
            for gr in moving:
                gr.copy = None
                gr.mapped = None
            if rec.finalizer is not None:
                rec.finalizer()
            self._remove_sub_hooks(g)
            with g.lock:
                g.state = _guard.RESIDENT
                g.cond.notify_all()
            error = "%s: %s" % (type(exc).__name__, exc)
            _log.log("unloading %s failed, rolled back: %s" % (g.model_id, error))
            self._event(g, module, "unload", _guard.RESIDENT, to, 0, 0,
                        time.perf_counter() - t0, reason, False, error)
            if isinstance(exc, Exception):
                raise ActionError(protocol.FAILED, "unload failed and was rolled back (the model "
                                  "is resident and unchanged): %s" % error) from None
            raise
        # (c) drop the old storages and give the cache back
        del swaps
        released = 0
        known = False
        for i in cuda_idx:
            try:
                with torch.cuda.device(i):
                    torch.cuda.empty_cache()
            except Exception as exc:
                _log.log("empty_cache on cuda:%d failed: %r" % (i, exc))
            after = _reserved(torch, i)
            before = reserved_before.get(i)
            if before is not None and after is not None:
                released += max(0, before - after)
                known = True
        if host_moved:
            _malloc_trim()
            rss_after = _rss()
            if rss_before is not None and rss_after is not None:
                released += max(0, rss_before - rss_after)
                known = True
        seconds = time.perf_counter() - t0
        self.tracker.invalidate(module)
        with g.lock:
            g.offload = rec
            g.target = to
            g.reloader = self._reload_work
            # the event is recorded before a waiting forward can reload (seq order)
            event = self._event(g, module, "unload", _guard.OFFLOADED, to, rec.bytes_moved,
                                released if known else None, seconds, reason, True, None)
            g.state = _guard.OFFLOADED
            g.cond.notify_all()
        _log.log("unloaded %s to %s: %d bytes in %.3f s (%s)"
                 % (g.model_id, to, rec.bytes_moved, seconds, reason))
        return event

    # -- reload (any thread: the forward pre-hook or the agent) -------------------
    def _reload_work(self, g: Any, reason: str) -> str | None:
        """Bring the weights back; None on success, else the error (undone)."""
        torch = _torch()
        rec = g.offload
        module = g.module_ref()
        t0 = time.perf_counter()
        if torch is None or rec is None:
            return "nothing to reload from"
        swaps: list = []
        try:
            # Disk: read from the mappings the tensors view now (not the files
            # afresh), so anything written into them while offloaded survives.
            cuda_idx = set()
            pending = []
            for gr in rec.moving:
                src = gr.copy if rec.target == "cpu" else (
                    torch.empty(0, dtype=torch.uint8).set_(gr.mapped) if gr.mapped is not None
                    else torch.empty(0, dtype=torch.uint8))
                if is_cuda(gr.device):
                    dst = torch.empty(gr.span, dtype=torch.uint8, device=gr.device)
                    copy_bytes(dst, src, True)
                    cuda_idx.add(_index(gr.device))
                    pending.append((gr, dst.untyped_storage(), 0, gr.device))
                elif rec.target == "disk" and gr.mapped is not None:
                    pending.append((gr, gr.mapped, 0, gr.device))  # stays memory-mapped
                else:
                    dst = torch.empty(gr.span, dtype=torch.uint8, device=gr.device)
                    copy_bytes(dst, src, False)
                    pending.append((gr, dst.untyped_storage(), 0, gr.device))
            _synchronize(torch, cuda_idx)
            for gr, storage, base, device in pending:
                for v in gr.views:
                    new = _view_on(torch, storage, device, base, v)
                    old = v.tensor.data
                    v.tensor.data = new
                    swaps.append((v.tensor, old))
            del pending
        except BaseException as exc:
            for t, old in reversed(swaps):
                try:
                    t.data = old
                except Exception:
                    _log.log_exc("undoing a reload swap failed")
            error = "%s: %s" % (type(exc).__name__, exc)
            _log.log("reloading %s failed: %s" % (g.model_id, error))
            self._event(g, module, "reload", _guard.OFFLOADED, rec.target, 0, 0,
                        time.perf_counter() - t0, reason, False, error)
            if not isinstance(exc, Exception):
                raise
            return error
        del swaps
        moved = rec.bytes_moved
        for gr in rec.moving:
            gr.copy = None
            gr.mapped = None
        if rec.paths:
            if os.name == "posix":
                rec.finalizer()  # unlink now: a memory-mapped CPU model keeps the inode alive
            # elsewhere the finalizer removes it when the model goes or at exit
        g.offload = None
        g.target = None
        g.reloads += 1
        if rec.target == "cpu" and any(is_cuda(gr.device) for gr in rec.moving):
            _host_empty_cache(torch)
        if module is not None:
            self.tracker.invalidate(module)
        seconds = time.perf_counter() - t0
        self._event(g, module, "reload", _guard.RESIDENT, rec.target, moved, None, seconds,
                    reason, True, None)
        return None

    # -- agent tick -----------------------------------------------------------------
    def tick(self) -> None:
        for module in self.tracker.roots():
            g = self.tracker.guard(module)
            if g is not None and g.sub_handles and g.state is _guard.RESIDENT:
                with g.lock:
                    if g.state is _guard.RESIDENT:
                        self._remove_sub_hooks(g)
        ttl = self.idle_unload_s
        if ttl is None:
            return
        thread = self._idle_thread
        if thread is not None and thread.is_alive():
            return
        due = self.idle_candidates(ttl)
        if not due:
            return
        self._idle_thread = threading.Thread(target=self._unload_idle, args=(due,),
                                             name="vram-steward-idle", daemon=True)
        self._idle_thread.start()

    def idle_candidates(self, ttl: float, now: float | None = None) -> list:
        now = time.time() if now is None else now
        out = []
        for module in self.tracker.roots():
            g = self.tracker.guard(module)
            if g is None or g.state is not _guard.RESIDENT or g.counts:
                continue
            last = g.cell[0]
            if last is None or now - last < ttl:
                continue
            try:
                if self.blocker(module, g, live=True) is None:
                    out.append(self.tracker.model_id(module))
            except Exception:
                _log.log_exc("idle check failed")
        return [m for m in out if m]

    def _unload_idle(self, model_ids: list) -> None:
        for model_id in model_ids:
            try:
                module = self.tracker.find(model_id)
                g = self.tracker.guard(module) if module is not None else None
                if g is None:
                    continue
                ttl = self.idle_unload_s
                last = g.cell[0]
                if ttl is None or last is None or time.time() - last < ttl:
                    continue  # used again since the tick looked
                if self.blocker(module, g, live=True) is not None:
                    continue
                self.unload(module, g, None, False, "idle", 0.0)
            except ActionError as exc:
                _log.log("idle unload of %s skipped: %s" % (model_id, exc))
            except Exception:
                _log.log_exc("idle unload of %s failed" % model_id)
            finally:
                module = None
