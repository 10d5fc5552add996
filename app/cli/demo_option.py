"""``--demo[=GxP]``: the simulated machine, optionally scaled to G GPUs with P
processes each (the benchmarks' 8x64 case is ``--demo=8x64``).

The option takes an optional value, which argparse would happily fill with the
next word: ``--demo status`` would read "status" as a scenario.  A scenario is
always ``\\d+x\\d+``, so :func:`attach_scenarios` marks a bare ``--demo``
followed by any other word as value-less before argparse sees it.

Standard library only (``run`` and ``agent-path`` import the parser).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection, Sequence
from typing import Any

#: A scaled scenario's limits: the scenario's pids stay distinct up to 99
#: processes per GPU, and 16 GPUs is already past any real machine's count.
MAX_GPUS = 16
MAX_PROCESSES = 99

_SCENARIO = re.compile(r"(\d+)x(\d+)")
#: What a bare ``--demo`` becomes when a word follows it: an explicit empty value.
_PLAIN = "--demo="


def parse_scenario(text: str) -> tuple[int, int] | None:
    """``GxP`` as (GPUs, processes per GPU); the empty value means the scripted demo.
    Raises ``argparse.ArgumentTypeError`` (argparse exits with status 2)."""
    if text == "":
        return None
    match = _SCENARIO.fullmatch(text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected GPUSxPROCESSES such as 8x64, not {text!r}")
    gpus, processes = int(match[1]), int(match[2])
    if not (1 <= gpus <= MAX_GPUS and 1 <= processes <= MAX_PROCESSES):
        raise argparse.ArgumentTypeError(
            f"{text}: 1 to {MAX_GPUS} GPUs with 1 to {MAX_PROCESSES} processes each")
    return gpus, processes


class DemoAction(argparse.Action):
    """Sets ``demo`` True and ``demo_size`` to the scenario (None: the scripted demo)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("metavar", "GxP")
        super().__init__(option_strings, dest, nargs="?", const=None, type=parse_scenario,
                         **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, _option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)
        namespace.demo_size = values


def attach_scenarios(argv: Sequence[str], commands: Collection[str]) -> list[str]:
    """``argv`` with every bare ``--demo`` that a non-scenario word follows made
    value-less, up to the command (after it only options follow ``--demo``; past
    ``run`` the words belong to the user's own program)."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == "--" or word in commands:
            break
        following = out[i + 1] if i + 1 < len(out) else None
        if (word == "--demo" and following is not None and not following.startswith("-")
                and _SCENARIO.fullmatch(following.strip().lower()) is None):
            out[i] = _PLAIN
    return out
