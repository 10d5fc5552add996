"""Terminating a process from the window: the confirmation's text and buttons, the
process table's "Terminate…" and the detail view's button, real child processes
signalled through the controller, and refusals shown with their reason."""

from __future__ import annotations

import signal

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.core.agents.types import AgentReport, ModelInfo
from app.core.control.controller import AppController
from app.core.control.requests import Terminate
from app.core.monitor.history import History
from app.core.monitor.samples import GpuSample, Snapshot
from app.ui.shell.controller import ControllerAdapter
from app.ui.window.main_window import MainWindow
from app.ui.window.terminate_dialog import TerminateDialog, confirm_text
from tests.fakes.child_processes import GiB, sample_of, snapshot_of

MiB = 1 << 20


@pytest.fixture
def win(qtbot):
    """A window whose controller measures the release at the next snapshot."""
    w = MainWindow(History(), controller=ControllerAdapter(AppController(None, settle_s=0.0)))
    w.display_timer.stop()
    qtbot.addWidget(w)
    yield w
    w.controller.core.close()


def agent(pid: int, *names: str) -> AgentReport:
    models = tuple(ModelInfo(id=n, name=n, class_name="Net", params=1, param_bytes=GiB,
                             buffer_bytes=0, device="cuda:0", dtype="float16", training=False,
                             last_used=None) for n in names)
    return AgentReport(pid=pid, argv=("python", "train.py"), python="3.11", torch="2.5",
                       torch_status="loaded", cuda_initialized=True, allocator_backend="native",
                       devices=(), models=models)


# -- the confirmation ---------------------------------------------------------------------------
def test_the_text_names_the_process_its_vram_per_gpu_and_how_it_is_stopped():
    s0 = sample_of(1, 3 * GiB, create_time=1.0, command="python train.py --epochs 3")
    s1 = s0._replace(gpu_memory=512 * MiB)
    gpus = (GpuSample(0, "A", "GPU-0", 80 * GiB, None, None, processes=(s0,)),
            GpuSample(1, "A", "GPU-1", 80 * GiB, None, None, processes=(s1,)))
    text = confirm_text(Snapshot(0.0, 0.0, "nvml", "550", gpus), 1, 5.0)
    assert text.startswith("Terminate train.py (1)?")
    assert "Command: python train.py --epochs 3" in text
    assert "VRAM: 3.0 GiB on GPU 0, 512 MiB on GPU 1" in text
    assert "agent" not in text
    assert text.endswith("Terminate asks it to stop (SIGTERM); if it is still running after "
                         "5 s, kills it (SIGKILL).")


def test_the_text_warns_of_an_agents_models_and_shows_unknown_vram_as_na():
    snap = snapshot_of(sample_of(1, None, create_time=1.0))
    snap = Snapshot(snap.timestamp, snap.monotonic, snap.source, snap.driver_version, snap.gpus,
                    agents={1: agent(1, "unet", "vae", "clip", "t5")})
    text = confirm_text(snap, 1, 0.5)
    assert "VRAM: n/a on GPU 0" in text
    assert ("It has a VRAM Steward agent with 4 models (unet, vae, clip, …): unsaved work in "
            "it is lost.") in text
    assert "after 0.5 s, kills it (SIGKILL)" in text


def test_cancel_is_the_default_button(qtbot):
    dialog = TerminateDialog("Terminate x?")
    qtbot.addWidget(dialog)
    assert dialog.cancel_button.isDefault()
    assert not dialog.terminate_button.isDefault()
    box = dialog.findChild(QDialogButtonBox)
    assert box.buttonRole(dialog.terminate_button) == QDialogButtonBox.ButtonRole.AcceptRole
    assert box.buttonRole(dialog.cancel_button) == QDialogButtonBox.ButtonRole.RejectRole


# -- from the process table ---------------------------------------------------------------------
def test_terminate_from_the_table_confirms_then_sigterms(win, children, qtbot):
    proc = children.start()
    sample = sample_of(proc.pid, 2 * GiB)
    win.on_snapshot(snapshot_of(sample, used=10 * GiB))
    win.table.terminate_requested.emit(proc.pid, "")
    dialog = win.terminate_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.text_label.text().startswith(f"Terminate train.py ({proc.pid})?")
    dialog.terminate_button.click()
    qtbot.waitUntil(lambda: win.action_label.text().startswith("Terminated"), timeout=10_000)
    assert win.action_label.text().startswith(
        f"Terminated train.py ({proc.pid}) with SIGTERM in ")
    assert proc.wait(5) == -signal.SIGTERM
    assert win.terminate_dialog is None
    entry = win.activity.entries[0]
    assert (entry.process, entry.event) == (f"train.py ({proc.pid})", "Terminated (SIGTERM)")
    # The driver lists it no more: what it held is released (the first snapshot after
    # the answer may have been sampled before it).
    win.on_snapshot(snapshot_of(sample, used=10 * GiB, t=1.0))
    assert not win.action_label.text().endswith("released")
    win.on_snapshot(snapshot_of(used=8 * GiB, t=2.0))
    assert win.action_label.text().endswith(" — NVML: 2.0 GiB released")


def test_cancel_sends_nothing(win, children, qtbot):
    proc = children.start()
    win.on_snapshot(snapshot_of(sample_of(proc.pid)))
    dialog = win.terminate_process(proc.pid)
    dialog.cancel_button.click()
    assert win.terminate_dialog is None
    assert win.controller.core.running() == []
    qtbot.wait(50)
    assert proc.poll() is None


def test_another_users_process_is_refused_without_a_dialog(win, children):
    proc = children.start()
    win.on_snapshot(snapshot_of(sample_of(proc.pid, user="svc-llm")))
    win.table.terminate_requested.emit(proc.pid, "")
    assert win.terminate_dialog is None
    assert win.action_label.text() == (
        f"Could not terminate train.py ({proc.pid}): svc-llm's process: only your own "
        "processes can be terminated")
    assert win.activity.entries[0].event == "Refused: terminate"
    assert proc.poll() is None


def test_demo_processes_are_refused_as_simulated(window, demo_feed):
    snap = demo_feed.step(window, 2)
    pid = snap.gpus[0].processes[0].pid
    window.table.terminate_requested.emit(pid, "")
    assert window.terminate_dialog is None
    assert "simulated process (demo)" in window.action_label.text()
    assert window.controller.core.running() == []


def test_the_process_changing_before_the_click_is_refused(win, children, qtbot):
    first, second = children.start(), children.start()
    win.on_snapshot(snapshot_of(sample_of(first.pid)))
    dialog = win.terminate_process(first.pid)
    win.on_snapshot(snapshot_of(sample_of(second.pid)))  # it left meanwhile
    dialog.terminate_button.click()
    assert win.action_label.text().startswith(f"Could not terminate pid {first.pid}: no process")
    qtbot.wait(50)
    assert first.poll() is None and second.poll() is None


# -- from the detail view -----------------------------------------------------------------------
def test_the_detail_views_button_kills_a_process_that_ignores_sigterm(win, children, qtbot):
    proc = children.start(stubborn=True)
    snap = snapshot_of(sample_of(proc.pid))
    win.on_snapshot(Snapshot(snap.timestamp, snap.monotonic, snap.source, snap.driver_version,
                             snap.gpus, agents={proc.pid: agent(proc.pid, "net")}))
    view = win.open_details(proc.pid)
    view.request.disconnect()
    view.request.connect(lambda r: win.submit(Terminate(r.pid, grace_s=0.5))
                         if isinstance(r, Terminate) else win.submit(r))
    view.terminate_button.click()
    dialog = win.terminate_dialog
    assert "with 1 model (net): unsaved work in it is lost" in dialog.text_label.text()
    assert "after 0.5 s, kills it (SIGKILL)" in dialog.text_label.text()
    dialog.accept()
    assert view.result_label.text() == f"Terminating train.py ({proc.pid})…"
    qtbot.waitUntil(lambda: win.action_label.text().startswith("Killed"), timeout=10_000)
    assert win.action_label.text() == f"Killed train.py ({proc.pid}) with SIGKILL after 0.5 s"
    assert view.result_label.text() == win.action_label.text()
    assert proc.wait(5) == -signal.SIGKILL


def test_the_detail_views_button_sends_a_terminate_request(win, qtbot):
    view = win.open_details(4242)
    with qtbot.waitSignal(view.request) as sent:
        view.terminate_button.click()
    assert sent.args == [Terminate(4242)]


def test_the_tables_menu_opens_the_confirmation(win, children):
    proc = children.start()
    win.on_snapshot(snapshot_of(sample_of(proc.pid)))
    index = win.table.proxy.index(win.table.visible_row_of("0", proc.pid), 0)
    menu = win.table.menu_for(index)
    (action,) = [a for a in menu.actions() if a.text() == "Terminate…"]
    action.trigger()
    assert win.terminate_dialog is not None
    assert f"({proc.pid})?" in win.terminate_dialog.text_label.text()
    win.terminate_dialog.reject()
    assert proc.poll() is None
