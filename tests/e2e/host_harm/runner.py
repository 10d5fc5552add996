"""Runs one host-harm pattern in this process: ``python runner.py PATTERN[:VARIANT] WORKDIR``.

The harness starts this twice, once plainly and once under ``main.py run``,
and compares what it prints.  Wire protocol (one JSON document per line, on
the process's original stdout; the pattern's own prints go to stderr so they
can never interleave with it):

    @@PID <pid>            first line: the process the agent lives in
    @@RECORD <json>        [label, digest], as soon as the pattern records it:
                           a process that dies early has shown what it did so far
    @@STEP <json>          {label, unload, reload, expect, force}; then one line
                           ``@@GO ...`` is read from stdin before going on
    @@RESULT <json>        last line, if the pattern returns: {pattern, warnings, error}

Every Python warning of the whole run is recorded (``catch_warnings`` is
process-wide, so warnings raised on other threads are caught too).  The exit
code is 0 unless the runner itself breaks (3) or the pattern ends the process
itself (a signal, ``sys.exit``, ``os._exit``): how it ends is part of what the
harness compares.

Patterns are imported by file path, and ``patterns/zoo.py`` (the models and
inputs they share) is registered as module ``zoo`` the same way: nothing of
the harness is put on ``sys.path``, where it could shadow a host's module.
A finder at the end of ``sys.meta_path`` (so it too never shadows a module
the host finds) resolves the same names in processes a pattern starts with
``multiprocessing``'s spawn, which run this file as ``__mp_main__`` and
unpickle a pattern's functions and classes by module name.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
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
PATTERN_MODULE_PREFIX = "host_harm_pattern_"


def pattern_module_name(pattern: str) -> str:
    return PATTERN_MODULE_PREFIX + pattern


class _PatternFinder(importlib.abc.MetaPathFinder):
    """Finds ``zoo`` and ``host_harm_pattern_<name>`` in ``patterns/`` when
    nothing else on ``sys.meta_path`` did (a spawned child unpickling them)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "zoo":
            file = PATTERNS / "zoo.py"
        elif fullname.startswith(PATTERN_MODULE_PREFIX):
            file = PATTERNS / (fullname.removeprefix(PATTERN_MODULE_PREFIX) + ".py")
        else:
            return None
        return importlib.util.spec_from_file_location(fullname, file) if file.is_file() else None


if not any(isinstance(f, _PatternFinder) for f in sys.meta_path):
    sys.meta_path.append(_PatternFinder())


class HarnessGone(BaseException):
    """stdin closed while a step waited for the harness's answer (a BaseException,
    so that a pattern's own ``except Exception`` cannot swallow it)."""


class Context:
    """What a pattern gets: records, expected errors and synchronisation points.

    Records go to the harness in call order; call them from one thread
    (patterns that use threads record after joining them) so the order is
    deterministic.
    """

    def __init__(self, workdir: Path, channel: TextIO, answers: TextIO,
                 variant: str | None = None) -> None:
        self.workdir = workdir
        self.variant = variant  # the pattern's VARIANTS key this run is for, if it has any
        self._channel = channel
        self._answers = answers
        self._lock = threading.RLock()  # re-entrant: a signal handler may record

    def record(self, label: str, value: Any) -> None:
        self._add([label, digest.digest(value)])

    def _add(self, entry: list[Any]) -> None:
        """Show ``entry`` to the harness now: a process that dies later has shown it."""
        with self._lock:
            _send(self._channel, "@@RECORD", entry)

    def expect_error(self, label: str, fn: Callable[[], Any]) -> None:
        """Run ``fn`` and record which exception it raised, or "ok" and its result."""
        try:
            value = fn()
        except Exception as exc:
            outcome: Any = {"raised": digest.exception_digest(exc)}
        else:
            outcome = {"ok": digest.digest(value)}
        self._add([label, outcome])

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


def run(pattern_name: str, workdir: Path, variant: str | None = None) -> int:
    channel = _protocol_channel()
    _send(channel, "@@PID", os.getpid())
    workdir.mkdir(parents=True, exist_ok=True)
    digest.add_path_root(str(workdir))
    # Nothing of ours on sys.path (a module of ours must never shadow one the host
    # looks for): the patterns' shared module is registered as ``zoo`` by path.
    if sys.path and Path(sys.path[0] or ".").resolve() == HERE:
        del sys.path[0]
    ctx = Context(workdir, channel, sys.stdin, variant)
    result: dict[str, Any] = {"pattern": pattern_name, "error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            _load("zoo", PATTERNS / "zoo.py")
            module = _load(pattern_module_name(pattern_name), PATTERNS / f"{pattern_name}.py")
            module.run(ctx)
        except HarnessGone:
            traceback.print_exc()
            return RUNNER_BROKE
        except Exception as exc:
            traceback.print_exc()  # both runs print it: the harness compares tracebacks
            result["error"] = digest.exception_digest(exc)
        warned = [_warning_digest(w) for w in caught]
    result["warnings"] = warned
    _send(channel, "@@RESULT", result)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: runner.py PATTERN[:VARIANT] WORKDIR", file=sys.stderr)
        return RUNNER_BROKE
    pattern, _, variant = argv[1].partition(":")
    if not (PATTERNS / f"{pattern}.py").is_file():
        print(f"runner.py: no pattern {pattern!r} in {PATTERNS}", file=sys.stderr)
        return RUNNER_BROKE
    return run(pattern, Path(argv[2]).resolve(), variant or None)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
