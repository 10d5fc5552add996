"""A ``DataLoader`` with two worker processes (fork, Linux's default) feeding a
frozen eval model; the model is unloaded between epochs, so workers fork from
a process whose model is offloaded.
"""

import torch
import zoo
from torch.utils.data import DataLoader, Dataset


class Waves(Dataset):
    """Deterministic samples computed in the worker (torch ops in the forked child)."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, i: int) -> torch.Tensor:
        t = torch.arange(16, dtype=torch.float32)
        return torch.sin(t * (i + 1) / 7.0) + torch.randn(16) * 0.01  # worker's seeded RNG


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    loader = DataLoader(Waves(), batch_size=6, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(0))
    ctx.step("loaded")
    for epoch in range(3):
        outputs = []
        with torch.no_grad():
            for batch in loader:
                outputs.append((batch, model(batch)))
        ctx.record(f"epoch {epoch}", outputs)
        ctx.step(f"after epoch {epoch}", unload=["MLP"], expect="unloaded")
    ctx.record("parameters", dict(model.named_parameters()))
