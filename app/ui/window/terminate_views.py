"""The main window's part in terminating a process: the confirmation, the
request sent to the controller, and the outcome in the status bar, the
Activity log and the detail view.

A request is checked against the latest snapshot before the dialog opens (a
process that may not be terminated is refused at once, with the reason), and
again by the controller when the user confirms.  :class:`TerminateViews` is
mixed into :class:`MainWindow` (through :class:`ActionViews`).
"""

from __future__ import annotations

import dataclasses
import time

from app.core.control.records import Outcome, TerminateAction
from app.core.control.requests import Request, RequestError, Terminate
from app.core.control.targets import label_of
from app.core.control.terminate import check
from app.core.monitor.samples import Snapshot
from app.core.units import fmt_bytes, fmt_elapsed
from app.ui.agents.activity import ActivityEntry, reason_text
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.shell.controller import ControllerAdapter
from app.ui.window.process_table import ProcessTable
from app.ui.window.terminate_dialog import TerminateDialog, confirm_text

_EVENTS = {Outcome.EXITED: "Terminated (SIGTERM)", Outcome.KILLED: "Killed (SIGKILL)",
           Outcome.GONE: "Terminate: already exited", Outcome.REFUSED: "Refused: terminate",
           Outcome.FAILED: "Terminate failed"}


def terminate_summary(action: TerminateAction) -> str:
    """One line: "Terminated train.py (20417) with SIGTERM in 0.4 s"."""
    label = action.label or f"pid {action.pid}"
    r = action.result
    if r is None:
        return f"Terminating {label}…"
    if r.outcome is Outcome.EXITED:
        text = f"Terminated {label} with SIGTERM in {fmt_elapsed(r.elapsed_s or 0.0)}"
    elif r.outcome is Outcome.KILLED:
        text = f"Killed {label} with SIGKILL after {action.grace_s:g} s"
    elif r.outcome is Outcome.GONE:
        text = f"{label} had already exited: nothing was sent"
    else:
        return f"Could not terminate {label}: {r.reason or 'failed'}"
    if action.measured and action.released is not None:
        text += f" — NVML: {fmt_bytes(action.released)} released"
    return text


class TerminateViews:
    """Confirm, send, show; mixed into the main window (its widgets are ``self``'s)."""

    controller: ControllerAdapter
    details: ProcessDetailView | None
    table: ProcessTable
    _latest: Snapshot | None
    #: The confirmation on screen (None: none).
    terminate_dialog: TerminateDialog | None = None
    _terminate_wired = False

    def terminate_process(self, pid: int) -> TerminateDialog | None:
        """Ask to terminate process ``pid`` as the latest snapshot shows it."""
        return self.ask_terminate(Terminate(pid))

    def ask_terminate(self, request: Terminate) -> TerminateDialog | None:
        """Open the confirmation of ``request`` (None: refused, the reason shown).
        "Terminate" sends it, pinned to the process the dialog named."""
        try:
            action = check(self._latest, request, self.controller.core.terminating())
        except RequestError as exc:
            self._on_refused(request, exc)
            return None
        request = dataclasses.replace(request, create_time=action.create_time)
        if self.terminate_dialog is not None:
            self.terminate_dialog.reject()
        dialog = TerminateDialog(confirm_text(self._latest, request.pid, request.grace_s),
                                 self)
        dialog.accepted.connect(lambda: self.controller.submit(request))
        dialog.finished.connect(lambda _result: self._dialog_closed(dialog))
        self.terminate_dialog = dialog
        dialog.open()
        return dialog

    def _dialog_closed(self, dialog: TerminateDialog) -> None:
        if self.terminate_dialog is dialog:
            self.terminate_dialog = None
        dialog.deleteLater()

    def _wire_terminate(self, controller: ControllerAdapter,
                        old: ControllerAdapter | None) -> None:
        """Refusals of ``controller`` shown; the process table's "Terminate…" (once)."""
        if old is not None:
            old.refused.disconnect(self._on_refused)
        controller.refused.connect(self._on_refused)
        if not self._terminate_wired:
            self._terminate_wired = True
            self.table.terminate_requested.connect(self.terminate_process)

    # -- results --------------------------------------------------------------------------------
    def _on_refused(self, request: Request, exc: RequestError) -> None:
        if not isinstance(request, Terminate):
            return
        label = label_of(self._latest, request.pid)
        text = f"Could not terminate {label}: {exc}"
        self._status(text, error=True)
        self._add_activity(ActivityEntry(time.time(), label, "", _EVENTS[Outcome.REFUSED],
                                         reason_text("manual"), detail=text, error=True,
                                         kind="refusal"))
        self._terminate_in_details(request.pid, text, True)

    def _on_terminate_update(self, action: TerminateAction) -> None:
        """Started, finished or measured: the status bar (and Activity once it ended)."""
        text = terminate_summary(action)
        failed = action.outcome in (Outcome.REFUSED, Outcome.FAILED)
        self._status(text, error=failed)
        self._terminate_in_details(action.pid, text, failed)
        if action.done and not action.measured:
            r = action.result
            assert r is not None
            self._add_activity(ActivityEntry(
                time.time(), action.label, "", _EVENTS[r.outcome], reason_text("manual"),
                seconds=r.elapsed_s, detail=text, error=failed,
                kind="refusal" if r.outcome is Outcome.REFUSED else "event"))

    def _terminate_in_details(self, pid: int, text: str, error: bool) -> None:
        view = self.details
        if view is not None and view.pid == pid:
            view.show_result(text, error=error)


__all__ = ["TerminateViews", "terminate_summary"]
