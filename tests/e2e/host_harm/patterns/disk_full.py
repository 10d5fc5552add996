"""Unloads to a disk without room: each run's cache folder (where a CPU
model's weights go when unloaded) is a 20 MiB tmpfs.

A 32 MiB model (sixteen tensors) does not fit: its unload must be refused
with a reason before anything is written, and the process go on with the
model as it was.  A small model then fits and is unloaded and reloaded on
the same filesystem, and the process ends with it unloaded; the harness
checks that nothing is left in the offload folder afterwards.
"""

import shutil

import torch
import zoo
from torch import nn

CACHE_TMPFS_MIB = 20


class Tower(nn.Module):
    """Eight 1024x1024 layers: 32 MiB of float32 weights and 32 KiB of biases."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def free_mib(path) -> float:
    return shutil.disk_usage(path).free / (1 << 20)


def run(ctx) -> None:
    zoo.seed_all(0)
    tower = Tower().eval().requires_grad_(False)
    small = zoo.mlp(frozen=True)
    x, y = zoo.inputs(2, 1024), zoo.inputs(4, 16)
    cache = ctx.workdir.parent / "cache"
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("tower", tower(x))
    ctx.step("the disk is too small", unload=["Tower"], expect="refused")
    ctx.record("free MiB after the refusal", free_mib(cache))
    with torch.no_grad():
        ctx.record("tower after the refusal", tower(x))
    ctx.record("tower's weights", tower.state_dict())

    ctx.step("a small model fits", unload=["MLP"], reload=True, expect="unloaded")
    with torch.no_grad():
        ctx.record("small model after its reload", small(y))
    ctx.step("ends unloaded", unload=["MLP"], expect="unloaded")
    with torch.no_grad():
        ctx.record("tower at the end", tower(x))
