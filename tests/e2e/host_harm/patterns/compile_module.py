"""``torch.compile(model)`` (default backend, inductor), then used like the eager model.

The model is unloaded right before it is compiled (compiling brings it
back); after compiled calls the agent refuses to move it (the compiled code
holds its weights).  It stays the model the user built, wrapped by an
``OptimizedModule``; grad and no-grad calls compile for their own mode.
"""

import torch
import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before compiling", unload=["MLP"], expect="unloaded")
    compiled = torch.compile(model)
    zoo.use_compiled(ctx, model, compiled, x)
