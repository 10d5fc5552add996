"""Every CLI output the suite produces, read for words no user should see.

A command's text never says ``None``: unknown is "n/a", a missing value is
left out (JSON says ``null``).  :class:`CliOutputs` watches the two ways the
tests run the CLI: ``app.cli.main`` in this process (its ``_dispatch``, so a
``from app.cli import main`` made before the watch counts too) and a child
process running ``main.py``, ``python -m app`` / ``-m app.cli`` or
``python -c`` code that imports the CLI, whose output the test collects with
``communicate`` (``subprocess.run`` does).  A child whose pipes the test reads
itself is not seen.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "main.py")
#: ``None`` as a word of its own (``NoneType`` or ``Nonesuch`` are other words).
FORBIDDEN = re.compile(r"(?<![A-Za-z0-9_])None(?![A-Za-z0-9_])")
_CLI_CODE = ("app.cli import", "from app import cli", "import app.cli")


@dataclass(frozen=True)
class Output:
    command: str  # how it was run, for the failure's message
    stream: str  # "stdout" or "stderr"
    text: str


def offending_lines(text: str) -> list[str]:
    """The lines of ``text`` that say None."""
    return [line for line in text.splitlines() if FORBIDDEN.search(line)]


def is_cli_command(args: Any, cwd: Any = None) -> bool:
    """Does this child's command line run this repository's CLI?"""
    if isinstance(args, (str, bytes, os.PathLike)):
        return False  # a shell string or a bare program: never how the tests run the CLI
    words = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    here = Path(os.fsdecode(cwd)).resolve() if cwd is not None else Path.cwd()
    for i, word in enumerate(words[1:4], 1):
        if word == "-m" and i + 1 < len(words) and words[i + 1] in ("app", "app.cli"):
            return True
        if word == "-c" and i + 1 < len(words):
            return any(marker in words[i + 1] for marker in _CLI_CODE)
        if word.endswith("main.py"):
            return str((here / word).resolve()) == MAIN
    return False


class _Tee:
    """A text stream that keeps what it is given and passes it on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.parts: list[str] = []
        self.keeping = True

    def write(self, text: str) -> int:
        if self.keeping:
            self.parts.append(text)
        return self.inner.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CliOutputs:
    """What the CLI said during one test; :meth:`install` starts watching."""

    def __init__(self) -> None:
        self.outputs: list[Output] = []

    def install(self, monkeypatch: Any) -> None:
        import app.cli as cli

        real_dispatch = cli._dispatch
        real_init = subprocess.Popen.__init__
        real_communicate = subprocess.Popen.communicate
        outputs = self.outputs

        def dispatch(argv: list[str] | None) -> int:
            out, err = _Tee(sys.stdout), _Tee(sys.stderr)
            sys.stdout, sys.stderr = out, err
            try:
                return real_dispatch(argv)
            finally:
                if sys.stdout is out:
                    sys.stdout = out.inner
                if sys.stderr is err:
                    sys.stderr = err.inner
                out.keeping = err.keeping = False
                command = "main(%r)" % (argv,)
                outputs.append(Output(command, "stdout", "".join(out.parts)))
                outputs.append(Output(command, "stderr", "".join(err.parts)))

        def init(popen: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
            real_init(popen, args, *rest, **kwargs)
            try:
                popen._cli_command = is_cli_command(args, kwargs.get("cwd"))  # type: ignore[attr-defined]
            except (OSError, ValueError):
                popen._cli_command = False  # type: ignore[attr-defined]

        def communicate(popen: subprocess.Popen, *a: Any, **kw: Any) -> tuple[Any, Any]:
            stdout, stderr = real_communicate(popen, *a, **kw)
            if getattr(popen, "_cli_command", False):
                command = " ".join(map(str, popen.args))  # type: ignore[arg-type]
                for stream, data in (("stdout", stdout), ("stderr", stderr)):
                    if data:
                        text = data if isinstance(data, str) else data.decode("utf-8", "replace")
                        outputs.append(Output(command, stream, text))
            return stdout, stderr

        monkeypatch.setattr(cli, "_dispatch", dispatch)
        monkeypatch.setattr(subprocess.Popen, "__init__", init)
        monkeypatch.setattr(subprocess.Popen, "communicate", communicate)

    def problems(self) -> list[str]:
        """One entry per output that says None: the command, the stream, the lines."""
        found = []
        for o in self.outputs:
            lines = offending_lines(o.text)
            if lines:
                found.append(f"{o.command} ({o.stream}):\n    " + "\n    ".join(lines[:5]))
        return found
