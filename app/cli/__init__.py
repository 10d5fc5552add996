"""Command line: the GUI (default), ``status``, the offscreen screenshot, the
agent commands (``run``, ``agent-path``, ``agents``, ``free-cache``), the
model manager (``models``, ``unload``, ``reload``, ``pin``, ``policy``) and
``estimate`` (will a run fit?).

One module per command group: :mod:`~app.cli.status`, :mod:`~app.cli.run`
(run, agent-path), :mod:`~app.cli.agents` (agents, free-cache),
:mod:`~app.cli.models` (the model manager) and :mod:`~app.cli.gui`; agent
commands reach agents through :mod:`~app.cli.directory`, the GUI's own agent
directory.  ``status`` must work over SSH on a server without Qt installed,
so Qt is only imported on the GUI paths.  ``run`` and ``agent-path`` import
nothing beyond the standard library (no Qt, numpy or psutil): every module
here imports the rest of the app inside the commands that need it.
"""

from __future__ import annotations

import argparse
import os
import sys

from app import APP_NAME, __version__
from app.cli import (
    agent_env,
    agents,
    doctor,
    estimate,
    gui,
    history,
    models,
    record,
    run,
    serve,
    servers,
    status,
)
from app.cli.common import EXIT_NO_SOURCE, EXIT_OK, CommandParser, new_command
from app.cli.demo_option import DemoAction, attach_scenarios
from app.cli.remote import REMOTE_COMMANDS, add_remote_options

__all__ = ["EXIT_NO_SOURCE", "build_parser", "main"]

DEMO_HELP = ("simulated GPUs and processes instead of NVML; --demo=GxP: G GPUs with "
             "P processes each (e.g. --demo=8x64)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vram-steward",
        description=f"{APP_NAME}: live VRAM per GPU and per process.")
    parser.add_argument("--version", action="version", version=f"{APP_NAME} {__version__}")
    # Accepted before or after the sub-command; SUPPRESS keeps a sub-command's
    # absent flag from overwriting one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--demo", action=DemoAction, default=argparse.SUPPRESS,
                        help=DEMO_HELP)
    common.add_argument("--seed", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    parser.add_argument("--demo", action=DemoAction, default=False, help=DEMO_HELP)
    parser.set_defaults(demo_size=None)
    parser.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)
    gui.add_options(parser)
    sub = parser.add_subparsers(dest="command", parser_class=CommandParser)
    status.register(sub, common)
    run.register(sub)
    agent_env.register(sub)
    agents.register(sub, common)
    models.register(sub, common)
    doctor.register(sub, common)
    record.register(sub, common)
    history.register(sub, common)
    serve.register(sub, common)
    servers.register(sub, common)
    estimate.register(sub, common)
    for name in REMOTE_COMMANDS:
        add_remote_options(sub.choices[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(argv)
    except BrokenPipeError:  # `status | head`: the reader left; exit quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _dispatch(argv: list[str] | None) -> int:
    new_command()
    parser = build_parser()
    args = parser.parse_args(attach_scenarios(sys.argv[1:] if argv is None else argv,
                                              _commands(parser)))
    if getattr(args, "func", None) is None:
        gui.check_options(parser, args)
        return gui.cmd_gui(args)
    if getattr(args, "hosts", None):  # the window's option, given before a command
        parser.error(f"--host before {args.command!r} is the window's: put it after the "
                     "command (`vram-steward COMMAND --host URL`)")
    from app.core.remote.errors import RemoteError

    try:
        result: int = args.func(args)
    except (RemoteError, ValueError) as exc:
        if getattr(args, "host", None) is None:
            raise
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_NO_SOURCE
    return result


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    """The sub-command names (``--demo`` never takes one as its value)."""
    return {name for action in parser._actions
            if isinstance(action, argparse._SubParsersAction) for name in action.choices}


if __name__ == "__main__":
    sys.exit(main())
