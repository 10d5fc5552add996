"""What a step allocates, seen from inside PyTorch's dispatcher.

Two observers of the same run:

* :func:`allocation_trace`: every storage an op creates, in order, and when
  it is freed (a weak reference's callback fires when the last tensor on it
  goes), as ``(key, nbytes)`` events for :func:`app.core.estimate.allocator.replay`;
  phase marks say where forward, backward and the optimizer step begin;
* :func:`peak_tracker`: PyTorch's ``MemTracker``, which labels each storage
  (parameter, gradient, optimizer state, activation, temporary) and keeps the
  breakdown at the peak.  Its per-module peaks are not needed here and cost a
  pass over every module on every op, so only the global peak is updated.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cache, partial
from typing import Any


@dataclass(frozen=True, slots=True)
class TracePeak:
    """The largest sum of live storages in a trace, and where it came."""

    peak_bytes: int
    phase: str | None  # the phase mark before the peak


def trace_peak(events: list[tuple[int, int]], marks: list[tuple[str, int]],
               start: int = 0) -> TracePeak:
    """The peak of live bytes over ``events`` from index ``start`` on (earlier events
    only set what is live there)."""
    live: dict[int, int] = {}
    total = 0
    peak, at = -1, start
    for index, (key, nbytes) in enumerate(events):
        if nbytes > 0:
            live[key] = nbytes
            total += nbytes
        else:
            total -= live.pop(key, 0)
        if index >= start - 1 and total > peak:
            peak, at = total, index
    phase = None
    for name, index in marks:
        if index <= at:
            phase = name
    return TracePeak(max(peak, 0), phase)


def allocation_trace() -> Any:
    """A new trace (a dispatch mode: enter it with ``with``); ``add`` puts in the
    tensors alive before, ``mark`` a phase, ``close`` ends the recording of frees."""
    return _trace_class()()


@cache
def _trace_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.weak import WeakIdKeyDictionary

    class AllocationTrace(TorchDispatchMode):
        """Storages created and freed, in order; ``add`` puts in those alive before."""

        def __init__(self) -> None:
            super().__init__()
            self.events: list[tuple[int, int]] = []
            self.marks: list[tuple[str, int]] = []
            self._keys: Any = WeakIdKeyDictionary()
            self._refs: dict[int, Any] = {}
            self._next = 1
            self._open = True

        def add(self, tensors: list[Any]) -> None:
            for t in tensors:
                self._see(t)

        def mark(self, phase: str) -> None:
            self.marks.append((phase, len(self.events)))

        def close(self) -> None:
            """Later frees are not recorded (the step is over)."""
            self._open = False

        def _see(self, t: Any) -> None:
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):
                return  # sparse and other storage-less layouts
            if storage in self._keys:
                return
            nbytes = storage.nbytes()
            if nbytes <= 0:
                return
            key = self._next
            self._next += 1
            self._keys[storage] = key
            self._refs[key] = weakref.ref(storage, partial(self._freed, key))
            self.events.append((key, nbytes))

        def _freed(self, key: int, _ref: Any) -> None:
            self._refs.pop(key, None)
            if self._open:
                self.events.append((key, 0))

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                self._see(out)
            elif isinstance(out, tuple | list | dict):
                for leaf in tree_leaves(out):
                    if isinstance(leaf, torch.Tensor):
                        self._see(leaf)
            return out

    return AllocationTrace


def peak_tracker() -> Any:
    """A new ``MemTracker`` that keeps only the global peak."""
    return _tracker_class()()


@cache
def _tracker_class() -> type:
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType

    no_storage = {torch.ops.prim.device.default}

    class PeakTracker(MemTracker):
        def _track_module_params_and_buffers(self, module: Any,
                                             install_grad_hooks: bool = True) -> Any:
            # MemTracker hooks every parameter; a frozen one (LoRA's base) takes no hook.
            found = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
            if install_grad_hooks:
                for param in module.parameters():
                    if param.requires_grad and param not in self._param_to_grad_hook_handles:
                        self._param_to_grad_hook_handles[param] = (
                            param.register_hook(self._grad),
                            param.register_post_accumulate_grad_hook(
                                lambda p: self._grad(p.grad)),
                        )
            return found

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func in no_storage:  # asked for on every op in backward; makes nothing
                return func(*args, **(kwargs or {}))
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _grad(self, grad: Any) -> None:
            self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

        def _update_peak_stats(self, peak_state: Any) -> None:
            # MemTracker also updates every active module's peak here, a pass over all
            # modules on every op; the estimate needs only the global peak.
            del peak_state
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap["Total"]:
                    self._peak_mem[dev] = dev_snap["Total"]
                    self._peak_mem_snap[dev] = dict(dev_snap)

    return PeakTracker


def breakdown_at_peak(tracker: Any, optimizer_state_bytes: int) -> dict[str, int]:
    """The tracker's peak by kind.  Tensors an optimizer step creates count as optimizer
    state in ``MemTracker``; beyond the state the optimizer keeps
    (``optimizer_state_bytes``) they are the step's temporaries."""
    from torch.distributed._tools.mem_tracker import _MemRefType

    snapshot = tracker.get_tracker_snapshot("peak")
    kinds = dict.fromkeys(("weights", "gradients", "optimizer", "activations", "temporaries"), 0)
    for dev_snap in snapshot.values():
        get = dev_snap.get
        kinds["weights"] += get(_MemRefType.PARAM, 0) + get(_MemRefType.BUFFER, 0)
        kinds["gradients"] += get(_MemRefType.GRAD, 0)
        kinds["activations"] += get(_MemRefType.ACT, 0)
        kinds["temporaries"] += get(_MemRefType.TEMP, 0) + get(_MemRefType.OTH, 0)
        opt = get(_MemRefType.OPT, 0)
        state = min(opt, optimizer_state_bytes)
        kinds["optimizer"] += state
        kinds["temporaries"] += opt - state
    return kinds


def peak_total(tracker: Any) -> int:
    return sum(int(dev_snap.get("Total", 0))
               for dev_snap in tracker.get_tracker_snapshot("peak").values())


def storage_bytes(tensors: list[Any]) -> int:
    """The bytes of the distinct storages under ``tensors``."""
    storages = [t.untyped_storage() for t in tensors]  # alive here, so ids are distinct
    return sum({id(s): s.nbytes() for s in storages}.values())
