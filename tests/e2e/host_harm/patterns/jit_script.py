"""``torch.jit.script(model)``: the scripted module, its code, a save/load round trip.

Scripting compiles the module's hooks too, so anything the agent adds to the
module must stay out of TorchScript's way.  The model is unloaded before
scripting; afterwards the agent refuses to move it (the script module
holds its weights).
"""

import io

import torch
import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before scripting", unload=["MLP"], expect="unloaded")
    scripted = torch.jit.script(model)
    ctx.record("code", scripted.code)
    with torch.no_grad():
        ctx.record("scripted", scripted(x))
    ctx.record("scripted with grad", scripted(x))

    ctx.step("after scripted calls", unload=["MLP"], expect="refused")
    with torch.no_grad():
        ctx.record("scripted after the pause", scripted(x))
        ctx.record("eager after the pause", model(x))
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    with torch.no_grad():
        ctx.record("saved and loaded", loaded(x))
    ctx.expect_error("script again", lambda: torch.jit.script(model)(x))
