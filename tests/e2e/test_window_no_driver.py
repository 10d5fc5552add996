"""End to end: the window on a machine whose NVIDIA driver cannot be read,
with a real agent in a real CPU-torch process.

Built as the application builds it (``History``, a ``Sampler`` whose
``NvmlSource`` finds no library, ``ControllerAdapter``, ``MainWindow``),
offscreen, in this process.  The agent's process is a row of the table (its
VRAM n/a, saying why), the driver's problem is one line above it rather than
the whole window, the detail view lists its model, and an unload and a
reload sent from the window reach the agent and come back as events.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from app.core.control.records import ModelAction
from app.core.control.requests import Reload, Unload
from app.core.units import NA
from tests.e2e import remote_world as rw
from tests.e2e.remote_world import Agent, Host
from tests.e2e.test_window_hosts import Gui
from tests.fakes import fake_pynvml
from tests.fakes.nvml_abi import FakeNvml

pytestmark = pytest.mark.skipif(rw.unavailable_reason() is not None,
                                reason=rw.unavailable_reason() or "")

PERIOD_S = 0.25


@pytest.fixture
def world(qapp) -> Iterator[tuple[Gui, Any, Agent]]:
    from app.core.control.controller import AppController
    from app.core.monitor.history import History, HistoryConfig
    from app.core.monitor.nvml_source import NvmlSource
    from app.ui.settings.values import UiSettings
    from app.ui.shell.controller import ControllerAdapter
    from app.ui.shell.sampler import Sampler
    from app.ui.window.main_window import MainWindow

    host = Host(FakeNvml(gpus=[]))
    patch = pytest.MonkeyPatch()
    # the window looks for agents where this host's processes register them
    patch.setenv("VRAM_STEWARD_RUNTIME_DIR", host.runtime(os.getuid()))
    patch.setenv("VRAM_STEWARD_STATE_DIR", rw.private_dir(host.tmp, "window-state"))
    agent = sampler = controller = window = None
    try:
        agent = Agent(host, "agent")
        history = History(HistoryConfig(period_s=PERIOD_S))
        sampler = Sampler(lambda: NvmlSource(nvml=fake_pynvml.FakeNvml.no_library()), PERIOD_S)
        controller = ControllerAdapter(AppController(lambda: sampler.agents))
        window = MainWindow(history, settings=UiSettings(), controller=controller)
        sampler.snapshot_ready.connect(window.on_snapshot)
        window.resize(1366, 768)
        window.show()
        gui = Gui(qapp)
        sampler.start()
        yield gui, window, agent
    finally:
        if controller is not None:
            controller.wait(2.0)
            controller.core.close()
        if sampler is not None:
            sampler.stop()
        if window is not None:
            window.close()
        if agent is not None:
            agent.stop()
        patch.undo()
        host.close()


def _row(window: Any, pid: int) -> dict[str, str] | None:
    from app.ui.window.process_rows import COLUMNS, KEY_ROLE

    model = window.table.source_model
    for r in range(model.rowCount()):
        key = model.index(r, 0).data(KEY_ROLE)
        if isinstance(key[1], tuple) and key[1][0] == pid:
            return {name: model.index(r, c).data() for c, name in enumerate(COLUMNS)}
    return None


def _tip(window: Any, pid: int, column: str) -> str:
    from app.ui.window.process_rows import COLUMNS, KEY_ROLE

    model = window.table.source_model
    col = COLUMNS.index(column)
    for r in range(model.rowCount()):
        key = model.index(r, 0).data(KEY_ROLE)
        if isinstance(key[1], tuple) and key[1][0] == pid:
            return str(model.index(r, col).data(0x03))  # Qt.ToolTipRole
    return ""


def test_an_agent_without_a_driver_is_a_row_with_its_models_and_its_actions(world):
    gui, window, agent = world
    pid = agent.pid
    row = gui.until("the agent's process in the table", lambda: _row(window, pid), 60)
    # The window is not the "no driver" page: the problem is one line above the table.
    assert window.stack.currentWidget() is window.monitor_page
    assert window.local_problem.isVisible() and window.local_problem.reason
    assert not window.gpu_area.isVisible()  # no GPU to draw
    assert row["PID"] == str(pid)
    assert row["GPU"] == "no CUDA"  # CPU torch: no CUDA device in use
    assert row["VRAM"] == NA and "driver cannot be read" in _tip(window, pid, "VRAM")
    assert row["PyTorch"].startswith("2.")  # the agent says which torch
    assert os.path.basename(agent.script) in row["Command"]
    assert row["User"]  # the agent answers its own user only

    details = window.open_details(pid)
    gui.until("the model in the detail view", lambda: details.model_model.rowCount() == 1, 30)

    unloaded = window.submit(Unload(pid, "m1", to="disk"))
    assert isinstance(unloaded, ModelAction), unloaded
    gui.until("the unload to finish", lambda: unloaded.done_at is not None, 60)
    assert unloaded.result is not None and unloaded.result.ok, unloaded.result
    gui.until("the model offloaded in the snapshot", lambda: [
        m.state for m in window.latest.agents[pid].models] == ["offloaded"], 30)
    gui.until("the unload in the activity log", lambda: any(
        e.event.startswith("Unloaded") or "unload" in e.event.lower()
        for e in window.activity.entries), 30,
        why=lambda: [e.event for e in window.activity.entries])

    reloaded = window.submit(Reload(pid, "m1"))
    assert isinstance(reloaded, ModelAction), reloaded
    gui.until("the reload to finish", lambda: reloaded.done_at is not None, 60)
    assert reloaded.result is not None and reloaded.result.ok, reloaded.result
    gui.until("the model resident again", lambda: [
        m.state for m in window.latest.agents[pid].models] == ["resident"], 30)
    gui.check()
