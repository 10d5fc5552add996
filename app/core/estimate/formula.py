"""A causal LM's inference memory by formula, for a GGUF file (llama.cpp) or a
Hugging Face config (transformers on PyTorch): the weights at their
quantization or dtype, the KV cache at a context length and batch, and the
working buffers that follow from the shape alone.

The weights and the KV cache are exact for the layouts :mod:`llm` counts; the
working buffers are a lower bound (the limits say what is left out), so an
estimate here is never marked exact.  ``reserved_bytes`` replays PyTorch's
caching allocator for transformers; llama.cpp allocates its own buffers, so
there it equals the peak.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.estimate.llm import (
    CONTEXTS,
    DTYPE_BYTES,
    GATED_MLP,
    ConfigError,
    LlmShape,
    kv_cache_bytes,
    largest_context,
    shape_from_hf_config,
)
from app.core.estimate.types import KINDS, ContextRow, Estimate, EstimateError, StepRequest
from app.core.units import fmt_bytes, fmt_count

#: llama.cpp's default micro-batch (``n_ubatch``): the prompt is processed in chunks of it.
UBATCH_TOKENS = 512
#: llama.cpp pads the context (per sequence) to a multiple of this.
CONTEXT_PAD = 256
#: The context sized when neither the request nor the model names one.
DEFAULT_CONTEXT = 4096
#: llama.cpp's default KV cache type is f16.
LLAMA_CPP_KV_BYTES = 2.0
_FLOAT32_BYTES = 4
#: Layouts with learned positions: no rotary embedding promotes K under autocast.
_LEARNED_POSITIONS = {"gpt2", "opt"}


@dataclass(frozen=True, slots=True)
class LlmModel:
    """A causal LM as the formula sees it."""

    name: str  # "llama · 8.0 B params · Q4_K_M"
    shape: LlmShape
    weights_bytes: int
    weight_element_bytes: float  # transformers' dtype; GGUF: the file's mean
    kv_element_bytes: float
    logits_element_bytes: float  # the LM head's output (transformers); unused by llama.cpp
    llama_cpp: bool  # a GGUF file: llama.cpp's buffers, no PyTorch allocator
    limits: tuple[str, ...]  # what holds at every context


@dataclass(frozen=True, slots=True)
class _Sized:
    breakdown: dict[str, int]
    peak_bytes: int
    reserved_bytes: int


def _padded(context: int) -> int:
    return -(-context // CONTEXT_PAD) * CONTEXT_PAD


def _gguf_model(path: Path) -> LlmModel:
    from app.core.estimate.gguf_file import read_gguf

    gguf = read_gguf(path)
    shape = gguf.shape
    name = f"{gguf.architecture} · {fmt_count(shape.params)} params · {gguf.quantization}"
    limits = (
        "llama.cpp allocates its own buffers (no PyTorch caching allocator): reserved "
        "equals peak.",
        "The KV cache is f16, llama.cpp's default; -ctk/-ctv q8_0 halves it.",
        f"Of llama.cpp's compute buffer only its largest part is counted: the logits of one "
        f"{UBATCH_TOKENS}-token micro-batch and their input "
        f"({fmt_bytes(_gguf_buffers_bytes(shape, UBATCH_TOKENS))}).",
        *gguf.caveats,
    )
    mean = gguf.weights_bytes / shape.params if shape.params else 0.0
    return LlmModel(name, shape, gguf.weights_bytes, mean, LLAMA_CPP_KV_BYTES, _FLOAT32_BYTES,
                    llama_cpp=True, limits=limits)


def _read_config(path: Path) -> dict[str, Any]:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise EstimateError(f"no config.json in {path}")
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EstimateError(f"{file} is not a readable JSON config ({exc})") from exc
    if not isinstance(config, dict):
        raise EstimateError(f"{file} is not a model config (a JSON object)")
    return config


def _hf_model(path: Path, request: StepRequest) -> LlmModel:
    config = _read_config(path)
    limits = []
    text = config.get("text_config")
    if "num_hidden_layers" not in config and isinstance(text, Mapping):
        limits.append("Only the language model is sized: the config's other towers "
                      "(vision, audio) are not.")
        config = {**text, "model_type": text.get("model_type") or config.get("model_type")}
    try:
        shape = shape_from_hf_config(config)
    except ConfigError as exc:
        raise EstimateError(f"{path}: {exc}") from exc
    if request.dtype not in DTYPE_BYTES:
        raise EstimateError(f"unknown dtype {request.dtype!r}")
    if request.autocast is not None and request.autocast not in DTYPE_BYTES:
        raise EstimateError(f"unknown autocast dtype {request.autocast!r}")
    weight_bytes = DTYPE_BYTES[request.dtype]
    # Under autocast the projections, hence V and the logits, come out in its dtype; K
    # too, unless a rotary embedding computed in the weights' dtype promotes it.
    act_bytes = DTYPE_BYTES[request.autocast or request.dtype]
    k_bytes = act_bytes
    if request.autocast is not None and shape.model_type not in _LEARNED_POSITIONS:
        k_bytes = max(weight_bytes, act_bytes)
        limits.append(f"Under autocast the rotary embedding keeps K in {request.dtype} "
                      f"({k_bytes:g} bytes per element) and V in {request.autocast}.")
    kv_bytes = (k_bytes + act_bytes) / 2
    if not shape.exact:
        limits.append(f"The parameter count does not know the {shape.model_type or 'unnamed'} "
                      "layout: the weights are a lower bound.")
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping):
        limits.append(f"The config names a {quant.get('quant_method', 'quantization')} "
                      f"quantization: the weights are sized at {request.dtype}, not at it.")
    limits += [
        f"The KV cache follows the dtype ({kv_bytes:g} bytes per element on average), as "
        "transformers' DynamicCache keeps it.",
        "reserved_bytes is the caching allocator on the weights, a full cache and one step's "
        "logits; DynamicCache grows by concatenation, which can leave more reserved.",
    ]
    kind = (config.get("architectures") or [shape.model_type])[0] or "causal LM"
    name = f"{kind} · {fmt_count(shape.params)} params · {request.autocast or request.dtype}"
    return LlmModel(name, shape, int(shape.params * weight_bytes), weight_bytes, kv_bytes,
                    act_bytes, llama_cpp=False, limits=tuple(limits))


def load_llm(request: StepRequest) -> LlmModel:
    """The model ``request.model`` names: a ``.gguf`` file, an HF folder or ``config.json``."""
    if request.train:
        raise EstimateError("the LLM formula sizes inference only; training needs the step run")
    path = Path(request.model)
    if not path.exists():
        raise EstimateError(f"no such file or folder: {request.model}")
    if path.suffix.lower() == ".gguf":
        return _gguf_model(path)
    return _hf_model(path, request)


def _gguf_buffers_bytes(shape: LlmShape, ubatch_tokens: int) -> int:
    """The LM head's output for every token of a micro-batch and its input, float32:
    llama.cpp reserves its compute buffer for that worst case."""
    return ubatch_tokens * (shape.vocab + shape.hidden) * _FLOAT32_BYTES


def _hf_weight_tensors(shape: LlmShape, element_bytes: float) -> list[int]:
    """The weights as transformers allocates them, one tensor per parameter."""
    h, q_out, kv_out = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    mlp = 3 if shape.model_type in GATED_MLP else 2
    layer = [h * q_out, h * kv_out, h * kv_out, q_out * h] + [h * shape.intermediate] * mlp
    layer += [h, h]
    numels = [shape.vocab * h] + layer * shape.layers
    rest = shape.params - sum(numels)  # an untied head, biases, positions, the last norm
    if rest >= shape.vocab * h:
        numels.append(shape.vocab * h)
        rest -= shape.vocab * h
    if rest > 0:
        numels.append(rest)
    return [max(1, int(n * element_bytes)) for n in numels]


def _size(model: LlmModel, context: int, batch: int) -> _Sized:
    shape = model.shape
    breakdown = dict.fromkeys(KINDS, 0)
    breakdown["weights"] = model.weights_bytes
    if model.llama_cpp:
        kv_context = _padded(context)
        breakdown["kv_cache"] = kv_cache_bytes(shape, kv_context, batch, model.kv_element_bytes)
        ubatch = min(UBATCH_TOKENS, kv_context * batch)
        breakdown["temporaries"] = _gguf_buffers_bytes(shape, ubatch)
        peak = sum(breakdown.values())
        return _Sized(breakdown, peak, peak)

    from app.core.estimate.allocator import replay

    kv = kv_cache_bytes(shape, context, batch, model.kv_element_bytes)
    breakdown["kv_cache"] = kv
    # The last step's logits in the head's dtype, and generate's float32 copy of them.
    logits = [int(batch * shape.vocab * model.logits_element_bytes),
              batch * shape.vocab * _FLOAT32_BYTES]
    breakdown["temporaries"] = sum(logits)
    sizes = _hf_weight_tensors(shape, model.weight_element_bytes)
    per_tensor = kv // (2 * shape.layers) if shape.layers else 0
    sizes += [per_tensor] * (2 * shape.layers) + logits
    peak_alloc = replay((key, n) for key, n in enumerate(sizes) if n > 0)
    return _Sized(breakdown, sum(breakdown.values()), peak_alloc.reserved_bytes)


def _context_of(request: StepRequest, shape: LlmShape) -> int:
    if request.context is not None:
        if request.context < 1:
            raise EstimateError(f"the context must be 1 token or more, not {request.context}")
        return request.context
    return min(shape.max_context or DEFAULT_CONTEXT, CONTEXTS[-1])


def estimate_llm(request: StepRequest) -> Estimate:
    """Weights, KV cache and working buffers at ``request.context`` (else the model's
    own limit, at most 128k), with a row per context length of :data:`CONTEXTS`."""
    started = time.perf_counter()
    if request.batch < 1:
        raise EstimateError(f"the batch must be 1 or more, not {request.batch}")
    model = load_llm(request)
    shape = model.shape
    context = _context_of(request, shape)
    sized = _size(model, context, request.batch)
    limits = list(model.limits)
    if model.llama_cpp:
        kv_context = _padded(context)
        if kv_context != context:
            limits.append(f"The context is rounded up to {kv_context} tokens, as llama.cpp "
                          f"pads it to a multiple of {CONTEXT_PAD}.")
        scores = kv_context * request.batch * UBATCH_TOKENS * shape.heads * _FLOAT32_BYTES
        limits.append("Without flash attention llama.cpp also holds a micro-batch's attention "
                      f"scores ({fmt_bytes(scores)} at this context), not counted.")
    else:
        prompt = request.batch * context * (shape.hidden + shape.intermediate)
        limits.append("Prefilling a prompt of the whole context in one forward also holds its "
                      "activations (at least the MLP's input and output of every token: "
                      f"{fmt_bytes(prompt * model.kv_element_bytes)}) and the attention's "
                      "scratch; not counted.")
    if shape.max_context is not None and context > shape.max_context:
        limits.append(f"The model was trained for {shape.max_context} tokens; a longer context "
                      "needs RoPE scaling.")
    rows = []
    for length in CONTEXTS:
        if shape.max_context is not None and length > shape.max_context:
            continue
        at = sized if length == context else _size(model, length, request.batch)
        rows.append(ContextRow(length, at.breakdown["weights"], at.breakdown["kv_cache"],
                               at.peak_bytes, at.reserved_bytes))
    scales = ("kv_cache",) if model.llama_cpp else ("kv_cache", "temporaries")
    return Estimate(
        request=request, method="formula", model_name=model.name, params=shape.params,
        peak_bytes=sized.peak_bytes, reserved_bytes=sized.reserved_bytes,
        breakdown=sized.breakdown, scales_with_batch=scales, peak_phase=None, exact=False,
        limits=("The weights and the KV cache are exact for this layout; the working buffers "
                "are a lower bound.", *limits),
        contexts=tuple(rows), seconds=time.perf_counter() - started)


def largest_context_for(request: StepRequest, room_bytes: int) -> int:
    """The longest context (a multiple of 256, at most the model's own limit) whose
    ``reserved_bytes`` fits in ``room_bytes`` at ``request.batch``; 0 when none does."""
    model = load_llm(request)
    batch = request.batch
    fixed = _size(model, CONTEXT_PAD, batch)
    fixed_bytes = fixed.peak_bytes - fixed.breakdown["kv_cache"]
    high = largest_context(model.shape, fixed_bytes, room_bytes, batch, model.kv_element_bytes)
    low, high = 0, high // CONTEXT_PAD
    while low < high:  # the most 256-token steps whose reserved bytes fit
        middle = (low + high + 1) // 2
        if _size(model, middle * CONTEXT_PAD, batch).reserved_bytes <= room_bytes:
            low = middle
        else:
            high = middle - 1
    return low * CONTEXT_PAD


__all__ = ["CONTEXT_PAD", "UBATCH_TOKENS", "LlmModel", "estimate_llm", "largest_context_for",
           "load_llm"]
