"""Runs an estimate off the GUI thread: a child ``python -m app estimate --json``
on a :class:`EstimateJob` thread, its answer parsed there and signalled back.

The estimate imports torch and builds the model under fake tensors: seconds of
CPU and hundreds of MiB that the window must not carry, and a crash that must
not take the window with it, so it is a child process.  The child runs in a
session of its own; a cancel (the inputs changed, the dialog closed) or the
timeout kills its whole process group and reaps it, so no zombie is left.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.core.units import fmt_duration
from app.ui.estimate.fit_result import parse_result

#: How long an estimate may take before it is stopped (a 7B config takes seconds).
TIMEOUT_S = 300.0
#: How often the job looks for a cancel while the child runs.
POLL_S = 0.05
#: The folder that holds the ``app`` package: the child imports the same code.
_ROOT = str(Path(__file__).resolve().parents[3])


def child_env() -> dict[str, str]:
    """This process's environment with the app's own folder first on the path, and
    without the agent (``agent install`` would start one at the estimate's
    ``import torch``: a process of the app's own, listed as the user's)."""
    env = dict(os.environ, VRAM_STEWARD_AGENT="0")
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _ROOT if not path else os.pathsep.join((_ROOT, path))
    return env


def stderr_text(stderr: str, returncode: int) -> str:
    """What went wrong, in the child's words; its status when it said nothing."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    if not lines:
        return f"The estimate stopped with status {returncode} and said nothing."
    return "\n".join(lines[-12:])  # a traceback's end says what failed


class EstimateJob(QThread):
    """One child process, from start to answer (see the module's docstring)."""

    # Each names its job: they reach the runner's slots queued, on the GUI thread.
    answered = Signal(object, object)  # (job, FitResult)
    failed = Signal(object, str)  # (job, what went wrong)
    ended = Signal(object)  # (job): the last thing its thread does

    def __init__(self, argv: Sequence[str], timeout_s: float = TIMEOUT_S,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.pid: int | None = None
        self.thread_ident: int | None = None  # the thread the child was started on
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Kill the child (on the job's thread, within :data:`POLL_S`); nothing is signalled."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def run(self) -> None:
        self.thread_ident = threading.get_ident()
        try:
            self._run()
        finally:
            self.ended.emit(self)

    def _run(self) -> None:
        try:
            proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True, env=child_env(),
                                    start_new_session=True)
        except OSError as exc:
            self.failed.emit(self, f"The estimate could not start: {exc.strerror or exc}")
            return
        self.pid = proc.pid
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self._cancel.is_set():
                _kill(proc)
                return
            try:
                out, err = proc.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    _kill(proc)
                    self.failed.emit(self, f"The estimate took longer than "
                                     f"{fmt_duration(self.timeout_s)} and was stopped.")
                    return
        if self._cancel.is_set():
            return
        try:
            result = parse_result(out)
        except ValueError as exc:
            # A refusal prints no JSON: its words are on stderr.
            self.failed.emit(self, stderr_text(err, proc.returncode) if proc.returncode
                             else str(exc)[:1].upper() + str(exc)[1:] + ".")
            return
        if proc.returncode and not result.note:  # the estimate, without GPU figures
            result = dataclasses.replace(result, note=stderr_text(err, proc.returncode))
        self.answered.emit(self, result)


def _kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child's process group, then reap it and close its pipes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.communicate()


class FitRunner(QObject):
    """One estimate at a time for the dialog: a new one cancels the one running;
    only the latest one's answer is signalled."""

    answered = Signal(object)  # FitResult
    failed = Signal(str)
    running_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__(parent)
        self.timeout_s = timeout_s
        self.job: EstimateJob | None = None
        self.jobs: list[EstimateJob] = []  # every job whose thread has not ended

    @property
    def running(self) -> bool:
        return self.job is not None

    def start(self, argv: Sequence[str]) -> EstimateJob:
        """Run ``argv``; the one running before is cancelled."""
        self.cancel()
        job = EstimateJob(argv, self.timeout_s, self)
        job.answered.connect(self._answered)
        job.failed.connect(self._failed)
        job.ended.connect(self._ended)
        self.job = job
        self.jobs.append(job)
        job.start()
        self.running_changed.emit(True)
        return job

    def cancel(self) -> None:
        """Stop the running estimate, if any; its answer is never shown."""
        job, self.job = self.job, None
        if job is not None:
            job.cancel()
            self.running_changed.emit(False)

    def shutdown(self, wait_ms: int = 3000) -> None:
        """Cancel and wait for every job's thread (the dialog closes)."""
        self.cancel()
        for job in list(self.jobs):
            job.cancel()
            if job.wait(wait_ms):
                self.jobs.remove(job)
                job.deleteLater()

    @Slot(object, object)
    def _answered(self, job: EstimateJob, result: object) -> None:
        if job is self.job and not job.cancelled:
            self.job = None
            self.running_changed.emit(False)
            self.answered.emit(result)

    @Slot(object, str)
    def _failed(self, job: EstimateJob, text: str) -> None:
        if job is self.job and not job.cancelled:
            self.job = None
            self.running_changed.emit(False)
            self.failed.emit(text)

    @Slot(object)
    def _ended(self, job: EstimateJob) -> None:
        if job not in self.jobs:  # waited for by shutdown()
            return
        job.wait()  # its thread is returning from run()
        self.jobs.remove(job)
        if job is self.job:  # ended without a word (it cannot, but never hang "running")
            self.job = None
            self.running_changed.emit(False)
        job.deleteLater()


__all__ = ["TIMEOUT_S", "EstimateJob", "FitRunner", "child_env", "stderr_text"]
