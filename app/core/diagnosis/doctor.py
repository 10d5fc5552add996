"""The doctor: every current diagnosis, and OOM post-mortems, from the snapshots.

``Doctor.observe(snapshot)`` runs on the sampler thread once per tick and
returns the snapshot with ``diagnoses`` (everything that holds now) and
``oom_reports`` (post-mortems new since the previous tick).  Per tick it
only looks for new OOM captures; every ``evaluate_every_s`` it samples each
process's figures into bounded series and re-evaluates trends, step growth,
advice and the GPUs' "full soon" forecast: O(processes).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.agents.types import AgentReport
from app.core.diagnosis import advice as rules
from app.core.diagnosis import findings
from app.core.diagnosis.agentless import AgentlessEnv, AgentlessFinder, no_agent
from app.core.diagnosis.forecast import FullSoon, seconds_to_full
from app.core.diagnosis.oom_report import LeakHint, build_report, report_id
from app.core.diagnosis.server_advice import idle_server_models
from app.core.diagnosis.step_growth import StepConfig, StepGrowth, step_growth
from app.core.diagnosis.tf_maps import TfDetector
from app.core.diagnosis.trends import Series, Trend, TrendConfig
from app.core.diagnosis.types import KINDS, Diagnosis, OomReport
from app.core.monitor.samples import GpuSample, HostStatus, ProcessSample, Snapshot
from app.core.paths import UnsafeDir
from app.core.servers.types import holding

if TYPE_CHECKING:
    from app.core.diagnosis.forecast import ForecastConfig
    from app.core.diagnosis.report_store import ReportStore
    from app.core.store.query import StoredHistory

log = logging.getLogger(__name__)

_ORDER = {k: i for i, k in enumerate(KINDS)}


@dataclass(frozen=True, slots=True)
class DoctorConfig:
    trends: TrendConfig = field(default_factory=TrendConfig)
    steps: StepConfig = field(default_factory=StepConfig)
    forecast: ForecastConfig | None = None  # None: ForecastConfig()
    advice: rules.AdviceConfig = field(default_factory=rules.AdviceConfig)
    evaluate_every_s: float = 2.0
    keep_snapshots: int = 8  # recent snapshots an OOM capture is joined with
    oom_shown_s: float = 3600.0  # an OOM report stays a current diagnosis this long
    forget_after_s: float = 120.0  # a process unseen this long loses its series


@dataclass(frozen=True, slots=True)
class Firing:
    """One "full soon" episode: when it fired and, once over, when it cleared."""

    gpu: str
    title: str
    fired_at: float
    seconds_to_full: float
    cleared_at: float | None = None
    pid: int | None = None  # the process growing most when it fired (None: no one alone)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "full_soon", "gpu": self.gpu, "title": self.title,
                "fired_at": self.fired_at, "seconds_to_full": self.seconds_to_full,
                "cleared_at": self.cleared_at, "pid": self.pid}


@dataclass(slots=True)
class _Proc:
    nvml: Series
    allocated: Series
    zero_since: float | None = None  # first of the current run of SM 0 % readings
    retries: int | None = None  # allocation retries at the last evaluation
    ooms: int | None = None  # and OOMs
    retries_rose_at: float | None = None
    last_seen: float = 0.0
    trend: Trend | None = None  # the last evaluated trend that counts (leaking or not)
    leak_since: float | None = None
    steps: StepGrowth | None = None


class Doctor:
    def __init__(self, config: DoctorConfig | None = None, store: ReportStore | None = None,
                 demo: bool = False) -> None:
        """``store``: where OOM reports are saved (None: kept in memory only);
        ``demo``: reports are marked as the demo's."""
        from app.core.diagnosis.forecast import ForecastConfig

        self.config = config or DoctorConfig()
        self.store = store
        self.demo = demo
        self._full = FullSoon(self.config.forecast or ForecastConfig())
        self._procs: dict[tuple[str, int, float | None], _Proc] = {}
        self._gpus: dict[str, Series] = {}
        self._snapshots: collections.deque[Snapshot] = collections.deque(
            maxlen=self.config.keep_snapshots)
        self._seen_ooms: collections.OrderedDict[tuple[int, float | None, int], None] = \
            collections.OrderedDict()
        self._tf = TfDetector()
        self._agentless = AgentlessFinder()
        self._last_eval: float | None = None
        self._diagnoses: tuple[Diagnosis, ...] = ()
        #: OOM reports made in this run, oldest first (bounded).
        self.reports: collections.deque[OomReport] = collections.deque(maxlen=50)
        #: "full soon" episodes, oldest first (bounded).
        self.firings: collections.deque[Firing] = collections.deque(maxlen=100)

    # -- the tick --------------------------------------------------------------------
    def observe(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the current diagnoses and the new OOM reports.  Never raises."""
        try:
            if snapshot.gpus:
                self._snapshots.append(snapshot)
            new = self._ooms(snapshot)
            now = snapshot.timestamp
            if snapshot.gpus and (self._last_eval is None or now < self._last_eval
                                  or now - self._last_eval >= self.config.evaluate_every_s):
                self._last_eval = now
                self._diagnoses = self._evaluate(snapshot, now)
            return dataclasses.replace(snapshot, diagnoses=self._diagnoses + self._oom_diagnoses(
                now), oom_reports=tuple(new))
        except Exception:
            log.exception("the doctor failed on a snapshot")
            return snapshot

    def seed(self, history: StoredHistory) -> None:
        """Start the series from stored history (NVML figures; epoch seconds)."""
        cfg = self.config.trends
        for uuid, gs in history.gpus.items():
            series = self._gpus.setdefault(uuid, Series(cfg))
            for t, v in zip(gs.t.tolist(), gs.used.tolist()):
                if math.isfinite(v):
                    series.add(t, v)
        for ps in history.processes:
            key = (ps.gpu_uuid, ps.pid, ps.create_time)
            st = self._procs.setdefault(key, _Proc(Series(cfg), Series(cfg)))
            for t, v in zip(ps.t.tolist(), ps.bytes.tolist()):
                if math.isfinite(v):
                    st.nvml.add(t, v)
            if len(ps.t):
                st.last_seen = float(ps.t[-1])

    # -- OOM post-mortems --------------------------------------------------------------
    def _ooms(self, snapshot: Snapshot) -> list[OomReport]:
        new: list[OomReport] = []
        for pid, report in snapshot.agents.items():
            captures = getattr(report, "ooms", ())
            create = self._create_time(pid) if captures else None
            for capture in captures:
                key = (pid, create, capture.seq)
                if key in self._seen_ooms:
                    continue
                self._seen_ooms[key] = None
                while len(self._seen_ooms) > 1000:
                    self._seen_ooms.popitem(last=False)
                rid = report_id(capture, pid)
                if self.store is not None and self.store.exists(rid):
                    continue  # reported by an earlier run
                made = build_report(capture, pid, list(self._snapshots), report,
                                    self._leak_hint(pid, create), self.demo)
                if self.store is not None:
                    try:
                        self.store.save(made)
                    except UnsafeDir as exc:  # the window and the CLI say so once
                        log.warning("OOM report %s not saved: %s", made.id, exc)
                    except OSError:
                        log.exception("could not save OOM report %s", made.id)
                self.reports.append(made)
                new.append(made)
        return new

    def _create_time(self, pid: int) -> float | None:
        for snap in reversed(self._snapshots):
            for gpu in snap.gpus:
                for p in gpu.processes:
                    if p.pid == pid:
                        return p.create_time
        return None

    def _leak_hint(self, pid: int, create_time: float | None) -> LeakHint | None:
        for (_, p, c), st in self._procs.items():
            if p != pid or c != create_time:
                continue
            rate = st.trend.rate if st.trend is not None and st.trend.leaking else None
            per_step = st.steps.bytes_per_step if st.steps is not None else None
            if rate is not None or per_step is not None:
                return LeakHint(rate, per_step)
        return None

    def _oom_diagnoses(self, now: float) -> tuple[Diagnosis, ...]:
        out = []
        for r in reversed(self.reports):
            if now - r.time > self.config.oom_shown_s:
                continue
            out.append(Diagnosis(
                "oom", "critical", r.title, r.explanation, r.fixes, gpu=r.gpu,
                gpu_uuid=r.gpu_uuid, pid=r.pid, command=r.command, since=r.time,
                figures={"request_bytes": r.request, "memory_used_bytes": r.memory_used,
                         "memory_total_bytes": r.memory_total}, report_id=r.id))
        return tuple(out)

    # -- evaluation --------------------------------------------------------------------
    def _evaluate(self, snapshot: Snapshot, now: float) -> tuple[Diagnosis, ...]:
        out: list[Diagnosis] = []
        live_gpus: set[str] = set()
        for gpu in snapshot.gpus:
            gkey = gpu.uuid or gpu.display_id
            live_gpus.add(gpu.display_id)
            series = self._gpus.setdefault(gkey, Series(self.config.trends))
            if gpu.memory_used is not None:
                series.add(now, gpu.memory_used)
            growers: list[findings.Grower] = []
            caches: list[tuple[ProcessSample, int]] = []
            for proc in gpu.processes:
                report = snapshot.agents.get(proc.pid)
                out.extend(self._process(gpu, gkey, proc, report, now, growers, caches))
            out.extend(self._forecast(gpu, series, now, growers, caches))
        out.extend(self._agentless_findings(snapshot))
        out.extend(idle_server_models(snapshot, self.config.advice.model_idle_s))
        self._full.forget(live_gpus)
        for key in [k for k, st in self._procs.items()
                    if now - st.last_seen > self.config.forget_after_s]:
            del self._procs[key]
        out.sort(key=lambda d: (_ORDER.get(d.kind, 99), d.gpu or "", d.pid or 0))
        return tuple(out)

    def _agentless_findings(self, snapshot: Snapshot) -> list[Diagnosis]:
        """PyTorch processes holding VRAM without an agent, one finding per environment
        (a model server's are controlled through its API instead)."""
        by_env: dict[AgentlessEnv, list[tuple[GpuSample, ProcessSample]]] = {}
        for gpu in snapshot.gpus:
            for proc in gpu.processes:
                if (proc.pid in snapshot.agents or not proc.gpu_memory
                        or proc.host_status is not HostStatus.OK
                        or holding(snapshot.servers, proc.pid) is not None):
                    continue
                env = self._agentless.torch_env(proc.pid, proc.create_time)
                if env is not None:
                    by_env.setdefault(env, []).append((gpu, proc))
        return [no_agent(found, env) for env, found in by_env.items()]

    def _process(self, gpu: GpuSample, gkey: str, proc: ProcessSample,
                 report: AgentReport | None, now: float, growers: list[findings.Grower],
                 caches: list[tuple[ProcessSample, int]]) -> list[Diagnosis]:
        cfg = self.config
        key = (gkey, proc.pid, proc.create_time)
        st = self._procs.get(key)
        if st is None:
            st = self._procs[key] = _Proc(Series(cfg.trends), Series(cfg.trends))
        st.last_seen = now
        dev = report.device_for_gpu(gpu.index, gpu.uuid) if report is not None else None
        if proc.gpu_memory is not None:
            st.nvml.add(now, proc.gpu_memory)
        if dev is not None and dev.allocated is not None:
            st.allocated.add(now, dev.allocated)
        if proc.sm_util is not None:  # None is unknown: it neither starts nor stops the clock
            if proc.sm_util > 0:
                st.zero_since = None
            elif st.zero_since is None:
                st.zero_since = now
        if dev is not None and dev.num_alloc_retries is not None:
            # A retry that ended in an OOM is the OOM's, not news of fragmentation.
            ooms = dev.num_ooms or 0
            if st.retries is not None and \
                    dev.num_alloc_retries - st.retries > ooms - (st.ooms or 0):
                st.retries_rose_at = now
            st.retries, st.ooms = dev.num_alloc_retries, ooms
        out: list[Diagnosis] = []
        # Trend: live tensors where an agent reports them for long enough, else NVML.
        nvml_trend = st.nvml.trend(now)
        alloc_trend = st.allocated.trend(now)
        use_alloc = alloc_trend is not None and alloc_trend.span_s >= cfg.trends.min_span_s
        trend, basis = (alloc_trend, "allocated") if use_alloc else (nvml_trend, "nvml")
        st.trend = trend
        if trend is not None and trend.leaking:
            st.leak_since = st.leak_since or now
            out.append(findings.leak(gpu, proc, trend, basis, st.leak_since))
            rate = nvml_trend.rate if nvml_trend is not None and nvml_trend.rate > 0 \
                else trend.rate
            growers.append(findings.Grower(proc, rate))
        else:
            st.leak_since = None
        st.steps = None
        if report is not None and dev is not None:
            for growth in step_growth(report.steps, cfg.steps):
                if growth.device == dev.index and growth.rising:
                    st.steps = growth
                    out.append(findings.step_leak(gpu, proc, growth))
            if dev.cache is not None and dev.cache >= cfg.advice.idle_cache_min_bytes:
                caches.append((proc, dev.cache))
        window = cfg.trends.window_s
        view = rules.ProcessView(
            gpu, proc, report, dev,
            now - st.zero_since if st.zero_since is not None else None,
            st.retries_rose_at is not None and now - st.retries_rose_at <= window)
        out.extend(d for d in (rules.idle_cache(view, now, cfg.advice),
                               rules.fragmentation(view, cfg.advice),
                               rules.idle_process(view, cfg.advice),
                               rules.idle_models(view, now, cfg.advice)) if d is not None)
        held, total = proc.gpu_memory, gpu.memory_total
        if (held is not None and total and held >= cfg.advice.tf_share * total
                and proc.host_status is not HostStatus.SIMULATED):
            is_tf = self._tf.is_tensorflow(proc.pid, proc.create_time)
            found = rules.tensorflow(view, is_tf, cfg.advice)
            if found is not None:
                out.append(found)
        return out

    def _forecast(self, gpu: GpuSample, series: Series, now: float,
                  growers: list[findings.Grower],
                  caches: list[tuple[ProcessSample, int]]) -> list[Diagnosis]:
        rate = sum(g.rate for g in growers)
        if not growers:
            own = series.trend(now)
            rate = own.rate if own is not None and own.leaking else 0.0
        capacity = None
        if gpu.memory_total is not None:
            capacity = gpu.memory_total - (gpu.memory_reserved or 0)
        # The recent peak, since the growers started: a peak of processes gone
        # before them (a crashed earlier life) is not where this growth starts.
        since = now - self._full.config.peak_window_s
        for g in growers:
            st = self._procs.get((gpu.uuid or gpu.display_id, g.proc.pid, g.proc.create_time))
            first = st.nvml.first_time if st is not None else None
            if first is not None:
                since = max(since, first)
        peak = series.peak(since)
        eta = seconds_to_full(capacity, peak, rate)
        was_active = self._full.fired_at(gpu.display_id) is not None
        active, fired = self._full.update(gpu.display_id, eta, now)
        if was_active and not active:
            for i in range(len(self.firings) - 1, -1, -1):
                if self.firings[i].gpu == gpu.display_id and self.firings[i].cleared_at is None:
                    self.firings[i] = dataclasses.replace(self.firings[i], cleared_at=now)
                    break
        if not active or eta is None or capacity is None or peak is None:
            return []
        found = findings.full_soon(gpu, eta, rate, peak, capacity, growers,
                                   self._full.fired_at(gpu.display_id),
                                   sorted(caches, key=lambda c: -c[1]))
        if fired:
            self.firings.append(Firing(gpu.display_id, found.title, now, eta, pid=found.pid))
        return [found]
