"""LoRA with peft, then ``merge_and_unload()``: a tiny GPT-2 built from a
config, two AdamW steps on its adapters, the merged model used and unloaded.

While it trains, the PeftModel refuses an unload (train mode).  The model
``merge_and_unload()`` returns is the one peft wrapped, an ordinary model
again once the wrapper is gone: unloaded between generate calls, brought
back by its next call or by hand, computing exactly what it did.
"""

import gc

import torch
import zoo
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

REQUIRES = ("transformers", "peft")


def generate(model, ids: torch.Tensor) -> torch.Tensor:
    return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                          do_sample=False, pad_token_id=0)


def run(ctx) -> None:
    zoo.seed_all(0)
    config = GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=1, eos_token_id=2)
    base = GPT2LMHeadModel(config)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["c_attn"],
                      task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    ids = torch.tensor([[1, 17, 42, 8, 33], [1, 5, 9, 61, 70]])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ctx.step("loaded")

    model.train()
    for step in range(2):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        ctx.record(f"loss {step}", loss)
    ctx.step("training", unload=["PeftModelForCausalLM"], expect="refused")
    ctx.record("adapters", {n: p for n, p in model.named_parameters() if "lora_" in n})

    merged = model.merge_and_unload()
    ctx.record("merged is the model peft wrapped", merged is base)
    del model, opt, loss
    gc.collect()
    merged.eval()
    with torch.no_grad():
        ctx.record("merged logits", merged(ids).logits)
        ctx.record("merged generate", generate(merged, ids))

    ctx.step("merged idle", unload=["GPT2LMHeadModel"], expect="unloaded")
    with torch.no_grad():
        ctx.record("generate after the pause", generate(merged, ids))

    ctx.step("merged idle again", unload=["GPT2LMHeadModel"], reload=True, expect="unloaded")
    with torch.inference_mode():
        ctx.record("generate after a reload", generate(merged, ids))
    ctx.record("merged parameters", dict(merged.named_parameters()))
    ctx.record("merged logits with grad", merged(ids).logits)
