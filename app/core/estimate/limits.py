"""Where fake tensors cannot follow a model's code, and what can still be sized.

An op whose output shape depends on the data (``nonzero``, a boolean mask, a
``.item()`` turned into a size) or a custom op without a meta kernel stops a
fake-tensor step.  The estimate then says which op stopped it and reports
what does not depend on running the step: the weights, and for training the
gradients of the trainable parameters and the optimizer's state for them, as
a lower bound (``exact=False``).
"""

from __future__ import annotations

from typing import Any

from app.core.estimate.model_source import Built
from app.core.estimate.step_modes import state_bytes_per_param
from app.core.estimate.types import KINDS, Estimate, StepRequest

LOWER_BOUND_LIMIT = ("Activations and temporaries are not sized: the figures are a lower "
                     "bound (weights{training}).")


def fake_errors() -> tuple[type[BaseException], ...]:
    """The exceptions by which fake tensors say they cannot run an op."""
    from torch._subclasses import fake_tensor as ft

    found: list[type[BaseException]] = [NotImplementedError]
    for name in ("DataDependentOutputException", "DynamicOutputShapeException",
                 "UnsupportedOperatorException", "UnsupportedFakeTensorException"):
        cls = getattr(ft, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    try:
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        found.append(GuardOnDataDependentSymNode)
    except ImportError:
        pass
    return tuple(found)


def unsupported(exc: BaseException) -> str:
    """A sentence naming the op fake tensors could not run."""
    op = getattr(exc, "func", None)
    kinds = {
        "DataDependentOutputException": "its output depends on the data",
        "DynamicOutputShapeException": "its output's shape depends on the data",
        "GuardOnDataDependentSymNode": "a size depends on the data",
        "UnsupportedOperatorException": "it has no meta kernel",
    }
    why = kinds.get(type(exc).__name__, "fake tensors cannot run it")
    if str(op) == "aten._local_scalar_dense.default":
        op = "a tensor's .item() (aten._local_scalar_dense)"
    if op is None:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"The step stopped where fake tensors cannot follow the code ({why}: {text[:160]})."
    return f"The step stopped at {op}: {why}, so fake tensors cannot follow it."


def lower_bound(built: Built, request: StepRequest, method: str) -> Estimate:
    """Weights, and for training gradients and optimizer state: what the step needs at least."""
    from app.core.estimate.allocator import replay

    module = built.module
    params = list({id(p): p for p in module.parameters()}.values())
    buffers = list({id(b): b for b in module.buffers()}.values())
    sizes = [_nbytes(t) for t in params + buffers]
    breakdown = dict.fromkeys(KINDS, 0)
    breakdown["weights"] = sum(sizes)
    if request.train:
        trainable = [p for p in params if p.requires_grad]
        grads = [_nbytes(p) for p in trainable]
        states = [state_bytes_per_param(request.optimizer, p) for p in trainable]
        breakdown["gradients"] = sum(grads)
        breakdown["optimizer"] = sum(states)
        sizes += grads + states
    events = [(key, nbytes) for key, nbytes in enumerate(sizes, start=1) if nbytes > 0]
    peak = sum(breakdown.values())
    reserved = max(peak, replay(events).reserved_bytes)
    training = ", gradients and optimizer state" if request.train else ""
    return Estimate(request, method, built.model_name, built.params, peak, reserved, breakdown,
                    (), None, False, (LOWER_BOUND_LIMIT.format(training=training),))


def _nbytes(t: Any) -> int:
    return int(t.numel() * t.element_size())
