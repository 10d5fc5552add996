"""``torch.compile(model, fullgraph=True)``: one graph (a graph break is an error).

The model may be unloaded right before it is compiled, and after compiled
calls (it is still the model the user built, wrapped by an
``OptimizedModule``); grad and no-grad calls compile for their own mode.
"""

import torch

import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before compiling", unload=["MLP"], expect="unloaded")
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        ctx.record("compiled", compiled(x))
        ctx.record("compiled, other input", compiled(x + 1))
    out = compiled(x)
    out.pow(2).sum().backward()
    ctx.record("compiled with grad", out)
    ctx.record("grads", {n: p.grad for n, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)

    ctx.step("after compiled calls", unload=["MLP"], expect="refused")
    with torch.no_grad():
        ctx.record("compiled after the pause", compiled(x))
        ctx.record("eager after the pause", model(x))
