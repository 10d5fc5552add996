"""``model.compile()``: the module compiles its own forward in place.

The model stays the root the agent sees (no wrapper), so it may be unloaded
before compiling and after compiled calls.
"""

import torch

import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before compiling", unload=["MLP"], expect="unloaded")
    model.compile()
    with torch.no_grad():
        ctx.record("compiled", model(x))
        ctx.record("compiled, other input", model(x + 1))
    out = model(x)
    out.pow(2).sum().backward()
    ctx.record("compiled with grad", out)
    ctx.record("grads", {n: p.grad for n, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)

    ctx.step("after compiled calls", unload=["MLP"], expect="refused")
    with torch.no_grad():
        ctx.record("compiled after the pause", model(x))
        ctx.record("a submodule directly", model.fc1(x))
