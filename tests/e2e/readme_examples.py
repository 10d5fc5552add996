"""The README's example sessions: found, run for real, compared, rewritten.

The convention: a fenced block whose info string is ``console`` is a real
terminal session.  Each line starting with ``$ python main.py`` is a command;
the lines after it, up to the next command or the block's end, are what it
printed (stdout and stderr as a terminal shows them).  Each runs as
``python main.py ARGS`` from the repository, with the demo's own user named
:data:`USER` and a state folder of its own, so the output is the same on any
machine but for what the wall clock and the machine put in it
(:func:`normalised`: the sample's date and time, the OOM report ids' creation
time, the host name).

``python -m tests.e2e.readme_examples --write`` rewrites every example's
output from its command (the host name written as :data:`HOST`);
``tests/e2e/test_readme_examples.py`` checks them.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PROMPT = "$ python main.py "
#: The user the examples' demo runs as (its own processes are that user's).
USER = "ana"
#: The host name the written examples show.
HOST = "workstation"

_FENCE = re.compile(r"^```(\S*)\s*$")
#: What the wall clock and the machine put in an output, and what stands for it.
_VARYING = (
    (re.compile(r"^\S+(  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  )"), r"<host>\1"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"), "<date and time>"),
    (re.compile(r"\b\d{13}(-\d+-\d+)\b"), r"<ms>\1"),  # an OOM report's id
)


@dataclass(frozen=True)
class Example:
    """One command of a console block and the output the README shows for it."""

    line: int  # the command's line in the README (1-based)
    args: tuple[str, ...]
    output: tuple[str, ...]

    @property
    def command(self) -> str:
        return PROMPT + shlex.join(self.args)


def examples(text: str) -> list[Example]:
    """Every command of every ``console`` block of ``text``, in order."""
    found: list[Example] = []
    in_console = False
    current: tuple[int, tuple[str, ...]] | None = None
    output: list[str] = []

    def close() -> None:
        if current is not None:
            found.append(Example(current[0], current[1], tuple(output)))

    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if fence:
            if in_console:
                close()
                current, output = None, []
            in_console = not in_console and fence[1] == "console"
            continue
        if not in_console:
            continue
        if line.startswith(PROMPT):
            close()
            current, output = (number, tuple(shlex.split(line[len(PROMPT):]))), []
        elif current is not None:
            output.append(line)
        else:
            raise ValueError(f"README.md:{number}: a console block starts with {PROMPT!r}")
    return found


def run(args: tuple[str, ...], state_dir: str) -> tuple[str, ...]:
    """What ``python main.py ARGS`` prints, both streams as a terminal shows them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAM_STEWARD_")}
    env.update(USER=USER, LOGNAME=USER, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
               VRAM_STEWARD_STATE_DIR=state_dir)
    done = subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, check=False)
    return tuple(done.stdout.rstrip("\n").splitlines())


def normalised(lines: tuple[str, ...]) -> list[str]:
    """``lines`` with what the wall clock and the machine put there replaced."""
    out = []
    for line in lines:
        for pattern, stand_in in _VARYING:
            line = pattern.sub(stand_in, line)
        out.append(line.rstrip())
    return out


def written(lines: tuple[str, ...]) -> list[str]:
    """``lines`` as the README shows them: this machine's name written as :data:`HOST`."""
    host = socket.gethostname()
    return [HOST + line[len(host):] if line.startswith(host + "  ") else line.rstrip()
            for line in lines]


def rewrite(text: str, state_dir: str) -> str:
    """``text`` with every example's output replaced by its command's output now."""
    lines = text.splitlines()
    for example in reversed(examples(text)):
        start = example.line  # the output's first line (0-based: just after the command)
        lines[start:start + len(example.output)] = written(run(example.args, state_dir))
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print("usage: python -m tests.e2e.readme_examples --write", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as state:
        os.chmod(state, 0o700)
        README.write_text(rewrite(README.read_text(encoding="utf-8"), state), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
