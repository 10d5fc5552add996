"""Terminate through the application controller: accepted without an agent
directory, run on a worker, busy while it runs, refused with a typed reason,
and the VRAM it released read from a later snapshot."""

from __future__ import annotations

import signal

import pytest

from app.core.control.controller import FINISHED, MEASURED, STARTED, AppController
from app.core.control.records import Outcome, TerminateAction
from app.core.control.requests import Refusal, RequestError, Terminate
from tests.fakes.child_processes import GiB, sample_of, snapshot_of


@pytest.fixture
def controller():
    t = [100.0]
    c = AppController(None, settle_s=0.5, clock=lambda: t[0])
    c.t = t
    yield c
    c.close()


def test_terminate_runs_on_a_worker_and_reports_through_poll(children, controller):
    proc = children.start()
    sample = sample_of(proc.pid, 3 * GiB)
    controller.on_snapshot(snapshot_of(sample, used=12 * GiB))
    stages = []
    controller.subscribe(lambda u: stages.append((u.stage, u.action)))
    action = controller.submit(Terminate(proc.pid, sample.create_time))
    assert isinstance(action, TerminateAction)
    assert controller.terminating() == {proc.pid}
    assert controller.wait(10)
    assert [s for s, _ in stages] == [STARTED, FINISHED]
    assert action.outcome is Outcome.EXITED and action.ok
    assert controller.terminating() == set()
    assert proc.wait(5) == -signal.SIGTERM

    # The driver lags: a snapshot before settle_s measures nothing.
    controller.on_snapshot(snapshot_of(sample, used=12 * GiB))
    assert not action.measured
    controller.t[0] += 1.0
    controller.on_snapshot(snapshot_of(used=9 * GiB))
    assert action.measured
    assert action.released == 3 * GiB
    assert action.gpu_released == 3 * GiB
    assert stages[-1] == (MEASURED, action)


def test_a_second_terminate_while_one_runs_is_busy(children, controller):
    proc = children.start(stubborn=True)
    controller.on_snapshot(snapshot_of(sample_of(proc.pid)))
    first = controller.submit(Terminate(proc.pid, grace_s=0.5))
    with pytest.raises(RequestError) as info:
        controller.submit(Terminate(proc.pid))
    assert info.value.code is Refusal.BUSY
    assert controller.wait(10)
    assert first.outcome is Outcome.KILLED
    assert first.result.elapsed_s >= 0.5


def test_another_users_process_is_refused_before_anything_runs(children, controller):
    proc = children.start()
    controller.on_snapshot(snapshot_of(sample_of(proc.pid, user="svc-llm")))
    with pytest.raises(RequestError) as info:
        controller.submit(Terminate(proc.pid))
    assert info.value.code is Refusal.NOT_OWNED
    assert controller.running() == []
    assert proc.poll() is None


def test_a_process_gone_before_the_worker_ran_is_reported_gone(children, controller):
    proc = children.start()
    controller.on_snapshot(snapshot_of(sample_of(proc.pid)))
    proc.kill()
    proc.wait(5)
    action = controller.submit(Terminate(proc.pid))
    assert controller.wait(10)
    assert action.outcome is Outcome.GONE
    assert not action.ok
    controller.t[0] += 5
    controller.on_snapshot(snapshot_of())
    assert not action.measured  # nothing of ours was released
