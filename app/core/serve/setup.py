"""The server's parts, put together as the window puts its own: the same
source, agents, policy, doctor and history recorder."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.core.monitor.source import GpuSource
from app.core.serve.api import ServerApi
from app.core.serve.engine import ServeEngine

if TYPE_CHECKING:
    from app.core.agents.directory import AgentDirectory
    from app.core.store.recorder import HistoryRecorder

log = logging.getLogger("app.serve")


def build_engine(source: GpuSource, period_s: float = 0.25, history: bool = True,
                 auto_unload: bool | None = None) -> ServeEngine:
    """An engine on ``source`` with its agents (the demo's or the real ones),
    the pressure policy (``auto_unload``; None: on, except for a server that
    reads every user's agents: it unloads nobody's models unless told to, as
    control follows identity) and, for real GPUs, the history
    recorder (``history``; the single-writer lock decides between this and a
    window on the same host)."""
    import os

    from app.core.monitor.collector import default_agents_for

    if source.name == "nvml" and hasattr(os, "getuid") and os.getuid() == 0:
        from app.core.agents.hub import AgentHub
        from app.core.servers.directory import ServerDirectory
        from app.core.servers.routing import WithServers

        # The system service: every user's agents, and every model server.
        agents: AgentDirectory = WithServers(AgentHub(all_users=True), ServerDirectory())
        if auto_unload is None:
            auto_unload = False
    else:
        agents = default_agents_for(source)
    if auto_unload is None:
        auto_unload = True
    recorder = None
    if history and source.name == "nvml":
        recorder = _recorder()
    return ServeEngine(source, agents, period_s, policy=auto_unload, recorder=recorder,
                       on_notice=lambda line: log.warning("%s", line))


def _recorder() -> HistoryRecorder | None:
    from app.core.paths import history_db_path, private_state_dir
    from app.core.store.recorder import HistoryRecorder

    try:
        private_state_dir()
    except OSError as exc:
        log.warning("no history: the state folder is refused (%s)", exc)
        return None
    return HistoryRecorder(history_db_path(),
                           on_message=lambda line: log.warning("history: %s", line))


def build_api(engine: ServeEngine, session: bool = False) -> ServerApi:
    """The API over ``engine``: its history (real GPUs) and stored OOM reports;
    ``session``: it lasts one SSH connection (``serve --stdio``)."""
    from app.core.diagnosis.report_store import ReportStore
    from app.core.paths import history_db_path

    real = engine.collector.source.name == "nvml"
    return ServerApi(engine, history_path=history_db_path() if real else None,
                     reports=ReportStore() if real else None, session=session)
