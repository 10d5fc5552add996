"""Copies and files of a model: ``state_dict``, ``load_state_dict`` (from it and
into it), ``copy.deepcopy``, ``pickle``, ``torch.save`` / ``torch.load`` of the
whole model and of its state dict.

Each case runs on the resident model, then again right after the model was
unloaded; the copies must hold the true weights and work without the agent's
help, and the model itself must work afterwards.
"""

import copy
import io
import pickle

import torch
import zoo


def check(ctx, tag: str, model: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        ctx.record(f"{tag}: forward", model(x))
    ctx.record(f"{tag}: parameters", dict(model.named_parameters()))


def case_state_dict(ctx, tag, model, x, workdir):
    sd = model.state_dict()
    ctx.record(f"{tag}: state_dict", sd)
    fresh = zoo.MLP().eval()
    ctx.record(f"{tag}: load into a fresh model", fresh.load_state_dict(sd))
    check(ctx, f"{tag}: fresh model", fresh, x)


def case_load_into(ctx, tag, model, x, workdir):
    zoo.seed_all(7)
    other = zoo.MLP().state_dict()
    ctx.record(f"{tag}: load other weights into the model", model.load_state_dict(other))
    check(ctx, f"{tag}: model with other weights", model, x)
    zoo.seed_all(0)
    ctx.record(f"{tag}: load its own weights back", model.load_state_dict(zoo.MLP().state_dict()))


def case_deepcopy(ctx, tag, model, x, workdir):
    check(ctx, f"{tag}: deepcopy", copy.deepcopy(model), x)


def case_pickle(ctx, tag, model, x, workdir):
    check(ctx, f"{tag}: pickle", pickle.loads(pickle.dumps(model)), x)


def case_save_model(ctx, tag, model, x, workdir):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    check(ctx, f"{tag}: torch.save(model)", torch.load(buffer, weights_only=False), x)


def case_save_state_dict(ctx, tag, model, x, workdir):
    path = workdir / f"{tag}.pt"
    torch.save(model.state_dict(), path)
    sd = torch.load(path, weights_only=True)
    ctx.record(f"{tag}: loaded state_dict", sd)
    fresh = zoo.MLP().eval()
    fresh.load_state_dict(sd)
    check(ctx, f"{tag}: torch.save(state_dict)", fresh, x)


CASES = (case_state_dict, case_load_into, case_deepcopy, case_pickle, case_save_model,
         case_save_state_dict)


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    x = zoo.inputs(4, 16)
    ctx.step("loaded")
    check(ctx, "model", model, x)
    for case in CASES:
        name = case.__name__.removeprefix("case_")
        case(ctx, f"resident {name}", model, x, ctx.workdir)
        check(ctx, f"model after resident {name}", model, x)
    for case in CASES:
        name = case.__name__.removeprefix("case_")
        ctx.step(f"before offloaded {name}", unload=["MLP"], expect="unloaded")
        case(ctx, f"offloaded {name}", model, x, ctx.workdir)
        check(ctx, f"model after offloaded {name}", model, x)
