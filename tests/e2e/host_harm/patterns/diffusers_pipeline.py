"""Tiny real diffusers pipelines: ``DDPMPipeline`` and ``StableDiffusionPipeline``.

Every component is built from a tiny config (the CLIP tokenizer from a small
vocab and merges file written to the work dir), saved with
``save_pretrained`` and loaded back with ``from_pretrained``, as a user loads
a checkpoint.  Pipelines run with a fixed generator and two inference steps;
the UNets (and the text encoder) are unloaded between calls, and the VAE is
used through a method (``vae.decode``) right after being unloaded.
"""

import json
from pathlib import Path

import torch
import zoo
from diffusers import (
    AutoencoderKL,
    DDIMScheduler,
    DDPMPipeline,
    DDPMScheduler,
    StableDiffusionPipeline,
    UNet2DConditionModel,
    UNet2DModel,
)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

REQUIRES = ("diffusers", "transformers")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def save_ddpm(path: Path) -> None:
    zoo.seed_all(0)
    unet = UNet2DModel(sample_size=8, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(8, 16), norm_num_groups=4, attention_head_dim=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=50)).save_pretrained(path)


def tiny_tokenizer(workdir: Path) -> CLIPTokenizer:
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, "!": 2}
    for suffix in ("", "</w>"):
        for c in LETTERS:
            vocab[c + suffix] = len(vocab)
    vocab["at</w>"] = len(vocab)
    vocab["cat</w>"] = len(vocab)
    (workdir / "vocab.json").write_text(json.dumps(vocab))
    (workdir / "merges.txt").write_text("#version: 0.2\na t</w>\nc at</w>\n")
    return CLIPTokenizer(str(workdir / "vocab.json"), str(workdir / "merges.txt"),
                         model_max_length=16)


def save_stable_diffusion(path: Path, workdir: Path) -> None:
    zoo.seed_all(0)
    tokenizer = tiny_tokenizer(workdir)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, vocab_size=len(tokenizer),
        hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=2,
        max_position_embeddings=16, projection_dim=16))
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(8, 16), norm_num_groups=4, attention_head_dim=4,
        cross_attention_dim=16, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"))
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                        block_out_channels=(8, 16), norm_num_groups=4, sample_size=16,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2)
    StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
        scheduler=DDIMScheduler(num_train_timesteps=50), safety_checker=None,
        feature_extractor=None, requires_safety_checker=False).save_pretrained(path)


def ddpm(ctx) -> None:
    save_ddpm(ctx.workdir / "ddpm")
    pipe = DDPMPipeline.from_pretrained(ctx.workdir / "ddpm")
    pipe.set_progress_bar_config(disable=True)

    def call():
        return pipe(generator=torch.Generator().manual_seed(0), num_inference_steps=2,
                    output_type="np")

    ctx.step("ddpm loaded")
    ctx.record("ddpm", call())
    ctx.step("ddpm idle", unload=["UNet2DModel"], expect="unloaded")
    ctx.record("ddpm after the pause", call())
    ctx.record("ddpm unet parameters", dict(pipe.unet.named_parameters()))


def stable_diffusion(ctx) -> None:
    save_stable_diffusion(ctx.workdir / "sd", ctx.workdir)
    pipe = StableDiffusionPipeline.from_pretrained(ctx.workdir / "sd")
    pipe.set_progress_bar_config(disable=True)

    def call(prompt: str, **extra):
        return pipe(prompt, generator=torch.Generator().manual_seed(0), num_inference_steps=2,
                    height=16, width=16, guidance_scale=2.0, **extra)

    ctx.step("sd loaded")
    ctx.record("sd", call("a cat", output_type="pt"))
    ctx.step("sd idle", unload=["UNet2DConditionModel", "CLIPTextModel"], expect="unloaded")
    ctx.record("sd after the pause", call("a cat", output_type="pt"))
    latents = call("a cat sat", output_type="latent").images
    ctx.record("sd latents", latents)

    ctx.step("sd before decoding", unload=["AutoencoderKL"], expect="unloaded")
    with torch.no_grad():
        decoded = pipe.vae.decode(latents / pipe.vae.config.scaling_factor, return_dict=False)
    ctx.record("vae.decode after the pause", decoded)
    ctx.step("sd idle again", unload=["UNet2DConditionModel"], expect="unloaded")
    ctx.record("sd at the end", call("a cat", output_type="np"))


def run(ctx) -> None:
    ddpm(ctx)
    stable_diffusion(ctx)
