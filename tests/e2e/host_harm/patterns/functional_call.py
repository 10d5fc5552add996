"""``torch.func.functional_call`` with a detached parameter dict, plain, inside
``torch.func.grad`` and inside ``torch.vmap``.

The dict is taken while the model is resident and used again after the model
was unloaded (the call then reloads it while its parameters are swapped for
the dict's tensors); a dict taken after the pause must work the same.
"""

import torch
import zoo
from torch.func import functional_call, grad, vmap


def all_three(ctx, tag: str, model: torch.nn.Module, params: dict, buffers: dict,
              x: torch.Tensor) -> None:
    ctx.record(f"{tag}: functional_call", functional_call(model, (params, buffers), (x,)))

    def loss(p: dict, inp: torch.Tensor) -> torch.Tensor:
        return functional_call(model, (p, buffers), (inp,)).pow(2).mean()

    ctx.record(f"{tag}: grad", grad(loss)(params, x))

    def one(sample: torch.Tensor) -> torch.Tensor:
        return functional_call(model, (params, buffers), (sample.unsqueeze(0),)).squeeze(0)

    ctx.record(f"{tag}: vmap", vmap(one)(x))


def run(ctx) -> None:
    model = zoo.mlp()
    x = zoo.inputs(4, 16)
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("eager", model(x))
    all_three(ctx, "resident", model, params, buffers, x)

    # gradients were taken through the model (torch.func.grad): training
    # evidence, so only a forced unload goes through
    ctx.step("idle", unload=["MLP"], expect="refused")
    ctx.step("idle, forced", unload=["MLP"], expect="unloaded", force=True)
    all_three(ctx, "after the pause", model, params, buffers, x)
    ctx.record("the dict afterwards", params)
    ctx.record("the model's parameters afterwards", dict(model.named_parameters()))

    ctx.step("idle again", unload=["MLP"], expect="unloaded", force=True)
    fresh = {k: v.detach() for k, v in model.named_parameters()}
    all_three(ctx, "dict taken after the pause", model, fresh,
              dict(model.named_buffers()), x)
    with torch.no_grad():
        ctx.record("eager at the end", model(x))
