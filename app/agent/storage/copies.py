"""The copy and swap phases of a move, out and back.

Out: every moving storage into its host buffer (pinned for GPU weights) or
its file, then each tensor's ``.data`` becomes its view of the copy.  Back:
every storage recreated as it was (see ``planning.Group``) on its own device,
then each tensor viewing it again.  ``undo`` reverts the swaps of a move
that failed."""

from __future__ import annotations

from typing import Any

from .. import log as _log
from . import devices as _dev
from . import files
from .devices import HostBuffers, device_index, host_buffer, storage_ptr
from .planning import ALIGN, Group, Offload, View


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


def copy_out(torch: Any, rec: Offload, buffers: HostBuffers | None = None) -> None:
    """Copy phase: every moving storage into its host buffer (one ``buffers``
    prepared, else a new one) or written to its file."""
    for k, gr in enumerate(rec.moving):
        src = bytes_view(torch, gr.views[0].tensor, gr.start, gr.span)
        if rec.target == "cpu":
            pin = _dev.is_cuda(gr.device)
            gr.copy = buffers.take(gr.span, pin) if buffers is not None else None
            if gr.copy is None:
                gr.copy = host_buffer(torch, gr.span, pin=pin)
            _dev.copy_bytes(gr.copy, src, True)
        elif gr.span:
            _dev.copy_bytes(files.FileSink(torch, rec.files[k].fd), src, False)
        rec.bytes_moved += gr.span
        del src


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
        _dev.copy_bytes(dst[base:base + gr.span], src, _dev.is_cuda(gr.device))
        if _dev.is_cuda(gr.device):
            cuda_idx.add(device_index(gr.device))
        pending.append((gr, dst.untyped_storage(), gr.device, base))
    return pending, cuda_idx


def home_buffer(torch: Any, gr: Group) -> tuple[Any, int]:
    """A byte tensor on the group's device and the offset of the group in it."""
    if not gr.span:
        return torch.empty(0, dtype=torch.uint8, device=gr.device), 0
    if gr.pinned:
        return _pinned_buffer(torch, gr)
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


def _pinned_buffer(torch: Any, gr: Group) -> tuple[Any, int]:
    """Page-locked host memory again.  It comes page-aligned from its
    allocator: a whole storage keeps its size (and its residue, when it had
    the usual 0); a compact one gets ALIGN bytes more and its group starts at
    the old residue.  (Storages shared with other processes are never moved:
    ``sharing``.)"""
    size = gr.nbytes if gr.whole else gr.span + ALIGN
    buf = host_buffer(torch, size, pin=True)
    if gr.whole:
        if storage_ptr(buf) % ALIGN != gr.residue:
            _log.log("a reloaded pinned storage is at residue %d, was %d"
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
    if residue == storage_ptr(buf) % ALIGN or _dev.is_cuda(device):
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
