"""Live-tensor bytes after optimizer steps, as an agent reports them.

The agent's global optimizer step hook counts steps and, at most once a
second, notes the allocator's ``allocated`` figure right after a step: the
point of a training loop where only weights, gradients, optimizer state and
whatever the user keeps are alive.  Rising step after step is the classic
leak.  Wire format: the report's ``"steps"`` object,
``{"count": n, "samples": [{"step", "time", "device", "allocated"}, ...]}``
(the last ``app.agent.step_memory.MAX_SAMPLES``, oldest first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.agents.fields import float_or_none, int_or_none


@dataclass(frozen=True, slots=True)
class StepSample:
    step: int  # optimizer steps taken so far in the process (all optimizers)
    time: float  # epoch seconds
    device: int  # CUDA ordinal of the stepped optimizer's parameters
    allocated: int  # bytes of live tensors on that device right after the step


@dataclass(frozen=True, slots=True)
class StepMemory:
    count: int  # optimizer steps so far
    samples: tuple[StepSample, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> StepMemory | None:
        if not isinstance(data, dict):
            return None
        count = int_or_none(data.get("count"))
        if count is None:
            return None
        out = []
        raw = data.get("samples")
        for s in raw if isinstance(raw, list) else ():
            if not isinstance(s, dict):
                continue
            step, when = int_or_none(s.get("step")), float_or_none(s.get("time"))
            device, allocated = int_or_none(s.get("device")), int_or_none(s.get("allocated"))
            if None not in (step, when, device, allocated):
                out.append(StepSample(step, when, device, allocated))  # type: ignore[arg-type]
        return cls(count, tuple(out))

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "samples": [
            {"step": s.step, "time": s.time, "device": s.device, "allocated": s.allocated}
            for s in self.samples]}
