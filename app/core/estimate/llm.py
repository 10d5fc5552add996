"""A causal LM's inference memory by formula: its weights at their precision
plus the KV cache at a context length and batch.

For a decoder-only transformer both terms follow from the config alone:

* weights: the parameter count (embeddings, attention, MLP, norms, an untied
  LM head) times the bytes per parameter of the dtype or quantization;
* KV cache: 2 (K and V) × layers × KV heads × head size × context × batch ×
  bytes per element; grouped-query attention shrinks it through the KV heads.

Activations and the CUDA context are not in these figures: the fit adds what a
fresh process needs on top.  The parameter count covers the Llama, Mistral,
Qwen2, GPT-2 and GPT-NeoX families' layouts; a config of another layout says
so (:attr:`LlmShape.exact` is False) and its count is a lower bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Bytes per element of the dtypes configs name.
DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "float8": 1.0, "int8": 1.0,
               "int4": 0.5}
#: The context lengths people pick, for a table.
CONTEXTS = (4096, 8192, 16384, 32768, 65536, 131072)
#: Layouts whose parameters :func:`shape_from_hf_config` counts exactly: those whose MLP
#: has three projections (gate, up, down), and the plain ones.
GATED_MLP = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "mixtral"}
_PLAIN = {"gpt2", "gpt_neox", "gptj", "opt", "falcon"}


class ConfigError(ValueError):
    """The config lacks what the formula needs (it names the key)."""


@dataclass(frozen=True, slots=True)
class LlmShape:
    """What the formula needs of a causal LM."""

    model_type: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    params: int  # parameters, the embeddings and an untied LM head included
    max_context: int | None  # the longest context the model was trained for
    exact: bool  # False: a layout the count does not know, ``params`` a lower bound


@dataclass(frozen=True, slots=True)
class LlmFootprint:
    """Memory of one LLM setting, in bytes."""

    context: int
    batch: int
    weights_bytes: int
    kv_cache_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes


def _int(config: Mapping[str, Any], *names: str, default: int | None = None) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    if default is not None:
        return default
    raise ConfigError(f"the config has no {' / '.join(names)}")


def shape_from_hf_config(config: Mapping[str, Any]) -> LlmShape:
    """The shape of a Hugging Face ``config.json`` (as a dict)."""
    kind = str(config.get("model_type") or "")
    hidden = _int(config, "hidden_size", "n_embd", "d_model")
    layers = _int(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(config, "num_attention_heads", "n_head")
    kv_heads = _int(config, "num_key_value_heads", "num_kv_heads", default=heads)
    if config.get("multi_query") is True:  # Falcon's single KV head
        kv_heads = 1
    head_dim = _int(config, "head_dim", default=hidden // heads)
    intermediate = _int(config, "intermediate_size", "n_inner", "ffn_dim",
                        default=4 * hidden)
    vocab = _int(config, "vocab_size")
    max_context = config.get("max_position_embeddings") or config.get("n_positions")
    tied = bool(config.get("tie_word_embeddings", kind in _PLAIN - {"gpt_neox"}))

    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    gated = kind in GATED_MLP
    mlp = (3 if gated else 2) * hidden * intermediate
    per_layer = attention + mlp + 2 * hidden  # two norms' weights
    biases = 0
    if kind in _PLAIN:  # biases on every projection, and LayerNorm's bias too
        biases = q_out + 2 * kv_out + hidden + intermediate + hidden + 2 * hidden
    elif config.get("attention_bias") or kind == "qwen2":
        biases = q_out + 2 * kv_out
    embed = vocab * hidden
    positions = 0
    if kind == "gpt2" and isinstance(max_context, int):
        positions = max_context * hidden  # learned position embeddings
    final_norm = hidden * (2 if kind in _PLAIN else 1)
    params = (embed + positions + layers * (per_layer + biases) + final_norm
              + (0 if tied else vocab * hidden))
    return LlmShape(kind, layers, heads, kv_heads, head_dim, hidden, intermediate, vocab,
                    params, max_context if isinstance(max_context, int) else None,
                    exact=gated or kind in _PLAIN)


def kv_cache_bytes(shape: LlmShape, context: int, batch: int = 1,
                   bytes_per_element: float = 2.0) -> int:
    """2 (K, V) × layers × KV heads × head size × context × batch × element bytes."""
    if context < 0 or batch < 1:
        raise ValueError("context must be >= 0 and batch >= 1")
    return int(2 * shape.layers * shape.kv_heads * shape.head_dim * context * batch
               * bytes_per_element)


def weight_bytes(shape: LlmShape, bytes_per_param: float) -> int:
    return int(shape.params * bytes_per_param)


def footprints(shape: LlmShape, weights_bytes: int, contexts: Iterable[int] = CONTEXTS,
               batch: int = 1, kv_bytes_per_element: float = 2.0) -> list[LlmFootprint]:
    """The memory at each context length (the ones past the model's own limit left out)."""
    out = []
    for context in contexts:
        if shape.max_context is not None and context > shape.max_context:
            continue
        out.append(LlmFootprint(context, batch, weights_bytes,
                                kv_cache_bytes(shape, context, batch, kv_bytes_per_element)))
    return out


def largest_context(shape: LlmShape, weights_bytes: int, room_bytes: int, batch: int = 1,
                    kv_bytes_per_element: float = 2.0) -> int:
    """The longest context whose weights and KV cache fit in ``room_bytes`` (0:
    not even the weights), capped at the model's own limit."""
    per_token = kv_cache_bytes(shape, 1, batch, kv_bytes_per_element)
    left = room_bytes - weights_bytes
    if left < 0 or per_token <= 0:
        return 0
    tokens = left // per_token
    return int(min(tokens, shape.max_context) if shape.max_context else tokens)


__all__ = ["CONTEXTS", "DTYPE_BYTES", "ConfigError", "LlmFootprint", "LlmShape",
           "footprints", "kv_cache_bytes", "largest_context", "shape_from_hf_config",
           "weight_bytes"]
