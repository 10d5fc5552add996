"""Runs one host-harm pattern in this process: ``python runner.py PATTERN WORKDIR``.

The harness starts this twice, once plainly and once under ``main.py run``,
and compares what it prints.  Wire protocol (one JSON document per line, on
the process's original stdout; the pattern's own prints go to stderr so they
can never interleave with it):

    @@PID <pid>            first line: the process the agent lives in
    @@STEP <json>          {label, unload, reload, expect, force}; then one line
                           ``@@GO ...`` is read from stdin before going on
    @@RESULT <json>        last line: {pattern, records, steps, warnings, error}

Every Python warning of the whole run is recorded (``catch_warnings`` is
process-wide, so warnings raised on other threads are caught too).  The exit
code is 0 unless the runner itself breaks (3), whatever the pattern does.

Patterns are imported by file path, and ``patterns/zoo.py`` (the models and
inputs they share) is registered as module ``zoo`` the same way: nothing of
the harness is put on ``sys.path``, where it could shadow a host's module.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
PATTERNS = HERE / "patterns"
EXPECTS = ("unloaded", "refused", "any")
RUNNER_BROKE = 3


def _load(name: str, path: Path) -> ModuleType:
    """Import ``path`` as module ``name`` (registered, so pickle finds its classes)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


digest = _load("host_harm_digest", HERE / "digest.py")


class HarnessGone(BaseException):
    """stdin closed while a step waited for the harness's answer (a BaseException,
    so that a pattern's own ``except Exception`` cannot swallow it)."""


class Context:
    """What a pattern gets: records, expected errors and synchronisation points.

    Records are kept in call order; call them from one thread (patterns that
    use threads record after joining them) so the order is deterministic.
    """

    def __init__(self, workdir: Path, channel: TextIO, answers: TextIO) -> None:
        self.workdir = workdir
        self.records: list[list[Any]] = []
        self.steps: list[str] = []
        self._channel = channel
        self._answers = answers
        self._lock = threading.Lock()

    def record(self, label: str, value: Any) -> None:
        entry = [label, digest.digest(value)]
        with self._lock:
            self.records.append(entry)

    def expect_error(self, label: str, fn: Callable[[], Any]) -> None:
        """Run ``fn`` and record which exception it raised, or "ok" and its result."""
        try:
            value = fn()
        except Exception as exc:
            outcome: Any = {"raised": digest.exception_digest(exc)}
        else:
            outcome = {"ok": digest.digest(value)}
        with self._lock:
            self.records.append([label, outcome])

    def step(self, label: str, unload: Iterable[str] = (), reload: bool = False,
             expect: str = "any", force: bool = False) -> None:
        """A pause between two calls: the harness may unload ``unload`` (class names;
        with ``force``, as ``unload --force`` does) and, with ``reload``, bring them
        back before answering.  The answer is not returned: a pattern must do the
        same thing whatever the agent did."""
        if isinstance(unload, str):
            raise TypeError("unload takes a sequence of class names, not one string")
        if expect not in EXPECTS:
            raise ValueError(f"expect must be one of {EXPECTS}, not {expect!r}")
        names = [str(n) for n in unload]
        self.steps.append(label)
        _send(self._channel, "@@STEP", {"label": label, "unload": names,
                                        "reload": bool(reload), "expect": expect,
                                        "force": bool(force)})
        answer = self._answers.readline()
        if not answer.startswith("@@GO"):
            raise HarnessGone(f"step {label!r}: expected @@GO from the harness, got {answer!r}")


def _send(channel: TextIO, tag: str, payload: Any) -> None:
    channel.write(f"{tag} {json.dumps(payload, separators=(',', ':'))}\n")
    channel.flush()


def _protocol_channel() -> TextIO:
    """A private copy of stdout for the protocol; fd 1 then points at stderr."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    return channel


def _warning_digest(w: warnings.WarningMessage) -> dict[str, str]:
    category = w.category
    return {"category": f"{category.__module__}.{category.__qualname__}",
            "message": digest.normalise(str(w.message))}


def run(pattern_name: str, workdir: Path) -> int:
    channel = _protocol_channel()
    _send(channel, "@@PID", os.getpid())
    workdir.mkdir(parents=True, exist_ok=True)
    digest.add_path_root(str(workdir))
    # Nothing of ours on sys.path (a module of ours must never shadow one the host
    # looks for): the patterns' shared module is registered as ``zoo`` by path.
    if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
        del sys.path[0]
    ctx = Context(workdir, channel, sys.stdin)
    result: dict[str, Any] = {"pattern": pattern_name, "error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _load("zoo", PATTERNS / "zoo.py")
            module = _load(f"host_harm_pattern_{pattern_name}", PATTERNS / f"{pattern_name}.py")
            module.run(ctx)
        except HarnessGone:
            traceback.print_exc()
            return RUNNER_BROKE
        except Exception as exc:
            traceback.print_exc()  # both runs print it: the harness compares tracebacks
            result["error"] = digest.exception_digest(exc)
        warned = [_warning_digest(w) for w in caught]
    result.update(records=ctx.records, steps=ctx.steps, warnings=warned)
    _send(channel, "@@RESULT", result)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: runner.py PATTERN WORKDIR", file=sys.stderr)
        return RUNNER_BROKE
    if not (PATTERNS / f"{argv[1]}.py").is_file():
        print(f"runner.py: no pattern {argv[1]!r} in {PATTERNS}", file=sys.stderr)
        return RUNNER_BROKE
    return run(argv[1], Path(argv[2]).resolve())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
