"""An estimate against each GPU's room: does it fit now, by how much, and if
not, what would make it fit.

``needs_bytes`` is the estimate's ``reserved_bytes`` plus what a fresh process
holds on that GPU model (``context.context_bytes``); it fits when that is at
most the GPU's free memory now.  Where it does not, the fixes are ranked as
the Doctor ranks its own: first what the app can free without touching the
run (other processes' caches, idle models, idle processes: each counted with
the ones above it, and listed until together they make room), then changes to
the run, each re-estimated and listed only where it lowers the need: the
largest batch that fits, gradient checkpointing, bf16, LoRA, a shorter context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from app.core.estimate.context import fresh_process_bytes
from app.core.estimate.rooms import Freeable, GpuRoom
from app.core.estimate.search import largest_batch
from app.core.estimate.types import Estimate, EstimateError, FitFix, GpuFit, StepRequest
from app.core.units import fmt_bytes, fmt_duration

Reestimate = Callable[[StepRequest], Estimate]
#: The LoRA rank proposed for a run that trains every weight (peft's default).
LORA_RANK = 8


def memoized(reestimate: Reestimate, *known: Estimate) -> Reestimate:
    """``reestimate`` asked at most once per request (``known``: answers already had)."""
    cache = {e.request: e for e in known}

    def ask(request: StepRequest) -> Estimate:
        if request not in cache:
            cache[request] = reestimate(request)
        return cache[request]

    return ask


def needs_bytes(reserved_bytes: int, gpu_name: str | None) -> int:
    """What a GPU must have free for a step that reserves ``reserved_bytes``."""
    return reserved_bytes + fresh_process_bytes(gpu_name)


def fit_gpus(estimate: Estimate, rooms: tuple[GpuRoom, ...] | list[GpuRoom], *,
             reestimate: Reestimate) -> tuple[GpuFit, ...]:
    """The fit on each room, fixes ranked where it does not fit (one estimate per
    changed request, shared by the GPUs)."""
    ask = memoized(reestimate, estimate)
    return tuple(fit_gpu(estimate, room, reestimate=ask) for room in rooms)


def fit_gpu(estimate: Estimate, room: GpuRoom, *, reestimate: Reestimate) -> GpuFit:
    """The fit on one room (``reestimate``: better :func:`memoized`)."""
    context = fresh_process_bytes(room.name)
    needs = estimate.reserved_bytes + context
    free = room.free_bytes
    if free is None:
        return GpuFit(room.gpu, room.name, room.total_bytes, None, context, needs, None, None)
    margin = free - needs
    fixes: tuple[FitFix, ...] = ()
    if margin < 0:
        fixes = (*_freeing(room.freeable, -margin),
                 *_run_changes(estimate, free, context, reestimate))
    return GpuFit(room.gpu, room.name, room.total_bytes, free, context, needs, margin >= 0,
                  margin, fixes)


def largest_batch_on(estimate: Estimate, fit: GpuFit, *,
                     reestimate: Reestimate) -> int | None:
    """The largest batch whose step fits the GPU of ``fit`` now (None: not even 1,
    or its free memory is unknown)."""
    if fit.free_bytes is None:
        return None
    return largest_batch(estimate.request, fit.free_bytes, reestimate, fit.context_bytes)


# -- what can be freed -------------------------------------------------------------------

def _freeing(freeable: tuple[Freeable, ...], short_bytes: int) -> list[FitFix]:
    """Frees in the room's order, each with the ones above it, until they make room."""
    out: list[FitFix] = []
    gained = 0
    given: dict[int, int] = {}  # bytes already counted per process
    for f in freeable:
        # A process stopped gives what its cache and models above did not already.
        gain = f.bytes - given.get(f.pid, 0) if f.action == "stop_process" else f.bytes
        if gain <= 0:
            continue
        given[f.pid] = given.get(f.pid, 0) + gain
        gained += gain
        fits = gained >= short_bytes
        after = ("with the ones above, " if out else "") + (
            "it fits" if fits else f"still short by {fmt_bytes(short_bytes - gained)}")
        out.append(FitFix(f.action, f"{_free_text(f)} — {after}", f.bytes, fits, f.pid,
                          f.model))
        if fits:
            break
    return out


def _free_text(f: Freeable) -> str:
    gives = f"gives {fmt_bytes(f.bytes)}"
    if f.action == "free_cache":
        return f"Free the cache of {f.holder}: {gives}"
    if f.action == "unload_model":
        idle = f" (idle {fmt_duration(f.idle_s)})" if f.idle_s is not None else ""
        note = f"; {f.note}" if f.note else ""
        return f"Unload {f.model_name} from {f.holder}{idle}: {gives}{note}"
    idle = f", idle for {fmt_duration(f.idle_s)}," if f.idle_s is not None else ""
    return f"Stop {f.holder}{idle} if it is no longer needed: {gives}"


# -- changes to the run ------------------------------------------------------------------

def _run_changes(estimate: Estimate, free: int, context: int,
                 reestimate: Reestimate) -> list[FitFix]:
    request = estimate.request
    needs = estimate.reserved_bytes + context
    out: list[FitFix] = []

    def changed(action: str, text: str, value: int | str, **change: Any) -> None:
        try:
            new = reestimate(dataclasses.replace(request, **change))
        except EstimateError:
            return  # this change does not apply to this model
        new_needs = new.reserved_bytes + context
        if new_needs >= needs:
            return
        fits = new_needs <= free
        tail = "" if fits else f"; still short by {fmt_bytes(new_needs - free)}"
        out.append(FitFix(action, f"{text}: needs {fmt_bytes(new_needs)} (saves "
                          f"{fmt_bytes(needs - new_needs)}){tail}", needs - new_needs, fits,
                          value=value))

    if request.batch > 1 and estimate.scales_with_batch:
        try:
            best = largest_batch(request, free, reestimate, context)
        except EstimateError:
            best = None
        if best is not None and best < request.batch:
            changed("batch", f"Batch {best} instead of {request.batch}, the largest that fits "
                    f"(--batch {best})", best, batch=best)
    if request.train and not request.checkpointing:
        changed("checkpointing", "Gradient checkpointing (--checkpointing)", "on",
                checkpointing=True)
    if request.dtype == "float32":
        if not request.train:
            changed("bfloat16", "bf16 weights (--dtype bfloat16)", "bfloat16",
                    dtype="bfloat16")
        elif request.autocast is None:
            changed("bfloat16", "bf16 mixed precision (--autocast bfloat16)", "bfloat16",
                    autocast="bfloat16")
    if request.train and request.lora_rank is None:
        changed("lora", f"LoRA rank {LORA_RANK} instead of training every weight "
                f"(--lora {LORA_RANK})", LORA_RANK, lora_rank=LORA_RANK)
    if estimate.method == "formula" and free > context:
        from app.core.estimate.formula import largest_context_for

        try:
            longest = largest_context_for(request, free - context)
        except EstimateError:
            longest = 0
        if longest > 0 and (request.context is None or longest < request.context):
            instead = f" instead of {request.context}" if request.context is not None else ""
            changed("context", f"Context {longest}{instead}, the longest that fits "
                    f"(--context {longest})", longest, context=longest)
    return out
