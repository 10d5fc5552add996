"""The one interface the app uses to reach agents, real or simulated.

``AgentHub`` (app.core.agent_hub) talks to real agents over their sockets;
``DemoAgents`` (app.core.demo_agents) simulates some demo processes' agents.
Both are used the same way, so ``--demo`` exercises the same code paths.
"""

from __future__ import annotations

import abc

from app.core.agent_types import AgentEntry, AgentReport, FreeCacheResult, ModelActionResult


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
    def unload(self, pid: int, model: str, to: str = "cpu", force: bool = False,
               reason: str = "manual", timeout_s: float = 300.0) -> ModelActionResult:
        """Offload a model's weights (to pinned host memory or to disk) and
        release the allocator cache; refused with a reason when unsafe."""
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def reload(self, pid: int, model: str, timeout_s: float = 300.0) -> ModelActionResult:
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0) -> ModelActionResult:
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        """The agent's own idle TTL for process ``pid`` (None = off)."""
        return {"ok": False, "error": "not supported"}

    def start(self) -> None:
        """Begin background polling (if any)."""

    def close(self) -> None:
        """Stop polling and release sockets; safe to call twice."""
