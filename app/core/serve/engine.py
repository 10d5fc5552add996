"""The server's sampler: the window's core, on a plain thread.

One thread ticks the :class:`Collector` (NVML, psutil, agents' reports, the
pressure policy, the doctor) every period and hands each snapshot to the
history recorder, as the window's sampler thread does; readers (the API,
the stream, ``/metrics``) get the latest :class:`ServeState` without I/O,
and a stream waits on :meth:`ServeEngine.wait_newer`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from app.core.agents.directory import AgentDirectory
from app.core.monitor.collector import Collector
from app.core.monitor.samples import Snapshot
from app.core.monitor.source import GpuSource
from app.core.policies.pressure import PolicyRunner, PressurePolicyConfig
from app.core.serve.state import ServeState
from app.core.store.recorder import HistoryRecorder

log = logging.getLogger(__name__)

#: Seconds a process's host figures (CPU %, RSS) and its SM % are kept between
#: reads of /proc and of the driver's samples (NVML's memory figures: every tick).
HOST_REFRESH_S = 1.0


class ServeEngine:
    """Owns the collector, its agents and the recorder; ticks on its own thread."""

    def __init__(self, source: GpuSource, agents: AgentDirectory | None,
                 period_s: float = 0.25, policy: PressurePolicyConfig | bool = True,
                 recorder: HistoryRecorder | None = None,
                 on_notice: Callable[[str], None] | None = None) -> None:
        self.period_s = period_s
        self.agents = agents
        runner: PolicyRunner | bool = False
        if agents is not None:
            # Off (--no-auto-unload, the root service's default) is a runner that is
            # disabled, so the policy can be turned on later (``set_policy``).
            config = policy if isinstance(policy, PressurePolicyConfig) else \
                PressurePolicyConfig(enabled=policy is not False)
            runner = PolicyRunner(agents, config)
        # Processes' CPU % and RSS once a second: most of a tick's cost at 8 x 64,
        # and a rate over a second reads better than one over a quarter.
        self.collector = Collector(source, agents=agents, pressure_policy=runner,
                                   host_refresh_s=HOST_REFRESH_S)
        self.recorder = recorder
        self._on_notice = on_notice
        self._told: set[str] = set()
        self._cond = threading.Condition()
        self._state = ServeState(None, 0, {}, time.time())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vram-steward-serve",
                                        daemon=True)
        #: Seconds each tick took (collector and bookkeeping), for the benchmark.
        self.last_tick_s = 0.0

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread and close everything; safe to call twice."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        if self.recorder is not None:
            self.recorder.close()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- readers (any thread, no I/O) ------------------------------------------------
    def state(self) -> ServeState:
        return self._state

    def wait_newer(self, seq: int, timeout_s: float) -> ServeState:
        """The first state after ``seq`` (or the current one after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._state.seq <= seq and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._state

    # -- the thread -------------------------------------------------------------
    def _run(self) -> None:
        next_at = time.monotonic()
        try:
            while not self._stop.is_set():
                started = time.perf_counter()
                self._tick()
                self.last_tick_s = time.perf_counter() - started
                next_at += self.period_s
                now = time.monotonic()
                if next_at < now:  # a slow tick (NVML init): start again from now
                    next_at = now
                self._stop.wait(next_at - now)
        finally:
            try:
                self.collector.close()
            except Exception:
                log.exception("closing the collector failed")

    def _tick(self) -> None:
        snapshot = self.collector.collect()
        if self.recorder is not None:
            self.recorder.observe(snapshot)
        self._publish(snapshot)
        self._tell_notices()

    def _publish(self, snapshot: Snapshot) -> None:
        old = self._state
        oom_total = dict(old.oom_total)
        for report in snapshot.oom_reports:
            key = (report.gpu or "", report.gpu_uuid or "")
            oom_total[key] = oom_total.get(key, 0) + 1
        with self._cond:
            self._state = ServeState(snapshot, old.seq + 1, oom_total, old.started_at)
            self._cond.notify_all()

    def _tell_notices(self) -> None:
        lines = []
        if self.agents is not None:
            try:
                lines = self.agents.notices()
            except Exception:
                log.exception("reading the agent directory's notices failed")
        if self.recorder is not None and self.recorder.message:
            lines.append(self.recorder.message)
        for line in lines:
            if line not in self._told:
                self._told.add(line)
                if self._on_notice is not None:
                    self._on_notice(line)
