"""The words of the "Will it fit?" dialog's results, Qt-free (figures by
:mod:`app.core.units`: an unknown is "n/a", never 0)."""

from __future__ import annotations

from app.core.estimate.context import fresh_process_bytes
from app.core.estimate.types import ContextRow, GpuFit
from app.core.units import NA, fmt_bytes, fmt_count, fmt_elapsed
from app.ui.estimate.fit_result import FitResult
from app.ui.style.hosts import gpu_text

#: A kind of memory at the step's peak, as the legend names it.
KIND_NAMES = {
    "weights": "Weights",
    "gradients": "Gradients",
    "optimizer": "Optimizer state",
    "activations": "Activations",
    "temporaries": "Temporaries",
    "kv_cache": "KV cache",
    "rounding": "Allocator rounding",
    "context": "CUDA context",
}
KIND_TIPS = {
    "weights": "The model's parameters (and buffers) at the weights' dtype",
    "gradients": "One gradient per trained parameter",
    "optimizer": "The optimizer's state (AdamW: two moments per trained parameter)",
    "activations": "Outputs of the forward pass kept for the backward pass, or the "
                   "activations alive at the peak",
    "temporaries": "Short-lived buffers of one operation alive at the peak",
    "kv_cache": "Keys and values of every layer for the whole context",
    "rounding": "Reserved − peak: PyTorch's caching allocator rounds blocks up and "
                "keeps whole segments",
    "context": "What a fresh PyTorch process holds on this GPU model before its first "
               "tensor: the CUDA context and cuBLAS/cuDNN workspaces",
}

#: The three figures: (key, caption, meaning).
FIGURES = (
    ("peak", "Peak tensors",
     "peak_bytes: the tensors alive at the step's peak (what "
     "torch.cuda.max_memory_allocated would say)"),
    ("reserved", "Reserved",
     "reserved_bytes: what PyTorch's caching allocator holds then, with its block "
     "rounding and segments (torch.cuda.max_memory_reserved)"),
    ("needs", "Needs free",
     "needs_bytes: reserved plus the CUDA context and library workspaces of a fresh "
     "process on this GPU model: what the GPU must have free"),
)

CONTEXT_COLUMNS = ("Context", "KV cache", "Needs", "Fits")


def figure_values(result: FitResult, fit: GpuFit | None) -> dict[str, str]:
    needs = fit.needs_bytes if fit is not None else result.needs_bytes
    return {"peak": fmt_bytes(result.peak_bytes), "reserved": fmt_bytes(result.reserved_bytes),
            "needs": fmt_bytes(needs)}


def verdict(fit: GpuFit | None) -> tuple[str, str]:
    """(level, sentence): "fits", "short" or "unknown", and what it says."""
    if fit is None:
        return "unknown", "No GPU answered: the fit is unknown."
    where = gpu_text(fit.gpu)
    if fit.fits is None or fit.free_bytes is None or fit.margin_bytes is None:
        return "unknown", (f"{where}'s free memory is unknown (n/a): the step needs "
                           f"{fmt_bytes(fit.needs_bytes)} free.")
    if fit.fits:
        return "fits", (f"Fits on {where}: {fmt_bytes(fit.margin_bytes)} to spare "
                        f"of {fmt_bytes(fit.free_bytes)} free now.")
    return "short", (f"Does not fit on {where}: short by {fmt_bytes(-fit.margin_bytes)} "
                     f"({fmt_bytes(fit.free_bytes)} free now).")


def margin_text(fit: GpuFit | None) -> str:
    if fit is None or fit.margin_bytes is None:
        return NA
    return fmt_bytes(fit.margin_bytes)


def free_text(fit: GpuFit | None) -> str:
    """"21.3 GiB free of 24.0 GiB"; "free n/a" when unknown."""
    if fit is None:
        return f"free {NA}"
    total = f" of {fmt_bytes(fit.total_bytes)}" if fit.total_bytes is not None else ""
    return f"{fmt_bytes(fit.free_bytes)} free{total}"


def about_text(result: FitResult) -> str:
    """"GPT2LMHeadModel · 124.4 M parameters · fake-tensor step · peak in backward · 3.1 s"."""
    parts = [result.model_name or "model"]
    if result.params is not None and "param" not in result.model_name:
        parts.append(f"{fmt_count(result.params)} parameters")
    if result.method:
        parts.append(result.method)
    if result.peak_phase:
        parts.append(f"peak in the {result.peak_phase}")
    if result.seconds is not None:
        parts.append(f"estimated in {fmt_elapsed(result.seconds)}")
    return " · ".join(parts)


def scales_text(result: FitResult) -> str:
    kinds = [KIND_NAMES.get(k, k).lower() for k in result.scales_with_batch]
    if not kinds:
        return "Nothing here grows with the batch."
    return "Grows with the batch: " + ", ".join(kinds) + "."


def max_batch_text(result: FitResult) -> str:
    if not result.max_batch_asked:
        return ""
    if result.max_batch is None or result.max_batch < 1:
        return "Largest batch that fits: none, not even 1."
    return f"Largest batch that fits: {result.max_batch}."


def limits_heading(result: FitResult) -> str:
    """The warning a lower bound shows first ("" for an exact estimate)."""
    if result.exact:
        return ""
    return ("A lower bound, not an exact figure: the run needs at least this much "
            "(what is left out: Limits, below).")


def context_rows(result: FitResult, fit: GpuFit | None) -> list[list[str]]:
    """Per context length: context, KV cache, needs free, fits ("yes", "no", "n/a")."""
    extra = fit.context_bytes if fit is not None else fresh_process_bytes(None)
    free = fit.free_bytes if fit is not None else None
    return [[context_label(row), fmt_bytes(row.kv_cache_bytes),
             fmt_bytes(row.reserved_bytes + extra), _fits(row, extra, free)]
            for row in result.contexts]


def context_label(row: ContextRow) -> str:
    n = row.context
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _fits(row: ContextRow, extra: int, free: int | None) -> str:
    if free is None:
        return NA
    return "yes" if row.reserved_bytes + extra <= free else "no"


def fix_text(text: str, fits_after: bool) -> str:
    return f"{text} — then it fits" if fits_after and "fits" not in text else text


__all__ = ["CONTEXT_COLUMNS", "FIGURES", "KIND_NAMES", "KIND_TIPS", "about_text",
           "context_label", "context_rows", "figure_values", "fix_text", "free_text",
           "limits_heading", "margin_text", "max_batch_text", "scales_text", "verdict"]
