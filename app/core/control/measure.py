"""The figures an action is judged by, each measured once, in one place, and the
one text of a model action's figures (the detail view, the status bar and the
Activity log all show :func:`model_action_text`).

NVML figures (a process's bytes, a GPU's used bytes) are read from snapshots
(``gpu_of_device``: app.core.agents.placement); the agent's figures come with
its reply (:class:`~app.core.agents.types.ModelEvent`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.units import MiB, fmt_bytes, fmt_elapsed

if TYPE_CHECKING:
    from collections.abc import Iterable

    from app.core.agents.types import ModelEvent
    from app.core.monitor.samples import Snapshot

#: Two byte figures closer than this read as the same: drivers count whole MiB and
#: the caching allocator hands memory back in segments of 2 MiB and more.
SAME_WITHIN = 32 * MiB


def nvml_usage(snapshot: Snapshot | None, pid: int, display_id: str | None = None) -> int | None:
    """NVML bytes of ``pid`` in ``snapshot`` (on ``display_id``, or summed over its GPUs);
    None when the process is absent or its figure unknown."""
    if snapshot is None:
        return None
    total = None
    for gpu in snapshot.gpus:
        if display_id is not None and gpu.display_id != display_id:
            continue
        for p in gpu.processes:
            if p.pid == pid:
                if p.gpu_memory is None:
                    return None
                total = (total or 0) + p.gpu_memory
    return total


def gpu_used(snapshot: Snapshot | None, display_id: str | None) -> int | None:
    """The GPU's NVML used bytes; None when unknown."""
    if snapshot is None or display_id is None:
        return None
    for gpu in snapshot.gpus:
        if gpu.display_id == display_id:
            return gpu.memory_used
    return None


def allocator_cache(snapshot: Snapshot | None, pid: int, display_id: str | None) -> int | None:
    """Bytes the caching allocator of ``pid`` holds unused on ``display_id`` (reserved −
    allocated), from the agent's report in ``snapshot``; None when unknown."""
    if snapshot is None or display_id is None:
        return None
    report = snapshot.agents.get(pid)
    gpu = next((g for g in snapshot.gpus if g.display_id == display_id), None)
    if report is None or gpu is None:
        return None
    device = report.device_for_gpu(gpu.index, gpu.uuid)
    return device.cache if device is not None else None


def released(before: int | None, after: int | None) -> int | None:
    """Bytes released between two readings; None when either is unknown."""
    return None if before is None or after is None else before - after


@dataclass(frozen=True, slots=True)
class ActionFigures:
    """What one unload (or reload) of one model did, in bytes; None where unknown.

    ``moved``: the model's tensors the agent moved (its reply).  ``released``:
    what the process's caching allocator gave back to the driver, the drop of
    its reserved bytes the agent measured around its own ``empty_cache`` for
    this action.  The agent counts that drop from before the move, so cache
    the process held before the unload is in it too: only ``own`` (at most
    what moved) is the model's; ``cache_before`` is the rest.  ``nvml``: the
    drop of the process's NVML used bytes on the model's GPU between the
    click and the first settled snapshot after the answer; ``cache_after``:
    the allocator cache listed in that same snapshot.  ``measuring``: the
    NVML after-figure is still to come (False and ``nvml`` None for an
    action nobody measures, e.g. an agent's idle timer).
    """

    moved: int | None = None
    released: int | None = None
    nvml: int | None = None
    cache_after: int | None = None
    measuring: bool = False
    measured: bool = False

    @classmethod
    def of_event(cls, event: ModelEvent | None) -> ActionFigures:
        """The agent's figures of one event (no NVML figure)."""
        if event is None:
            return cls()
        return cls(event.bytes_moved, event.bytes_released if event.action == "unload"
                   else None)

    @classmethod
    def total(cls, figures: Iterable[ActionFigures]) -> ActionFigures:
        """Several unloads as one (a policy decision's): the sums of what is known."""
        items = list(figures)

        def add(values: list[int | None]) -> int | None:
            known = [v for v in values if v is not None]
            return sum(known) if known else None

        return cls(add([f.moved for f in items]), add([f.released for f in items]))

    @property
    def own(self) -> int | None:
        """The part of the allocator's release this model's weights account for."""
        if self.released is None or self.moved is None:
            return None
        return max(0, min(self.released, self.moved))

    @property
    def cache_before(self) -> int:
        """Bytes of the release that were cache held before the unload (0: none to say)."""
        if self.released is None or self.moved is None:
            return 0
        extra = self.released - self.moved
        return extra if extra > SAME_WITHIN else 0


def target_text(target: str | None) -> str:
    """Where unloaded weights went: "CPU", "disk"."""
    return {"cpu": "CPU", "disk": "disk"}.get(target or "", target or "?")


def released_text(f: ActionFigures) -> str:
    """"allocator released 2.3 GiB (2.1 GiB of it cache held before)": what is more than
    the weights moved was cache the process held before the unload, not the model's."""
    if f.released is None:
        return "allocator release unknown"
    text = f"allocator released {fmt_bytes(f.released)}"
    if f.cache_before:
        text += f" ({fmt_bytes(f.cache_before)} of it cache held before)"
    return text


def nvml_text(f: ActionFigures, unload: bool = True) -> str:
    """What NVML shows for the process, and why it differs from the allocator's figure;
    "" when nobody measures it."""
    if f.measuring:
        return "measuring with NVML…" if unload else ""
    if not f.measured:
        return ""
    value = f.nvml
    if not unload:
        return "" if value is None else f"NVML shows {fmt_bytes(max(0, -value))} more in use"
    if value is None:
        return "NVML release unknown"
    text = "NVML shows nothing released" if value <= 0 else \
        f"NVML shows {fmt_bytes(value)} released"
    if f.released is None or abs(f.released - value) <= SAME_WITHIN:
        return text
    if value < f.released:
        why = f"{fmt_bytes(f.released - value)} less than the allocator's: the process held more"
        if f.cache_after is not None and f.cache_after > SAME_WITHIN:
            why += f" again by then ({fmt_bytes(f.cache_after)} of cache)"
        else:
            why += " again by then"
    else:
        why = (f"{fmt_bytes(value - f.released)} more than the allocator's: other memory "
               "left the process meanwhile")
    return f"{text} ({why})"


def model_action_text(kind: str, name: str, f: ActionFigures, target: str | None = None,
                      seconds: float | None = None, forced: bool = False) -> str:
    """The one line of a finished unload or reload: "unloaded pipe.unet to CPU: moved
    1.6 GiB, allocator released 3.7 GiB (2.1 GiB of it cache held before), NVML
    shows 3.7 GiB released, 0.2 s"."""
    unload = kind == "unload"
    if unload:
        head = f"unloaded {name} to {target_text(target)}" + (" (forced)" if forced else "")
        parts = [f"moved {fmt_bytes(f.moved)}", released_text(f)]
    else:
        head = f"reloaded {name}"
        parts = [f"moved {fmt_bytes(f.moved)}"]
    if seconds is not None:
        parts.append(fmt_elapsed(seconds))
    nvml = nvml_text(f, unload)
    if nvml and unload:
        parts.insert(2, nvml)  # beside the allocator's figure
    elif nvml:
        parts.append(nvml)
    return f"{head}: " + ", ".join(parts)


__all__ = ["SAME_WITHIN", "ActionFigures", "allocator_cache", "gpu_used", "model_action_text",
           "nvml_text", "nvml_usage", "released", "released_text", "target_text"]
