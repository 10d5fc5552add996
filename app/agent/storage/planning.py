"""Planning a move: a model's tensors grouped by the storage they view.

One copy per storage, so tied / shared tensors and views of one storage stay
shared after a reload; each ``Group`` remembers what its storage was (size,
offsets, alignment) so a reload recreates it exactly."""

from __future__ import annotations

from typing import Any

from .. import protocol
from ..errors import ActionError
from ..figures import why_unmovable
from . import devices as _dev
from .devices import storage_ptr

#: Weights come back at the same address modulo this many bytes.  CPU (and
#: GPU) kernels pick code paths by the alignment of their operands: a weight
#: loaded as a slice of a memory-mapped safetensors file and the same bytes at
#: another alignment give a Linear different output bits.
ALIGN = 64
#: A storage holding this much more than the model's tensors cover is not
#: recreated whole on reload (only the covered bytes come back).
SLACK_BYTES = 64 * 1024


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

    __slots__ = ("device", "start", "span", "nbytes", "residue", "pinned", "views", "copy",
                 "mapped", "items")

    def __init__(self, device: Any) -> None:
        self.device = device
        self.start = 0  # byte offset of the first covered byte in the storage
        self.span = 0  # covered bytes
        self.nbytes = 0  # the storage's size
        self.residue = 0  # the storage's address modulo ALIGN
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
                 "files", "dicts", "copy_seconds")

    def __init__(self, reason: str) -> None:
        self.target = "cpu"
        self.groups: list = []
        self.moving: list = []
        self.home: str | None = None
        self.bytes_moved = 0
        self.finalizer: Any = None
        self.reason = reason
        self.files: list = []  # disk: one ``files.DiskFile`` per moving storage
        self.copy_seconds: float | None = None  # the copy phase alone (GPU -> host: the rate)
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
        if why is None and t.device.type != "cpu" and not _dev.is_cuda(t.device):
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
        g.pinned = bool(g.span) and not _dev.is_cuda(g.device) and _flag(st.is_pinned)
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
