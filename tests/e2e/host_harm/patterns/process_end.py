"""The process ends while its model is unloaded to disk, in each way a
process ends: the program returns, ``os._exit``, SIGTERM, SIGHUP, SIGINT and
SIGKILL with their default actions, a ``KeyboardInterrupt`` handler and a
SIGTERM handler that each save a checkpoint of the unloaded model.

The process raises the signal itself right after the step
(``signal.raise_signal``): it is delivered to the main thread before the
call returns, so both runs end at the same point of the program, with the
disposition a ``kill`` from outside would meet.  The harness compares how
each run ended and what it left in its offload folder; a handler records
what it wrote before the process goes.
"""

import os
import signal
import sys

import torch
import zoo

#: Each way to end, with the exit status it ends with (as a shell says it).
VARIANTS = {"return": 0, "os_exit": 0, "SIGTERM": 143, "SIGHUP": 129, "SIGINT": 130,
            "SIGKILL": 137, "keyboard_interrupt_saves": 0, "sigterm_handler_saves": 0}


def unloaded(ctx) -> None:
    ctx.step("idle", unload=["MLP"], expect="unloaded")


def save_checkpoint(ctx, model: torch.nn.Module, name: str) -> None:
    """A training script's handler: ``torch.save`` the state dict (of the
    unloaded model), recorded as the file's bytes and as loaded back."""
    path = ctx.workdir / f"{name}.pt"
    torch.save(model.state_dict(), path)
    ctx.record(f"{name}: file bytes", path.read_bytes())
    ctx.record(f"{name}: loaded back", torch.load(path, weights_only=True))


def end_by_returning(ctx, model) -> None:
    unloaded(ctx)


def end_by_os_exit(ctx, model) -> None:
    unloaded(ctx)
    os._exit(0)  # no atexit, no finalizers: as a forked worker or a watchdog ends


def end_by_signal(ctx, model) -> None:
    unloaded(ctx)
    signal.raise_signal(getattr(signal, ctx.variant))
    ctx.record("survived the signal", True)


def end_by_keyboard_interrupt(ctx, model) -> None:
    try:
        unloaded(ctx)
        signal.raise_signal(signal.SIGINT)
        ctx.record("survived the signal", True)
    except KeyboardInterrupt:
        save_checkpoint(ctx, model, "interrupted")


def end_by_sigterm_handler(ctx, model) -> None:
    def on_sigterm(signum, frame) -> None:
        save_checkpoint(ctx, model, "terminated")
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    unloaded(ctx)
    signal.raise_signal(signal.SIGTERM)
    ctx.record("survived the signal", True)


ENDINGS = {"return": end_by_returning, "os_exit": end_by_os_exit,
           "keyboard_interrupt_saves": end_by_keyboard_interrupt,
           "sigterm_handler_saves": end_by_sigterm_handler}


def run(ctx) -> None:
    model = zoo.mlp(frozen=True)
    x = zoo.inputs(4, 16)
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("forward", model(x))
    ENDINGS.get(ctx.variant, end_by_signal)(ctx, model)
