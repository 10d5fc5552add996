"""``run`` and ``agent-path``: start a command with the agent loaded in its
Python processes, or say where the agent's bootstrap lies.

Standard library only (no Qt, numpy or psutil): these need only the repository.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from app import APP_NAME
from app.cli.common import EXIT_NO_SOURCE, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_OK

#: What signal.signal() takes and returns.
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

#: Signals ``run`` passes on to the command (POSIX).
FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")


def bootstrap_dir() -> str:
    """The directory holding the agent's ``sitecustomize.py`` and ``vram_steward_agent.py``."""
    app_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(app_dir, "agent", "_bootstrap")


def agent_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default os.environ) with the agent bootstrap first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = bootstrap_dir() + (os.pathsep + existing if existing else "")
    env["VRAM_STEWARD_AGENT"] = "1"
    return env


def folder_notices() -> list[str]:
    """The lines about folders the command's agents refuse: a runtime dir
    another user holds (and the private one they use instead, made now so the
    line can name it), an unsafe ``VRAM_STEWARD_RUNTIME_DIR``, an unsafe state dir."""
    from app.agent import paths as agent_paths
    from app.core.paths import state_notice

    lines = []
    try:
        lines.append(agent_paths.claim_runtime_dir().notice)
    except agent_paths.UnsafeDir as exc:
        lines.append(agent_paths.refusal_line(exc.path, exc.reason, [], True))
    except OSError as exc:
        lines.append(f"{agent_paths.PREFIX}no runtime folder for the agents: "
                     f"{exc.strerror or exc}")
    lines.append(state_notice())
    return [line for line in lines if line]


def cmd_agent_path(args: argparse.Namespace) -> int:
    print(bootstrap_dir())
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    import subprocess

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(f"{APP_NAME}: run: no command given (usage: run [--] COMMAND ARGS...)",
              file=sys.stderr)
        return EXIT_NO_SOURCE
    for line in folder_notices():  # the agents inside never write to the command's stderr
        print(line, file=sys.stderr)
    env = agent_env()
    posix = os.name == "posix"
    # Interactive (a terminal): the command stays in our process group, so the
    # terminal delivers Ctrl-C / Ctrl-\ to it directly and it can read the
    # terminal; we only pass on SIGTERM/SIGHUP.  Otherwise the command gets its
    # own process group and every signal we receive goes to that whole group
    # (torchrun's workers included), exactly once.
    interactive = posix and _is_foreground_tty()
    own_group: dict[str, Any] = {} if not posix or interactive else {"process_group": 0}
    try:
        proc = subprocess.Popen(command, env=env, **own_group)
    except FileNotFoundError:
        print(f"{APP_NAME}: run: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except PermissionError:
        print(f"{APP_NAME}: run: permission denied: {command[0]}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    except OSError as exc:
        print(f"{APP_NAME}: run: cannot start {command[0]}: {exc}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE

    previous: dict[int, SignalHandler] = {}

    def forward(signum: int, _frame: object) -> None:
        try:
            if interactive:
                proc.send_signal(signum)
            else:
                os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    for name in FORWARDED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        if not posix:
            handler: SignalHandler = signal.SIG_IGN if name == "SIGINT" else None
        elif interactive and name in ("SIGINT", "SIGQUIT"):
            handler = signal.SIG_IGN  # the terminal sent it to the command too
        else:
            handler = forward
        if handler is None:
            continue
        try:
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread
            pass
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:  # Windows console Ctrl-C reaches the child itself
                continue
    finally:
        for sig, old in previous.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError):
                pass
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128 + N, as a shell says


def _is_foreground_tty() -> bool:
    try:
        fd = sys.stdin.fileno()
        return os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def register(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run", help="run a command with the agent loaded in its Python processes",
        description="Run COMMAND with the VRAM Steward agent loaded in every Python process it "
                    "starts (PYTHONPATH gets the agent's bootstrap dir first, and "
                    "VRAM_STEWARD_AGENT=1). Child processes inherit this: under torchrun each "
                    "rank gets its own agent, and so does the torchrun launcher process itself "
                    "(it does not import torch's CUDA, so it holds no VRAM). Forked DataLoader "
                    "workers have no agent. The command's exit code is returned (128+N when "
                    "it was killed by signal N); SIGINT, SIGTERM, SIGHUP and SIGQUIT are "
                    "passed on to it. Exit 127 when COMMAND is not found.")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="[--] COMMAND ARGS",
                     help="the command, e.g. `-- torchrun --nproc-per-node 2 train.py`")
    run.set_defaults(func=cmd_run)

    path = sub.add_parser(
        "agent-path", help="print the agent's bootstrap dir (for PYTHONPATH or %%load_ext)",
        description="Print the directory holding the agent's sitecustomize.py and "
                    "vram_steward_agent.py. Put it on sys.path and call "
                    "`import vram_steward_agent; vram_steward_agent.start()`, or in "
                    "Jupyter/IPython `%%load_ext vram_steward_agent`.")
    path.set_defaults(func=cmd_agent_path)
