"""Run the agent's own tensor work outside whatever the caller had switched on.

A reload can start inside any user call: a forward under ``inference_mode``,
``no_grad`` or ``autocast``, inside a ``torch.device(...)`` default-device
context, a ``torch.func`` transform (``grad``, ``vmap``), a dispatch mode
(fake tensors during export), or while ``torch.jit.trace`` records.  Tensors
made there would come out as inference tensors, on the default device, as
functorch wrappers, as fake tensors, or recorded into the user's trace.
``suspended(torch)`` switches all of that off for the duration of the copy
and restores it afterwards, so weights come back exactly as they were.

Every piece is looked up defensively: a torch that lacks one simply has
nothing to suspend there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def suspended(torch: Any) -> Iterator[None]:
    """The caller's grad / inference / autocast modes, transforms, torch
    function and dispatch modes and jit tracing, all off; restored on exit."""
    torch_c = getattr(torch, "_C", None)
    get_state = getattr(torch_c, "_get_tracing_state", None)
    set_state = getattr(torch_c, "_set_tracing_state", None)
    trace_state = None
    if callable(get_state) and callable(set_state):
        trace_state = get_state()
        if trace_state is not None:
            set_state(None)
    try:
        with contextlib.ExitStack() as stack:
            for make in _contexts(torch):
                try:
                    stack.enter_context(make())
                except Exception:
                    continue  # this torch has nothing of that kind to suspend
            yield
    finally:
        if trace_state is not None and callable(set_state):
            set_state(trace_state)


def _contexts(torch: Any) -> list:
    torch_c = getattr(torch, "_C", None)
    out: list = []
    disable_functorch = getattr(torch_c, "_DisableFuncTorch", None)
    if disable_functorch is not None:
        out.append(disable_functorch)
    dispatch = getattr(getattr(getattr(torch, "utils", None), "_python_dispatch", None),
                       "_disable_current_modes", None)
    if dispatch is not None:
        out.append(dispatch)
    disable_tf = getattr(torch_c, "DisableTorchFunction", None)
    if disable_tf is not None:
        out.append(disable_tf)
    out.append(lambda: torch.inference_mode(False))
    out.append(torch.no_grad)
    set_autocast = getattr(torch_c, "_set_autocast_enabled", None)
    if callable(set_autocast):
        out.append(lambda: _autocast_off(torch))
    return out


@contextlib.contextmanager
def _autocast_off(torch: Any) -> Iterator[None]:
    """Autocast off for every device type it is on (copies are never cast
    anyway; this keeps any future helper from casting either)."""
    changed = []
    for device in ("cpu", "cuda"):
        try:
            if torch.is_autocast_enabled(device):
                torch._C._set_autocast_enabled(device, False)
                changed.append(device)
        except Exception:
            continue
    try:
        yield
    finally:
        for device in changed:
            torch._C._set_autocast_enabled(device, True)
