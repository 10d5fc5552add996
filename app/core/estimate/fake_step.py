"""One real step of a model, run on fake tensors: the memory it needs, with no
weights loaded and no GPU.

PyTorch's ``FakeTensorMode`` runs every op for its output's shape, dtype and
storage alone, so the step is the model's own code (forward; for training,
backward, the optimizer step and ``zero_grad(set_to_none=True)``) and its
allocations are the real ones.  Training is measured on the second step: the
optimizer's state exists from the first step on, so the second is the one
whose peak every later step repeats.

The same :func:`run_step` runs a real step (``model_source.build(...,
fake=False)``), so a measurement on a real device checks exactly what the
estimate sized.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from app.core.estimate.attention import ATTENTION_LIMIT, gpu_attention
from app.core.estimate.model_source import Built, build, resolve
from app.core.estimate.optional import need, quiet
from app.core.estimate.step_modes import (
    make_optimizer,
    scale_batch,
    tensors_of,
    torch_dtype,
)
from app.core.estimate.trace import (
    allocation_trace,
    breakdown_at_peak,
    peak_total,
    peak_tracker,
    storage_bytes,
    trace_peak,
)
from app.core.estimate.types import KINDS, Estimate, EstimateError, StepRequest

METHOD = "fake-tensor step"
#: A kind scales with the batch when doubling the batch grows it by more than this.
SCALING_GROWTH = 0.01
FAKE_CPU_LIMIT = ("Sized on fake CPU tensors: the workspaces cuDNN's convolution algorithms "
                  "take from the allocator for a moment are not counted (they can add to the "
                  "reserved memory of convolutional models).")
AUTOCAST_LIMIT = ("Autocast follows PyTorch's CPU list of ops run in lower precision, "
                  "which differs slightly from CUDA's.")

Mark = Callable[[str], None]


def forward(module: Any, batch: Any) -> Any:
    """The module called on its batch: a dict as keywords, a tuple as arguments."""
    if isinstance(batch, dict):
        return module(**batch)
    if isinstance(batch, tuple | list):
        return module(*batch)
    return module(batch)


def loss_of(output: Any) -> Any:
    """The output's own loss (an HF head given labels, or a scalar output); otherwise the
    mean squared error of the first output against a random target of its shape, in
    float32, as diffusion training computes its noise-prediction loss."""
    import torch

    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss
    floats = [t for t in tensors_of(output) if t.is_floating_point() and t.requires_grad]
    if not floats:
        raise EstimateError("the model's output has no tensor to train against")
    prediction = floats[0]
    target = torch.randn_like(prediction)
    return torch.nn.functional.mse_loss(prediction.float(), target.float())


def autocast_of(module: Any, request: StepRequest) -> AbstractContextManager[Any]:
    """``torch.autocast`` on the module's device when the request asks for it."""
    import torch

    if not request.autocast:
        return nullcontext()
    first = next(iter(module.parameters()), None)
    device = first.device.type if first is not None else "cpu"
    return torch.autocast(device, dtype=torch_dtype(request.autocast))


def run_step(module: Any, batch: Any, request: StepRequest, optimizer: Any = None,
             mark: Mark | None = None) -> None:
    """One step as a plain script runs it.  ``mark`` is called with the phase about to
    start ("forward", "backward", "optimizer step") and "end"."""
    import torch

    mark = mark or _no_mark
    if not request.train:
        mark("forward")
        with torch.no_grad(), autocast_of(module, request):
            output = forward(module, batch)
        mark("end")
        del output
        return
    mark("forward")
    with autocast_of(module, request):
        output = forward(module, batch)
        loss = loss_of(output)
    mark("backward")
    loss.backward()
    mark("optimizer step")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    mark("end")


def _no_mark(_phase: str) -> None:
    return None


@dataclass(slots=True)
class Measured:
    """One tracked step."""

    peak_bytes: int  # MemTracker's peak
    breakdown: dict[str, int]
    trace_peak_bytes: int | None = None  # the allocation trace's own peak of the same step
    phase: str | None = None
    events: list[tuple[int, int]] | None = None


def optimizer_state(optimizer: Any) -> list[Any]:
    if optimizer is None:
        return []
    return [v for state in optimizer.state.values() for v in state.values()
            if hasattr(v, "untyped_storage")]


def measure(built: Built, request: StepRequest, optimizer: Any, batch: Any,
            *, traced: bool = True, kernels: str = "cuda") -> Measured:
    """The step's peak and breakdown; with ``traced`` also the ordered allocations
    (the warm-up step of training included, as the allocator saw it)."""
    module = built.module
    trace = allocation_trace() if traced else None
    before = [*module.parameters(), *module.buffers(), *tensors_of(batch),
              *optimizer_state(optimizer)]
    start = 0
    with trace if trace is not None else nullcontext(), \
            gpu_attention() if kernels == "cuda" else nullcontext():
        if trace is not None:
            trace.add(before)
        if request.train and not optimizer_state(optimizer):
            run_step(module, batch, request, optimizer)  # the optimizer state is made here
        if trace is not None:
            start = len(trace.events)
        tracker = peak_tracker()
        tracker.track_external(module, optimizer, *tensors_of(batch))
        with tracker:
            run_step(module, batch, request, optimizer, trace.mark if trace else None)
        if trace is not None:
            trace.close()
    state_bytes = storage_bytes(optimizer_state(optimizer))
    measured = Measured(peak_total(tracker), breakdown_at_peak(tracker, state_bytes))
    if trace is not None:
        marks = [m for m in trace.marks if m[1] >= start]
        peak = trace_peak(trace.events, marks, start)
        measured.trace_peak_bytes = peak.peak_bytes
        measured.phase = peak.phase
        measured.events = trace.events
    return measured


def estimate_step(request: StepRequest, *, scaling: bool = True,
                  kernels: str = "cuda") -> Estimate:
    """The memory of ``request``'s step, measured on fake tensors.  ``kernels``: whose
    attention kernels to size, a GPU's ("cuda") or, to compare with a real step on
    this machine's processor, the CPU's ("cpu")."""
    started = time.perf_counter()
    need("torch")
    _check(request)
    from torch._subclasses.fake_tensor import FakeTensorMode

    from app.core.estimate.limits import fake_errors, lower_bound, unsupported

    source = resolve(request.model)
    with FakeTensorMode(), quiet():
        built, optimizer = _built(request, source)
        try:
            measured = measure(built, request, optimizer, built.batch, kernels=kernels)
            doubled = measure(built, request, optimizer, scale_batch(built.batch, 2),
                              traced=False, kernels=kernels) if scaling else None
        except fake_errors() as exc:
            found = lower_bound(built, request, METHOD)
            limits = (*built.limits, unsupported(exc), *found.limits)
            return replace(found, limits=limits, seconds=time.perf_counter() - started)
        except EstimateError:
            raise
        except Exception as exc:
            raise EstimateError(f"the {request.mode} step of {built.model_name} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
    return _estimate(request, built, measured, doubled, time.perf_counter() - started)


def _built(request: StepRequest, source: Any) -> tuple[Built, Any]:
    """The fake model, batch and optimizer; anything that fails while making them
    (a user's module, a config the class rejects) is an :class:`EstimateError`."""
    try:
        built = build(request, fake=True, source=source)
        optimizer = make_optimizer(built.module, request.optimizer) if request.train else None
    except EstimateError:
        raise
    except Exception as exc:
        raise EstimateError(f"{request.model} could not be built for the {request.mode} step: "
                            f"{type(exc).__name__}: {exc}") from exc
    return built, optimizer


def _check(request: StepRequest) -> None:
    if request.batch < 1:
        raise EstimateError(f"the batch must be 1 or more, not {request.batch}")
    for name in ("seq", "image"):
        value = getattr(request, name)
        if value is not None and value < 1:
            raise EstimateError(f"--{name} must be 1 or more, not {value}")
    torch_dtype(request.dtype)
    if request.autocast:
        torch_dtype(request.autocast)


def _estimate(request: StepRequest, built: Built, measured: Measured,
              doubled: Measured | None, seconds: float) -> Estimate:
    from app.core.estimate.allocator import replay

    peak = measured.peak_bytes
    reserved = peak
    if measured.events:
        reserved = max(peak, replay(measured.events).reserved_bytes)
    grows: tuple[str, ...] = ()
    if doubled is not None:
        grows = tuple(kind for kind, before in measured.breakdown.items()
                      if doubled.breakdown[kind] > before * (1 + SCALING_GROWTH)
                      and doubled.breakdown[kind] > 0)
    limits = [*built.limits, FAKE_CPU_LIMIT, ATTENTION_LIMIT]
    if request.autocast:
        limits.append(AUTOCAST_LIMIT)
    breakdown = {kind: measured.breakdown.get(kind, 0) for kind in KINDS}
    return Estimate(request, METHOD, built.model_name, built.params, peak, reserved, breakdown,
                    grows, measured.phase, True, tuple(limits), seconds=seconds)
