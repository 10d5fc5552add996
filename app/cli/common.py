"""What every command shares: exit statuses, where words go, JSON output,
concurrent calls, the lines about refused folders (once per command, on stderr).

Results go to stdout; refusals, failures and targets not found go to stderr,
with a status other than 0.  With ``--json`` the JSON goes to stdout whatever
the outcome (``"ok": false`` and the code for a refusal), the exit status is
the same as without it, and stderr gets the same line.

Standard library only: ``run`` and ``agent-path`` import this and nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NO_SOURCE = 2
EXIT_NO_AGENT = 2
EXIT_NO_DISPLAY = 2
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

T = TypeVar("T")
R = TypeVar("R")

_told: set[str] = set()


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: an argument it does not know is its own error,
    under its own usage (argparse would leave it to the top level's usage,
    which names none of the command's options)."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: Any = None) -> tuple[Any, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return parsed, extras


def say(text: str, ok: bool = True) -> None:
    """A command's words: a result on stdout; a refusal, a failure or a target
    not found on stderr (the exit status says which, ``--json`` or not)."""
    print(text, file=sys.stdout if ok else sys.stderr)


def print_json(data: Any) -> None:
    """``data`` on stdout as indented JSON, newline-terminated."""
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def gather(func: Callable[[T], R], items: Sequence[T], workers: int = 16) -> list[R]:
    """``func`` over ``items`` concurrently (each call bounded by its own timeout)."""
    if len(items) <= 1:
        return [func(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(func, items))


def tell(line: str | None) -> None:
    """A visible line about a folder refused, on stderr, once per command."""
    if line and line not in _told:
        _told.add(line)
        print(line, file=sys.stderr)


def new_command() -> None:
    """A new command starts: its lines are told again."""
    _told.clear()
