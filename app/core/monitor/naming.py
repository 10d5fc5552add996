"""Short, recognisable names for processes ("train.py", "vllm.entrypoints…")."""

from __future__ import annotations

import os
import re

from app.core.monitor.samples import ProcessSample

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?[mwd]?(\.exe)?$", re.IGNORECASE)
# Options of the python interpreter that take a value (the next word is not the script).
_PY_OPTS_WITH_ARG = {"-W", "-X", "-Q"}


def short_name(proc: ProcessSample) -> str:
    """What a person calls the process: the script or module for Python, else its name."""
    name = proc.name or ""
    words = (proc.command or "").split()
    if words and _PYTHON.match(os.path.basename(words[0]) or name):
        script = _python_target(words[1:])
        if script:
            return script
    if name:
        return name
    if words:
        return os.path.basename(words[0])
    return "pid"


def _python_target(args: list[str]) -> str | None:
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-m" and i + 1 < len(args):
            return args[i + 1]
        if arg == "-c":
            return "python -c"
        if arg in _PY_OPTS_WITH_ARG:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return os.path.basename(arg)
    return None


def process_label(proc: ProcessSample) -> str:
    """Legend label: "train.py (20417)"."""
    return f"{short_name(proc)} ({proc.pid})"


def label_or_pid(proc: ProcessSample) -> str:
    """:func:`process_label`, or "pid 20417" when the process has no name or command."""
    if not proc.name and not proc.command:
        return f"pid {proc.pid}"
    return process_label(proc)
