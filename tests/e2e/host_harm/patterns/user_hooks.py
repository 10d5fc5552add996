"""The user's own hooks: a forward pre-hook that rescales the input, a forward
hook that changes the output, a full backward hook, and a hook on a submodule.

The model (eval mode, parameters requiring grad, as a saliency computation
leaves it) is unloaded before a ``no_grad`` call and before a call with
backward; every hook must still run, once, in order, with the same values.
"""

import torch
import zoo


def run(ctx) -> None:
    model = zoo.mlp()
    x = zoo.inputs(4, 16)
    calls: list[str] = []
    seen: list = []

    def pre(module, args):
        calls.append("pre")
        return (args[0] * 0.5,)

    def post(module, args, output):
        calls.append("post")
        return output + 1.0

    def backward(module, grad_input, grad_output):
        calls.append("backward")
        seen.append((grad_input, grad_output))

    def sub(module, args, output):
        calls.append("fc1")
        return output.clamp(min=-1.0)

    handles = [model.register_forward_pre_hook(pre), model.register_forward_hook(post),
               model.register_full_backward_hook(backward),
               model.fc1.register_forward_hook(sub)]
    ctx.step("loaded")

    inp = x.clone().requires_grad_()
    out = model(inp)
    out.sum().backward()
    ctx.record("with hooks", out)
    ctx.record("input grad", inp.grad)
    ctx.record("parameter grads", {n: p.grad for n, p in model.named_parameters()})
    ctx.record("backward hook saw", seen)
    model.zero_grad(set_to_none=True)

    # a backward went through the model: training evidence, so only a forced
    # unload goes through
    ctx.step("idle before no_grad", unload=["MLP"], expect="refused")
    ctx.step("idle before no_grad, forced", unload=["MLP"], expect="unloaded", force=True)
    with torch.no_grad():
        ctx.record("no_grad after the pause", model(x))
    ctx.record("calls so far", list(calls))

    ctx.step("idle before backward", unload=["MLP"], expect="unloaded", force=True)
    inp = x.clone().requires_grad_()
    out = model(inp)
    out.sum().backward()
    ctx.record("with hooks after the pause", out)
    ctx.record("input grad after the pause", inp.grad)
    ctx.record("parameter grads after the pause", {n: p.grad for n, p in model.named_parameters()})
    ctx.record("backward hook saw, all", seen)
    model.zero_grad(set_to_none=True)

    for handle in handles:
        handle.remove()
    ctx.step("hooks removed", unload=["MLP"], expect="unloaded", force=True)
    with torch.no_grad():
        ctx.record("without hooks", model(x))
    ctx.record("calls", calls)
