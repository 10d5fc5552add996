"""Forwards under inference_mode / no_grad / enable_grad, then training steps.

The model is unloaded before an ``inference_mode`` forward, which reloads it
inside inference mode; the training that follows must see ordinary (not
inference) parameters, and the optimizer (momentum) must keep working
across later unloads.
"""

import torch
import zoo


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               target: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    return loss


def run(ctx) -> None:
    model = zoo.mlp()
    x = zoo.inputs(4, 16)
    target = zoo.inputs(4, 8, seed=2)
    ctx.step("loaded")

    with torch.inference_mode():
        ctx.record("inference_mode", model(x))
    with torch.no_grad():
        ctx.record("no_grad", model(x))
    with torch.enable_grad():
        ctx.record("enable_grad", model(x))

    # the enable_grad forward built a graph that could still be backwarded:
    # training evidence, so only a forced unload goes through
    ctx.step("idle before inference", unload=["MLP"], expect="refused")
    ctx.step("idle before inference, forced", unload=["MLP"], expect="unloaded", force=True)
    with torch.inference_mode():
        ctx.record("inference_mode after unload", model(x))
    ctx.record("parameters after a reload in inference_mode", dict(model.named_parameters()))
    ctx.record("buffers after a reload in inference_mode", dict(model.named_buffers()))

    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ctx.expect_error("first training step", lambda: train_step(model, opt, x, target))
    ctx.record("grads", {n: p.grad for n, p in model.named_parameters()})
    ctx.record("weights after step 1", dict(model.named_parameters()))

    ctx.step("training", unload=["MLP"], expect="refused")
    ctx.expect_error("second training step", lambda: train_step(model, opt, x, target))
    ctx.record("weights after step 2", dict(model.named_parameters()))

    model.eval()
    opt.zero_grad(set_to_none=True)
    ctx.step("evaluation", unload=["MLP"], expect="refused")  # its optimizer stepped
    with torch.no_grad():
        ctx.record("eval forward", model(x))
    model.train()
    ctx.expect_error("third training step", lambda: train_step(model, opt, x, target))
    ctx.record("weights after step 3", dict(model.named_parameters()))
    ctx.record("momentum buffers", [opt.state[p].get("momentum_buffer")
                                    for p in model.parameters()])
