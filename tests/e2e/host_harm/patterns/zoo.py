"""The small model and inputs several patterns share (registered as ``zoo``).

``MLP`` is the kind of module users write themselves: parameters, a buffer,
a norm layer and a non-linearity, nothing clever.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn


def seed_all(seed: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class MLP(nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.norm = nn.LayerNorm(d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.norm(self.fc1(x)))) * self.scale


def mlp(seed: int = 0, frozen: bool = False) -> MLP:
    """A seeded MLP in eval mode; ``frozen``: no parameter requires grad."""
    seed_all(seed)
    model = MLP().eval()
    if frozen:
        model.requires_grad_(False)
    return model


def inputs(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def loaded_mlp(ctx) -> tuple[MLP, torch.Tensor]:
    """The common start of a pattern: a seeded eval-mode MLP and its input,
    a first pause ("loaded"), and the eager output recorded as "eager"."""
    model = mlp()
    x = inputs(4, 16)
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("eager", model(x))
    return model, x


def use_compiled(ctx, model: MLP, compiled, x: torch.Tensor) -> None:
    """What the compile patterns do with their compiled callable: no-grad and
    grad calls (each compiles for its own mode), a backward, then a pause
    after which the agent must refuse to move the weights."""
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
        ctx.record("a submodule directly", model.fc1(x))
