"""``torch.export.export(model, (x,))``, the exported program's module, then eager again.

The graph the exporter produced is recorded too: nothing of the agent may
end up in it.  The model is unloaded before exporting; afterwards the agent refuses to
move it (the exported program holds its weights).
"""

import torch
import zoo


def graph_nodes(ep: torch.export.ExportedProgram) -> list[str]:
    return [f"{n.op}:{n.target}" for n in ep.graph.nodes]


def run(ctx) -> None:
    model, x = zoo.loaded_mlp(ctx)

    ctx.step("before exporting", unload=["MLP"], expect="unloaded")
    ep = torch.export.export(model, (x,))
    ctx.record("graph", graph_nodes(ep))
    ctx.record("exported state", dict(ep.state_dict))
    exported = ep.module()
    ctx.record("exported module", exported(x))
    ctx.record("exported module, other input", exported(x + 1))

    ctx.step("after exporting", unload=["MLP"], expect="refused")
    ctx.record("exported module after the pause", exported(x))
    with torch.no_grad():
        ctx.record("eager after the pause", model(x))
    ctx.record("eager with grad", model(x))
