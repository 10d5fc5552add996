"""The sampler thread: sources are read off the GUI thread, results arrive on it."""

from __future__ import annotations

import os
import threading
import time

import pytest
from PySide6.QtCore import QTimer

from app.core.monitor.demo_source import DemoSource
from app.core.monitor.samples import GpuSample, Snapshot
from app.core.monitor.source import GpuSource, SourceUnavailable
from app.ui.shell.sampler import MAX_PERIOD_S, MIN_PERIOD_S, Sampler, clamp_period


class RecordingSource(GpuSource):
    """Records which thread reads it; can be made slow or broken."""

    name = "nvml"
    wants_host_details = False

    def __init__(self, delay_s: float = 0.0, fail_open: str | None = None) -> None:
        self.delay_s = delay_s
        self.fail_open = fail_open
        self.read_threads: set[int] = set()
        self.open_threads: set[int] = set()
        self.closed = threading.Event()
        self.reads = 0

    def open(self) -> None:
        self.open_threads.add(threading.get_ident())
        if self.fail_open:
            raise SourceUnavailable(self.fail_open, "no_library")

    def read(self) -> tuple[GpuSample, ...]:
        self.read_threads.add(threading.get_ident())
        self.reads += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return (GpuSample(0, "Fake GPU", "GPU-x", 100, 40, 60),)

    def close(self) -> None:
        self.closed.set()


@pytest.fixture
def make_sampler(qapp):
    made: list[Sampler] = []

    def make(factory, period_s=0.1):
        sampler = Sampler(factory, period_s)
        made.append(sampler)
        return sampler

    yield make
    for sampler in made:
        sampler.stop()


def test_reads_happen_off_the_gui_thread_and_arrive_on_it(qtbot, make_sampler):
    source = RecordingSource()
    sampler = make_sampler(lambda: source)
    received: list[tuple[Snapshot, int]] = []
    sampler.snapshot_ready.connect(lambda s: received.append((s, threading.get_ident())))
    sampler.start()
    qtbot.waitUntil(lambda: len(received) >= 3, timeout=3000)

    gui_thread = threading.get_ident()
    assert gui_thread not in source.open_threads
    assert gui_thread not in source.read_threads
    assert all(thread == gui_thread for _, thread in received)
    snapshot = received[0][0]
    assert snapshot.gpus[0].memory_used == 40
    assert sampler.source_name == "nvml"


def test_a_slow_driver_call_does_not_freeze_the_gui(qtbot, make_sampler):
    source = RecordingSource(delay_s=0.6)
    sampler = make_sampler(lambda: source)
    sampler.start()
    qtbot.waitUntil(lambda: source.reads >= 1, timeout=3000)

    # While the sampler thread sleeps inside read(), GUI timers keep firing.
    ticks: list[float] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    qtbot.wait(400)
    timer.stop()
    assert len(ticks) >= 10
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < 0.2


def test_source_unavailable_becomes_an_error_snapshot(qtbot, make_sampler):
    source = RecordingSource(fail_open="NVIDIA driver not found")
    sampler = make_sampler(lambda: source)
    with qtbot.waitSignal(sampler.snapshot_ready, timeout=3000) as blocker:
        sampler.start()
    snapshot = blocker.args[0]
    assert snapshot.gpus == ()
    assert snapshot.error == "NVIDIA driver not found"


def test_switch_source_closes_the_old_one_and_reads_the_new(qtbot, make_sampler):
    first = RecordingSource()
    sampler = make_sampler(lambda: first)
    sampler.start()
    qtbot.waitUntil(lambda: first.reads >= 1, timeout=3000)

    seen: list[str] = []
    sampler.snapshot_ready.connect(lambda s: seen.append(s.source))
    sampler.switch_source(lambda: DemoSource(seed=1))
    qtbot.waitUntil(lambda: "demo" in seen, timeout=3000)
    assert first.closed.is_set()


def test_period_can_change_while_running(qtbot, make_sampler):
    source = RecordingSource()
    sampler = make_sampler(lambda: source, period_s=1.0)
    sampler.start()
    qtbot.waitUntil(lambda: source.reads >= 1, timeout=3000)
    before = source.reads
    qtbot.wait(300)
    assert source.reads - before <= 1  # 1 s period: at most one more read
    sampler.set_period(0.1)
    qtbot.waitUntil(lambda: source.reads - before >= 4, timeout=3000)


def test_stop_joins_the_thread_and_closes_the_source(qtbot, make_sampler):
    source = RecordingSource()
    sampler = make_sampler(lambda: source)
    sampler.start()
    qtbot.waitUntil(lambda: source.reads >= 1, timeout=3000)
    assert sampler.stop() is True
    assert source.closed.is_set()
    assert not sampler.sampler_thread.isRunning()


@pytest.mark.parametrize("asked, expected", [(0.01, MIN_PERIOD_S), (0.25, 0.25), (60, MAX_PERIOD_S)])
def test_period_is_clamped_to_the_supported_range(asked, expected):
    assert clamp_period(asked) == expected


class _Directory:
    """Stands in for an AgentDirectory: only identity and close matter here."""

    def __init__(self, name):
        self.name = name

    def start(self):
        pass

    def reports(self):
        return {}

    def close(self):
        pass


def test_sampler_exposes_the_current_agent_directory(qtbot, make_sampler):
    made = []

    def agents_for(source):
        made.append(_Directory(f"dir{len(made)}"))
        return made[-1]

    sampler = Sampler(lambda: RecordingSource(), 0.1, agents_for=agents_for)
    assert sampler.agents is None
    sampler.start()
    try:
        qtbot.waitUntil(lambda: sampler.agents is not None, timeout=3000)
        first = sampler.agents
        assert first is made[0]
        sampler.switch_source(lambda: RecordingSource())
        qtbot.waitUntil(lambda: sampler.agents is not None and sampler.agents is not first,
                        timeout=3000)
        assert sampler.agents is made[1]
    finally:
        sampler.stop()
    assert sampler.agents is None  # closed with the collector


def test_a_failing_agent_factory_still_samples(qtbot, make_sampler):
    def agents_for(source):
        raise RuntimeError("no agents today")

    sampler = Sampler(lambda: RecordingSource(), 0.1, agents_for=agents_for)
    try:
        with qtbot.waitSignal(sampler.snapshot_ready, timeout=3000) as blocker:
            sampler.start()
        assert blocker.args[0].gpus and sampler.agents is None
    finally:
        sampler.stop()


def test_folders_refused_reach_the_gui_thread_as_lines(qtbot, qapp, tmp_path, monkeypatch):
    """The state dir's check runs on the sampler thread; the hub's lines (its own
    scans) come along; the window shows them in a banner that stays."""
    from app.core.monitor.history import History, HistoryConfig
    from app.ui.window.main_window import MainWindow
    from tests.fakes.directories import EmptyDirectory

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(shared))

    class Refusing(EmptyDirectory):
        def notices(self):
            return ["vram-steward: /tmp/vram-steward-0 belongs to uid 1001, not you: using "
                    "/tmp/vram-steward-0-k3j2ab instead"]

    sampler = Sampler(lambda: RecordingSource(), 0.1, agents_for=lambda _s: Refusing())
    window = MainWindow(History(HistoryConfig(period_s=0.1)))
    qtbot.addWidget(window)
    sampler.notices_changed.connect(window.show_folder_notices)
    seen: list[tuple[list[str], int]] = []
    sampler.notices_changed.connect(lambda lines: seen.append((lines, threading.get_ident())))
    try:
        sampler.start()
        qtbot.waitUntil(lambda: bool(seen), timeout=3000)
        time.sleep(0.3)  # more ticks: the same lines are not sent again
    finally:
        sampler.stop()
    lines, thread = seen[-1]
    assert len(seen) == 1 and thread == threading.get_ident()
    assert lines == [f"vram-steward: {shared} (VRAM_STEWARD_STATE_DIR) is open to group/others "
                     "(mode 777): refused; history, OOM reports, recordings and agent.log are "
                     "neither read nor written there",
                     Refusing().notices()[0]]
    window.show()
    banner = window.folder_banner
    assert banner.isVisible() and banner.body.text() == "\n".join(lines)
    assert "2 folders were refused" in banner.title.text()
    window.show_folder_notices([])
    assert not banner.isVisible()
    assert os.listdir(shared) == []  # nothing written there


class HeldSource(RecordingSource):
    """Reads once, then holds the next read until released (a driver call that hangs)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def read(self) -> tuple[GpuSample, ...]:
        if self.reads >= 1:
            self.release.wait(20)
        return super().read()


class FleetStub:
    """What the sampler reads of the remote hosts: views, without I/O."""

    def __init__(self) -> None:
        from app.core.monitor.hosts import CONNECTED, HostView

        self.view = HostView("gpu1", "ssh://gpu1", CONNECTED)
        self.started = self.closed = False

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        self.closed = True

    def views(self):
        return (self.view,)


def test_the_hosts_keep_coming_while_this_machines_driver_holds_the_sampler(qapp, qtbot):
    source, fleet = HeldSource(), FleetStub()
    sampler = Sampler(lambda: source, 0.1, fleet=fleet)
    seen: list[Snapshot] = []
    sampler.snapshot_ready.connect(seen.append)
    try:
        sampler.start()
        qtbot.waitUntil(lambda: any(s.gpus for s in seen), timeout=5000)
        qtbot.waitUntil(lambda: any(s.error and s.hosts for s in seen), timeout=8000)
        held = next(s for s in seen if s.error and s.hosts)
        assert held.gpus == () and held.hosts == (fleet.view,)
        assert "sampler has not answered" in held.error
        source.release.set()
        count = len(seen)
        qtbot.waitUntil(lambda: any(s.gpus for s in seen[count:]), timeout=5000)
    finally:
        source.release.set()
        assert sampler.stop()
    assert fleet.started and fleet.closed
