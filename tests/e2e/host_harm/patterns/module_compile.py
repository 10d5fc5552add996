"""``model.compile()``: the module compiles its own forward in place.

The model stays the root the agent sees (no wrapper), so it may be unloaded
before compiling and after compiled calls.
"""

import zoo


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before compiling", unload=["MLP"], expect="unloaded")
    model.compile()
    zoo.use_compiled(ctx, model, model, x)
