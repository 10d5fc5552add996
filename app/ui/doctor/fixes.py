"""Ranked fixes, best first: what each gives, and the one control that fits it.

- free a cache, unload a model: a button sending the typed request through the
  controller (enabled while agent actions are available);
- stop a process: "Terminate…", a :class:`Terminate` request the window turns
  into its confirmation (which re-checks and refuses other users' processes);
  disabled, with the reason, when the latest snapshot already says no;
- record allocations: "Record…", which asks for the process's detail view at
  its "Record allocations" section (the user picks the length; nothing starts);
- an environment setting: "Copy", which puts the exact setting on the clipboard;
- advice (fix a leak, need less memory): text to read, no button.

A remote host's fixes (:attr:`FixList.host`) send requests naming that host,
and "Terminate…" is checked against its snapshot, for the user its server
acts for.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QGridLayout, QLabel, QPushButton, QSizePolicy, QWidget

from app.core.control.requests import FreeCache, Request, RequestError, Terminate, Unload
from app.core.control.terminate import check
from app.core.monitor.samples import Snapshot
from app.ui.doctor.texts import SNIPPETS, fix_button_text, gain_text
from app.ui.style.layouts import clear
from app.ui.style.text import plain_label, plain_tip

#: How long "Copied" shows on a Copy button.
COPIED_MS = 1500


def fix_request(fix: Any, host: str = "") -> Request | None:
    """The request that carries ``fix`` out on ``host`` ("" this machine); None for a
    fix the user makes."""
    if fix.pid is None:
        return None
    if fix.action == "free_cache":
        return FreeCache.of(fix.pid, host)
    if fix.action == "unload_model" and fix.model:
        return Unload(fix.pid, fix.model, name=fix.model_name, host=host)
    if fix.action == "stop_process":
        return Terminate(fix.pid, host=host)
    return None


def terminate_refusal(snapshot: Snapshot | None, pid: int, host: str = "",
                      user: str | None = None) -> str:
    """Why terminating ``pid`` would be refused as ``snapshot`` (its host's) shows it
    ("" when it would be offered).  The window's own check, on figures already in
    memory: the snapshot's rows and the cached user name (a remote host's: ``user``,
    the one its server acts for), no I/O."""
    try:
        check(snapshot, Terminate(pid, host=host), set(), user, here=not host)
    except RequestError as exc:
        return str(exc)
    return ""


class FixList(QWidget):
    """One row per fix: rank, text, gain, its control (see the module's docstring)."""

    request = Signal(object)  # a typed request: FreeCache, Unload, Terminate
    #: (pid, host): show its detail view at "Record allocations"
    record_requested = Signal(int, str)

    def __init__(self, parent: QWidget | None = None, host: str = "") -> None:
        super().__init__(parent)
        self.host = host  # the remote host the fixes act on ("" this machine)
        self.fixes: tuple[Any, ...] = ()
        self.buttons: list[QPushButton] = []  # free cache / unload (need the agent)
        self.terminate_buttons: dict[int, QPushButton] = {}  # pid -> "Terminate…"
        self.record_buttons: list[QPushButton] = []
        self.copy_buttons: list[QPushButton] = []
        self._can_act = True
        self._refusals: dict[int, str] = {}  # pid -> why Terminate is refused ("" offered)
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(10)
        self.grid.setVerticalSpacing(4)
        self.grid.setColumnStretch(1, 1)

    def set_fixes(self, fixes: tuple[Any, ...]) -> None:
        if fixes == self.fixes:
            return
        self.fixes = fixes
        clear(self.grid)
        self.buttons, self.record_buttons, self.copy_buttons = [], [], []
        self.terminate_buttons = {}
        for row in range(self.grid.rowCount()):
            self.grid.setRowStretch(row, 0)
        # Texts start level with a button's label: the first line lines up, the rest wrap.
        pad = max(0, (_button_height(self) - self.fontMetrics().height()) // 2)
        top = Qt.AlignmentFlag.AlignTop
        for row, fix in enumerate(fixes):
            rank = QLabel(f"{row + 1}.", self)
            rank.setObjectName("secondary")
            text = plain_label(QLabel(fix.text, self))  # names processes and models
            policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
            policy.setHeightForWidth(True)  # as tall as its wrapped lines, no taller
            text.setSizePolicy(policy)
            text.setWordWrap(True)
            text.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
            text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            text.setMinimumWidth(200)
            gain = QLabel(gain_text(fix.gain_bytes), self)
            gain.setObjectName("fixGain")
            f = gain.font()
            f.setBold(True)
            gain.setFont(f)
            for label in (rank, text, gain):
                label.setContentsMargins(0, pad, 0, 0)
            self.grid.addWidget(rank, row, 0, top)
            self.grid.addWidget(text, row, 1)
            self.grid.addWidget(gain, row, 2, top | Qt.AlignmentFlag.AlignRight)
            button = self._control(fix)
            if button is not None:
                button.setAutoDefault(False)
                self.grid.addWidget(button, row, 3, top)
        # Room the list is given beyond its rows goes below them, never between.
        self.grid.setRowStretch(len(fixes), 1)
        self._apply_refusals()

    def _control(self, fix: Any) -> QPushButton | None:
        """The button that carries out ``fix``; None for advice to read."""
        if fix.action == "stop_process" and fix.pid is not None:
            button = QPushButton("Terminate…", self)
            button.setObjectName("terminateFixButton")
            button.clicked.connect(
                lambda *_a, p=fix.pid: self.request.emit(Terminate(p, host=self.host)))
            self.terminate_buttons[fix.pid] = button
            return button
        if fix.action == "record_allocations" and fix.pid is not None:
            button = QPushButton("Record…", self)
            button.setObjectName("recordFixButton")
            button.setToolTip(f"Open pid {fix.pid}'s details at “Record allocations”: "
                              "choose how long, then record")
            button.clicked.connect(
                lambda *_a, p=fix.pid: self.record_requested.emit(p, self.host))
            self.record_buttons.append(button)
            return button
        snippet = fix.command if fix.action == "install_agent" else SNIPPETS.get(fix.action)
        if snippet is not None:
            button = QPushButton("Copy", self)
            button.setObjectName("copyFixButton")
            button.setToolTip(plain_tip(f"Copy “{snippet}” to the clipboard"))
            width = max(button.fontMetrics().horizontalAdvance(t) for t in ("Copy", "Copied"))
            button.setMinimumWidth(width + 24)
            button.clicked.connect(lambda *_a, s=snippet, b=button: _copy(s, b))
            self.copy_buttons.append(button)
            return button
        request = fix_request(fix, self.host)
        if request is None:
            return None
        button = QPushButton(fix_button_text(fix), self)
        button.setObjectName("fixButton")
        button.setToolTip(plain_tip(fix.text))
        button.clicked.connect(lambda *_a, r=request: self.request.emit(r))
        button.setEnabled(self._can_act)
        self.buttons.append(button)
        return button

    def set_can_act(self, can_act: bool) -> None:
        """Without an agent connection the app's fixes are shown, not offered."""
        self._can_act = can_act
        for b in self.buttons:
            if b.isEnabled() != can_act:
                b.setEnabled(can_act)

    def check_terminate(self, snapshot: Snapshot | None, user: str | None = None,
                        why_not: str = "") -> None:
        """Offer "Terminate…" only where ``snapshot`` (the host's; ``user``: whom its
        server acts for) does not already refuse it; ``why_not``: why nothing may be
        done now (the host is not connected)."""
        refusals = {pid: why_not or terminate_refusal(snapshot, pid, self.host, user)
                    for pid in self.terminate_buttons}
        if refusals != self._refusals:
            self._refusals = refusals
            self._apply_refusals()

    def _apply_refusals(self) -> None:
        for pid, button in self.terminate_buttons.items():
            why = self._refusals.get(pid, "")
            button.setEnabled(not why)
            button.setToolTip(plain_tip(f"Cannot terminate: {why}") if why else
                              f"Terminate pid {pid}: asks you to confirm first")


def _button_height(widget: QWidget) -> int:
    """A push button's height in the app's style and ``widget``'s font (measured, not shown)."""
    probe = QPushButton("Copy")
    probe.setFont(widget.font())
    height = probe.sizeHint().height()
    probe.deleteLater()
    return height


def _copy(text: str, button: QPushButton) -> None:
    QGuiApplication.clipboard().setText(text)
    button.setText("Copied")
    QTimer.singleShot(COPIED_MS, button, lambda: button.setText("Copy"))


__all__ = ["COPIED_MS", "FixList", "fix_request", "terminate_refusal"]
