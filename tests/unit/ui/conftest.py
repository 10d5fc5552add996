"""Qt widget tests run headless (offscreen platform) with pytest-qt."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from app.ui.shell.qt_compat import guard_singleton_refcounts  # noqa: E402

guard_singleton_refcounts()  # a no-op unless this PySide6 build needs it

import pytest  # noqa: E402

from app.core.agents.events import EventFeed  # noqa: E402
from app.core.monitor.collector import Collector  # noqa: E402
from app.core.monitor.demo_source import DemoSource, scaled_scenario  # noqa: E402


class DemoFeed:
    """Demo snapshots on a fake clock: ``feed.step(n)`` advances 0.25 s per snapshot."""

    def __init__(self, **source_kwargs) -> None:
        self.t = [1000.0]
        self.source = DemoSource(clock=lambda: self.t[0], **source_kwargs)
        self.collector = Collector(self.source)

    def snapshot(self):
        snap = self.collector.collect()
        # The collector stamps real time; history must follow the fake clock.
        return dataclasses.replace(snap, monotonic=self.t[0],
                                   timestamp=self.source._epoch + self.t[0] - 1000.0)

    def step(self, window, n: int = 1, dt: float = 0.25):
        snap = None
        for _ in range(n):
            snap = self.snapshot()
            window.on_snapshot(snap)
            self.t[0] += dt
        return snap


class Ticks:
    """Snapshots into the window as the Collector delivers them: with the model
    events and policy decisions that are new since the previous one attached
    (the core event path), for tests that build their snapshots by hand."""

    def __init__(self, window, directory=None, policy=None) -> None:
        self.window = window
        self.feed = EventFeed(directory, policy)

    def __call__(self, snapshot) -> None:
        self.window.on_snapshot(self.feed.attach(snapshot))


@pytest.fixture
def demo_feed() -> DemoFeed:
    return DemoFeed()


@pytest.fixture
def big_feed() -> DemoFeed:
    gpus, procs = scaled_scenario(8, 64)
    return DemoFeed(gpus=gpus, processes=procs)


@pytest.fixture
def window(qtbot):
    """A main window on an empty history; tests drive refresh() themselves."""
    from app.core.monitor.history import History
    from app.ui.window.main_window import MainWindow

    w = MainWindow(History())
    w.display_timer.stop()
    qtbot.addWidget(w)
    return w
