"""Forwards after an unload under global modes the reload runs inside:
``with torch.device("cpu")``, ``torch.use_deterministic_algorithms(True)``,
``torch.set_default_dtype(torch.float64)``, and inside ``torch.func.grad`` /
``torch.vmap`` through ``functional_call``.
"""

import torch
import zoo
from torch.func import functional_call, grad, vmap


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    x = zoo.inputs(4, 16)
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("plain", model(x))

    ctx.step("before a device context", unload=["MLP"], expect="unloaded")
    with torch.device("cpu"):
        with torch.no_grad():
            ctx.record("inside torch.device('cpu')", model(x))
        ctx.record("a factory inside it", torch.ones(2))

    ctx.step("before deterministic mode", unload=["MLP"], expect="unloaded")
    torch.use_deterministic_algorithms(True)
    try:
        with torch.no_grad():
            ctx.record("deterministic", model(x))
        ctx.record("a factory in deterministic mode", torch.empty(3).isnan())
    finally:
        torch.use_deterministic_algorithms(False)

    ctx.step("before a float64 default dtype", unload=["MLP"], expect="unloaded")
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            ctx.record("float64 default dtype", model(x))
        ctx.record("parameters under a float64 default", dict(model.named_parameters()))
        ctx.record("a factory under it", torch.tensor([1.5]))
    finally:
        torch.set_default_dtype(torch.float32)

    buffers = dict(model.named_buffers())

    def loss(p: dict, inp: torch.Tensor) -> torch.Tensor:
        return functional_call(model, (p, buffers), (inp,)).pow(2).mean()

    ctx.step("before torch.func.grad", unload=["MLP"], expect="unloaded")
    params = {k: v.detach() for k, v in model.named_parameters()}
    ctx.record("grad", grad(loss)(params, x))

    ctx.step("before torch.vmap", unload=["MLP"], expect="unloaded")
    params = {k: v.detach() for k, v in model.named_parameters()}
    ctx.record("vmap", vmap(lambda s: functional_call(model, (params, buffers),
                                                      (s.unsqueeze(0),)).squeeze(0))(x))
    ctx.record("vmap of grad", vmap(grad(loss), in_dims=(None, 0))(params, x.unsqueeze(1)))
    with torch.no_grad():
        ctx.record("plain at the end", model(x))
