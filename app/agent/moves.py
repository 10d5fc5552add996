"""The steps of one move of a model's weights, out (unload) and back (reload).

The manager runs them in order, against the user's threads (``manager``
docstring); each step either completes or leaves what the caller's rollback
undoes: ``swaps`` collects (tensor, its data before) as tensors are swapped.
All tensor work runs with the caller's modes suspended (``modes``)."""

from __future__ import annotations

import sys
import time
from typing import Any

from . import figures as _fig
from . import log as _log
from . import model_guard as _guard
from . import paths, protocol, sharing
from .errors import ActionError
from .storage import copies, devices, files, planning, room
from .storage.offloaded_dict import restore_dicts


class Changed(Exception):
    """The weights changed under an unload: it is refused, nothing moved."""


class Transition:
    """A move in progress, as ``guard.transition``: in a child forked meanwhile
    (the moving thread does not exist there) the model goes back to where the
    move started from."""

    __slots__ = ("rec", "unloading", "swaps", "done")

    def __init__(self, rec: planning.Offload, unloading: bool) -> None:
        self.rec = rec
        self.unloading = unloading
        self.swaps: list = []  # (tensor, its data before) as the move swaps them
        self.done = False  # every tensor is where the move takes it

    def undo_in_child(self) -> str:
        if self.done:  # the weights are where the move took them
            return _guard.OFFLOADED if self.unloading else _guard.RESIDENT
        copies.undo(self.swaps)
        if self.unloading:
            restore_dicts(self.rec)
            return _guard.RESIDENT
        return _guard.OFFLOADED


# -- out ---------------------------------------------------------------------------

def plan(torch: Any, tracker: Any, module: Any, modules: list, rec: planning.Offload,
         to: str | None) -> None:
    """Decide what moves where (``to`` None: "cpu" for CUDA weights, else "disk").
    Refused up front: weights shared with other processes, too little room on
    the disk."""
    planning.check_not_reparametrized(torch, modules)
    tensors = _fig.tensors(module, grads=True)
    check_shared(tracker, module, tensors)
    if sharing.shared_storage(tensors):
        raise ActionError(protocol.REFUSED, sharing.REFUSAL)
    groups = planning.plan(torch, tensors)
    del tensors
    to = target_for(groups, to)
    moving = [gr for gr in groups if to == "disk" or devices.is_cuda(gr.device)]
    if not moving:
        raise ActionError(protocol.REFUSED, "nothing to move: the weights are already "
                          "on the CPU (use to=disk to free host RAM)")
    if to == "disk":
        room.check(disk_folder(), [gr.span for gr in moving])
    rec.planned(to, groups, moving)


def target_for(groups: list, to: str | None) -> str:
    return to or ("cpu" if any(devices.is_cuda(gr.device) for gr in groups) else "disk")


def disk_folder() -> str:
    """The offload folder; an unsafe one refuses the unload."""
    try:
        return files.offload_dir()
    except paths.UnsafeDir as exc:
        raise ActionError(protocol.REFUSED, "the offload folder is unsafe: %s" % exc) from None
    except OSError as exc:
        raise ActionError(protocol.REFUSED, "no offload folder: %s" % exc) from None


def prepare_buffers(torch: Any, module: Any, to: str | None,
                    buffers: devices.HostBuffers) -> None:
    """Page-locked host buffers for a GPU model's unload to "cpu", made in
    ``buffers`` while its calls still run.  The plan is made again once the
    model is held; a buffer it does not take is dropped."""
    try:
        groups = planning.plan(torch, _fig.tensors(module, grads=True))
    except ActionError:
        return  # refused later, with the model held, as always
    if target_for(groups, to) == "cpu":
        buffers.prepare([gr.span for gr in groups if devices.is_cuda(gr.device)], pin=True)


def check_shared(tracker: Any, module: Any, tensors: list) -> None:
    """Refuse a model sharing tensors with another root model."""
    mine = {id(t) for t in tensors}
    for other in tracker.roots():
        if other is module:
            continue
        for t in _fig.tensors(other):
            if id(t) in mine:
                raise ActionError(protocol.REFUSED, "shares tensors with model %s"
                                  % (tracker.model_id(other) or "?"))


def cuda_indices(rec: planning.Offload) -> list[int]:
    """The CUDA devices a move touches, in order."""
    return sorted({devices.device_index(gr.device) for gr in rec.moving
                   if devices.is_cuda(gr.device)})


def move_out(torch: Any, rec: planning.Offload, g: Any, cuda_idx: list[int],
             swaps: list, buffers: devices.HostBuffers | None = None) -> None:
    """Copy every moving storage out, then swap each tensor onto its copy.
    Raises ``Changed`` when a tensor was replaced while it was copied, OSError
    when the disk cannot take the bytes."""
    devices.synchronize(torch, cuda_idx)  # pending kernels may still use them
    folder = files.attach_files(rec, g.model_id or "m", g) if rec.target == "disk" else ""
    t0 = time.perf_counter()
    copies.copy_out(torch, rec, buffers)
    devices.synchronize(torch, cuda_idx)
    if rec.target == "disk":
        files.sync_files(rec, folder)
    rec.copy_seconds = time.perf_counter() - t0
    if rec.target == "disk":
        files.map_files(torch, rec)
    if not planning.unchanged(rec.groups):
        raise Changed("a tensor of it was replaced while it was being copied "
                      "(through a reference held outside the model)")
    copies.offloaded_views(torch, rec, swaps)


def roll_back_out(rec: planning.Offload, swaps: list) -> None:
    """Undo a failed ``move_out``: the weights and dicts as they were, no copies,
    no files."""
    copies.undo(swaps)
    restore_dicts(rec)
    for gr in rec.moving:
        gr.copy = None
        gr.mapped = None
    files.drop_files(rec)


def host_bytes(rec: planning.Offload) -> int:
    """Bytes a move took off the host (storages not on a GPU)."""
    return sum(gr.span for gr in rec.moving if not devices.is_cuda(gr.device))


def release(torch: Any, cuda_idx: list, reserved_before: dict,
            rss_before: int | None, host_moved: int) -> int | None:
    """Give the cache back; bytes that really left (None when it cannot be told)."""
    released = 0
    known = False
    for i in cuda_idx:
        try:
            with torch.cuda.device(i):
                torch.cuda.empty_cache()
        except Exception as exc:
            _log.log("empty_cache on cuda:%d failed: %r" % (i, exc))
        after = devices.reserved(torch, i)
        before = reserved_before.get(i)
        if before is not None and after is not None:
            released += max(0, before - after)
            known = True
    if rss_before is not None:
        devices.malloc_trim()
        rss_after = devices.rss()
        if rss_after is not None:
            # malloc_trim may hand back unrelated free heap too: never
            # credit this unload with more than the host bytes it moved
            released += min(max(0, rss_before - rss_after), host_moved)
            known = True
    return released if known else None


# -- back --------------------------------------------------------------------------

def move_back(torch: Any, rec: planning.Offload, swaps: list) -> None:
    """Recreate every storage on its device and swap each tensor back onto it."""
    pending, cuda_idx = copies.copy_back(torch, rec)
    devices.synchronize(torch, cuda_idx)
    copies.home_views(torch, pending, swaps)
    del pending


def pinned_copies(rec: planning.Offload) -> bool:
    """Did the move keep pinned host copies of GPU weights?"""
    return rec.target == "cpu" and any(devices.is_cuda(gr.device) for gr in rec.moving)


def drop_copies(rec: planning.Offload) -> None:
    """After a reload: the offloaded copies and (where the platform allows) the files go."""
    for gr in rec.moving:
        gr.copy = None
        gr.mapped = None
    if sys.platform != "win32":
        files.drop_files(rec)  # nothing is left of them on POSIX: closed and unlinked
    # Windows: a mapped file keeps its name until the model goes or the process exits

