"""The dialog is opened from the Doctor tab and from a GPU panel's menu, with
that GPU chosen; the window keeps one and raises it.  Its Estimate runs the
real command and shows the answer; a failure shows the command's words."""

from __future__ import annotations

from app.core.units import fmt_bytes
from app.ui.estimate.fit_dialog import FitDialog


def test_the_doctor_tab_opens_the_one_dialog(window, demo_feed):
    demo_feed.step(window, 2)
    window.doctor.fit_button.click()
    dialog = window.fit_dialog
    assert isinstance(dialog, FitDialog) and dialog.isVisible()
    ids = [t.display_id for t in dialog.inputs.targets]
    assert ids == [g.display_id for g in window.latest.gpus]
    assert dialog.inputs.target().display_id == window.gpu_area.selected
    assert all(t.demo for t in dialog.inputs.targets)  # the demo's GPUs: --demo
    window.doctor.fit_button.click()
    assert window.findChildren(FitDialog) == [dialog]


def test_a_panels_menu_opens_it_on_that_gpu(window, demo_feed):
    demo_feed.step(window, 2)
    window.refresh(force=True)
    did = window.latest.gpus[-1].display_id
    panel = window.gpu_area.panels.get(did) or window._make_panel(did)
    menu = panel.menu()
    (action,) = [a for a in menu.actions() if a.text() == "Will it fit on this GPU?…"]
    action.trigger()
    dialog = window.fit_dialog
    assert dialog.isVisible() and dialog.inputs.target().display_id == did
    # From the Doctor again: the GPU chosen stays.
    window.doctor.fit_button.click()
    assert window.fit_dialog is dialog and dialog.inputs.target().display_id == did


def test_estimate_shows_the_real_answer(qtbot, window, demo_feed, llama_dir):
    demo_feed.step(window, 2)
    dialog = window.open_fit_dialog("0")
    inputs = dialog.inputs
    assert not dialog.estimate()  # no model yet: says so
    assert dialog.status.text() == "Name a model first."
    inputs.set_model(llama_dir)
    inputs.context.setValue(8192)
    inputs.dtype.setCurrentText("bfloat16")
    with qtbot.waitSignal(dialog.runner.answered, timeout=120_000):
        assert dialog.estimate()
    result = dialog.results.result
    assert dialog.results.isVisible() and not dialog.message.isVisible()
    assert dialog.results.figures()["peak"] == fmt_bytes(result.peak_bytes)
    assert dialog.results.fit.gpu == "0"
    assert dialog.copy_command().startswith("vram-steward estimate --json --model ")
    inputs.batch.setValue(2)  # the results stay, said to be of the inputs before
    assert "inputs changed" in dialog.status.text()


def test_a_failure_shows_the_commands_words(qtbot, window, demo_feed, tmp_path):
    demo_feed.step(window, 2)
    dialog = window.open_fit_dialog("0")
    dialog.inputs.set_model(str(tmp_path / "missing"))
    with qtbot.waitSignal(dialog.runner.failed, timeout=60_000):
        dialog.estimate()
    assert dialog.message.isVisible() and not dialog.results.isVisible()
    assert "no such file or folder" in dialog.message.text()
    assert dialog.status.text() == "Failed."


def test_a_right_click_on_the_graph_opens_the_panels_menu(qtbot, window, demo_feed):
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QContextMenuEvent
    from PySide6.QtWidgets import QApplication, QMenu

    demo_feed.step(window, 2)
    did = window.latest.gpus[0].display_id
    panel = window.gpu_area.panels.get(did) or window._make_panel(did)
    panel.show()
    viewport = panel.plot.viewport()
    QApplication.sendEvent(viewport, QContextMenuEvent(
        QContextMenuEvent.Reason.Mouse, QPoint(20, 20), viewport.mapToGlobal(QPoint(20, 20))))
    (menu,) = [m for m in panel.findChildren(QMenu) if m.isVisible()]
    assert [a.text() for a in menu.actions()] == ["Will it fit on this GPU?…"]
    menu.close()
