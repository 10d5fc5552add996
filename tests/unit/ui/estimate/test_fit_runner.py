"""The estimate runs as a real child process on a worker thread: its answer or
its words on stderr come back; a timeout, a cancel or the dialog's closing
kill it and reap it (no zombie); only the latest estimate's answer is shown."""

from __future__ import annotations

import os
import sys
import threading

import psutil
import pytest

from app.core.estimate.run import estimate
from app.core.estimate.types import StepRequest
from app.ui.estimate.fit_command import FitChoice, GpuTarget, command_line
from app.ui.estimate.fit_dialog import FitDialog
from app.ui.estimate.fit_runner import FitRunner

DEMO_GPU0 = GpuTarget("0", demo=True)


def gone(pid: int) -> bool:
    """Ended and reaped: no longer a child of this process (running or a zombie)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # a zombie would be reaped here: it was left behind
    except ChildProcessError:
        return True
    return False


@pytest.fixture
def runner(qtbot):
    r = FitRunner()
    yield r
    r.shutdown()


@pytest.fixture
def sleeper(tmp_path):
    """A stand-in for the command that says nothing for a minute."""
    script = tmp_path / "slow.py"
    script.write_text("import time\ntime.sleep(60)\n")
    return [sys.executable, str(script)]


def wait_ended(qtbot, runner, job) -> None:
    qtbot.waitUntil(lambda: job not in runner.jobs, timeout=10_000)


def test_the_real_command_answers_off_the_gui_thread(qtbot, runner, gpt2_dir):
    choice = FitChoice(gpt2_dir, batch=2, context=512)
    with qtbot.waitSignal(runner.answered, timeout=120_000) as answer:
        job = runner.start(command_line(choice, DEMO_GPU0))
        assert runner.running
    result = answer.args[0]
    assert job.thread_ident not in (None, threading.main_thread().ident)
    # The same request estimated here gives the same figures.
    own = estimate(StepRequest(gpt2_dir, batch=2, context=512))
    assert (result.peak_bytes, result.reserved_bytes) == (own.peak_bytes, own.reserved_bytes)
    assert result.breakdown == own.breakdown and result.exact == own.exact
    (fit,) = result.gpus
    assert fit.gpu == "0" and fit.free_bytes is not None
    assert fit.needs_bytes == own.reserved_bytes + fit.context_bytes
    assert not runner.running
    wait_ended(qtbot, runner, job)
    assert gone(job.pid)


def test_a_refusal_shows_the_commands_words(qtbot, runner, tmp_path):
    missing = str(tmp_path / "no-model-here")
    with qtbot.waitSignal(runner.failed, timeout=60_000) as failure:
        runner.start(command_line(FitChoice(missing), DEMO_GPU0))
    assert f"no such file or folder: {missing}" in failure.args[0]


def test_an_answer_that_is_not_json_is_an_error(qtbot, runner, tmp_path):
    script = tmp_path / "talk.py"
    script.write_text("print('hello')\n")
    with qtbot.waitSignal(runner.failed, timeout=20_000) as failure:
        runner.start([sys.executable, str(script)])
    assert "not JSON" in failure.args[0]


def test_a_timeout_kills_the_child(qtbot, sleeper):
    runner = FitRunner(timeout_s=0.5)
    with qtbot.waitSignal(runner.failed, timeout=20_000) as failure:
        job = runner.start(sleeper)
    assert "took longer than" in failure.args[0]
    wait_ended(qtbot, runner, job)
    assert gone(job.pid)


def test_a_cancel_kills_the_child_and_says_nothing(qtbot, runner, sleeper):
    job = runner.start(sleeper)
    qtbot.waitUntil(lambda: job.pid is not None and psutil.pid_exists(job.pid), timeout=10_000)
    with qtbot.assertNotEmitted(runner.answered), qtbot.assertNotEmitted(runner.failed):
        runner.cancel()
        wait_ended(qtbot, runner, job)
        qtbot.wait(50)
    assert gone(job.pid) and not runner.running


def test_only_the_latest_estimate_is_shown(qtbot, runner, tmp_path, sleeper):
    script = tmp_path / "fast.py"
    script.write_text("import sys\nprint('not json')\nsys.exit(0)\n")
    first = runner.start(sleeper)
    qtbot.waitUntil(lambda: first.pid is not None, timeout=10_000)
    with qtbot.waitSignal(runner.failed, timeout=20_000) as failure:
        runner.start([sys.executable, str(script)])
    assert "not JSON" in failure.args[0]
    wait_ended(qtbot, runner, first)
    assert gone(first.pid)


def test_closing_the_dialog_or_changing_its_inputs_kills_the_estimate(qtbot, sleeper):
    dialog = FitDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    job = dialog.runner.start(sleeper)
    qtbot.waitUntil(lambda: job.pid is not None, timeout=10_000)
    assert dialog.stop_button.isVisible()
    dialog.inputs.batch.setValue(4)
    assert not dialog.runner.running and "stopped" in dialog.status.text()
    wait_ended(qtbot, dialog.runner, job)
    assert gone(job.pid)

    job = dialog.runner.start(sleeper)
    qtbot.waitUntil(lambda: job.pid is not None, timeout=10_000)
    dialog.close()
    assert job not in dialog.runner.jobs and gone(job.pid)
