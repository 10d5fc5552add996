"""An OOM post-mortem's "batch that would have fitted": the run that failed,
sized again at smaller batches against the room its process could have had.

The run is rebuilt from what the process's agent reported of its model (see
:func:`oom_request`): its config (Hugging Face or diffusers), the shape of
its last call's first tensor, its dtype and whether it was training.  The
room is the card as the OOM found it (see :func:`room_at_oom`).  Both come
from the stored report alone (``OomReport.model``), so the proposal can be
made long after the process died, on another machine, or from the demo.

Estimating needs torch (a fake-tensor step): never on the sampler thread or
the GUI thread; the CLI (``estimate --oom``) and a child process of the
window run it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from app.core.agents.types import ModelInfo
from app.core.diagnosis.types import Holder, OomReport
from app.core.estimate.types import DTYPES, Estimate, EstimateError, StepRequest
from app.core.units import fmt_bytes

Reestimate = Callable[[StepRequest], Estimate]
#: Latent diffusion models see the image through a VAE that divides its side by 8.
LATENT_SCALE = 8
#: The diffusers classes whose input is latents (the engine's example batch divides
#: their ``image`` by ``LATENT_SCALE``); other diffusers models take pixels.
LATENT_CLASSES = frozenset({"UNet2DConditionModel"})
#: A memory-fraction cap below this share of the card counts as a cap.
CAP_SHARE = 0.98


@dataclass(frozen=True, slots=True)
class RanShape:
    """The batch the failed call ran, and its length or image side."""

    batch: int
    seq: int | None = None
    image: int | None = None


@dataclass(frozen=True, slots=True)
class Room:
    """What the OOM's process could have had on its GPU (bytes)."""

    room_bytes: int  # the card less what the other processes (and no process) held
    context_bytes: int  # the process's own memory outside its allocator (CUDA context)


@dataclass(frozen=True, slots=True)
class BatchProposal:
    """The largest batch estimated to fit where the OOM happened.

    ``batch`` None: not even batch 1 fits; ``batch == ran_batch``: the
    estimate says the batch that ran fits, so the batch alone does not
    explain the OOM (the report's verdict does)."""

    batch: int | None
    ran_batch: int
    needs_bytes: int  # reserved + context at ``batch`` (at ``ran_batch`` when batch is None)
    ran_needs_bytes: int  # the same at the batch that ran
    room_bytes: int
    text: str
    request: StepRequest  # the run as rebuilt (at the batch that ran)
    exact: bool = True  # False: the estimates are lower bounds

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["request"] = self.request.to_json()
        return out


def oom_model(report: OomReport) -> ModelInfo | None:
    """The model the report keeps of its process (``OomReport.model``), or None."""
    data = report.model
    return ModelInfo.from_json(data) if isinstance(data, dict) else None


def ran_shape(model: ModelInfo) -> RanShape | None:
    """The failed run's batch and size, from the model's last input shape.

    Token ids ``(batch, seq)`` and embeddings ``(batch, seq, hidden)`` give
    the sequence length; images ``(batch, channels, height, width)`` their
    side, and a latent diffusion UNet's latents eight times theirs.  None: no shape, or one that
    says neither."""
    shape, config = model.input_shape, model.config or {}
    if not shape or shape[0] < 1:
        return None
    diffusers = isinstance(config.get("_class_name"), str)
    if len(shape) == 4 and shape[-1] > 0:
        latent = diffusers and config["_class_name"] in LATENT_CLASSES
        return RanShape(shape[0], image=shape[-1] * (LATENT_SCALE if latent else 1))
    if len(shape) in (2, 3) and not diffusers and "vocab_size" in config and shape[1] > 0:
        return RanShape(shape[0], seq=shape[1])
    return None


def is_training(report: OomReport, model: ModelInfo) -> bool:
    """Train mode, and an optimizer seen (a step taken) or weights that want
    gradients: an OOM in the first step comes before any optimizer step."""
    step = report.capture.get("step") if isinstance(report.capture, dict) else None
    return model.training is True and (isinstance(step, int) or model.requires_grad is True)


def oom_request(report: OomReport, model: ModelInfo, model_path: str) -> StepRequest | None:
    """The step that failed, with the model's config at ``model_path`` (a
    folder holding it as ``config.json``, see :func:`written_config`); None
    when the model's config, input shape or dtype is not known.  The
    optimizer is AdamW (the agent does not say which) and no autocast."""
    shape = ran_shape(model)
    if model.config is None or shape is None or model.dtype not in DTYPES:
        return None
    return StepRequest(model=model_path, batch=shape.batch, seq=shape.seq, image=shape.image,
                       dtype=model.dtype or "float32", train=is_training(report, model))


@contextmanager
def written_config(config: dict[str, Any]) -> Iterator[str]:
    """A private temporary folder (0700) holding ``config`` as ``config.json``
    (0600), removed on leaving.  A folder that cannot be made or written (a full
    disk) is an :class:`EstimateError` saying so."""
    with tempfile.TemporaryDirectory(prefix="vram-steward-oom-") as folder:
        try:
            fd = os.open(os.path.join(folder, "config.json"),
                         os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(config, f)
        except OSError as exc:
            raise EstimateError(f"the model's config could not be written to {folder}: "
                                f"{exc.strerror or exc}") from exc
        yield folder


def room_at_oom(report: OomReport, context_fallback: int) -> Room | None:
    """What the OOM's process could have had: the GPU's total less what the
    other processes held at the OOM (their NVML bytes) and what no listed
    process held; of that, the process's own memory outside its allocator
    (its NVML bytes less its reserved: the CUDA context and library
    workspaces) is not the run's to use, so it is the ``context_bytes`` a
    batch's ``reserved_bytes`` is added to.  Where that is unknown (no NVML
    figure for the process), ``context_fallback`` (a fresh process's on that
    GPU model).  A memory-fraction cap (the capture's ``limit`` below the
    card) bounds the allocator's part.  None: the GPU's total is unknown."""
    total = report.memory_total
    cap = report.capture.get("limit") if isinstance(report.capture, dict) else None
    if total is None:
        total = cap if isinstance(cap, int) else None
    if total is None:
        return None
    own: Holder | None = next((h for h in report.holders if h.is_oom_process), None)
    others = sum(h.gpu_memory or 0 for h in report.holders if not h.is_oom_process)
    room = total - others - (report.unattributed or 0)
    context = context_fallback
    if own is not None and own.gpu_memory is not None and own.reserved is not None:
        context = max(0, own.gpu_memory - own.reserved)
    if isinstance(cap, int) and cap < total * CAP_SHARE:
        room = min(room, cap + context)
    return Room(max(0, room), context)


def why_unknown(report: OomReport, model: ModelInfo | None) -> str | None:
    """Why no batch can be proposed, in words after "n/a — "; None: one can."""
    if model is None:
        return "the OOM's model is not known (no agent, or no model in the process)"
    if model.config is None:
        return "the model's config is not known"
    if ran_shape(model) is None:
        return "the shape of the model's last input is not known"
    if model.dtype not in DTYPES:
        return f"the model's dtype ({model.dtype or 'unknown'}) is not one the estimate sizes"
    if report.memory_total is None and not isinstance(report.capture.get("limit"), int):
        return "the GPU's total memory is not known"
    return None


def _memoized(reestimate: Reestimate) -> tuple[Reestimate, dict[int, Estimate]]:
    seen: dict[int, Estimate] = {}

    def once(request: StepRequest) -> Estimate:
        if request.batch not in seen:
            seen[request.batch] = reestimate(request)
        return seen[request.batch]
    return once, seen


def batch_that_fits(report: OomReport, model: ModelInfo | None,
                    reestimate: Reestimate | None = None) -> BatchProposal | None:
    """The largest batch below the one that ran that the estimate says fits
    the room the process could have had; None when the run cannot be rebuilt
    (:func:`why_unknown` says why).  :class:`EstimateError` when estimating
    fails."""
    from app.core.estimate.context import fresh_process_bytes
    from app.core.estimate.search import largest_batch

    if model is None or model.config is None or why_unknown(report, model) is not None:
        return None
    room = room_at_oom(report, fresh_process_bytes(report.gpu_name))
    if room is None:
        return None
    if reestimate is None:
        from app.core.estimate.run import estimate

        reestimate = estimate
    with written_config(model.config) as folder:
        request = oom_request(report, model, folder)
        if request is None:
            return None
        once, seen = _memoized(reestimate)
        ran = once(request)
        ran_needs = ran.reserved_bytes + room.context_bytes
        if ran_needs <= room.room_bytes or request.batch == 1:
            batch: int | None = request.batch if ran_needs <= room.room_bytes else None
        else:
            batch = largest_batch(request, room.room_bytes, once, room.context_bytes,
                                  max_batch=request.batch - 1)
    at = seen[batch] if batch is not None else ran
    needs = at.reserved_bytes + room.context_bytes
    exact = all(e.exact for e in seen.values())
    return BatchProposal(batch, request.batch, needs, ran_needs, room.room_bytes,
                         proposal_text(batch, request.batch, needs, ran_needs, room.room_bytes,
                                       exact), request, exact)


def proposal_text(batch: int | None, ran: int, needs: int, ran_needs: int, room: int,
                  exact: bool = True) -> str:
    """The proposal in one sentence, with its figures."""
    of = f"of the {fmt_bytes(room)} the process could have had"
    bound = "" if exact else " (the estimate is a lower bound)"
    if batch is None:
        return f"Not even batch 1 would have fitted: it needs {fmt_bytes(needs)} {of}{bound}."
    if batch >= ran:
        return (f"Batch {ran} should have fitted by the estimate: it needs "
                f"{fmt_bytes(ran_needs)} {of}; the batch alone does not explain the OOM"
                f"{bound}.")
    return (f"Batch {batch} would have fitted (it ran {ran}): needs {fmt_bytes(needs)} "
            f"{of}{bound}.")
