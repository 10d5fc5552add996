"""The agent directory a command talks through: the one the GUI uses.

``--demo`` gets ``DemoAgents`` at the demo's moment (``demo_moment``: the
moment every one-shot demo command shows); real agents get the GUI's ``AgentHub`` used
one-shot: never started (no polling threads), so ``entries()`` reads the
registry and every action opens a connection of its own under the command's
timeout.  Reports are the one thing a one-shot hub does not hold (the GUI's
hub keeps the latest polled ones): ``read_reports`` asks the agents for them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.cli.common import gather, tell
from app.core.agents.directory import AgentDirectory
from app.core.agents.types import AgentEntry, AgentReport

if TYPE_CHECKING:
    from app.core.agents.hub import AgentHub

def open_directory(args: argparse.Namespace) -> AgentDirectory:
    """The server's agents for ``--host``, the demo's at its moment for
    ``--demo``, else a one-shot AgentHub on the user's registry."""
    if getattr(args, "host", None):
        from app.cli.remote import remote_directory

        return remote_directory(args)
    if getattr(args, "demo", False):
        from app.core.agents.demo_moment import demo_moment

        return demo_moment(getattr(args, "seed", 7), getattr(args, "demo_size", None)).agents
    return real_agents()


def real_agents() -> AgentHub:
    """A one-shot AgentHub on every private registry of ours; each folder it
    refuses (another user's, a symlink, open to others) is told on stderr."""
    from app.core.agents.hub import AgentHub
    from app.core.agents.registry import registry_folders

    for line in registry_folders().notices:
        tell(line)
    return AgentHub()


def find_entry(directory: AgentDirectory, pid: int) -> AgentEntry | None:
    """The directory's entry for process ``pid``, None when it has no agent."""
    return next((e for e in directory.entries() if e.pid == pid), None)


@dataclass(frozen=True)
class AgentAnswer:
    """One agent's report, or why there is none (``entry`` None: a simulated agent)."""

    entry: AgentEntry | None
    report: AgentReport | None
    error: str | None = None


def read_reports(directory: AgentDirectory, timeout_s: float) -> list[AgentAnswer]:
    """Every agent's current report, by pid.  A simulated directory's are at
    hand; a one-shot hub asks each registered agent now, all at once, each
    under ``timeout_s``."""
    from app.core.agents.hub import AgentHub
    from app.core.remote.agents import RemoteAgents

    if isinstance(directory, RemoteAgents):
        return [AgentAnswer(e, r, err) for e, r, err in directory.listed()]
    if not isinstance(directory, AgentHub):
        return [AgentAnswer(None, r) for _, r in sorted(directory.reports().items())]
    from app.core.agents.client import query_report
    from app.core.agents.connection import AgentError, AgentUnavailable

    def one(entry: AgentEntry) -> AgentAnswer:
        try:
            return AgentAnswer(entry, query_report(entry, timeout_s))
        except (AgentUnavailable, AgentError) as exc:
            return AgentAnswer(entry, None, str(exc))

    return gather(one, directory.entries())
