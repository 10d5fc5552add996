"""``agent install | uninstall | status``: the agent invited once into a
Python environment, so every PyTorch process started there has it without
``run`` (see :mod:`app.core.agent_install`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from app import APP_NAME
from app.cli.common import EXIT_FAILED, EXIT_OK, print_json

if TYPE_CHECKING:
    from app.core.agent_install import Environment

EXIT_BAD_INPUT = 2


def _environment(args: argparse.Namespace) -> Environment:
    from app.core.agent_install import InstallError, current_python, env_python, probe

    if args.env and args.user:
        raise InstallError("--env and --user: name one")
    if args.env:
        return probe(env_python(args.env))
    if args.user:
        return probe(args.python or "python3", user=True)
    python = args.python or current_python()
    if python is None:
        raise InstallError("no environment named: give --env PATH (a virtualenv or conda "
                           "environment) or --user, or activate the environment first")
    return probe(python)


def cmd_agent(args: argparse.Namespace) -> int:
    from app.core.agent_install import InstallError, install, installed, recorded, uninstall

    try:
        if args.action == "status":
            return _status(args, recorded(), installed)
        env = _environment(args)
        if args.action == "install":
            install(env)
            print(f"installed into {env.site} (Python {env.version_text}, {env.kind}): every "
                  "process of this environment that imports torch now has the agent, from its "
                  "next start; VRAM_STEWARD_AGENT=0 turns it off for one process")
        else:
            removed = uninstall(env)
            print(f"removed from {env.site}" if removed else f"not installed in {env.site}")
        return EXIT_OK
    except InstallError as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"{APP_NAME}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _status(args: argparse.Namespace, envs: list[Environment],
            installed: Callable[[Environment], bool]) -> int:
    rows = [{"site": e.site, "python": e.python, "version": e.version_text, "kind": e.kind,
             "installed": installed(e)} for e in envs]
    if args.json:
        print_json(rows)
    elif not rows:
        print("the agent is installed in no environment (vram-steward agent install --env PATH)")
    else:
        for r in rows:
            state = "installed" if r["installed"] else "gone (removed by hand?)"
            print(f"{r['site']}  Python {r['version']}  {r['kind']}  {state}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", help="install the agent once into a Python environment: every "
                                     "PyTorch process started there gets it, without `run`")
    p.add_argument("action", choices=["install", "uninstall", "status"])
    p.add_argument("--env", metavar="PATH", help="a virtualenv or conda environment "
                                                 "(default: the active one)")
    p.add_argument("--user", action="store_true", help="your user site-packages instead")
    p.add_argument("--python", metavar="PYTHON", help="the interpreter (with --user: default "
                                                      "python3)")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.set_defaults(func=cmd_agent)
