"""Record allocations from the detail view: through the real controller on a
worker, a countdown while it records, then the call-site table and the file."""

from __future__ import annotations

import threading

import pytest

from app.core.agents.directory import AgentDirectory
from app.core.agents.recording import AllocationSite, RecordResult
from app.core.control.controller import AppController
from app.core.units import MiB
from app.ui.agents.record_view import NO_CUDA_TIP
from app.ui.shell.controller import ControllerAdapter
from tests.unit.ui.doctor.samples import later, snapshot

PID = 20417


class RecordingDirectory(AgentDirectory):
    """Answers ``record`` once its gate opens, on whatever thread calls it."""

    def __init__(self, result=None):
        self.gate = threading.Event()
        self.calls = []
        self.threads = []
        self.result = result

    def reports(self):
        return {}

    def entries(self):
        return []

    def free_cache(self, pid, timeout_s=30.0):
        raise AssertionError("not asked for")

    def collect_garbage(self, pid, timeout_s=30.0):
        raise AssertionError("not asked for")

    def record(self, pid, seconds, max_entries=None, timeout_s=None):
        self.calls.append((pid, seconds, max_entries, timeout_s))
        self.threads.append(threading.get_ident())
        self.gate.wait(5)
        return self.result or RecordResult(
            pid, True, path="/tmp/vram-steward/record-20417.pickle", entries=12408,
            seconds=seconds, device=0, truncated=False,
            sites=(AllocationSite("train.py:42 in step", 900 * MiB, 120, 64 * MiB),
                   AllocationSite("model.py:88 in forward", 300 * MiB, 4000, 0)))


@pytest.fixture
def rig(window, qtbot):
    directory = RecordingDirectory()
    window.set_controller(ControllerAdapter(AppController(directory), window))
    s = snapshot()
    window.on_snapshot(s)
    view = window.open_details(PID)
    qtbot.addWidget(view)
    return window, directory, view.record_view, s


def test_a_recording_runs_on_a_worker_counts_down_then_shows_the_sites(rig, qtbot):
    window, directory, rv, _s = rig
    assert rv.record_button.isEnabled()
    rv.seconds_combo.setCurrentIndex(rv.seconds_combo.findText("5 s"))
    rv.record_button.click()
    qtbot.waitUntil(lambda: bool(directory.calls), timeout=3000)
    assert directory.threads[0] != threading.get_ident()
    pid, seconds, entries, timeout_s = directory.calls[0]
    assert (pid, seconds, entries) == (PID, 5.0, None) and timeout_s > seconds
    assert rv.action is not None and not rv.action.done
    assert rv.status.text() in {f"Recording… {n} s left" for n in range(1, 6)}
    assert not rv.progress.isHidden()
    assert not rv.record_button.isEnabled()
    assert rv.table.isHidden()
    directory.gate.set()
    qtbot.waitUntil(lambda: rv.action.done, timeout=3000)
    assert rv.progress.isHidden() and rv.record_button.isEnabled()
    assert rv.status.text() == ("Recorded 5 s on cuda:0: 12,408 allocation events at 2 call "
                                "sites")
    assert rv.sites() == [["train.py:42 in step", "900 MiB", "120", "64 MiB"],
                          ["model.py:88 in forward", "300 MiB", "4,000", "0 B"]]
    assert not rv.table.isHidden() and not rv.file_row.isHidden()
    assert rv.path_label.text() == "Snapshot file: /tmp/vram-steward/record-20417.pickle"
    assert "pytorch.org/memory_viz" in rv.viz_note.text()


def test_a_process_without_cuda_cannot_be_recorded(rig):
    window, directory, rv, s = rig
    window.on_snapshot(later(snapshot(cuda=False)))
    assert not rv.record_button.isEnabled()
    assert rv.record_button.toolTip() == NO_CUDA_TIP
    window.on_snapshot(later(s, dt=2))
    assert rv.record_button.isEnabled()


def test_a_refusal_is_shown_plainly(rig, qtbot):
    window, directory, rv, _s = rig
    directory.result = RecordResult(
        PID, False, error="the process is already recording its own allocation history",
        code="refused")
    directory.gate.set()
    rv.record_button.click()
    qtbot.waitUntil(lambda: rv.action is not None and rv.action.done, timeout=3000)
    assert rv.status.text() == ("Not recorded: the process is already recording its own "
                                "allocation history")
    assert rv.table.isHidden() and rv.file_row.isHidden()


def test_a_request_the_controller_refuses_says_why(window, qtbot):
    window.set_controller(ControllerAdapter(AppController(RecordingDirectory()), window))
    window.on_snapshot(snapshot(with_agents=False))
    view = window.open_details(PID)
    qtbot.addWidget(view)
    rv = view.record_view
    assert not rv.record_button.isEnabled()  # no agent: nothing to record
    rv._on_record()
    assert rv.status.text() == f"Not started: process {PID} has no agent reporting"
