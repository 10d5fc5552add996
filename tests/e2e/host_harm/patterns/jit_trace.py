"""``torch.jit.trace(model, x)``: the traced module, its code, a save/load round trip.

The tracer runs the model's forward (with whatever hooks it carries) and
checks the trace by running it again.  The model is unloaded before
tracing; afterwards the agent refuses to move it (the traced module holds
its weights).
"""

import io

import torch
import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before tracing", unload=["MLP"], expect="unloaded")
    traced = torch.jit.trace(model, x)
    ctx.record("code", traced.code)
    with torch.no_grad():
        ctx.record("traced", traced(x))
        ctx.record("traced, other input", traced(x + 1))

    ctx.step("after traced calls", unload=["MLP"], expect="refused")
    with torch.no_grad():
        ctx.record("traced after the pause", traced(x))
        ctx.record("eager after the pause", model(x))
    buffer = io.BytesIO()
    torch.jit.save(traced, buffer)
    buffer.seek(0)
    with torch.no_grad():
        ctx.record("saved and loaded", torch.jit.load(buffer)(x))
