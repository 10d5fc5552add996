"""A server's agents as an :class:`AgentDirectory`: every action is sent to
the server, which carries it out under its own checks (the caller must own
the process), so the views above work unchanged on a remote host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.agents.directory import AgentDirectory
from app.core.agents.recording import RecordResult
from app.core.agents.types import AgentEntry, AgentReport, FreeCacheResult, ModelActionResult
from app.core.remote.client import RemoteClient
from app.core.remote.errors import RemoteError
from app.core.remote.source import RemoteSource


class RemoteAgents(AgentDirectory):
    def __init__(self, client: RemoteClient | Callable[[], RemoteClient],
                 source: RemoteSource | None = None) -> None:
        """``client``: the client, or what returns the current one (raising
        RemoteError while there is none).  ``source``: the reports come from
        its stream (no I/O); without one, ``reports()`` and ``entries()`` ask
        the server."""
        self._client_of = (lambda: client) if isinstance(client, RemoteClient) else client
        self.source = source

    @property
    def client(self) -> RemoteClient:
        return self._client_of()

    def reports(self) -> dict[int, AgentReport]:
        """From the source's stream (no I/O); without a source, asked now."""
        if self.source is not None:
            latest = self.source.latest()
            return dict(latest.agents) if latest is not None else {}
        return {entry.pid: report for entry, report, _ in self.listed() if report is not None}

    def entries(self) -> list[AgentEntry]:
        """Asked now (blocks); RemoteError when the server cannot say."""
        return [entry for entry, _, _ in self.listed()]

    def listed(self) -> list[tuple[AgentEntry, AgentReport | None, str | None]]:
        """Every agent the server reads, its latest report, or why there is none."""
        return self.client.agents()

    # -- actions ------------------------------------------------------------------
    def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
        try:
            return self.client.free_cache(pid, timeout_s)
        except RemoteError as exc:
            return FreeCacheResult(pid, False, error=str(exc))

    def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
        try:
            return self.client.collect_garbage(pid, timeout_s)
        except RemoteError as exc:
            return {"ok": False, "collected": None, "seconds": None, "error": str(exc),
                    "code": exc.code}

    def unload(self, pid: int, model: str, to: str | None = "cpu", force: bool = False,
               reason: str = "manual", timeout_s: float = 300.0) -> ModelActionResult:
        return self._model(pid, model, lambda: self.client.unload(pid, model, to, force,
                                                                  timeout_s))

    def reload(self, pid: int, model: str, timeout_s: float = 300.0) -> ModelActionResult:
        return self._model(pid, model, lambda: self.client.reload(pid, model, timeout_s))

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0
            ) -> ModelActionResult:
        return self._model(pid, model, lambda: self.client.pin(pid, model, pinned, timeout_s))

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        try:
            return self.client.set_idle_unload(pid, seconds, timeout_s)
        except RemoteError as exc:
            return {"ok": False, "idle_unload_s": None, "error": str(exc), "code": exc.code}

    def record(self, pid: int, seconds: float, max_entries: int | None = None,
               timeout_s: float | None = None) -> RecordResult:
        try:
            return self.client.record(pid, seconds, max_entries)
        except RemoteError as exc:
            return RecordResult(pid, False, error=str(exc), code=exc.code)

    def terminate(self, pid: int, create_time: float | None,
                  grace_s: float | None = None) -> dict[str, Any]:
        """SIGTERM, then SIGKILL, by the server, to a process of the caller's own."""
        try:
            return self.client.terminate(pid, create_time, grace_s)
        except RemoteError as exc:
            return {"pid": pid, "outcome": "refused", "reason": str(exc), "code": exc.code}

    @staticmethod
    def _model(pid: int, model: str, call: Any) -> ModelActionResult:
        try:
            result: ModelActionResult = call()
            return result
        except RemoteError as exc:
            return ModelActionResult(pid, model, False, error=str(exc), code=exc.code)

    def close(self) -> None:
        self.client.close()
