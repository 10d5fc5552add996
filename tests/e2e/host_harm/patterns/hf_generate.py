"""Greedy ``generate()`` with tiny Hugging Face causal LMs (GPT-2 and Llama).

Each model is built from a tiny config, saved with ``save_pretrained`` and
loaded back with ``from_pretrained`` as a user loads a checkpoint, then put
in eval mode (its parameters keep ``requires_grad=True``, as transformers
leaves them).  Generation runs under ``no_grad`` and ``inference_mode``, with
the model unloaded between generate calls (reloaded by its next call, or by
hand).
"""

from pathlib import Path

import torch
import zoo
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

REQUIRES = ("transformers",)
VOCAB = 96


def tiny_checkpoints(workdir: Path) -> dict[str, tuple[type, Path]]:
    zoo.seed_all(0)
    gpt2 = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                      bos_token_id=1, eos_token_id=2)
    llama = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    out = {}
    for cls, config in ((GPT2LMHeadModel, gpt2), (LlamaForCausalLM, llama)):
        path = workdir / cls.__name__
        cls(config).save_pretrained(path)
        out[cls.__name__] = (cls, path)
    return out


def generate(model, ids: torch.Tensor, **extra):
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                          do_sample=False, pad_token_id=0, **extra)


def run(ctx) -> None:
    ids = torch.tensor([[1, 17, 42, 8, 33], [1, 5, 9, 61, 70]])
    for name, (cls, path) in tiny_checkpoints(ctx.workdir).items():
        model = cls.from_pretrained(path).eval()
        ctx.step(f"{name} loaded")
        with torch.no_grad():
            ctx.record(f"{name} logits", model(ids).logits)
            ctx.record(f"{name} generate, no_grad", generate(model, ids))

        ctx.step(f"{name} idle", unload=[name], expect="unloaded")
        with torch.inference_mode():
            ctx.record(f"{name} generate, inference_mode",
                       generate(model, ids, return_dict_in_generate=True, output_scores=True))

        ctx.step(f"{name} idle again", unload=[name], reload=True, expect="unloaded")
        with torch.no_grad():
            ctx.record(f"{name} generate after the pause", generate(model, ids))
        ctx.record(f"{name} parameters", dict(model.named_parameters()))
        ctx.record(f"{name} logits with grad", model(ids).logits)
        del model
