"""Module conversions: ``.to(torch.float64)``, ``.half()``, ``.to("cpu")``,
``.float()``, on the resident model and right after it was unloaded.

A conversion replaces every parameter's data; the model must then compute in
the new dtype, and a later reload must never bring the old dtype back.
"""

import torch
import zoo

CONVERSIONS = (
    ("to float64", lambda m: m.to(torch.float64), torch.float64),
    ("half", lambda m: m.half(), torch.float16),
    ("to cpu", lambda m: m.to("cpu"), torch.float16),
    ("float", lambda m: m.float(), torch.float32),
)


def convert(ctx, tag: str, model: torch.nn.Module, x: torch.Tensor) -> None:
    for name, fn, dtype in CONVERSIONS:
        if tag == "offloaded":
            ctx.step(f"before offloaded {name}", unload=["MLP"], expect="unloaded")
        ctx.record(f"{tag} {name}: returns the model", fn(model) is model)
        ctx.record(f"{tag} {name}: parameters", dict(model.named_parameters()))
        ctx.record(f"{tag} {name}: buffers", dict(model.named_buffers()))
        with torch.no_grad():
            ctx.record(f"{tag} {name}: forward", model(x.to(dtype)))


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    x = zoo.inputs(4, 16)
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("float32", model(x))
    convert(ctx, "resident", model, x)
    convert(ctx, "offloaded", model, x)
    ctx.step("idle", unload=["MLP"], expect="unloaded")
    with torch.no_grad():
        ctx.record("float32 at the end", model(x))
