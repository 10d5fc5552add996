"""CPU autocast to bfloat16 around forwards of a frozen eval model.

The model is unloaded between two autocast forwards, so the reload happens
inside the autocast region: the weights must come back as they were
(float32), and the autocast outputs must be the same.
"""

import torch
import zoo


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    x = zoo.inputs(4, 16)
    ctx.step("loaded")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ctx.record("autocast", model(x))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ctx.record("autocast, no_grad", model(x))

    ctx.step("idle", unload=["MLP"], expect="unloaded")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ctx.record("autocast after the pause", model(x))
    ctx.record("parameters", dict(model.named_parameters()))

    ctx.step("idle again", unload=["MLP"], expect="unloaded")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ctx.record("autocast, no_grad, after the pause", model(x))
    with torch.no_grad():
        ctx.record("float32", model(x))
