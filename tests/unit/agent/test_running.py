"""Reading the threads' stacks without risking the host's interpreter."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from app.agent import running


@pytest.fixture
def gc_state():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_the_stacks_of_every_thread_are_read(gc_state):
    gate, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (gate.set(), done.wait(5)))
    worker.start()
    try:
        gate.wait(5)
        frames = running.current_frames()
        assert threading.get_ident() in frames and worker.ident in frames
    finally:
        done.set()
        worker.join(5)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython 3.12 pauses the collector itself")
def test_no_collection_can_start_while_the_stacks_are_read(gc_state, monkeypatch):
    # CPython gh-106883: a collection inside sys._current_frames() can hang the
    # process when a finaliser (torch's tensor dealloc) needs the GIL.
    seen = []
    real = sys._current_frames
    monkeypatch.setattr(sys, "_current_frames", lambda: (seen.append(gc.isenabled()), real())[1])
    gc.enable()
    running.current_frames()
    assert seen == [False] and gc.isenabled()


def test_a_host_that_turned_the_collector_off_keeps_it_off(gc_state):
    gc.disable()
    running.current_frames()
    assert not gc.isenabled()
