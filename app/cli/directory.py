"""The agent directory a command talks through: the one the GUI uses.

``--demo`` gets ``DemoAgents``; real agents get the GUI's ``AgentHub`` used
one-shot: never started (no polling threads), so ``entries()`` reads the
registry and every action opens a connection of its own under the command's
timeout.  Reports are the one thing a one-shot hub does not hold (the GUI's
hub keeps the latest polled ones): ``read_reports`` asks the agents for them.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.cli.common import gather, tell
from app.core.agents.directory import AgentDirectory
from app.core.agents.types import AgentEntry, AgentReport

if TYPE_CHECKING:
    from app.core.agents.hub import AgentHub

#: Seconds of the demo replayed before a model command (see ``demo_model_agents``).
DEMO_REPLAY_S = 320.0


def open_directory(args: argparse.Namespace, replay_s: float | None = None) -> AgentDirectory:
    """DemoAgents for ``--demo`` (after ``replay_s`` seconds of the pressure policy
    when given), else a one-shot AgentHub on the user's registry."""
    if getattr(args, "host", None):
        from app.cli.remote import remote_directory

        return remote_directory(args)
    if getattr(args, "demo", False):
        seed = getattr(args, "seed", 7)
        size = getattr(args, "demo_size", None)
        return (demo_agents(seed, size) if replay_s is None
                else demo_model_agents(seed, replay_s, size))
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


def demo_agents(seed: int, size: tuple[int, int] | None = None) -> AgentDirectory:
    """The demo's agents 30 s into its run: a grown training cache, eval.py running
    (``size``: the scaled demo's, which has none)."""
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.demo_source import demo_source

    source = demo_source(size, seed)
    source.open(elapsed=30.0)
    agents = DemoAgents(source)
    source.read()
    return agents


def demo_model_agents(seed: int, replay_s: float = DEMO_REPLAY_S,
                      size: tuple[int, int] | None = None) -> AgentDirectory:
    """The demo's agents after its first ``replay_s`` seconds, replayed at 4 Hz
    through the collector and the pressure policy exactly as the GUI runs them:
    GPU 0 crosses 90 % every 45 s from ~32 s on, and once the policy has seen
    the notebook's idle pipeline for its minimum idle time (5 min), at ~302 s,
    it unloads its text encoder and UNet.  The demo then goes on in real time."""
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.collector import Collector
    from app.core.monitor.demo_source import demo_source
    from app.core.policies.pressure import PolicyRunner

    shift = [0.0]
    source = demo_source(size, seed, clock=lambda: time.monotonic() + shift[0])
    source.open()
    agents = DemoAgents(source)
    runner = PolicyRunner(agents, synchronous=True, clock=source.clock)
    collector = Collector(source, agents=agents, pressure_policy=runner)
    collector.open()
    for _ in range(int(replay_s * 4)):
        collector.collect()
        shift[0] += 0.25
    runner.close()
    source.read()
    return agents
