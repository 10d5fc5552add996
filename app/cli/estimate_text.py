"""The words of ``estimate``: the run, its three figures kept apart, the
breakdown at the peak, the limits, an LLM's context lengths, and each GPU's
fit with its ranked fixes.  Unknown is "n/a", never 0."""

from __future__ import annotations

from app.core.estimate.context import fresh_process_bytes
from app.core.estimate.types import KINDS, Estimate, GpuFit, StepRequest
from app.core.units import fmt_bytes, fmt_count, fmt_elapsed


def describe(request: StepRequest) -> str:
    """The run in a line: "training step (adamw, LoRA rank 8), batch 8, seq 512, float32"."""
    mode = "inference step"
    if request.train:
        extras = [request.optimizer]
        if request.checkpointing:
            extras.append("gradient checkpointing")
        if request.lora_rank is not None:
            extras.append(f"LoRA rank {request.lora_rank}")
        mode = f"training step ({', '.join(extras)})"
    parts = [mode, f"batch {request.batch}"]
    if request.seq is not None:
        parts.append(f"seq {request.seq}")
    if request.image is not None:
        parts.append(f"image {request.image} px")
    if request.context is not None:
        parts.append(f"context {request.context}")
    parts.append(request.dtype + (f" with {request.autocast} autocast"
                                  if request.autocast else ""))
    return ", ".join(parts)


def _gpu_label(fit: GpuFit) -> str:
    return f"GPU {fit.gpu}" + (f" ({fit.gpu_name})" if fit.gpu_name else "")


def estimate_text(est: Estimate, fits: tuple[GpuFit, ...], chosen: GpuFit | None,
                  batches: dict[str, int | None], source: str,
                  needs: tuple[int, int]) -> str:
    needs_bytes, context = needs
    params = f", {fmt_count(est.params)} parameters" if est.params is not None else ""
    lines = [f"{est.model_name}{params}: {describe(est.request)}"]
    how = f"Method: {est.method}"
    if est.seconds is not None:
        how += f", {fmt_elapsed(est.seconds)}"
    if est.peak_phase:
        how += f"; the peak is in the {est.peak_phase}"
    lines += [how + ".", ""]
    where = f"on {_gpu_label(chosen)}" if chosen is not None else "on a GPU of unknown model"
    bound = "" if est.exact else " (at least)"
    lines += [f"  peak      {fmt_bytes(est.peak_bytes):>9}{bound}  tensors alive at the step's "
              "peak",
              f"  reserved  {fmt_bytes(est.reserved_bytes):>9}{bound}  held by PyTorch's "
              "caching allocator then",
              f"  needs     {fmt_bytes(needs_bytes):>9}{bound}  free memory it needs {where}:",
              f"  {'':>19}{' ' * len(bound)}reserved + {fmt_bytes(context)} of CUDA context "
              "and library handles", ""]
    lines.append("Breakdown at the peak:")
    for kind in KINDS:
        value = est.breakdown.get(kind, 0)
        if value:
            grows = "   grows with the batch" if kind in est.scales_with_batch else ""
            lines.append(f"  {kind:<12} {fmt_bytes(value):>9}{grows}")
    if est.limits:
        lines += ["", "Limits:" if est.exact else "A lower bound:"]
        lines += [f"  {line}" for line in est.limits]
    if est.contexts:
        lines += ["", *_contexts(est, chosen)]
    lines += ["", f"GPUs ({source}):" if fits else f"GPUs ({source}): none"]
    for fit in fits:
        lines += _fit_lines(fit, batches)
    return "\n".join(lines)


def _contexts(est: Estimate, chosen: GpuFit | None) -> list[str]:
    where = f"GPU {chosen.gpu}" if chosen is not None else "a GPU"
    out = [f"Context lengths (batch {est.request.batch}):",
           f"  {'context':>8}  {'weights':>9}  {'KV cache':>9}  {'needs':>9}  fits {where}"]
    for row in est.contexts:
        needs = row.reserved_bytes + (chosen.context_bytes if chosen is not None
                                      else fresh_process_bytes(None))
        fits = "n/a" if chosen is None or chosen.free_bytes is None else \
            ("yes" if needs <= chosen.free_bytes else "no")
        out.append(f"  {row.context:>8}  {fmt_bytes(row.weights_bytes):>9}  "
                   f"{fmt_bytes(row.kv_cache_bytes):>9}  {fmt_bytes(needs):>9}  {fits}")
    return out


def _fit_lines(fit: GpuFit, batches: dict[str, int | None]) -> list[str]:
    head = f"  {_gpu_label(fit)}: free {fmt_bytes(fit.free_bytes)} of " \
           f"{fmt_bytes(fit.total_bytes)}, needs {fmt_bytes(fit.needs_bytes)}: "
    if fit.fits is None or fit.margin_bytes is None:
        head += "fits n/a (free memory unknown)"
    elif fit.fits:
        head += f"fits, margin {fmt_bytes(fit.margin_bytes)}"
    else:
        head += f"does not fit, short by {fmt_bytes(-fit.margin_bytes)}"
    out = [head]
    if fit.gpu in batches:
        batch = batches[fit.gpu]
        out.append("    Largest batch that fits: "
                   + (str(batch) if batch is not None else "none (not even 1)"
                      if fit.free_bytes is not None else "n/a"))
    if fit.fits is False:
        if fit.fixes:
            out.append("    What would make it fit:")
            out += [f"    {i}. {f.text}" for i, f in enumerate(fit.fixes, 1)]
        else:
            out.append("    Nothing found that would make it fit here.")
    return out
