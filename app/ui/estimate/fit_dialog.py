""""Will it fit?": the memory a run needs, before running it, against what a
GPU has free now, and what would make it fit.

The form on top, the answer below (it scrolls; the form and the buttons stay).
"Estimate" runs ``python -m app estimate --json`` as a child process on a
worker thread (:class:`~app.ui.estimate.fit_runner.FitRunner`): the window
never imports torch, reads NVML or waits.  Changing the inputs stops an
estimate of the old ones; closing the dialog stops it too.  One dialog per
window, non-modal, opened from the Doctor tab and a GPU panel's menu with
that GPU chosen.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QElapsedTimer, QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.hosts import host_view, snapshot_of
from app.core.monitor.samples import Snapshot
from app.ui.estimate.fit_command import command_line, gpu_targets
from app.ui.estimate.fit_inputs import FitInputs
from app.ui.estimate.fit_result import FitResult
from app.ui.estimate.fit_results import FitResults
from app.ui.estimate.fit_runner import TIMEOUT_S, FitRunner
from app.ui.style import palette as pal
from app.ui.style.hosts import stale
from app.ui.style.text import plain_label

DEFAULT_SIZE = QSize(640, 560)
IDLE_TEXT = ("Name a model and press Estimate: one step of it runs under fake tensors "
             "(no weights loaded, no GPU used), and its memory is set against what the "
             "GPU has free now.")
STALE_TEXT = "The inputs changed: these results are for the inputs before. Press Estimate."


class FitDialog(QDialog):
    """The dialog (see the module's docstring)."""

    request = Signal(object)  # a typed request a fix sends (free cache, unload, terminate)

    def __init__(self, parent: QWidget | None = None, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__(parent)
        self.setObjectName("fitDialog")
        self.setWindowTitle("Will it fit?")
        self.setModal(False)
        self.snapshot: Snapshot | None = None
        self.can_act = True
        self.argv: list[str] = []  # the command of the estimate shown or running
        outer = QVBoxLayout(self)
        outer.setContentsMargins(16, 12, 16, 12)
        outer.setSpacing(8)

        self.inputs = FitInputs(self)
        outer.addWidget(self.inputs)
        actions = QHBoxLayout()
        actions.setSpacing(8)
        self.estimate_button = QPushButton("Estimate", self)
        self.estimate_button.setObjectName("estimateButton")
        self.estimate_button.setDefault(True)
        self.stop_button = QPushButton("Stop", self)
        self.stop_button.setAutoDefault(False)
        self.stop_button.setVisible(False)
        self.status = plain_label(QLabel("", self))
        self.status.setObjectName("secondary")
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        actions.addWidget(self.estimate_button)
        actions.addWidget(self.stop_button)
        actions.addWidget(self.status, 1)
        outer.addLayout(actions)
        line = QFrame(self)
        line.setFrameShape(QFrame.Shape.HLine)
        line.setObjectName("fitRule")
        outer.addWidget(line)

        self.body_scroll = QScrollArea(self)
        self.body_scroll.setObjectName("fitScroll")
        self.body_scroll.setWidgetResizable(True)
        self.body_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.body_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget(self.body_scroll)
        body.setObjectName("fitBody")
        blay = QVBoxLayout(body)
        blay.setContentsMargins(0, 0, 6, 0)
        blay.setSpacing(8)
        self.message = plain_label(QLabel(IDLE_TEXT, body))  # the idle text, or an error
        self.message.setObjectName("fitMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        blay.addWidget(self.message)
        self.results = FitResults(body)
        self.results.request.connect(self.request)
        blay.addWidget(self.results)
        blay.addStretch(1)  # a short answer or an error stays at the top
        self.body_scroll.setWidget(body)
        outer.addWidget(self.body_scroll, 1)

        foot = QHBoxLayout()
        self.copy_button = QPushButton("Copy command", self)
        self.copy_button.setToolTip("Copy the estimate as a command line "
                                    "(vram-steward estimate …)")
        self.copy_button.clicked.connect(self.copy_command)
        close = QPushButton("Close", self)
        close.clicked.connect(self.close)
        for b in (self.copy_button, close):
            b.setAutoDefault(False)
        foot.addStretch(1)
        foot.addWidget(self.copy_button)
        foot.addWidget(close)
        outer.addLayout(foot)

        self.runner = FitRunner(self, timeout_s)
        self.runner.answered.connect(self._answered)
        self.runner.failed.connect(self._failed)
        self.runner.running_changed.connect(self._running)
        self.estimate_button.clicked.connect(self.estimate)
        self.stop_button.clicked.connect(self.stop)
        self.inputs.changed.connect(self._inputs_changed)
        self._clock = QElapsedTimer()
        self._ticker = QTimer(self)
        self._ticker.setInterval(500)
        self._ticker.timeout.connect(self._tick)
        self.error = ""
        self._style()
        self.resize(DEFAULT_SIZE)

    # -- the window's side ----------------------------------------------------------------------
    def set_snapshot(self, snapshot: Snapshot | None, configs: Sequence[Any] = (),
                     gpu: str | None = None, can_act: bool = True) -> None:
        """The GPUs to offer (``snapshot``'s, this machine's and each host's;
        ``configs``: how to reach those hosts), ``gpu`` chosen."""
        self.snapshot = snapshot
        self.can_act = can_act
        self.inputs.set_targets(gpu_targets(snapshot, configs), gpu)

    # -- running --------------------------------------------------------------------------------
    def estimate(self) -> bool:
        """Start an estimate of the inputs; False (and why) when no model is named."""
        choice = self.inputs.choice()
        if choice is None:
            self.status.setText("Name a model first.")
            self.inputs.model_edit.setFocus()
            return False
        self.argv = command_line(choice, self.inputs.target())
        self.runner.start(self.argv)
        return True

    def stop(self) -> None:
        if self.runner.running:
            self.runner.cancel()
            self.status.setText("Stopped.")

    def _running(self, running: bool) -> None:
        self.stop_button.setVisible(running)
        self.estimate_button.setText("Estimate again" if running else "Estimate")
        if running:
            self._clock.start()
            self._ticker.start()
            self._tick()
        else:
            self._ticker.stop()

    def _tick(self) -> None:
        seconds = self._clock.elapsed() // 1000
        self.status.setText(f"Estimating… {seconds} s" if seconds else "Estimating…")

    def _answered(self, result: FitResult) -> None:
        self.error = ""
        target = self.inputs.target()
        gpu = target.display_id if target is not None else None
        host = target.host if target is not None else ""
        view = host_view(self.snapshot, host)
        self.message.setVisible(bool(result.note))
        self.message.setText(result.note)
        self.results.set_result(result, gpu, host, snapshot_of(self.snapshot, host),
                                None if view is None else view.user,
                                self.can_act and not stale(view))
        self.status.setText("")
        self._style()

    def _failed(self, text: str) -> None:
        self.error = text
        self.results.set_result(None)
        self.message.setText(f"The estimate failed:\n{text}")
        self.message.setVisible(True)
        self.status.setText("Failed.")
        self._style()

    def _inputs_changed(self) -> None:
        if self.runner.running:
            self.runner.cancel()
            self.status.setText("The inputs changed: the estimate was stopped.")
        elif self.results.result is not None:
            self.status.setText(STALE_TEXT)

    # -- the rest -------------------------------------------------------------------------------
    def copy_command(self) -> str:
        choice = self.inputs.choice()
        argv = command_line(choice, self.inputs.target()) if choice is not None else self.argv
        text = shlex.join(["vram-steward", *argv[3:]]) if argv else ""
        QGuiApplication.clipboard().setText(text)
        return text

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        self.runner.shutdown()
        super().closeEvent(event)

    def done(self, code: int) -> None:  # Escape, too
        self.runner.shutdown()
        super().done(code)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._style()
        super().changeEvent(event)

    def _style(self) -> None:
        palette = self.palette()
        color = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL] if self.error else pal.hex_color(
            pal.muted(palette))
        css = ("QScrollArea#fitScroll, QWidget#fitBody { background: transparent; }"
               f"QLabel#fitMessage {{ color: {color}; }}" + pal.view_rules(palette))
        if css != self.styleSheet():
            self.setStyleSheet(css)


__all__ = ["DEFAULT_SIZE", "FitDialog"]
