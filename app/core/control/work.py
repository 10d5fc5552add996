"""The blocking directory calls of each action, as they run on a worker thread.

A job never touches the action's record: it returns (or reports through
``progress``) what the directory answered, and the controller fills the record
in on its owner's thread.  Errors are answers, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from app.core.agents.directory import AgentDirectory
from app.core.agents.recording import RecordResult
from app.core.agents.types import FreeCacheResult, ModelActionResult
from app.core.control.records import (
    GC,
    IDLE_TTL,
    PIN,
    RELOAD,
    UNLOAD,
    CacheAction,
    ModelAction,
    RecordAction,
)

log = logging.getLogger(__name__)

NO_CONNECTION = "no agent connection"


def error_text(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


def run_cache_action(action: CacheAction, directory: AgentDirectory | None, timeout_s: float,
                     progress: Callable[[FreeCacheResult], None]) -> dict[str, Any] | None:
    """Free each process's cache in turn (each answer through ``progress``), or gc
    one process (its answer returned)."""
    if action.kind == GC:
        try:
            if directory is None:
                raise RuntimeError(NO_CONNECTION)
            result = directory.collect_garbage(action.pids[0], timeout_s)
            return dict(result) if isinstance(result, dict) else {
                "ok": False, "error": f"unexpected answer {result!r}"}
        except Exception as exc:  # shown, never raised
            return {"ok": False, "error": error_text(exc)}
    for pid in action.pids:
        try:
            if directory is None:
                raise RuntimeError(NO_CONNECTION)
            answer = directory.free_cache(pid, timeout_s)
            if not isinstance(answer, FreeCacheResult):
                raise TypeError(f"unexpected answer {answer!r}")
        except Exception as exc:
            answer = FreeCacheResult(pid=pid, ok=False, error=error_text(exc))
        progress(answer)
    return None


def run_model_action(a: ModelAction, d: AgentDirectory | None, timeout_s: float
                     ) -> ModelActionResult | dict[str, Any]:
    """The directory's answer: a ModelActionResult, or the idle timer's dict."""
    try:
        if d is None:
            raise RuntimeError(NO_CONNECTION)
        if a.kind == IDLE_TTL:
            res: Any = d.set_idle_unload(a.pid, a.seconds)
            return dict(res) if isinstance(res, dict) else {
                "ok": False, "error": f"unexpected answer {res!r}"}
        model = a.model or ""
        if a.kind == UNLOAD:
            res = d.unload(a.pid, model, to=a.to, force=a.force, reason=a.reason,
                           timeout_s=timeout_s)
        elif a.kind == RELOAD:
            res = d.reload(a.pid, model, timeout_s=timeout_s)
        elif a.kind == PIN:
            res = d.pin(a.pid, model, bool(a.pinned))
        else:
            raise ValueError(f"unknown model action {a.kind!r}")
        if not isinstance(res, ModelActionResult):
            raise TypeError(f"unexpected answer {res!r}")
        return res
    except Exception as exc:  # shown, never raised
        text = error_text(exc)
        if a.kind == IDLE_TTL:
            return {"ok": False, "error": text}
        return ModelActionResult(a.pid, a.model or "", False, error=text)


#: Beyond the recording itself: writing the snapshot file and summarising it.
RECORD_MARGIN_S = 60.0


def run_record(a: RecordAction, d: AgentDirectory | None) -> RecordResult:
    """The agent's recording, or why there is none (never raises)."""
    try:
        if d is None:
            raise RuntimeError(NO_CONNECTION)
        res = d.record(a.pid, a.seconds, a.max_entries, a.seconds + RECORD_MARGIN_S)
        if not isinstance(res, RecordResult):
            raise TypeError(f"unexpected answer {res!r}")
        return res
    except Exception as exc:  # shown, never raised
        return RecordResult(a.pid, False, error=error_text(exc))


__all__ = ["NO_CONNECTION", "RECORD_MARGIN_S", "error_text", "run_cache_action",
           "run_model_action", "run_record"]


DirectoryLike = AgentDirectory | Callable[[], AgentDirectory | None] | None


def resolve_directory(directory: DirectoryLike) -> AgentDirectory | None:
    """The directory itself, or what a getter returns now (the source can change)."""
    if directory is None or isinstance(directory, AgentDirectory):
        return directory
    try:
        return directory()
    except Exception:
        log.exception("looking up the agent directory failed")
        return None
