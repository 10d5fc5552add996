"""The sampler thread: polls a source and hands snapshots to the GUI thread.

Every NVML and psutil call happens on this thread, and the stored history is
read here before the first tick; each snapshot is handed to the history
recorder (a queue: its writer thread does the SQLite work).  The folders
refused as not private (the state dir, checked here; runtime and registry
dirs, by the agent hub's own scans) reach the GUI thread as lines
(``notices_changed``).  The GUI thread only
receives finished, immutable :class:`~app.core.monitor.samples.Snapshot` objects through
a queued signal, so a slow driver call (NVML init without persistence mode, a
GPU falling off the bus) can delay samples but never freeze the window.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot

from app.core.agents.directory import AgentDirectory
from app.core.monitor.collector import Collector, default_agents_for
from app.core.monitor.samples import Snapshot
from app.core.monitor.source import GpuSource
from app.core.paths import state_notice
from app.core.policies.pressure import PolicyRunner
from app.core.remote.fleet import Fleet
from app.core.store.recorder import HistoryRecorder

log = logging.getLogger(__name__)

SourceFactory = Callable[[], GpuSource]
AgentsFactory = Callable[[GpuSource], "AgentDirectory | None"]
#: Reads the stored history (SQLite) on the sampler thread before the first tick.
HistoryLoader = Callable[[], object]


#: The sampler thread silent this long: the hosts are shown without it.
HELD_AFTER_S = 3.0
MIN_PERIOD_S = 0.1
MAX_PERIOD_S = 10.0
DEFAULT_PERIOD_S = 0.25


def clamp_period(period_s: float) -> float:
    return min(MAX_PERIOD_S, max(MIN_PERIOD_S, float(period_s)))


class _Worker(QObject):
    """Lives on the sampler thread; owns the collector and the poll timer."""

    snapshot_ready = Signal(object)
    history_loaded = Signal(object)
    notices_changed = Signal(object)

    def __init__(self, period_s: float, agents_for: AgentsFactory,
                 publish_agents: Callable[[AgentDirectory | None, PolicyRunner | None], None],
                 recorder: HistoryRecorder | None = None,
                 load_history: HistoryLoader | None = None, fleet: Fleet | None = None
                 ) -> None:
        super().__init__()
        self._fleet = fleet
        self._recorder = recorder
        self._load_history = load_history
        self._period_s = period_s
        self._collector: Collector | None = None
        self._timer: QTimer | None = None
        self._agents_for = agents_for
        self._publish_agents = publish_agents
        self._state_notice: str | None = None
        self._notices: list[str] = []

    @Slot()
    def begin(self) -> None:
        try:  # the state dir's check is filesystem I/O: here, never on the GUI thread
            self._state_notice = state_notice()
        except Exception:
            log.exception("checking the state directory failed")
        if self._load_history is not None:
            # Before any snapshot: the window seeds its history first (queued, in order).
            try:
                self.history_loaded.emit(self._load_history())
            except Exception:  # the stored history is an extra: sample without it
                log.exception("reading the stored history failed")
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self.tick)
        self._timer.start(int(self._period_s * 1000))

    @Slot(object)
    def use_source(self, factory: SourceFactory) -> None:
        self._close_collector()
        try:
            source = factory()
        except Exception:  # a broken factory must not kill the thread
            log.exception("creating the source failed")
            self._collector = None
            return
        try:
            agents = self._agents_for(source)
        except Exception:  # agents are an extra: the GPUs are still shown without them
            log.exception("creating the agent directory failed")
            agents = None
        self._collector = Collector(source, agents=agents)
        self._publish_agents(agents, self._collector.policy)
        self.tick()  # first figures at once, not one period later

    @Slot(float)
    def set_period(self, period_s: float) -> None:
        self._period_s = period_s
        if self._timer is not None:
            self._timer.setInterval(int(period_s * 1000))

    @Slot()
    def tick(self) -> None:
        if self._collector is None:
            return
        snapshot = self._collector.collect()
        if self._recorder is not None:
            self._recorder.observe(snapshot)  # queues it: the writer thread does the I/O
        if self._fleet is not None:  # what each host's own thread received: no I/O here
            snapshot = dataclasses.replace(snapshot, hosts=self._fleet.views())
        self.snapshot_ready.emit(snapshot)
        self._tell_notices()

    def _tell_notices(self) -> None:
        """The folders refused (the state dir's, and the hub's from its own
        registry scans: no I/O here), emitted when they change."""
        agents = self._collector.agents if self._collector is not None else None
        told = getattr(agents, "notices", None)
        lines = ([self._state_notice] if self._state_notice else []) + (
            list(told()) if callable(told) else [])
        if lines != self._notices:
            self._notices = lines
            self.notices_changed.emit(list(lines))

    @Slot()
    def finish(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._close_collector()
        thread = self.thread()
        if thread is not None:
            thread.quit()

    def _close_collector(self) -> None:
        self._publish_agents(None, None)  # before closing: no new action may start on it
        if self._collector is not None:
            try:
                self._collector.close()
            except Exception:
                log.exception("closing the source failed")
            self._collector = None


class Sampler(QObject):
    """GUI-thread handle on the sampler thread.

    ``snapshot_ready`` is emitted on the GUI thread (queued) with each Snapshot.
    """

    snapshot_ready = Signal(object)
    #: The lines about folders refused as not private (``list[str]``, maybe
    #: empty), each time they change.
    notices_changed = Signal(object)
    #: The stored history (``app.core.store.query.StoredHistory``), once, before
    #: the first snapshot, when a loader was given.
    history_loaded = Signal(object)
    _use_source = Signal(object)
    _set_period = Signal(float)
    _finish = Signal()

    def __init__(self, factory: SourceFactory, period_s: float = DEFAULT_PERIOD_S,
                 parent: QObject | None = None, agents_for: AgentsFactory | None = None,
                 recorder: HistoryRecorder | None = None,
                 load_history: HistoryLoader | None = None, fleet: Fleet | None = None
                 ) -> None:
        """``fleet``: the remote hosts whose views each snapshot carries."""
        super().__init__(parent)
        self.fleet = fleet
        self.period_s = clamp_period(period_s)
        self.source_name = ""
        self._factory = factory
        self._agents_lock = threading.Lock()
        self._agents: AgentDirectory | None = None
        self._policy: PolicyRunner | None = None
        self._thread = QThread()
        self._thread.setObjectName("vram-steward-sampler")
        self._worker = _Worker(self.period_s, agents_for or default_agents_for, self._set_agents,
                               recorder, load_history, fleet)
        self._worker.moveToThread(self._thread)
        self._worker.history_loaded.connect(self._forward_history,
                                            Qt.ConnectionType.QueuedConnection)
        self._thread.started.connect(self._worker.begin)
        self._worker.snapshot_ready.connect(self._forward, Qt.ConnectionType.QueuedConnection)
        self._worker.notices_changed.connect(self.notices_changed,
                                             Qt.ConnectionType.QueuedConnection)
        self._use_source.connect(self._worker.use_source, Qt.ConnectionType.QueuedConnection)
        self._set_period.connect(self._worker.set_period, Qt.ConnectionType.QueuedConnection)
        self._finish.connect(self._worker.finish, Qt.ConnectionType.QueuedConnection)
        self._started = False
        # Remote hosts must not wait on this machine's driver: while the sampler
        # thread is held in a call (a GPU falling off the bus), the hosts' views,
        # read without I/O, still come every second.
        self._last_at = time.monotonic()
        self._last: Snapshot | None = None
        self._stall_timer = QTimer(self)
        self._stall_timer.setInterval(1000)
        self._stall_timer.timeout.connect(self._hosts_while_held)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.fleet is not None:
            self.fleet.start()
            self._last_at = time.monotonic()
            self._stall_timer.start()
        self._thread.start()
        self._use_source.emit(self._factory)

    def switch_source(self, factory: SourceFactory) -> None:
        """Replace the source (e.g. "Show demo"); the old one is closed on the thread."""
        self._factory = factory
        self._use_source.emit(factory)

    def retry(self) -> None:
        self._use_source.emit(self._factory)

    def set_period(self, period_s: float) -> None:
        self.period_s = clamp_period(period_s)
        self._set_period.emit(self.period_s)

    def stop(self, timeout_ms: int = 3000) -> bool:
        """Stop and join the thread; False if a driver call kept it busy too long."""
        if not self._started:
            return True
        self._started = False
        self._stall_timer.stop()
        if self.fleet is not None:
            self.fleet.close()
        self._finish.emit()
        finished = self._thread.wait(timeout_ms)
        if not finished:
            log.warning("sampler thread did not stop within %d ms", timeout_ms)
        return finished

    @property
    def agents(self) -> AgentDirectory | None:
        """The current source's agent directory (None: none, or between sources).
        Safe from any thread; its ``free_cache`` blocks, so call that off the GUI thread."""
        with self._agents_lock:
            return self._agents

    @property
    def policy(self) -> PolicyRunner | None:
        """The current source's memory-pressure policy (it runs in the Collector)."""
        with self._agents_lock:
            return self._policy

    def _set_agents(self, agents: AgentDirectory | None,
                    policy: PolicyRunner | None = None) -> None:  # on the sampler thread
        with self._agents_lock:
            self._agents = agents
            self._policy = policy

    @Slot(object)
    def _forward(self, snapshot: object) -> None:
        self.source_name = getattr(snapshot, "source", "")
        if isinstance(snapshot, Snapshot):
            self._last, self._last_at = snapshot, time.monotonic()
        self.snapshot_ready.emit(snapshot)

    @Slot()
    def _hosts_while_held(self) -> None:
        """A snapshot of the hosts alone, with this machine's part an error,
        when the sampler thread has said nothing for ``HELD_AFTER_S``."""
        held = time.monotonic() - self._last_at
        if self.fleet is None or held < max(HELD_AFTER_S, 4 * self.period_s):
            return
        last = self._last
        self.snapshot_ready.emit(Snapshot(
            time.time(), time.monotonic(), last.source if last else "nvml",
            last.driver_version if last else None, (),
            f"this machine's sampler has not answered for {held:.0f} s (a driver call "
            "that does not return?)", hosts=self.fleet.views()))

    @Slot(object)
    def _forward_history(self, stored: object) -> None:
        self.history_loaded.emit(stored)

    @property
    def sampler_thread(self) -> QThread:
        return self._thread
