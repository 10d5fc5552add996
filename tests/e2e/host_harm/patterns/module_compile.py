"""``model.compile()``: the module compiles its own forward in place.

The model is unloaded before compiling; after compiled calls the agent
refuses to move it (the compiled code holds its weights).
"""

import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before compiling", unload=["MLP"], expect="unloaded")
    model.compile()
    zoo.use_compiled(ctx, model, model, x)
