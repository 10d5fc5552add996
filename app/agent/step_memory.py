"""Live-tensor bytes right after optimizer steps: the leak signal per step.

The global optimizer step post-hook (``eligibility.OptimizerSteps.on_step``)
calls :meth:`StepMemory.after_step` on the user's thread after every step
(never while dynamo compiles).  It counts the step and, at most once per
``SAMPLE_INTERVAL_S``, reads the allocator's ``allocated`` figure on the
device of the stepped optimizer's first parameter (CUDA only, and only once
CUDA is initialised): right after a step only weights, gradients, optimizer
state and what the user keeps are alive, so that figure rising step after
step is a leak.  Between samples a step costs a counter increment and a
clock read; a sample adds ``torch._C._cuda_memoryStats(i)`` (~16 us; the
public ``memory_stats`` builds a flat dict, ~150 us, and is the fallback).

Wire format (the report's ``"steps"``): ``{"count": n, "samples": [{"step",
"time", "device", "allocated"}, ...]}``, the last ``MAX_SAMPLES``, oldest first.
"""

from __future__ import annotations

import collections
import itertools
import time
from typing import Any

MAX_SAMPLES = 120
SAMPLE_INTERVAL_S = 1.0


def _first_param(optimizer: Any) -> Any:
    groups = getattr(optimizer, "param_groups", None)
    if not groups:
        return None
    params = groups[0].get("params") if isinstance(groups[0], dict) else None
    return params[0] if params else None


def allocated_bytes(torch: Any, index: int) -> int | None:
    """The allocator's current allocated bytes on CUDA device ``index``."""
    fast = getattr(torch._C, "_cuda_memoryStats", None)
    if callable(fast):
        try:
            value = fast(index)["allocated_bytes"]["all"]["current"]
            if isinstance(value, int):
                return value
        except Exception:
            pass
    value = torch.cuda.memory_stats(index).get("allocated_bytes.all.current")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StepMemory:
    """Step count and the sampled figures (written by the user's thread, read
    by the agent's: a deque append and an int are safe under the GIL)."""

    def __init__(self) -> None:
        self.torch: Any = None  # set when torch's hooks are installed
        self.count = 0
        self._counter = itertools.count(1)
        self._next_sample = 0.0
        self._samples: collections.deque = collections.deque(maxlen=MAX_SAMPLES)

    def after_step(self, optimizer: Any) -> None:
        """One step done (the user's thread): count it, maybe sample.  Never raises."""
        try:
            self.count = next(self._counter)
            now = time.monotonic()
            if now < self._next_sample:
                return
            self._next_sample = now + SAMPLE_INTERVAL_S
            self._sample(optimizer)
        except Exception:
            pass

    def _sample(self, optimizer: Any) -> None:
        torch = self.torch
        if torch is None:
            return
        device: Any = getattr(_first_param(optimizer), "device", None)
        if getattr(device, "type", None) != "cuda":
            return
        index = device.index
        if not isinstance(index, int) or not torch.cuda.is_initialized():
            return
        allocated = allocated_bytes(torch, index)
        if allocated is not None:
            self._samples.append({"step": self.count, "time": time.time(), "device": index,
                                  "allocated": allocated})

    def to_json(self) -> dict[str, Any] | None:
        """The wire form; None until torch's step hook is installed (unknown)."""
        if self.torch is None:
            return None
        return {"count": self.count, "samples": list(self._samples)}
