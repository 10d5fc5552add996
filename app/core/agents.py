"""The one interface the app uses to reach agents, real or simulated.

``AgentHub`` (app.core.agent_hub) talks to real agents over their sockets;
``DemoAgents`` (app.core.demo_agents) simulates some demo processes' agents.
Both are used the same way, so ``--demo`` exercises the same code paths.
"""

from __future__ import annotations

import abc

from app.core.agent_types import AgentEntry, AgentReport, FreeCacheResult


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

    def start(self) -> None:
        """Begin background polling (if any)."""

    def close(self) -> None:
        """Stop polling and release sockets; safe to call twice."""
