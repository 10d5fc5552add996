"""What an estimate is asked and what it answers, in bytes.

Three figures are kept apart everywhere: ``peak_bytes`` (tensors alive at the
step's peak), ``reserved_bytes`` (what PyTorch's caching allocator holds then:
its block rounding and segments) and ``needs_bytes`` (reserved plus what a
fresh process on that GPU model holds before its first tensor: the CUDA
context and library workspaces).  ``needs_bytes`` depends on the GPU, so it
lives on each :class:`GpuFit`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: The parts of a step's memory, in the order a bar draws them.
KINDS = ("weights", "gradients", "optimizer", "activations", "temporaries", "kv_cache")
#: Modes of a step.
MODES = ("inference", "training")
#: Optimizers the training step knows (``torch.optim`` names, lower case).
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum", "adafactor")
#: Weight dtypes.
DTYPES = ("float32", "bfloat16", "float16")


class EstimateError(ValueError):
    """The request cannot be estimated (a missing file, a bad value); the message says why."""


@dataclass(frozen=True, slots=True)
class StepRequest:
    """One step of a model to size.

    ``model`` is a Hugging Face model folder or ``config.json``, a diffusers
    component folder (its ``config.json`` names ``_class_name``), a GGUF file,
    or ``package.module:function`` returning ``(module, example_batch)``.
    """

    model: str
    batch: int = 1
    seq: int | None = None  # tokens per sample (text models)
    image: int | None = None  # image side in pixels (vision models, UNets)
    context: int | None = None  # an LLM's context length (the formula's KV cache)
    dtype: str = "float32"  # the weights' dtype
    autocast: str | None = None  # "bfloat16" / "float16": mixed precision over float32 weights
    train: bool = False
    optimizer: str = "adamw"
    checkpointing: bool = False
    lora_rank: int | None = None

    @property
    def mode(self) -> str:
        return "training" if self.train else "inference"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ContextRow:
    """An LLM at one context length (the formula's table)."""

    context: int
    weights_bytes: int
    kv_cache_bytes: int
    peak_bytes: int
    reserved_bytes: int


@dataclass(frozen=True, slots=True)
class Estimate:
    """The memory of one step, without the GPU it runs on."""

    request: StepRequest
    method: str  # "fake-tensor step" or "formula"
    model_name: str  # what the model is: "LlamaForCausalLM", "llama 8.0B Q4_K_M"
    params: int | None  # parameter count
    peak_bytes: int
    reserved_bytes: int
    breakdown: dict[str, int]  # bytes at the peak by kind (KINDS), kinds absent are 0
    scales_with_batch: tuple[str, ...]  # the kinds that grow with the batch
    peak_phase: str | None  # "forward", "backward", "optimizer step", or None (formula)
    exact: bool  # False: a lower bound, ``limits`` says what it leaves out
    limits: tuple[str, ...] = ()  # plain sentences
    contexts: tuple[ContextRow, ...] = ()  # LLMs: the figures per context length
    seconds: float | None = None  # how long the estimate took

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["scales_with_batch"] = list(self.scales_with_batch)
        out["limits"] = list(self.limits)
        out["contexts"] = [asdict(c) for c in self.contexts]
        return out


@dataclass(frozen=True, slots=True)
class FitFix:
    """One way to make a step fit, ranked as the Doctor ranks its fixes (best first)."""

    action: str  # "free_cache" "unload_model" "stop_process" "batch" "checkpointing"
    #              "bfloat16" "lora" "context"
    text: str  # plain words, with the figures
    gain_bytes: int | None  # what it frees on the GPU or saves from needs_bytes
    fits_after: bool  # with this fix (and the ones ranked above it, for freeing) it fits
    pid: int | None = None
    model: str | None = None  # an agent's model id
    value: int | str | None = None  # the new batch, context, LoRA rank, dtype


@dataclass(frozen=True, slots=True)
class GpuFit:
    """The estimate against one GPU's free memory now."""

    gpu: str  # display id ("0", "0@gpu1")
    gpu_name: str | None
    total_bytes: int | None
    free_bytes: int | None  # NVML free now; None: unknown
    context_bytes: int  # a fresh process's CUDA context and workspaces on this GPU model
    needs_bytes: int  # reserved + context
    fits: bool | None  # None: free memory unknown
    margin_bytes: int | None  # free − needs (negative: short by)
    fixes: tuple[FitFix, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["fixes"] = [asdict(f) for f in self.fixes]
        return out
