"""The sampler feeds the history recorder and loads the stored history off
the GUI thread, before its first snapshot."""

from __future__ import annotations

import threading
import time

from app.core.monitor.history import History
from app.core.store.query import StoredHistory, read_history
from app.core.store.recorder import HistoryRecorder
from app.ui.shell.sampler import Sampler
from tests.unit.ui.shell.test_sampler import RecordingSource


def _run(qtbot, sampler: Sampler, events: list) -> None:
    sampler.history_loaded.connect(lambda s: events.append(("history", s)))
    sampler.snapshot_ready.connect(lambda s: events.append(("snapshot", s)))
    sampler.start()
    try:
        qtbot.waitUntil(lambda: sum(e[0] == "snapshot" for e in events) >= 3, timeout=5000)
    finally:
        sampler.stop()


def test_recorded_run_seeds_the_next_one(qtbot, qapp, tmp_path):
    db = str(tmp_path / "history.sqlite3")
    recorder = HistoryRecorder(db)
    first: list = []
    _run(qtbot, Sampler(lambda: RecordingSource(), 0.1, recorder=recorder), first)
    recorder.close()
    assert "GPU-x" in read_history(db, 0).gpus

    loader_threads: list[int] = []

    def load() -> StoredHistory:
        loader_threads.append(threading.get_ident())
        return read_history(db, time.time() - 3600)

    second: list = []
    _run(qtbot, Sampler(lambda: RecordingSource(), 0.1, load_history=load), second)
    assert second[0][0] == "history"  # before any snapshot
    assert loader_threads and threading.get_ident() not in loader_threads
    history = History()
    history.seed(second[0][1])
    assert history.view("0", 3600.0).used.size >= 1
