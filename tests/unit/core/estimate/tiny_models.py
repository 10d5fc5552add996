"""Small real model configs saved as a user's folders: the five models of the
estimate's accuracy table, and a BERT, each small enough to step in a second."""

from __future__ import annotations

from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
diffusers = pytest.importorskip("diffusers")

UNET = dict(block_out_channels=(32, 64), layers_per_block=1, sample_size=16, in_channels=4,
            out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
            norm_num_groups=32)


def hf_configs() -> dict:
    T = transformers
    return {
        "gpt2": T.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256,
                             architectures=["GPT2LMHeadModel"]),
        "llama": T.LlamaConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=344,
                               num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                               max_position_embeddings=512, architectures=["LlamaForCausalLM"]),
        "resnet": T.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                 layer_type="basic", num_labels=10,
                                 architectures=["ResNetForImageClassification"]),
        "vit": T.ViTConfig(image_size=32, patch_size=4, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128, num_labels=10,
                           architectures=["ViTForImageClassification"]),
        "bert": T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=128, vocab_size=1000, max_position_embeddings=128,
                             architectures=["BertForMaskedLM"]),
        "bert-cls": T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=128, vocab_size=1000,
                                 architectures=["BertForSequenceClassification"]),
        "bert-base": T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=1000,
                                  architectures=["BertModel"]),
        "t5": T.T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16,
                         vocab_size=1000, architectures=["T5ForConditionalGeneration"]),
    }


def save_all(root: Path) -> dict[str, str]:
    """Every model's folder under ``root``, by name."""
    out = {}
    for name, config in hf_configs().items():
        folder = root / name
        config.save_pretrained(folder)
        out[name] = str(folder)
    unet = root / "unet"
    diffusers.UNet2DConditionModel.from_config(UNET).save_config(unet)
    out["unet"] = str(unet)
    return out


def real_model(folder: str):
    """The model a folder names, built for real (to count what the estimate should see)."""
    from app.core.estimate.model_source import resolve

    source = resolve(folder)
    if source.origin == "diffusers":
        return getattr(diffusers, source.class_name).from_config(source.config)
    return getattr(transformers, source.class_name)._from_config(source.config)


def param_bytes(model, trainable_only: bool = False) -> int:
    params = {id(p): p for p in model.parameters()}.values()
    return sum(p.numel() * p.element_size() for p in params
               if p.requires_grad or not trainable_only)


def buffer_bytes(model) -> int:
    return sum(b.numel() * b.element_size() for b in model.buffers())
