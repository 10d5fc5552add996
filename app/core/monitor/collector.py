"""One sampler tick: a source reading joined with host process details.

Shared by the GUI's sampler thread and the CLI, so both show the same numbers.
Qt-free.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from app.core.agents.directory import AgentDirectory
from app.core.agents.events import EventFeed
from app.core.diagnosis.doctor import Doctor
from app.core.monitor.host_processes import HostProcessReader
from app.core.monitor.nvml_errors import NA_NOT_SUPPORTED, NA_SEE_MIG
from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.monitor.source import GpuSource, SourceUnavailable
from app.core.policies.pressure import PolicyRunner, PressurePolicyConfig
from app.core.servers.directory import ServerDirectory
from app.core.servers.routing import WithServers

log = logging.getLogger(__name__)


class Collector:
    #: After the source fails, wait this long before trying to open it again
    #: (the driver may come back: module reload, GPU reset).
    RETRY_AFTER_S = 5.0

    def __init__(self, source: GpuSource, host: HostProcessReader | None = None,
                 agents: AgentDirectory | None = None,
                 pressure_policy: PolicyRunner | PressurePolicyConfig | bool = True,
                 doctor: Doctor | bool = True, wall_clock: Callable[[], float] = time.time,
                 monotonic_clock: Callable[[], float] = time.monotonic,
                 host_refresh_s: float = 0.0, servers: ServerDirectory | None = None) -> None:
        """``pressure_policy``: True (default) runs the memory-pressure policy
        with its defaults whenever there are ``agents``; a config or a runner
        to choose; False for none.  The runner is ``self.policy``.  Every
        snapshot carries the model events and policy decisions that are new
        since the previous one (``self.events``).  ``doctor``: True (default)
        adds every current diagnosis and new OOM reports (saved in the state
        directory, except the demo's); a Doctor to choose; False for none.
        The clocks stamp snapshots (the demo's instant run passes its own).
        ``host_refresh_s``: how long a process's host figures (CPU %, RSS) are
        kept before they are read again (0: every tick).  ``servers``: the
        model servers on this host, read on their own threads and joined to
        every snapshot (``Snapshot.servers``)."""
        self._host_refresh_s = host_refresh_s
        if servers is None and isinstance(agents, WithServers):
            servers = agents.servers
        self.servers = servers
        self.source = source
        self._wall = wall_clock
        self._mono = monotonic_clock
        self.doctor: Doctor | None = None
        if isinstance(doctor, Doctor):
            self.doctor = doctor
        elif doctor:
            self.doctor = _default_doctor(source)
        self._host = host
        self.agents = agents
        self.policy: PolicyRunner | None = None
        if isinstance(pressure_policy, PolicyRunner):
            self.policy = pressure_policy
        elif agents is not None and pressure_policy is not False:
            config = pressure_policy if isinstance(pressure_policy, PressurePolicyConfig) \
                else None
            self.policy = PolicyRunner(agents, config)
        self.events = EventFeed(agents, self.policy)
        self._agents_started = False
        self._opened = False
        self._driver_version: str | None = None
        self._failed_at: float | None = None
        self._last_error: str | None = None

    def open(self) -> None:
        """Open the source; raises :class:`SourceUnavailable` with the reason."""
        if self.agents is not None and not self._agents_started:
            # Started even when the source then fails: agents answer without NVML.
            self._agents_started = True
            try:
                self.agents.start()
            except Exception:
                log.exception("starting the agent directory failed")
        if self.servers is not None:
            self.servers.start()
        self.source.open()
        self._opened = True
        self._driver_version = self.source.driver_version()
        if self.source.wants_host_details and self._host is None:
            self._host = HostProcessReader(refresh_s=self._host_refresh_s)

    def collect(self) -> Snapshot:
        """One snapshot.  Never raises: a failing source yields an error snapshot."""
        started = time.perf_counter()
        try:
            if not self._opened:
                if (self._failed_at is not None
                        and time.monotonic() - self._failed_at < self.RETRY_AFTER_S):
                    return self._error_snapshot(self._last_error or "unavailable", started)
                self.open()
            gpus = self.source.read()
        except SourceUnavailable as exc:
            return self._fail(exc.reason, started)
        except Exception as exc:  # a bug or an unexpected driver answer: keep sampling
            log.exception("source read failed")
            return self._fail(f"{type(exc).__name__}: {exc}", started)
        self._failed_at = None
        if self._host is not None and self.source.wants_host_details:
            gpus = self._enrich(self._host, gpus)
        extras = self.source.extras()
        if extras is not None:  # a server's snapshot: its findings, not ours again
            return Snapshot(self._wall(), self._mono(), self.source.name,
                            self.source.driver_version(), gpus, None,
                            time.perf_counter() - started, **extras)
        agents = self._agent_reports()
        snapshot = Snapshot(self._wall(), self._mono(), self.source.name,
                            self._driver_version, gpus, None, time.perf_counter() - started,
                            agents)
        snapshot = self._with_servers(snapshot)
        if self.policy is not None and (self.servers is None or self.servers.ready):
            # Decides here, unloads on its own thread; not before the model servers
            # are known (a second or two), so a crossing is not spent on "nothing".
            self.policy.observe(snapshot)
        snapshot = self.events.attach(snapshot)
        return self.doctor.observe(snapshot) if self.doctor is not None else snapshot

    def _with_servers(self, snapshot: Snapshot) -> Snapshot:
        if self.servers is None:
            return snapshot
        try:
            return dataclasses.replace(snapshot, servers=self.servers.current(snapshot))
        except Exception:
            log.exception("joining the model servers failed")
            return snapshot

    def _agent_reports(self) -> dict:
        if self.agents is None:
            return {}
        try:
            return self.agents.reports()  # a copy under a lock: no I/O
        except Exception:
            log.exception("reading agent reports failed")
            return {}

    @staticmethod
    def _enrich(host: HostProcessReader, gpus: tuple[GpuSample, ...]) -> tuple[GpuSample, ...]:
        """Join host details to each GPU's processes.  A failure here (an
        unexpected psutil error) leaves that GPU's processes as the source
        reported them, host fields unknown, rather than losing the tick."""
        live: set[int] = set()
        enriched = []
        now = time.monotonic()  # one tick: a pid on several GPUs is read once
        for gpu in gpus:
            if gpu.processes:
                live.update(p.pid for p in gpu.processes)
                try:
                    gpu = dataclasses.replace(gpu, processes=tuple(host.enrich(gpu.processes, now)))
                except Exception:
                    log.exception("reading host details of GPU processes failed")
            enriched.append(gpu)
        # A device whose process list failed this tick (an error, no permission)
        # keeps its processes' cache: their CPU baselines, and "exited" rather
        # than "not visible".  Lists that never come (a MIG parent, not
        # supported, a lost GPU) do not hold pruning back, and neither does a
        # cache grown well past what is listed.
        try:
            if not any(_list_failed(g) for g in gpus) or host.cached() > 2 * len(live) + 256:
                host.prune(live)
        except Exception:
            log.exception("pruning host process cache failed")
        return tuple(enriched)

    def _fail(self, reason: str, started: float) -> Snapshot:
        if self._opened:
            try:
                self.source.close()
            except Exception:
                log.exception("closing a failed source")
            self._opened = False
        self._failed_at = time.monotonic()
        self._last_error = reason
        return self._error_snapshot(reason, started)

    def _error_snapshot(self, reason: str, started: float) -> Snapshot:
        # Agents and model servers answer without NVML: their reports, and the
        # events of unloads and reloads asked of them, still reach the views.
        snapshot = Snapshot(self._wall(), self._mono(), self.source.name,
                            self._driver_version, (), reason, time.perf_counter() - started,
                            self._agent_reports())
        snapshot = self._with_servers(snapshot)
        snapshot = self.events.attach(snapshot)
        # OOM captures still arrive (agents answer without NVML); diagnoses stay as they were.
        return self.doctor.observe(snapshot) if self.doctor is not None else snapshot

    def close(self) -> None:
        if self.policy is not None:
            self.policy.close()
        if self.servers is not None:
            self.servers.close()
        if self._agents_started and self.agents is not None:
            self._agents_started = False
            try:
                self.agents.close()
            except Exception:
                log.exception("closing the agent directory failed")
        if self._opened:
            self.source.close()
            self._opened = False


def _list_failed(gpu: GpuSample) -> bool:
    """Whether ``gpu``'s process list is unknown this tick only."""
    if gpu.state is DeviceState.ERROR:
        return True
    note = gpu.notes.get("processes")
    return note is not None and note not in (NA_SEE_MIG, NA_NOT_SUPPORTED)


def _default_doctor(source: GpuSource) -> Doctor:
    """The demo's reports stay in memory; real ones are saved in the state directory."""
    if source.name == "demo":
        return Doctor(demo=True)
    from app.core.diagnosis.report_store import ReportStore

    return Doctor(store=ReportStore())


def default_agents_for(source: GpuSource) -> AgentDirectory:
    """Simulated agents for the demo; for anything else real ones (AgentHub)
    with the host's model servers (``WithServers``)."""
    from app.core.monitor.demo_source import DemoSource

    if isinstance(source, DemoSource):
        from app.core.agents.demo import DemoAgents

        return DemoAgents(source)
    from app.core.agents.hub import AgentHub

    if source.name != "nvml":  # another host's GPUs: its servers are its own
        return AgentHub()
    return WithServers(AgentHub(), ServerDirectory())
