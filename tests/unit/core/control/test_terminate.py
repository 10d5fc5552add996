"""Terminating a process: the refusals decided from the snapshot, and the signals
sent to real child processes (SIGTERM; SIGKILL when SIGTERM is ignored; one
already gone; a pid that names a later process; another user's)."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from app.core.control.records import Outcome, TerminateAction
from app.core.control.requests import Refusal, RequestError, Terminate
from app.core.control.terminate import check, current_user, run
from app.core.monitor.samples import Container, GpuSample, HostStatus, Snapshot
from tests.fakes.child_processes import GiB, sample_of, snapshot_of


def refusal(snapshot, request, busy=frozenset(), user=None) -> RequestError:
    with pytest.raises(RequestError) as info:
        check(snapshot, request, set(busy), user)
    return info.value


# -- check: from the snapshot ---------------------------------------------------------------
def test_an_own_process_is_accepted_with_its_vram_and_gpus(children):
    pid = children.start().pid
    sample = sample_of(pid, 3 * GiB)
    action = check(snapshot_of(sample, used=12 * GiB), Terminate(pid, sample.create_time), set())
    assert isinstance(action, TerminateAction)
    assert action.key == sample.key
    assert action.label == f"train.py ({pid})"
    assert action.gpus == ("0",)
    assert action.vram_before == 3 * GiB
    assert action.gpu_before == {"0": 12 * GiB}
    assert action.grace_s == 5.0


def test_another_users_process_is_refused_with_whose_it_is(children):
    pid = children.start().pid
    err = refusal(snapshot_of(sample_of(pid, user="svc-llm")), Terminate(pid))
    assert err.code is Refusal.NOT_OWNED
    assert str(err) == "svc-llm's process: only your own processes can be terminated"


def test_an_owner_hidden_by_access_denied_is_refused(children):
    pid = children.start().pid
    sample = sample_of(pid, user=None, host_status=HostStatus.ACCESS_DENIED)
    err = refusal(snapshot_of(sample), Terminate(pid))
    assert err.code is Refusal.NOT_OWNED
    assert "owner is not visible" in str(err)


@pytest.mark.parametrize("pid", [0, 1])
def test_init_is_never_terminated(pid):
    assert refusal(snapshot_of(), Terminate(pid)).code is Refusal.PROTECTED


def test_the_app_itself_is_never_terminated():
    me = sample_of(os.getpid())
    err = refusal(snapshot_of(me), Terminate(os.getpid()))
    assert err.code is Refusal.PROTECTED
    assert "VRAM Steward itself" in str(err)


def test_demo_processes_are_simulated_and_never_signalled(children):
    # A demo pid may well be a real process's: the demo never signals any.
    pid = children.start().pid
    for snap in (snapshot_of(sample_of(pid), source="demo"),
                 snapshot_of(sample_of(pid, host_status=HostStatus.SIMULATED))):
        err = refusal(snap, Terminate(pid))
        assert err.code is Refusal.SIMULATED
        assert "simulated" in str(err)


def test_pids_from_another_namespace_and_exited_processes_are_refused(children):
    pid = children.start().pid
    hidden = sample_of(pid, user=None, create_time=None, host_status=HostStatus.NOT_VISIBLE,
                       container=Container("docker", "ab" * 32))
    assert refusal(snapshot_of(hidden), Terminate(pid)).code is Refusal.NOT_VISIBLE
    exited = sample_of(pid, host_status=HostStatus.EXITED)
    err = refusal(snapshot_of(exited), Terminate(pid))
    assert err.code is Refusal.GONE
    assert "has exited" in str(err)


def test_unknown_pid_no_snapshot_and_a_later_process_under_the_pid_are_refused(children):
    pid = children.start().pid
    sample = sample_of(pid)
    assert refusal(None, Terminate(pid)).code is Refusal.NO_SNAPSHOT
    assert refusal(snapshot_of(sample), Terminate(pid + 100_000)).code is Refusal.UNKNOWN_PROCESS
    err = refusal(snapshot_of(sample), Terminate(pid, sample.create_time - 30))
    assert err.code is Refusal.GONE
    assert "now belongs to another process" in str(err)


def test_a_second_terminate_of_the_same_process_is_busy(children):
    pid = children.start().pid
    assert refusal(snapshot_of(sample_of(pid)), Terminate(pid), busy={pid}).code is Refusal.BUSY


def test_the_user_is_matched_by_name():
    assert current_user()
    assert refusal(snapshot_of(sample_of(os.getppid(), user="alice")), Terminate(os.getppid()),
                   user="bob").code is Refusal.NOT_OWNED


def test_a_process_on_two_gpus_counts_both():
    pid = os.getppid()
    s0, s1 = sample_of(pid, GiB), sample_of(pid, 2 * GiB)
    gpus = (GpuSample(0, "A", "GPU-0", 80 * GiB, 5 * GiB, None, processes=(s0,)),
            GpuSample(1, "A", "GPU-1", 80 * GiB, 7 * GiB, None, processes=(s1,)))
    snap = Snapshot(0.0, 0.0, "nvml", "550", gpus)
    action = check(snap, Terminate(pid), set())
    assert action.gpus == ("0", "1")
    assert action.vram_before == 3 * GiB
    assert action.gpu_before == {"0": 5 * GiB, "1": 7 * GiB}


# -- run: the signals -----------------------------------------------------------------------
def action_for(proc, grace_s=5.0, create_time=None) -> TerminateAction:
    sample = sample_of(proc.pid)
    return TerminateAction(proc.pid, sample.create_time if create_time is None else create_time,
                           grace_s, f"python ({proc.pid})")


def test_sigterm_stops_a_process_that_listens(children):
    proc = children.start()
    result = run(action_for(proc))
    assert result.outcome is Outcome.EXITED
    assert result.elapsed_s is not None and result.elapsed_s < 4.0
    assert proc.wait(5) == -signal.SIGTERM


def test_sigkill_follows_once_the_grace_time_has_passed(children):
    proc = children.start(stubborn=True)
    result = run(action_for(proc, grace_s=0.5))
    assert result.outcome is Outcome.KILLED
    assert result.elapsed_s is not None and result.elapsed_s >= 0.5
    assert proc.wait(5) == -signal.SIGKILL


def test_a_process_already_gone_is_reported_as_such(children):
    proc = children.start()
    action = action_for(proc)
    proc.kill()
    proc.wait(5)  # reaped: the pid is free
    result = run(action)
    assert result.outcome is Outcome.GONE
    assert result.elapsed_s is None


def test_an_unreaped_zombie_counts_as_gone(children):
    proc = children.start()
    action = action_for(proc)
    os.kill(proc.pid, signal.SIGKILL)  # not reaped: a zombie until close()
    deadline = time.monotonic() + 5
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    result = run(action)
    assert result.outcome is Outcome.GONE
    assert "zombie" in (result.reason or "")


def test_a_later_process_under_the_pid_is_never_signalled(children):
    proc = children.start()
    result = run(action_for(proc, create_time=sample_of(proc.pid).create_time - 30))
    assert result.outcome is Outcome.REFUSED
    assert "now belongs to another process" in (result.reason or "")
    assert proc.poll() is None


def test_the_os_owner_is_checked_again_before_signalling(children):
    proc = children.start()
    result = run(action_for(proc), uid=os.getuid() + 4242)
    assert result.outcome is Outcome.REFUSED
    assert (result.reason or "").endswith("'s process: only your own processes can be "
                                          "terminated")
    assert proc.poll() is None


class _Uids:
    real = effective = os.getuid()


class _FakeProcess:
    """Always running; ``denied`` signals raise AccessDenied."""

    def __init__(self, ps, denied=()) -> None:
        self.ps, self.denied, self.sent = ps, set(denied), []

    def create_time(self):
        return 100.0

    def uids(self):
        return _Uids()

    def status(self):
        return psutil.STATUS_SLEEPING

    def is_running(self):
        return True

    def send_signal(self, sig):
        if sig in self.denied:
            raise psutil.AccessDenied(1)
        self.sent.append(sig)


class _FakePs:
    NoSuchProcess, AccessDenied = psutil.NoSuchProcess, psutil.AccessDenied
    STATUS_ZOMBIE = psutil.STATUS_ZOMBIE

    def __init__(self, denied=()) -> None:
        self.proc = _FakeProcess(self, denied)

    def Process(self, pid):
        return self.proc


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_a_signal_the_os_refuses_is_a_failure():
    ps = _FakePs(denied={signal.SIGTERM})
    result = run(TerminateAction(4321, 100.0, 5.0), ps=ps)
    assert result.outcome is Outcome.FAILED
    assert result.reason == "not permitted to send SIGTERM"


def test_a_process_that_survives_sigkill_is_a_failure():
    ps, clock = _FakePs(), _Clock()
    result = run(TerminateAction(4321, 100.0, 5.0), ps=ps, kill_wait_s=2.0, clock=clock,
                 sleep=clock.sleep)
    assert ps.proc.sent == [signal.SIGTERM, signal.SIGKILL]
    assert result.outcome is Outcome.FAILED
    assert result.elapsed_s == pytest.approx(7.0)
    assert "still running 2 s after SIGKILL" in (result.reason or "")
