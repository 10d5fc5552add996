"""When to warn the user: a GPU near its VRAM limit, or a process that hit OOM.

Qt-free and pure: ``AlertPolicy.evaluate(snapshot)`` returns the alerts to show
now; notification delivery (tray, D-Bus, banner) is someone else's job.

Memory alerts are per GPU with hysteresis: one alert when usage crosses the
threshold (default 90 % of total), then silence until usage has dropped below
the re-arm level (default 85 %) *and* the minimum interval has passed.  A
pause suppresses alerts without disarming, so a GPU still full when the pause
ends is reported then.  OOM alerts fire when an attached process's OOM count
rises; allocation-retry alerts when its retry count rises (memory pressure
inside the caching allocator), each at most once per minimum interval per
process.  Counts seen the first time are a baseline, not news.  A "full soon"
alert fires once per episode of the doctor's ``full_soon`` diagnosis (the
doctor applies the forecast's hysteresis); during a pause it waits, and
fires when the pause ends if the episode still holds.

Remote hosts' GPUs and processes are watched as this machine's are, with
their current figures only (``live_gpus``: a disconnected host's last
figures never raise an alert); each alert names its host (``Alert.host``,
its title starts "gpu1 · ") and a process is (host, pid), its figures
looked up in its host's own snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.monitor.hosts import LOCAL, live_gpus, split_id
from app.core.monitor.naming import short_name
from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.policies.reservations import level_beside, reserved_on
from app.core.policies.thresholds import ALERT_AT, REARM_AT
from app.core.units import fmt_bytes


@dataclass(frozen=True, slots=True)
class AlertConfig:
    threshold: float = ALERT_AT  # fraction of total
    rearm: float = REARM_AT  # fraction of total; must be below threshold
    min_interval_s: float = 300.0  # between two alerts of one GPU (or one process)
    enabled: bool = True
    oom_alerts: bool = True
    retry_alerts: bool = True
    full_soon_alerts: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")
        if not 0.0 <= self.rearm < self.threshold:
            raise ValueError("re-arm level must be below the threshold")
        if self.min_interval_s < 0:
            raise ValueError("minimum interval must not be negative")


@dataclass(frozen=True, slots=True)
class TopProcess:
    pid: int
    name: str
    gpu_memory: int | None  # bytes


@dataclass(frozen=True, slots=True)
class Alert:
    kind: str  # "memory", "oom", "alloc_retries" or "full_soon"
    display_id: str | None  # the GPU ("0", "0/mig1"); None for a process alert off any GPU
    title: str
    message: str
    level: float | None = None  # used / total, memory alerts
    used: int | None = None  # bytes
    total: int | None = None  # bytes
    top: tuple[TopProcess, ...] = ()
    freeable: int | None = None  # bytes free-cache could release (agents' caches); None = unknown
    pid: int | None = None  # process alerts
    count: int | None = None  # OOMs or retries so far
    time: float = 0.0  # snapshot monotonic seconds
    seconds_to_full: float | None = None  # full_soon alerts
    host: str = LOCAL  # the host the GPU or process is on ("" : this machine)


@dataclass(slots=True)
class _GpuState:
    armed: bool = True
    last_alert: float | None = None


@dataclass(slots=True)
class _Count:
    """A count that only matters when it rises (OOMs, allocation retries)."""

    value: int | None = None
    last_alert: float | None = None

    def rose_and_due(self, value: int | None, now: float, interval: float) -> bool:
        """Record ``value``; True when it rose and no alert was given within ``interval``.
        The first value seen is a baseline, not news."""
        if value is None:
            return False
        rose = self.value is not None and value > self.value
        self.value = value
        return rose and (self.last_alert is None or now - self.last_alert >= interval)


@dataclass(slots=True)
class _ProcessState:
    ooms: _Count = field(default_factory=_Count)
    retries: _Count = field(default_factory=_Count)


@dataclass
class AlertPolicy:
    config: AlertConfig = field(default_factory=AlertConfig)
    per_gpu: dict[str, AlertConfig] = field(default_factory=dict)  # display_id -> override
    _gpus: dict[str, _GpuState] = field(default_factory=dict)
    _procs: dict[tuple[str, int], _ProcessState] = field(default_factory=dict)  # (host, pid)
    _full_soon: set[str] = field(default_factory=set)  # GPUs whose episode has been alerted
    _paused_until: float | None = None

    def config_for(self, display_id: str) -> AlertConfig:
        return self.per_gpu.get(display_id, self.config)

    # -- pause ---------------------------------------------------------------------------
    def pause(self, until_monotonic: float) -> None:
        """No alerts until then ("Pause alerts for 1 h")."""
        self._paused_until = until_monotonic

    def resume(self) -> None:
        self._paused_until = None

    def paused(self, now: float) -> bool:
        return self._paused_until is not None and now < self._paused_until

    def rearmed(self, display_id: str) -> bool:
        """True when GPU ``display_id`` has not alerted or has since dropped below its
        re-arm level: its last memory alert no longer holds."""
        state = self._gpus.get(display_id)
        return state is None or state.armed

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self, snapshot: Snapshot) -> list[Alert]:
        now = snapshot.monotonic
        quiet = self.paused(now)
        alerts: list[Alert] = []
        own = _live_snapshots(snapshot)
        for host, gpu in live_gpus(snapshot):
            alert = self._memory(gpu, own[host], now, quiet, host)
            if alert is not None:
                alerts.append(alert)
        for key in [k for k in self._procs if k[0] not in own and k[0] not in _stale(snapshot)]:
            del self._procs[key]  # a host no longer watched: forget its processes
        for host, theirs in own.items():
            alerts.extend(self._process_alerts(theirs, now, quiet, host))
        alerts.extend(self._full_soon_alerts(own, now, quiet))
        return alerts

    def _full_soon_alerts(self, own: dict[str, Snapshot], now: float,
                          quiet: bool) -> list[Alert]:
        found = {d.gpu: (host, d) for host, theirs in own.items() for d in theirs.diagnoses
                 if getattr(d, "kind", None) == "full_soon" and d.gpu is not None}
        self._full_soon &= set(found)  # an episode that ended may alert again next time
        alerts: list[Alert] = []
        gpus = {g.display_id: g for theirs in own.values() for g in theirs.gpus}
        for display_id, (host, diag) in found.items():
            cfg = self.config_for(display_id)
            if display_id in self._full_soon or quiet or not cfg.enabled \
                    or not cfg.full_soon_alerts:
                continue
            self._full_soon.add(display_id)
            gpu = gpus.get(display_id)
            eta = diag.figures.get("seconds_to_full")
            alerts.append(Alert(
                "full_soon", display_id, on_host(host, diag.title),
                " ".join((*diag.evidence[1:3],)),
                level=gpu.memory_fraction if gpu else None,
                used=gpu.memory_used if gpu else None, total=gpu.memory_total if gpu else None,
                pid=diag.pid, time=now,
                seconds_to_full=float(eta) if isinstance(eta, (int, float)) else None,
                host=host))
        return alerts

    def _memory(self, gpu: GpuSample, snapshot: Snapshot, now: float,
                quiet: bool, host: str = LOCAL) -> Alert | None:
        cfg = self.config_for(gpu.display_id)
        state = self._gpus.setdefault(gpu.display_id, _GpuState())
        level = gpu.memory_fraction
        reserved = reserved_on(gpu, snapshot)
        if reserved is not None:  # a vLLM-like pool: watch what it leaves to the rest
            level = level_beside(gpu, reserved)
        if gpu.state is not DeviceState.OK or level is None:
            return None  # unknown is not "fine" but also not an alert of this kind
        if level < cfg.rearm:
            state.armed = True
            return None
        if not (cfg.enabled and level >= cfg.threshold and state.armed) or quiet:
            return None
        if state.last_alert is not None and now - state.last_alert < cfg.min_interval_s:
            return None
        state.armed = False
        state.last_alert = now
        top = tuple(TopProcess(p.pid, short_name(p), p.gpu_memory) for p in sorted(
            gpu.processes, key=lambda p: -(p.gpu_memory or 0))[:3])
        freeable = _freeable(gpu, snapshot.agents)
        title = on_host(host, f"GPU {split_id(gpu.display_id)[1]} at {level * 100:.0f} % "
                        "of its memory")
        parts = [f"{gpu.name}: {fmt_bytes(gpu.memory_used)} of {fmt_bytes(gpu.memory_total)} used."]
        if reserved is not None:
            title += " beside a server's reservation"
            parts.append(f"{reserved.text}; the rest is {level * 100:.0f} % used.")
        if top:
            parts.append("Top: " + ", ".join(
                f"{t.name} ({t.pid}) {fmt_bytes(t.gpu_memory)}" for t in top) + ".")
        if freeable:
            parts.append(f"Free cache could release about {fmt_bytes(freeable)}.")
        return Alert("memory", gpu.display_id, title, " ".join(parts), level=level,
                     used=gpu.memory_used, total=gpu.memory_total, top=top, freeable=freeable,
                     time=now, host=host)

    def _process_alerts(self, snapshot: Snapshot, now: float, quiet: bool,
                        host: str = LOCAL) -> list[Alert]:
        """``snapshot``: ``host``'s own (its pids are that host's)."""
        cfg = self.config
        alerts: list[Alert] = []
        if not snapshot.agents and not any(k[0] == host for k in self._procs):
            return alerts
        where = {p.pid: (p, g.display_id) for g in snapshot.gpus for p in g.processes
                 if p.pid in snapshot.agents}
        seen: set[tuple[str, int]] = set()
        for pid, report in snapshot.agents.items():
            seen.add((host, pid))
            state = self._procs.setdefault((host, pid), _ProcessState())
            ooms = _total(d.num_ooms for d in report.devices)
            if report.oom_events is not None:
                ooms = max(ooms or 0, report.oom_events)
            retries = _total(d.num_alloc_retries for d in report.devices)
            proc, display_id = where.get(pid, (None, None))
            name = short_name(proc) if proc is not None else f"pid {pid}"
            if (state.ooms.rose_and_due(ooms, now, cfg.min_interval_s)
                    and cfg.oom_alerts and not quiet):
                state.ooms.last_alert = now
                alerts.append(Alert(
                    "oom", display_id, on_host(host, f"{name} ran out of GPU memory"),
                    f"{name} ({pid}) hit CUDA out of memory ({ooms} so far).",
                    pid=pid, count=ooms, time=now, host=host))
            if (state.retries.rose_and_due(retries, now, cfg.min_interval_s)
                    and cfg.retry_alerts and not quiet):
                state.retries.last_alert = now
                alerts.append(Alert(
                    "alloc_retries", display_id, on_host(host, f"{name} is short of GPU memory"),
                    f"{name} ({pid}): the caching allocator had to free its cache and retry "
                    f"({retries} retries so far); an OOM may follow.",
                    pid=pid, count=retries, time=now, host=host))
        for key in [k for k in self._procs if k[0] == host and k not in seen]:
            del self._procs[key]  # the process left: forget it
        return alerts


def on_host(host: str, text: str) -> str:
    """``text`` naming its host: "gpu1 · GPU 0 at 92 % …"; this machine's as is."""
    return f"{host} · {text}" if host else text


def _live_snapshots(snapshot: Snapshot) -> dict[str, Snapshot]:
    """This machine's snapshot and every connected host's, by host key."""
    own = {LOCAL: snapshot}
    for view in snapshot.hosts:
        if view.connected and view.snapshot is not None:
            own[view.key] = view.snapshot
    return own


def _stale(snapshot: Snapshot) -> set[str]:
    """Hosts watched but not connected: their processes are kept, not judged."""
    return {v.key for v in snapshot.hosts if not v.connected}


def _freeable(gpu: GpuSample, agents: Any) -> int | None:
    total = 0
    known = False
    for proc in gpu.processes:
        report = agents.get(proc.pid) if agents else None
        if report is None:
            continue
        dev = report.device_for_gpu(gpu.index, gpu.uuid)
        if dev is not None and dev.cache is not None:
            total += dev.cache
            known = True
    return total if known else None


def _total(values: Any) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
