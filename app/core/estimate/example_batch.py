"""The example batch of a model built from a config: what its forward takes,
at the request's batch, sequence length or image size.

Training batches carry the labels the model's head computes its own loss
from (token ids for language-model heads, a class per sample for
classifiers); a model without such a head is trained against a target shaped
like its output (see :func:`app.core.estimate.fake_step.loss_of`).
"""

from __future__ import annotations

from typing import Any

from app.core.estimate.types import EstimateError, StepRequest

#: Tokens per sample when the request names none (capped at the model's positions).
DEFAULT_SEQ = 512
#: Image side when neither the request nor the config names one.
DEFAULT_IMAGE = 224
#: Pixels per latent pixel of Stable Diffusion's VAE.
VAE_SCALE = 8
#: Tokens of the text encoder's output a UNet attends to (CLIP's context).
TEXT_TOKENS = 77

_TOKEN_LABELS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration",
                 "ForTokenClassification")
_CLASS_LABELS = ("ForSequenceClassification", "ForImageClassification")


def example_batch(source: Any, request: StepRequest, batch: int, device: str = "cpu") -> Any:
    """The batch of a transformers or diffusers source at ``batch`` samples, on ``device``
    (under an active ``FakeTensorMode`` the tensors are fake)."""
    import torch

    with torch.device(device):
        if source.origin == "diffusers":
            return _diffusers_batch(source.class_name, source.config, request, batch)
        return _transformers_batch(source.class_name, source.config, request, batch)


def seq_len(config: Any, request: StepRequest) -> int:
    """The request's tokens per sample, or 512 capped at the model's positions."""
    if request.seq:
        return request.seq
    limits = [getattr(config, name, None) for name in
              ("max_position_embeddings", "n_positions", "max_length")]
    known = [n for n in limits if isinstance(n, int) and n > 0]
    return min([DEFAULT_SEQ, *known])


def image_side(config: Any, request: StepRequest) -> int:
    if request.image:
        return request.image
    size = getattr(config, "image_size", None)
    if isinstance(size, list | tuple) and size:
        size = size[0]
    return size if isinstance(size, int) and size > 0 else DEFAULT_IMAGE


def _transformers_batch(class_name: str, config: Any, request: StepRequest, batch: int) -> Any:
    import torch
    import transformers

    cls = getattr(transformers, class_name)
    main_input = getattr(cls, "main_input_name", "input_ids")
    out: dict[str, Any] = {}
    if main_input == "pixel_values":
        side = image_side(config, request)
        channels = getattr(config, "num_channels", 3)
        out["pixel_values"] = torch.randn(batch, channels, side, side)
    elif main_input == "input_ids":
        seq = seq_len(config, request)
        vocab = int(getattr(config, "vocab_size", None) or 1000)
        out["input_ids"] = torch.randint(0, vocab, (batch, seq))
    else:
        raise EstimateError(f"{class_name} takes {main_input}: no example batch is known "
                            f"for it; use a module:function that returns one")
    if request.train:
        labels = _labels(class_name, config, out, batch)
        if labels is not None:
            out["labels"] = labels
    if getattr(config, "is_encoder_decoder", False) and "input_ids" in out:
        # the decoder's own tokens (training passes them as a label-shifting head would)
        out["decoder_input_ids"] = torch.zeros_like(out["input_ids"])
    return out


def _labels(class_name: str, config: Any, inputs: dict[str, Any], batch: int) -> Any:
    import torch

    if class_name.endswith(_TOKEN_LABELS) and "input_ids" in inputs:
        ids = inputs["input_ids"]
        num_labels = getattr(config, "num_labels", 2)
        high = num_labels if class_name.endswith("ForTokenClassification") else \
            int(getattr(config, "vocab_size", None) or 1000)
        return torch.randint(0, high, tuple(ids.shape))
    if class_name.endswith(_CLASS_LABELS):
        return torch.randint(0, getattr(config, "num_labels", 2), (batch,))
    return None


def _diffusers_batch(class_name: str, config: dict[str, Any], request: StepRequest,
                     batch: int) -> Any:
    import torch

    channels = int(config.get("in_channels", 4))
    size = config.get("sample_size") or 64
    if isinstance(size, list | tuple):
        size = size[0]
    if class_name == "UNet2DConditionModel":
        side = (request.image or int(size) * VAE_SCALE) // VAE_SCALE
        context = config.get("cross_attention_dim") or 768
        if isinstance(context, list | tuple):
            context = context[0]
        out: dict[str, Any] = {
            "sample": torch.randn(batch, channels, side, side),
            "timestep": torch.randint(0, 1000, (batch,)),
            "encoder_hidden_states": torch.randn(batch, TEXT_TOKENS, int(context)),
        }
        if config.get("addition_embed_type") == "text_time":
            time_ids = 6 * int(config.get("addition_time_embed_dim") or 256)
            text = int(config.get("projection_class_embeddings_input_dim") or time_ids) - time_ids
            out["added_cond_kwargs"] = {"text_embeds": torch.randn(batch, text),
                                        "time_ids": torch.randn(batch, 6)}
        return out
    if class_name == "UNet2DModel":
        side = request.image or int(size)
        return {"sample": torch.randn(batch, channels, side, side),
                "timestep": torch.randint(0, 1000, (batch,))}
    raise EstimateError(f"no example batch is known for diffusers' {class_name}; "
                        f"use a module:function that returns one")
