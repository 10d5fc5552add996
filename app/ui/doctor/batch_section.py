"""An OOM report's "Batch that would have fitted": the run sized again at
smaller batches against the room its process could have had.

Estimating needs torch, which stays out of the window's process: a child
process (``python -m app estimate --oom - --json``, the report's JSON on its
stdin, so a remote host's or the demo's report works as a stored one does)
runs on a worker thread and its answer reaches the GUI thread through a
queued signal.  When the report keeps no model that could be rebuilt, the
section says why at once, with no child.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.core.estimate.postmortem import oom_model, why_unknown
from app.ui.estimate.fit_runner import child_env
from app.ui.style.text import plain_label

log = logging.getLogger(__name__)

#: The command run for the proposal (the report's JSON on its stdin).
COMMAND = (sys.executable, "-m", "app", "estimate", "--oom", "-", "--json")
#: How long the child may take (a large model's few estimates).
TIMEOUT_S = 300.0
WORKING = "Estimating the run at smaller batches…"


def answer_text(answer: dict[str, Any]) -> str:
    """The line an ``estimate --oom --json`` answer gives."""
    proposal = answer.get("proposal")
    if isinstance(proposal, dict) and isinstance(proposal.get("text"), str):
        return proposal["text"]
    reason = answer.get("reason")
    return f"n/a — {reason if isinstance(reason, str) else 'no proposal could be made'}"


class Child:
    """The estimate's child process, stoppable from another thread."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.stopped = False

    def stop(self) -> None:
        """Kill its process group (it runs in a session of its own)."""
        self.stopped = True
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass


def run_child(report_json: str, command: tuple[str, ...] = COMMAND,
              child: Child | None = None) -> str:
    """The proposal's line from a child process (a worker thread's call)."""
    child = child or Child()
    try:
        child.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, env=child_env(),
                                         start_new_session=True)
        if child.stopped:
            child.stop()
        out, err = child.process.communicate(report_json, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        child.stop()
        if child.process is not None:
            child.process.communicate()
        return f"n/a — the estimate did not answer ({type(exc).__name__})"
    returncode = child.process.returncode
    if returncode == 0:
        try:
            return answer_text(json.loads(out))
        except ValueError:
            pass
    lines = [line for line in err.splitlines() if line.strip()]
    return "n/a — " + (lines[-1] if lines else f"the estimate ended with {returncode}")


class BatchSection(QWidget):
    """The heading and one line; ``finished(text)`` once the line is final."""

    finished = Signal(str)
    _answered = Signal(str)

    def __init__(self, report: Any, parent: QWidget | None = None,
                 command: tuple[str, ...] = COMMAND) -> None:
        super().__init__(parent)
        self.setObjectName("oomBatch")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        head = QLabel("Batch that would have fitted", self)
        font = head.font()
        font.setBold(True)
        head.setFont(font)
        layout.addWidget(head)
        self.line = plain_label(QLabel("", self))
        self.line.setObjectName("oomBatchText")
        self.line.setWordWrap(True)
        layout.addWidget(self.line)
        self.thread: threading.Thread | None = None
        self.child = Child()
        self._answered.connect(self._show)
        child = self.child
        self.destroyed.connect(lambda *_: child.stop())  # a closed dialog stops its estimate
        reason = why_unknown(report, oom_model(report))
        if reason is not None:
            self._show(f"n/a — {reason}")
            return
        self.line.setText(WORKING)
        payload = json.dumps(report.to_json())
        self.thread = threading.Thread(target=self._run, args=(payload, command),
                                       name="vram-steward-oom-batch", daemon=True)
        self.thread.start()

    def _run(self, payload: str, command: tuple[str, ...]) -> None:  # worker thread
        try:
            text = run_child(payload, command, self.child)
        except Exception as exc:  # shown, never raised
            log.warning("the OOM batch estimate failed: %s", exc)
            text = f"n/a — {exc}"
        try:
            self._answered.emit(text)
        except RuntimeError:  # the dialog was closed meanwhile
            return

    def _show(self, text: str) -> None:
        self.line.setText(text)
        self.finished.emit(text)

    @property
    def text(self) -> str:
        return self.line.text()


__all__ = ["BatchSection", "answer_text", "run_child"]
