"""Where an unloaded model's bytes go, and how they come back.

Planning: a model's parameters, buffers and gradients are grouped by the
storage they view (``plan``): one copy per storage, so tied / shared tensors
and views of one storage stay shared after a reload; dtypes never change
(bytes are copied).  Split models are fine: each storage keeps its device.

Targets:
* ``cpu``: a pinned host buffer per storage (pageable where pinning fails),
  filled with ``copy_(non_blocking=True)`` and the devices synchronised;
* ``disk``: one file per storage in ``$XDG_CACHE_HOME/vram-steward/offload``
  (dir 0700, files 0600), written through ``UntypedStorage.from_file(
  shared=True)`` into the page cache (no fsync: the bytes must outlive the
  process's use of them, not a crash of the machine).  The offloaded tensors
  then view a private (copy-on-write) mapping of their file: nothing is
  resident until read.  The files are unlinked on reload.

A reload recreates every storage as it was (``Group``): same size, same
offsets, same alignment, on its own device.

While a model is offloaded each of its modules' ``_parameters`` and
``_buffers`` dicts is an ``OffloadedDict``: any read of a weight by the
user's code (``state_dict``, ``.to()``, ``.half()``, ``deepcopy``, pickling,
a deeper submodule's forward, ``model.device``) brings the model back first,
exactly as a forward would.  Only a reference to a tensor taken before the
unload reaches the offloaded copy directly.  The agent reads the dicts with
``dict.values(d)`` and never triggers a reload.
"""

from __future__ import annotations

import copy as _copy
import os
import sys
import weakref
from collections import OrderedDict
from typing import Any

from . import figures as _fig
from . import log as _log
from . import paths, protocol
from .errors import ActionError
from .figures import why_unmovable
from .guard import RESIDENT

PARAM_DICTS = ("_parameters", "_buffers")

#: Weights come back at the same address modulo this many bytes.  CPU (and
#: GPU) kernels pick code paths by the alignment of their operands: a weight
#: loaded as a slice of a memory-mapped safetensors file and the same bytes at
#: another alignment give a Linear different output bits.
ALIGN = 64
#: A storage holding this much more than the model's tensors cover is not
#: recreated whole on reload (only the covered bytes come back).
SLACK_BYTES = 64 * 1024


# -- seams the tests monkeypatch ---------------------------------------------

def is_cuda(device: Any) -> bool:
    """True for a CUDA device (the CUDA path's tests fake it for CPU tensors)."""
    return getattr(device, "type", None) == "cuda"


def copy_bytes(dst: Any, src: Any, non_blocking: bool) -> None:
    """One storage copy (uint8 views); a failure here is undone by the caller."""
    dst.copy_(src, non_blocking=non_blocking)


# -- planning --------------------------------------------------------------------

class View:
    """One tensor of a group: enough to rebuild it on any storage."""

    __slots__ = ("tensor", "dtype", "size", "stride", "rel", "esize", "home_ptr", "placed")

    def __init__(self, tensor: Any, rel: int) -> None:
        self.tensor = tensor
        self.dtype = tensor.dtype
        self.size = tuple(tensor.size())
        self.stride = tuple(tensor.stride())
        self.esize = int(tensor.element_size())
        self.rel = rel  # byte offset from the group's start (a multiple of esize)
        self.home_ptr = home_key(tensor)  # what it viewed when planned
        self.placed = 0  # data_ptr of the storage the offloaded tensor views


class Group:
    """Tensors sharing one storage: copied once, views recreated on reload.

    The storage comes back as it was: the same size, the tensors at the same
    offsets in it, its first byte at the same address modulo ``ALIGN`` (so
    ``torch.save`` writes the same bytes, safetensors still sees tied weights
    covering their storage, and kernels see the same alignment).  Bytes of
    the storage no tensor of the model covers come back as zeros; a storage
    much larger than what the model covers comes back as the covered bytes
    only, still at the same alignment."""

    __slots__ = ("device", "start", "span", "nbytes", "residue", "shared", "pinned", "views",
                 "copy", "mapped", "items")

    def __init__(self, device: Any) -> None:
        self.device = device
        self.start = 0  # byte offset of the first covered byte in the storage
        self.span = 0  # covered bytes
        self.nbytes = 0  # the storage's size
        self.residue = 0  # the storage's address modulo ALIGN
        self.shared = False  # in shared memory (``share_memory()``, for torch.multiprocessing)
        self.pinned = False  # page-locked host memory
        self.views: list = []
        self.copy: Any = None  # host buffer (cpu target)
        self.mapped: Any = None  # disk: private (copy-on-write) mapping of its own file
        self.items: list = []  # (tensor, byte offset in storage, extent) while planning

    @property
    def whole(self) -> bool:
        """Recreate the whole storage on reload (it holds little besides the model)."""
        return self.nbytes - self.span <= SLACK_BYTES


class Offload:
    """Everything needed to bring one offloaded model back."""

    __slots__ = ("target", "groups", "moving", "home", "bytes_moved", "finalizer", "reason",
                 "paths", "dicts")

    def __init__(self, reason: str) -> None:
        self.target = "cpu"
        self.groups: list = []
        self.moving: list = []
        self.home: str | None = None
        self.bytes_moved = 0
        self.finalizer: Any = None
        self.reason = reason
        self.paths: list = []  # disk: one file per storage
        self.dicts: list = []  # (weakref to module, attr, weakref to its OffloadedDict)

    def planned(self, target: str, groups: list, moving: list) -> None:
        self.target = target
        self.groups = groups
        self.moving = moving
        self.home = home_of(groups)


def home_of(groups: list) -> str | None:
    devices = sorted({str(g.device) for g in groups})
    return devices[0] if len(devices) == 1 else ("mixed" if devices else None)


def plan(torch: Any, tensors: list) -> list:
    """Group ``tensors`` by storage; raises ActionError(refused) for what cannot move."""
    groups: dict = {}
    for t in tensors:
        if getattr(t, "is_meta", False) or t.device.type == "meta":
            raise ActionError(protocol.REFUSED, "holds meta tensors (weights not materialised)")
        why = why_unmovable(t)
        if why is None and t.device.type != "cpu" and not is_cuda(t.device):
            why = "tensors on %s" % t.device
        if why is not None:
            raise ActionError(protocol.REFUSED, "holds %s: not supported" % why)
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
            g = groups[key] = Group(t.device)
        g.items.append((t, off, extent))
    out = []
    for g in groups.values():
        start = min(off for _, off, _ in g.items)
        start -= start % 16  # keeps every view's offset a multiple of its element size
        end = max(off + ext for _, off, ext in g.items)
        g.start, g.span = start, max(0, end - start)
        first = g.items[0][0]
        st = first.untyped_storage()
        g.nbytes = int(st.nbytes()) if g.span else 0
        g.residue = storage_ptr(first) % ALIGN if g.span else 0
        g.shared = bool(g.span) and not is_cuda(g.device) and _flag(st.is_shared)
        g.pinned = bool(g.span) and not is_cuda(g.device) and _flag(st.is_pinned)
        g.views = [View(t, off - start) for t, off, _ in g.items]
        g.items = []
        out.append(g)
    return out


def _flag(fn: Any) -> bool:
    try:
        return bool(fn())
    except Exception:
        return False


def home_key(tensor: Any) -> tuple:
    """What a tensor views: storage, offset, shape, strides, dtype."""
    return (storage_ptr(tensor), int(tensor.storage_offset()), tuple(tensor.size()),
            tuple(tensor.stride()), tensor.dtype)


def unchanged(groups: list) -> bool:
    """Do all planned tensors still view what they viewed when planned?
    (False: the user changed one meanwhile, through a reference of their own.)"""
    return all(home_key(v.tensor) == v.home_ptr for g in groups for v in g.views)


def check_not_reparametrized(torch: Any, modules: list) -> None:
    """Refuse while ``torch.func.functional_call`` has swapped a module's
    parameters for the caller's tensors (moving those would move the caller's)."""
    parameter = torch.nn.Parameter
    for m in modules:
        params = m.__dict__.get("_parameters") or {}
        for value in dict.values(params):
            if value is not None and not isinstance(value, parameter):
                raise ActionError(protocol.REFUSED, "its parameters are swapped for other "
                                  "tensors right now (torch.func.functional_call)")


# -- tensor helpers -----------------------------------------------------------------

def bytes_view(torch: Any, tensor: Any, start: int, span: int) -> Any:
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(
        tensor.untyped_storage(), start, (span,), (1,))


def view_on(torch: Any, storage: Any, device: Any, base: int, v: View) -> Any:
    return torch.empty(0, dtype=v.dtype, device=device).set_(
        storage, (base + v.rel) // v.esize, v.size, v.stride)


_SCALARS: dict = {}


def placeholder(torch: Any, v: View) -> Any:
    """Holds no memory but keeps shape and dtype: a 0-stride expand of a scalar."""
    scalar = _SCALARS.get(v.dtype)
    if scalar is None:
        scalar = _SCALARS[v.dtype] = torch.zeros((), dtype=v.dtype, device="cpu")
    return scalar.expand(v.size)


def uint8(torch: Any, storage: Any) -> Any:
    return torch.empty(0, dtype=torch.uint8, device="cpu").set_(storage)


def host_buffer(torch: Any, nbytes: int, pin: bool) -> Any:
    if pin:
        try:
            return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=True)
        except Exception as exc:  # pinning can fail (limits, no driver): plain memory
            _log.log("pinned host buffer of %d bytes failed (%r): pageable" % (nbytes, exc))
    return torch.empty(nbytes, dtype=torch.uint8, device="cpu")


def storage_ptr(tensor: Any) -> int:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except Exception:
        return -1


def device_index(device: Any) -> int:
    return 0 if device.index is None else int(device.index)


def synchronize(torch: Any, indices: Any) -> None:
    for i in sorted(set(indices)):
        torch.cuda.synchronize(i)


def reserved(torch: Any, index: int) -> int | None:
    try:
        value = (torch.cuda.memory_stats(index) or {}).get("reserved_bytes.all.current")
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        return None


def malloc_trim() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        pass


def host_empty_cache(torch: Any) -> None:
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


# -- disk files -----------------------------------------------------------------------

def offload_dir() -> str:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.makedirs(base, exist_ok=True)
    top = paths.ensure_private_dir(os.path.join(base, "vram-steward"))
    return paths.ensure_private_dir(os.path.join(top, "offload"))


def unlink_all(file_paths: list) -> None:
    for path in file_paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def new_file(model_id: str, nbytes: int) -> str:
    """A fresh 0600 file of ``nbytes`` (at least 1) for one storage."""
    directory = offload_dir()
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(
        os, "O_BINARY", 0)
    for n in range(100):
        name = "%d-%s%s.bin" % (os.getpid(), model_id, "" if n == 0 else "-%d" % n)
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            continue
        try:
            os.ftruncate(fd, max(nbytes, 1))
        finally:
            os.close(fd)
        return path
    raise OSError("no free offload file name in %s" % directory)


def attach_files(rec: Offload, model_id: str, owner: Any) -> None:
    """Create the disk target's files; they go when ``owner`` (the guard) goes."""
    for k, gr in enumerate(rec.moving):
        rec.paths.append(new_file("%s-%d" % (model_id, k), gr.span))
    rec.finalizer = weakref.finalize(owner, unlink_all, list(rec.paths))


# -- copies ------------------------------------------------------------------------------

def copy_out(torch: Any, rec: Offload) -> None:
    """Copy phase: every moving storage into its host buffer or its file."""
    for k, gr in enumerate(rec.moving):
        src = bytes_view(torch, gr.views[0].tensor, gr.start, gr.span)
        if rec.target == "cpu":
            gr.copy = host_buffer(torch, gr.span, pin=is_cuda(gr.device))
            copy_bytes(gr.copy, src, True)
        elif gr.span:
            shared = torch.UntypedStorage.from_file(rec.paths[k], shared=True, nbytes=gr.span)
            copy_bytes(uint8(torch, shared), src, False)
            del shared  # the page cache holds the bytes now
        rec.bytes_moved += gr.span
        del src


def map_files(torch: Any, rec: Offload) -> None:
    """Disk: the offloaded tensors view a private mapping of each file."""
    for k, gr in enumerate(rec.moving):
        gr.mapped = (torch.UntypedStorage.from_file(rec.paths[k], shared=False, nbytes=gr.span)
                     if gr.span else None)


def offloaded_views(torch: Any, rec: Offload, swaps: list) -> None:
    """Swap phase: each tensor's ``.data`` becomes its view of the copy.

    Parameter identity is kept, so optimizers and user references stay valid.
    ``swaps`` collects (tensor, old data) for the caller's rollback."""
    for gr in rec.moving:
        storage = gr.copy.untyped_storage() if rec.target == "cpu" else gr.mapped
        for v in gr.views:
            new = (view_on(torch, storage, "cpu", 0, v) if storage is not None
                   else placeholder(torch, v))
            swaps.append((v.tensor, v.tensor.data))  # first: a fork between the two undoes it
            v.tensor.data = new
            v.placed = storage_ptr(new)


def copy_back(torch: Any, rec: Offload) -> tuple[list, set]:
    """Reload's copy phase: (group, storage, device, base) to swap in, CUDA
    devices used.  Every storage is recreated as it was (see ``Group``); none
    stays memory-mapped (a mapped storage is "shared" for torch.multiprocessing)."""
    cuda_idx: set = set()
    pending = []
    for gr in rec.moving:
        if rec.target == "cpu":
            src = gr.copy
        elif gr.mapped is not None:
            src = uint8(torch, gr.mapped)
        else:
            src = torch.empty(0, dtype=torch.uint8, device="cpu")
        dst, base = home_buffer(torch, gr)
        copy_bytes(dst[base:base + gr.span], src, is_cuda(gr.device))
        if is_cuda(gr.device):
            cuda_idx.add(device_index(gr.device))
        pending.append((gr, dst.untyped_storage(), gr.device, base))
    return pending, cuda_idx


def home_buffer(torch: Any, gr: Group) -> tuple[Any, int]:
    """A byte tensor on the group's device and the offset of the group in it."""
    if not gr.span:
        return torch.empty(0, dtype=torch.uint8, device=gr.device), 0
    if gr.shared or gr.pinned:
        return _special_buffer(torch, gr)
    if gr.whole:
        buf = aligned_empty(torch, gr.nbytes, gr.device, gr.residue)
        _zero_outside(buf, gr)
        return buf, gr.start
    return aligned_empty(torch, gr.span, gr.device, (gr.residue + gr.start) % ALIGN), 0


def _zero_outside(buf: Any, gr: Group) -> None:
    """Zero what the model does not cover of a whole storage."""
    if gr.start:
        buf[:gr.start].zero_()
    if gr.start + gr.span < gr.nbytes:
        buf[gr.start + gr.span:].zero_()


def _special_buffer(torch: Any, gr: Group) -> tuple[Any, int]:
    """Shared or page-locked memory again.  Both come page-aligned from their
    allocators: a whole storage keeps its size (and its residue, when it had
    the usual 0); a compact one gets ALIGN bytes more and its group starts at
    the old residue."""
    size = gr.nbytes if gr.whole else gr.span + ALIGN
    buf = host_buffer(torch, size, pin=True) if gr.pinned else torch.empty(
        size, dtype=torch.uint8, device="cpu")
    if gr.shared:
        try:
            buf.untyped_storage().share_memory_()  # before anything is written: no copy
        except Exception as exc:
            _log.log("a reloaded storage could not go back to shared memory: %r" % (exc,))
    if gr.whole:
        if storage_ptr(buf) % ALIGN != gr.residue:
            _log.log("a reloaded shared or pinned storage is at residue %d, was %d"
                     % (storage_ptr(buf) % ALIGN, gr.residue))
        _zero_outside(buf, gr)
        return buf, gr.start
    return buf, (gr.residue + gr.start - storage_ptr(buf)) % ALIGN


def aligned_empty(torch: Any, nbytes: int, device: Any, residue: int) -> Any:
    """A byte tensor of exactly ``nbytes`` (its storage too) at an address of
    ``residue`` modulo ALIGN.  torch's allocators give ALIGN-aligned memory;
    another residue (a storage made from a Python buffer) needs a buffer of
    our own on the CPU (a GPU storage's address is the allocator's)."""
    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if residue == storage_ptr(buf) % ALIGN or is_cuda(device):
        return buf
    raw = bytearray(nbytes + ALIGN)
    addr = torch.frombuffer(raw, dtype=torch.uint8, count=1).data_ptr()
    offset = (residue - addr) % ALIGN
    return torch.frombuffer(raw, dtype=torch.uint8, count=nbytes, offset=offset)


def home_views(torch: Any, pending: list, swaps: list) -> None:
    """Reload's swap phase.  A tensor the user replaced meanwhile (``p.data =
    ...`` on a reference held outside the model) keeps what the user gave it."""
    for gr, storage, device, base in pending:
        for v in gr.views:
            if storage_ptr(v.tensor) != v.placed:
                continue
            new = view_on(torch, storage, device, base, v)
            swaps.append((v.tensor, v.tensor.data))
            v.tensor.data = new


def undo(swaps: list) -> None:
    for t, old in reversed(swaps):
        try:
            t.data = old
        except Exception:
            _log.log_exc("undoing a swap failed")
    swaps.clear()


# -- the offloaded model's dicts -----------------------------------------------------

class OffloadedDict(dict):
    """A module's ``_parameters`` / ``_buffers`` while its model is offloaded.

    ``home`` is the module's own dict, put back on reload (so the module keeps
    the same dict object across unloads).  Any read of a value brings the
    model back first (``guard.make_resident``), on the reading thread, then
    answers from ``home``; keys, ``in`` and ``len`` need no weights.  Every
    change is made to both, so a reference to either taken before a reload
    stays right.  ``__iter__`` is overridden so that CPython's dict copies
    (``dict(d)``, ``{**d}``) go through ``keys`` and ``__getitem__`` instead
    of reading the table directly.  Copies, pickles and deep copies are plain
    dicts.
    """

    __slots__ = ("guard", "home", "__weakref__")

    def __init__(self, home: dict, guard: Any) -> None:
        dict.__init__(self, home)
        self.home = home
        # strong: a part the user keeps after its model is gone still reloads
        # (the offload record holds us weakly, so there is no cycle)
        self.guard = guard

    def _home(self) -> dict:
        g = self.guard
        if g is not None and g.state is not RESIDENT:
            g.make_resident("access")
        return self.home

    # -- reads: the model comes back first (names need no weights)
    def __getitem__(self, key: Any) -> Any:
        return self._home()[key]

    def __iter__(self) -> Any:
        return iter(self.home)

    def __contains__(self, key: Any) -> bool:
        return key in self.home

    def __len__(self) -> int:
        return len(self.home)

    def keys(self) -> Any:
        return self.home.keys()

    def get(self, key: Any, default: Any = None) -> Any:
        return self._home().get(key, default)

    def items(self) -> Any:
        return self._home().items()

    def values(self) -> Any:
        return self._home().values()

    def copy(self) -> dict:
        return self._home().copy()

    __copy__ = copy

    def __eq__(self, other: Any) -> bool:
        return self._home() == other

    def __ne__(self, other: Any) -> bool:
        return self._home() != other

    __hash__ = None  # type: ignore[assignment]

    def __or__(self, other: Any) -> Any:
        return self.copy() | other

    def __deepcopy__(self, memo: dict) -> dict:
        result = _copy.deepcopy(self.copy(), memo)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol_: Any) -> Any:
        return (dict, (self.copy(),))

    def __repr__(self) -> str:
        return repr(self.copy())

    # -- changes: made to both
    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self.home[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.home[key]  # the module's own dict says what is there
        dict.pop(self, key, None)

    def pop(self, key: Any, *default: Any) -> Any:
        home = self._home()
        dict.pop(self, key, None)
        return home.pop(key, *default)

    def popitem(self) -> Any:
        key, value = self._home().popitem()
        dict.pop(self, key, None)
        return key, value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        value = self._home().setdefault(key, default)
        dict.setdefault(self, key, value)
        return value

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.home.update(*args, **kwargs)
        dict.clear(self)
        dict.update(self, self.home)

    def __ior__(self, other: Any) -> OffloadedDict:
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self.home.clear()


_fig.WATCHABLE_DICTS.add(OffloadedDict)


def swap_in_dicts(modules: list, guard: Any, rec: Offload) -> None:
    """Give each module an ``OffloadedDict`` per weight dict (right after the
    model's calls have left it, before anything is copied: from then on a
    read waits for the unload, then brings the model back)."""
    for m in modules:
        d = m.__dict__
        ref = weakref.ref(m)  # never strong: the guard (in a dict keyed by the model) holds rec
        for attr in PARAM_DICTS:
            plain = d.get(attr)
            if type(plain) in (dict, OrderedDict) and plain:
                off = OffloadedDict(plain, guard)
                d[attr] = off
                rec.dicts.append((ref, attr, weakref.ref(off)))


def restore_dicts(rec: Offload) -> None:
    """The modules' own dicts again, with whatever was registered meanwhile."""
    for ref, attr, off_ref in rec.dicts:
        m, off = ref(), off_ref()
        if m is None or off is None:
            continue
        try:
            if m.__dict__.get(attr) is off:
                m.__dict__[attr] = off.home
        except Exception:
            _log.log_exc("restoring a module's %s failed" % attr)
    rec.dicts = []
