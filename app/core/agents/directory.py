"""The one interface the app uses to reach agents, real or simulated.

``AgentHub`` (app.core.agents.hub) talks to real agents over their sockets;
``DemoAgents`` (app.core.agents.demo) simulates some demo processes' agents.
Both are used the same way, so ``--demo`` exercises the same code paths.
"""

from __future__ import annotations

import abc

from app.core.agents.event_log import ModelEventLog
from app.core.agents.recording import RecordResult
from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
)


class AgentDirectory(abc.ABC):
    @abc.abstractmethod
    def reports(self) -> dict[int, AgentReport]:
        """Latest report per pid; never blocks on I/O (safe on any thread)."""

    @abc.abstractmethod
    def entries(self) -> list[AgentEntry]:
        """Agents currently registered (stale ones already pruned)."""

    @abc.abstractmethod
    def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
        """gc.collect() + empty_cache() in process ``pid``.  Blocks: call it off the GUI thread."""

    @abc.abstractmethod
    def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
        """gc.collect() alone; ``{"ok", "collected", "seconds", "error"}``."""

    # -- model manager (blocking: call off the GUI thread) ----------------------
    def unload(self, pid: int, model: str, to: str | None = "cpu", force: bool = False,
               reason: str = "manual", timeout_s: float = 300.0) -> ModelActionResult:
        """Offload a model's weights (to pinned host memory or to disk; None:
        the agent's default) and release the allocator cache; refused with a
        reason (``code="refused"``) when unsafe.  ``reason``: "manual" or
        "pressure" (automatic: pinned models refused, never forced)."""
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def reload(self, pid: int, model: str, timeout_s: float = 300.0) -> ModelActionResult:
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0) -> ModelActionResult:
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        """The agent's own idle TTL for process ``pid`` (None = off):
        ``{"ok", "idle_unload_s", "error", "code"}``."""
        return {"ok": False, "idle_unload_s": None, "error": "not supported",
                "code": "unsupported"}

    # -- allocation recording (blocking: call off the GUI thread) -------------
    def record(self, pid: int, seconds: float, max_entries: int | None = None,
               timeout_s: float | None = None) -> RecordResult:
        """Record process ``pid``'s CUDA allocations for ``seconds`` (PyTorch's
        allocation history, at most ``max_entries`` events; None: the agent's
        default), write the snapshot file memory_viz opens, and summarise the
        allocations by call site.  Blocks for about ``seconds``."""
        return RecordResult(pid, False, error="not supported", code="unsupported")

    # -- model events (non-blocking) -------------------------------------------
    def events_since(self, cursor: int = 0) -> tuple[list[tuple[int, ModelEvent]], int]:
        """Model unload/reload events seen since ``cursor``: ``([(pid, event)], new_cursor)``.

        Start with 0 (everything still kept, oldest first), then pass back the
        cursor returned.  Never blocks on I/O: safe on any thread.  Events come
        from the agents' reports (deduplicated by (agent, seq)) and from the
        replies of model actions (:meth:`note_reply`).  This default keeps the
        replies only; directories that poll reports log theirs too.
        """
        log = self.__dict__.get("_replies")
        return log.since(cursor) if log is not None else ([], cursor)

    def note_reply(self, pid: int, event: ModelEvent) -> None:
        """The event an action's reply carried, for :meth:`events_since`."""
        log = self.__dict__.get("_replies")
        if log is None:
            log = self.__dict__["_replies"] = ModelEventLog()
        log.add(pid, (event,))

    def notices(self) -> list[str]:
        """One visible line per folder refused as not private (a runtime or
        registry dir another user holds, say), from the latest registry read.
        Never blocks on I/O: safe on any thread.  Simulated agents have none."""
        return []

    def errors(self) -> dict[int, str]:
        """Why an agent has no report, by pid (its last polling error); no I/O.
        Only a directory that polls has any."""
        return {}

    def start(self) -> None:  # noqa: B027 (optional hook: most directories have nothing to start)
        """Begin background polling (if any)."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Stop polling and release sockets; safe to call twice."""
