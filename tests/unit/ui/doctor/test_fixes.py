"""Each fix gets the control that fits it: "Terminate…" through the window's
confirmation, "Record…" to the detail view's recording section, "Copy" with the
exact setting, and no button for advice; the OOM dialog's fixes all reachable."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel

from app.core.control.requests import RecordAllocations, Terminate
from app.core.control.terminate import current_user
from app.core.diagnosis.types import Diagnosis, Fix
from app.core.units import GiB
from app.ui.doctor.fixes import FixList
from app.ui.doctor.oom_dialog import SCREEN_SHARE, OomDialog
from tests.unit.ui.doctor.samples import NOW, gpus, oom_report, snapshot

EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
TF_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH=true"


def owned(snap, user):
    """``snap`` with every process owned by ``user``."""
    g0, g1 = gpus()
    procs = tuple(p._replace(user=user) for p in g0.processes)
    return dataclasses.replace(snap, gpus=(dataclasses.replace(g0, processes=procs), g1))


def finding(*fixes, pid=23890):
    return Diagnosis("idle_process", "info", "serve_embeddings.py holds 6.0 GiB, idle",
                     ("SM use 0 % for 30 min",), tuple(fixes), gpu="0", pid=pid,
                     command="serve_embeddings.py", since=NOW - 1800)


def stop(pid=23890):
    return Fix("stop_process", f"End serve_embeddings.py (pid {pid}): gives 6.0 GiB",
               6 * GiB, pid)


def test_terminate_opens_the_windows_confirmation_for_that_pid(window, monkeypatch):
    sent = []
    monkeypatch.setattr(window.controller.core, "submit", sent.append)  # nothing signalled
    window.on_snapshot(owned(snapshot([finding(stop())]), current_user()))
    card = window.doctor.cards[("", "idle_process", "0", 23890)]
    button = card.fixes.terminate_buttons[23890]
    assert button.text() == "Terminate…" and button.isEnabled()
    assert card.fixes.buttons == []  # not an agent action: offered without an agent
    button.click()
    dialog = window.terminate_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.text_label.text().startswith("Terminate serve_embeddings.py (23890)?")
    assert sent == []  # it asks first
    dialog.terminate_button.click()
    assert sent == [Terminate(23890, create_time=NOW - 500)]


def test_terminate_is_disabled_with_the_reason_when_the_check_refuses(window):
    window.on_snapshot(owned(snapshot([finding(stop())]), "someone-else"))
    button = window.doctor.cards[("", "idle_process", "0", 23890)].fixes.terminate_buttons[23890]
    assert not button.isEnabled()
    assert button.toolTip() == ("Cannot terminate: someone-else's process: only your own "
                                "processes can be terminated")
    # The process becomes the user's: offered, in the same widget.
    window.on_snapshot(owned(snapshot([finding(stop())], t=11.0), current_user()))
    assert button.isEnabled()
    assert button.toolTip() == "Terminate pid 23890: asks you to confirm first"


def test_record_opens_the_detail_view_at_its_recording_and_starts_nothing(window, monkeypatch):
    sent = []
    monkeypatch.setattr(window.controller.core, "submit", sent.append)
    monkeypatch.setattr(type(window.controller.core), "available", property(lambda s: True))
    record = Fix("record_allocations", "Record serve_embeddings.py's allocations", None, 23890)
    window.on_snapshot(snapshot([finding(record)]))
    (button,) = window.doctor.cards[("", "idle_process", "0", 23890)].fixes.record_buttons
    assert button.text() == "Record…"
    button.click()
    view = window.details
    assert view is not None and view.isVisible() and view.pid == 23890
    rv = view.record_view
    assert rv.pid == 23890 and rv.record_button.isEnabled()
    assert rv.status.text() == "Choose how long, then press “Record allocations…”."
    assert not [r for r in sent if isinstance(r, RecordAllocations)]


def test_record_from_the_oom_dialog_opens_that_process(window):
    report = oom_report()
    report = dataclasses.replace(report, fixes=(
        Fix("record_allocations", "Record train.py's allocations", None, 20417),))
    window.on_snapshot(snapshot(oom_reports=[report]))
    dialog = window.open_oom_report(report)
    (button,) = dialog.fixes.record_buttons
    button.click()
    assert window.details is not None and window.details.pid == 20417
    # Without agent actions the section says why it cannot record yet.
    assert window.details.record_view.status.text().startswith("Cannot record now: ")


def test_copy_puts_the_exact_setting_on_the_clipboard(qtbot):
    fixes = FixList()
    qtbot.addWidget(fixes)
    fixes.set_fixes((
        Fix("expandable_segments", f"Restart train.py with {EXPANDABLE}", GiB, 20417),
        Fix("tf_memory_growth", "Restart tf.py with TF_FORCE_GPU_ALLOW_GROWTH=true (or "
            "tf.config.experimental.set_memory_growth(gpu, True))", None, 31002)))
    expandable, tf = fixes.copy_buttons
    assert expandable.toolTip() == f"Copy “{EXPANDABLE}” to the clipboard"
    assert tf.toolTip() == f"Copy “{TF_GROWTH}” to the clipboard"
    expandable.click()
    assert QGuiApplication.clipboard().text() == EXPANDABLE
    assert expandable.text() == "Copied"
    qtbot.waitUntil(lambda: expandable.text() == "Copy", timeout=3000)
    tf.click()
    assert QGuiApplication.clipboard().text() == TF_GROWTH


def test_advice_to_read_has_no_button(qtbot):
    fixes = FixList()
    qtbot.addWidget(fixes)
    fixes.set_fixes((
        Fix("fix_leak", "Stop train.py keeping tensors alive: loss.item(), detach()", None,
            20417),
        Fix("reduce_activations", "Make train.py need less: a smaller batch, bf16 autocast",
            None, 20417),
        stop(None), Fix("record_allocations", "Record allocations", None, None)))
    grid = fixes.grid
    assert [grid.itemAtPosition(r, 1).widget().text() for r in range(4)][:2] == [
        "Stop train.py keeping tensors alive: loss.item(), detach()",
        "Make train.py need less: a smaller batch, bf16 autocast"]
    # No control in the last column: advice, and fixes naming no process.
    assert all(grid.itemAtPosition(r, 3) is None for r in range(4))
    assert not (fixes.buttons or fixes.terminate_buttons or fixes.record_buttons
                or fixes.copy_buttons)


def test_every_fix_of_the_oom_dialog_is_reachable_at_its_default_size(qtbot):
    many = tuple(stop(30000 + i) for i in range(14)) + (
        Fix("reduce_activations", "Make train.py need less: a smaller batch, mixed precision "
            "(bf16/fp16 autocast), activation checkpointing " * 3, None, 20417),)
    report = dataclasses.replace(oom_report(), fixes=many)
    dialog = OomDialog(report)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    avail = dialog.screen().availableGeometry()
    assert dialog.height() <= avail.height() * SCREEN_SHARE + 1  # never past the screen
    assert dialog.width() <= avail.width()
    viewport = dialog.body_scroll.viewport()
    texts = [w for w in dialog.fixes.findChildren(QLabel) if w.wordWrap()]
    assert len(texts) == len(many)
    for widget in [*texts, *dialog.fixes.terminate_buttons.values()]:
        # Each wrapped text has the height its lines need: none cut off.
        if isinstance(widget, QLabel):
            assert widget.height() >= widget.heightForWidth(widget.width())
        dialog.body_scroll.ensureWidgetVisible(widget, 0, 0)
        top_left = widget.mapTo(viewport, QPoint(0, 0))
        assert viewport.rect().contains(QRect(top_left, widget.size())), widget
    # The buttons stay outside the scrolled body: always on screen.
    assert not dialog.body_scroll.isAncestorOf(dialog.copy_button)


def test_the_dialog_offers_terminate_as_the_latest_snapshot_allows(qtbot):
    report = dataclasses.replace(oom_report(), fixes=(stop(23890), stop(4242)))
    dialog = OomDialog(report, snapshot=owned(snapshot(), current_user()))
    qtbot.addWidget(dialog)
    sent = []
    dialog.request.connect(sent.append)
    ours, gone = dialog.fixes.terminate_buttons[23890], dialog.fixes.terminate_buttons[4242]
    assert ours.isEnabled()
    assert not gone.isEnabled()
    assert gone.toolTip() == "Cannot terminate: no process 4242 on any GPU in the latest sample"
    ours.click()
    assert sent == [Terminate(23890)]


def test_the_install_command_of_an_agentless_process_is_copied_whole(qtbot):
    command = "vram-steward agent install --env '/home/ana/stable diffusion/venv'"
    fixes = FixList()
    qtbot.addWidget(fixes)
    fixes.set_fixes((Fix("install_agent", f"Install the agent into … once: {command}. Each "
                         "PyTorch process started there has it from its next start.",
                         command=command),))
    (button,) = fixes.copy_buttons
    assert button.toolTip() == f"Copy “{command}” to the clipboard"
    button.click()
    assert QGuiApplication.clipboard().text() == command
