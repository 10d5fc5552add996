"""The Doctor tab: diagnoses rendered as cards, calm updates, fixes as requests,
past OOM reports read off the GUI thread."""

from __future__ import annotations

import dataclasses
import threading

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.core.control.requests import FreeCache, Unload
from app.core.diagnosis.types import Fix
from app.core.units import GiB
from app.ui.doctor.doctor_view import DoctorView
from app.ui.doctor.oom_dialog import OomDialog
from app.ui.doctor.past_reports import PastReports
from tests.unit.ui.doctor.samples import (
    fragmentation,
    full_soon,
    later,
    leak,
    oom_report,
    snapshot,
)


def tab_text(window):
    return window.lower_tabs.tabText(window.lower_tabs.indexOf(window.doctor))


def test_the_doctor_tab_lists_every_diagnosis_most_severe_first(window):
    assert tab_text(window) == "Doctor"
    window.on_snapshot(snapshot([fragmentation(), leak(), full_soon()]))
    cards = window.doctor.cards_in_order()
    assert [c.title.text() for c in cards] == [
        "GPU 0 will be full in ~9 min at this rate",
        "serve_embeddings.py (pid 23890) is leaking ~14 MiB/s",
        "train.py (pid 20417): memory is fragmented"]
    assert [c.badge.text() for c in cards] == ["Critical", "Warning", "Note"]
    leak_card = cards[1]
    assert leak_card.where.text().startswith("GPU 0 · serve_embeddings.py (23890) · since ")
    assert "allocated rose 14 MiB/s" in leak_card.evidence.text()
    # Fixes best first, with what they give.
    grid = cards[0].fixes.grid
    assert grid.itemAtPosition(0, 1).widget().text().startswith("Free the cache of train.py")
    assert grid.itemAtPosition(0, 2).widget().text() == "gives 2.0 GiB"
    assert grid.itemAtPosition(1, 2).widget().text() == "gives 1.2 GiB"
    assert [b.text() for b in cards[0].fixes.buttons] == ["Free cache", "Unload clip"]
    # Warnings and critical ones are counted in the tab's title; a note is not.
    assert tab_text(window) == "Doctor (2)"
    assert window.doctor.empty_label.isHidden()


def test_a_card_shows_names_that_look_like_html_as_text(window):
    hostile = "<b>x</b> <img src=/etc/x>"
    d = dataclasses.replace(leak(), title=f"{hostile} (pid 23890) is leaking ~14 MiB/s",
                            command=hostile, evidence=(f"{hostile} allocated more",),
                            fixes=(Fix("fix_leak", f"Stop {hostile}", pid=23890),))
    window.on_snapshot(snapshot([d]))
    (card,) = window.doctor.cards_in_order()
    fix_text = card.fixes.grid.itemAtPosition(0, 1).widget()
    for label in (card.title, card.where, card.evidence, fix_text):
        assert label.textFormat() == Qt.TextFormat.PlainText
    assert card.title.text() == f"{hostile} (pid 23890) is leaking ~14 MiB/s"
    assert card.where.text().startswith(f"GPU 0 · {hostile} (23890) · since ")
    assert card.evidence.text() == f"·  {hostile} allocated more"
    assert fix_text.text() == f"Stop {hostile}"


def test_updates_are_calm_same_figures_touch_nothing(window):
    s = snapshot([leak(), full_soon(), fragmentation()])
    window.on_snapshot(s)
    doctor = window.doctor
    cards = {k: id(c) for k, c in doctor.cards.items()}
    order = list(doctor.order)
    redraws = doctor.redraws
    for _ in range(5):  # the same findings again: no card set afresh, none moved
        s = later(s)
        window.on_snapshot(s)
    assert doctor.redraws == redraws
    assert {k: id(c) for k, c in doctor.cards.items()} == cards
    assert doctor.order == order
    # One figure changes: that card alone is set again, in place.
    window.on_snapshot(later(s, diagnoses=(leak(20), full_soon(), fragmentation())))
    assert doctor.redraws == redraws + 1
    assert doctor.order == order
    assert doctor.cards[("", "leak", "0", 23890)].title.text().endswith("~20 MiB/s")
    # A finding gone: its card goes, the others stay the same widgets.
    window.on_snapshot(later(s, dt=2, diagnoses=(full_soon(), fragmentation())))
    assert ("leak", "0", 23890) not in doctor.cards
    assert id(doctor.cards[("", "full_soon", "0", None)]) == cards[("", "full_soon", "0", None)]
    assert tab_text(window) == "Doctor (1)"


def test_empty_state_says_what_is_watched(window):
    window.on_snapshot(snapshot([]))
    doctor = window.doctor
    assert not doctor.empty_label.isHidden()
    assert doctor.empty_label.text().startswith(
        "No problems found. Watching 3 processes on 2 GPUs")
    assert tab_text(window) == "Doctor"


def test_fix_buttons_send_the_existing_requests(window, monkeypatch):
    sent = []
    monkeypatch.setattr(window.controller.core, "submit", sent.append)
    monkeypatch.setattr(type(window.controller.core), "available", property(lambda s: True))
    window.on_snapshot(snapshot([full_soon()]))
    card = window.doctor.cards[("", "full_soon", "0", None)]
    free, unload = card.fixes.buttons
    assert free.isEnabled()
    free.click()
    unload.click()
    assert sent == [FreeCache((20417,)), Unload(20417, "m1", name="clip")]


def test_without_agent_actions_the_fix_buttons_are_shown_disabled(window):
    window.on_snapshot(snapshot([full_soon()]))  # the default controller has no directory
    buttons = window.doctor.cards[("", "full_soon", "0", None)].fixes.buttons
    assert buttons and not any(b.isEnabled() for b in buttons)


def test_a_copyable_fix_copies_its_setting(window):
    window.on_snapshot(snapshot([fragmentation()]))
    card = window.doctor.cards[("", "fragmentation", "0", 20417)]
    assert card.fixes.buttons == []
    (copy,) = card.fixes.copy_buttons
    copy.click()
    assert QGuiApplication.clipboard().text() == \
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def test_past_reports_are_read_off_the_gui_thread_and_open(qtbot):
    threads = []
    stored = [oom_report("1600000000000-1-1"), oom_report("1690000000000-2-1")]

    def loader():
        threads.append(threading.get_ident())
        return stored

    view = DoctorView(past=PastReports(loader))
    qtbot.addWidget(view)
    view.add_report(oom_report("live-1"))  # this run's report stays listed
    with qtbot.waitSignal(view.past.loaded, timeout=3000):
        view.show()  # the store is read when the tab is first shown
    view.past.wait()
    assert threads and threads[0] != threading.get_ident()
    assert view.past_list.topLevelItemCount() == 3
    first = view.past_list.topLevelItem(0)
    assert first.text(1) == "train.py" and first.text(2) == "2.0 GiB"
    assert first.text(3) == "other processes held the memory"
    opened = []
    view.open_report.connect(opened.append)
    view._on_past_activated(first)
    assert opened and opened[0].request == 2 * GiB
    assert view.past_note.text() == "Double-click a report to open it."


def test_an_unreadable_store_is_said_plainly(qtbot):
    def loader():
        raise OSError("permission denied")

    view = DoctorView(past=PastReports(loader))
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.past.loaded, timeout=3000):
        view.past.refresh()
    assert view.past_note.text() == "The stored reports could not be read: permission denied"
    assert view.past_list.topLevelItemCount() == 0


def test_an_oom_card_opens_its_report(window):
    from app.core.diagnosis.types import Diagnosis

    report = oom_report()
    d = Diagnosis("oom", "critical", report.title, ("asked for 2.0 GiB",), report.fixes,
                  gpu="0", pid=20417, command="train.py", since=report.time,
                  report_id=report.id)
    window.on_snapshot(snapshot([d], [report]))
    card = window.doctor.cards[("", "oom", "0", 20417)]
    assert not card.report_button.isHidden()
    assert window.findChildren(OomDialog) == []
    card.report_button.click()
    (dialog,) = window.findChildren(OomDialog)
    assert dialog.report is report and dialog.isVisible()


def test_the_default_loader_reads_the_report_store(tmp_path, monkeypatch, qtbot):
    from app.core.diagnosis.report_store import ReportStore
    from app.ui.doctor.past_reports import store_loader

    monkeypatch.setenv("VRAM_STEWARD_STATE_DIR", str(tmp_path))
    ReportStore().save(oom_report("1700000000000-20417-1"))
    assert [r.id for r in store_loader()] == ["1700000000000-20417-1"]
