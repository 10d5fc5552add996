"""The models of the accuracy table, as the config folders a user would name
with ``--model``: large enough that activations weigh, small enough to run
for real on a 2-core CPU.

The estimate and the real measurement both build from the folder with
``app.core.estimate.model_source.build`` (fake tensors for one, real ones for
the other), so both size the same model, batch and step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BATCH = 8
SEQ = 256
IMAGE = 128
LATENT_IMAGE = 256  # pixels: a 32 x 32 latent
VOCAB = 8192  # the logits stay one activation among others


def gpt2_config() -> Any:
    from transformers import GPT2Config

    return GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=SEQ, vocab_size=VOCAB,
                      bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                      architectures=["GPT2LMHeadModel"])


def llama_config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(num_hidden_layers=4, hidden_size=256, intermediate_size=688,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                       max_position_embeddings=SEQ, architectures=["LlamaForCausalLM"])


def resnet_config() -> Any:
    from transformers import ResNetConfig

    return ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 2, 1],
                        layer_type="basic", num_labels=100,
                        architectures=["ResNetForImageClassification"])


def vit_config() -> Any:
    from transformers import ViTConfig

    return ViTConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, image_size=IMAGE, patch_size=8, num_labels=100,
                     architectures=["ViTForImageClassification"])


def write_unet(folder: Path) -> None:
    """A diffusers component folder: ``config.json`` naming its ``_class_name``."""
    config = dict(_class_name="UNet2DConditionModel", sample_size=LATENT_IMAGE // 8, in_channels=4, out_channels=4,
                  layers_per_block=1, block_out_channels=(64, 128), cross_attention_dim=128,
                  attention_head_dim=8, norm_num_groups=32,
                  down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


#: name -> (what to write, tokens per sample or None, image side or None), the table's order
MODELS: dict[str, tuple[Any, int | None, int | None]] = {
    "gpt2": (gpt2_config, SEQ, None),
    "llama": (llama_config, SEQ, None),
    "resnet": (resnet_config, None, IMAGE),
    "vit": (vit_config, None, IMAGE),
    "unet": (write_unet, None, LATENT_IMAGE),
}


def write(name: str, root: Path) -> Path:
    """The config folder of ``name`` under ``root``."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    make = MODELS[name][0]
    if make is write_unet:
        write_unet(folder)
    else:
        make().save_pretrained(folder)
    return folder
