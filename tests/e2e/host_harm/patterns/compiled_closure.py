"""``torch.compile`` of a function that closes over a model (invisible to the agent).

The model is the root; it is unloaded before the first compiled call (compiling brings it
back) and refused after compiled calls, and the compiled function must keep computing with the
model's true weights.
"""

import torch
import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    f = torch.compile(lambda inp: model(inp) * 2)
    ctx.step("before the first compiled call", unload=["MLP"], expect="unloaded")
    with torch.no_grad():
        ctx.record("compiled", f(x))
        ctx.record("compiled, other input", f(x + 1))

    ctx.step("after compiled calls", unload=["MLP"], expect="refused")
    with torch.no_grad():
        ctx.record("compiled after the pause", f(x))
        ctx.record("eager after the pause", model(x))
    ctx.record("compiled with grad", f(x))
