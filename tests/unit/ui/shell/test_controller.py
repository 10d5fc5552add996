"""The controller's Qt adapter: answers from worker threads arrive as signals on
the GUI thread; refusals are signalled, not raised."""

from __future__ import annotations

import threading

from app.core.control.controller import AppController
from app.core.control.requests import FreeCache, Refusal
from app.ui.shell.controller import ControllerAdapter
from tests.unit.ui.agents.test_agent_views import FakeDirectory, snap, two_agents_on_gpu0


def test_signals_arrive_on_the_gui_thread_and_refusals_are_signalled(qtbot):
    fake = FakeDirectory(freed={10: 1 << 30}, block=True)
    adapter = ControllerAdapter(AppController(fake, settle_s=0.0))
    gpus, agents = two_agents_on_gpu0()
    adapter.on_snapshot(snap(gpus, agents))
    seen: list[tuple[str, int]] = []
    for name in ("started", "progress", "finished", "measured"):
        getattr(adapter, name).connect(
            lambda *args, name=name: seen.append((name, threading.get_ident())))
    refused = []
    adapter.refused.connect(lambda req, err: refused.append((req, err.code)))

    action = adapter.submit(FreeCache.of(10))
    assert action is not None and adapter.busy_pids() == {10}
    assert adapter.submit(FreeCache.of(10)) is None  # the double click
    assert refused == [(FreeCache.of(10), Refusal.BUSY)]
    fake.gate.set()
    qtbot.waitUntil(lambda: not adapter.busy_pids(), timeout=3000)
    adapter.on_snapshot(snap(gpus, agents, t=10.5))  # may have been sampled while it ran
    adapter.on_snapshot(snap(gpus, agents, t=11.0))
    assert [n for n, _ in seen] == ["started", "progress", "finished", "measured"]
    assert {t for _, t in seen} == {threading.get_ident()}
    assert fake.threads and threading.get_ident() not in fake.threads
    assert action.freed == 1 << 30 and action.measured
    adapter.core.close()
