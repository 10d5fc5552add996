"""Agents and model servers behind the one ``AgentDirectory`` interface.

The window, the CLI, the pressure policy and the Doctor's fixes unload
through an ``AgentDirectory``.  ``WithServers`` sends an unload (or a
reload) for a model a server holds to that server's API, and everything
else to the agents.  A server's model is named by the server's own id; a
process that is both a server and has an agent (ComfyUI started under
``run``) is unloaded through the server: the agent refuses, since doing it
behind the server's back would break the server's bookkeeping.
"""

from __future__ import annotations

from app.core.agents.directory import AgentDirectory
from app.core.agents.recording import RecordResult
from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
)
from app.core.servers import unloading
from app.core.servers.directory import ServerDirectory
from app.core.servers.types import ServerUnload


def as_result(done: ServerUnload) -> ModelActionResult:
    return ModelActionResult(
        done.pid, done.model, done.ok, error=None if done.ok else done.reason,
        code=None if done.ok else done.code or done.outcome.replace(" ", "_"),
        outcome=done.outcome,
        note=done.reason, freed_bytes=done.freed_bytes if done.outcome == "freed" else None)


class WithServers(AgentDirectory):
    def __init__(self, agents: AgentDirectory, servers: ServerDirectory) -> None:
        self.agents = agents
        self.servers = servers

    def _server_model(self, pid: int, model: str) -> bool:
        server = self.servers.owner(pid)
        return server is not None and (server.model(model) is not None
                                       or pid not in self.agents.reports())

    # -- routed
    def unload(self, pid: int, model: str, to: str | None = "cpu", force: bool = False,
               reason: str = "manual", timeout_s: float = 300.0) -> ModelActionResult:
        if self._server_model(pid, model):
            return as_result(unloading.unload(self.servers, pid, model,
                                              automatic=reason != "manual"))
        return self.agents.unload(pid, model, to, force, reason, timeout_s)

    def reload(self, pid: int, model: str, timeout_s: float = 300.0) -> ModelActionResult:
        if self._server_model(pid, model):
            return as_result(unloading.reload(self.servers, pid, model))
        return self.agents.reload(pid, model, timeout_s)

    # -- the agents'
    def reports(self) -> dict[int, AgentReport]:
        return self.agents.reports()

    def entries(self) -> list[AgentEntry]:
        return self.agents.entries()

    def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
        return self.agents.free_cache(pid, timeout_s)

    def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
        return self.agents.collect_garbage(pid, timeout_s)

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0) -> ModelActionResult:
        return self.agents.pin(pid, model, pinned, timeout_s)

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        return self.agents.set_idle_unload(pid, seconds, timeout_s)

    def record(self, pid: int, seconds: float, max_entries: int | None = None,
               timeout_s: float | None = None) -> RecordResult:
        return self.agents.record(pid, seconds, max_entries, timeout_s)

    def events_since(self, cursor: int = 0) -> tuple[list[tuple[int, ModelEvent]], int]:
        return self.agents.events_since(cursor)

    def note_reply(self, pid: int, event: ModelEvent) -> None:
        self.agents.note_reply(pid, event)

    def notices(self) -> list[str]:
        return self.agents.notices() + self.servers.notices()

    def errors(self) -> dict[int, str]:
        return self.agents.errors()

    def start(self) -> None:
        self.agents.start()
        self.servers.start()

    def close(self) -> None:
        self.servers.close()
        self.agents.close()


def with_servers(agents: AgentDirectory, servers: ServerDirectory | None = None) -> WithServers:
    return WithServers(agents, servers or ServerDirectory())


__all__ = ["WithServers", "as_result", "with_servers"]
