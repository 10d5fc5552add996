"""One entry point for an estimate: the formula where it is exact enough and
cheap (a GGUF file; a causal LM asked at a context length), otherwise one real
step under fake tensors."""

from __future__ import annotations

from pathlib import Path

from app.core.estimate.model_source import is_function
from app.core.estimate.types import Estimate, EstimateError, StepRequest


def is_gguf(model: str) -> bool:
    return model.lower().endswith(".gguf")


def uses_formula(request: StepRequest) -> bool:
    """A GGUF file always; an HF model's config only for inference at a context length."""
    return is_gguf(request.model) or (request.context is not None and not request.train
                                      and not is_function(request.model))


def estimate(request: StepRequest) -> Estimate:
    """The memory of ``request``'s step; raises :class:`EstimateError` with the reason."""
    if request.batch < 1:
        raise EstimateError(f"the batch must be 1 or more, not {request.batch}")
    if not is_function(request.model) and not Path(request.model).exists():
        raise EstimateError(f"no such file or folder: {request.model}")
    if request.context is not None and not uses_formula(request):
        raise EstimateError("--context sizes an LLM's inference by formula (a GGUF file or "
                            "a model's config); for a step of this model give --seq")
    if uses_formula(request):
        from app.core.estimate.formula import estimate_llm

        return estimate_llm(request)
    from app.core.estimate.fake_step import estimate_step

    return estimate_step(request)
