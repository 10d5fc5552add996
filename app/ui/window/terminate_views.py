"""The main window's part in terminating a process: the confirmation, the
request sent to the controller, and the outcome in the status bar, the
Activity log and the detail view.

A request is checked against the latest snapshot before the dialog opens (a
process that may not be terminated is refused at once, with the reason), and
again by the controller when the user confirms.  :class:`TerminateViews` is
mixed into :class:`MainWindow` (through :class:`ActionViews`).

A remote host's process is checked against that host's snapshot, for the user
its server acts for, and terminated by that server; the confirmation and the
outcome name the host.
"""

from __future__ import annotations

import dataclasses
import time

from app.core.control.records import Outcome, TerminateAction
from app.core.control.requests import Refusal, Request, RequestError, Terminate
from app.core.control.targets import label_of
from app.core.control.terminate import check
from app.core.monitor.hosts import host_view, snapshot_of
from app.core.monitor.samples import Snapshot
from app.core.units import fmt_bytes, fmt_elapsed
from app.ui.agents.activity import ActivityEntry, on_host, reason_text
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.agents.detail_facts import stale_action
from app.ui.shell.controller import ControllerAdapter
from app.ui.style.hosts import stale, state_text
from app.ui.window.process_table import ProcessTable
from app.ui.window.terminate_dialog import TerminateDialog, confirm_text

_EVENTS = {Outcome.EXITED: "Terminated (SIGTERM)", Outcome.KILLED: "Killed (SIGKILL)",
           Outcome.GONE: "Terminate: already exited", Outcome.REFUSED: "Refused: terminate",
           Outcome.FAILED: "Terminate failed"}


def terminate_summary(action: TerminateAction) -> str:
    """One line: "Terminated train.py (20417) with SIGTERM in 0.4 s" ("… on gpu1")."""
    label = action.label or f"pid {action.pid}"
    if action.host:
        label += f" on {action.host}"
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

    def terminate_process(self, pid: int, host: str = "") -> TerminateDialog | None:
        """Ask to terminate process ``pid`` of ``host`` as the latest snapshot shows it."""
        return self.ask_terminate(Terminate(pid, host=host))

    def ask_terminate(self, request: Terminate) -> TerminateDialog | None:
        """Open the confirmation of ``request`` (None: refused, the reason shown).
        "Terminate" sends it, pinned to the process the dialog named."""
        host = request.host
        snapshot = snapshot_of(self._latest, host)
        try:
            action = self._check_terminate(request)
        except RequestError as exc:
            self._on_refused(request, exc)
            return None
        request = dataclasses.replace(request, create_time=action.create_time)
        if self.terminate_dialog is not None:
            self.terminate_dialog.reject()
        dialog = TerminateDialog(confirm_text(snapshot, request.pid, request.grace_s, host),
                                 self, host)
        dialog.accepted.connect(lambda: self.controller.submit(request))
        dialog.finished.connect(lambda _result: self._dialog_closed(dialog))
        self.terminate_dialog = dialog
        dialog.open()
        return dialog

    def _check_terminate(self, request: Terminate) -> TerminateAction:
        """The window's check of ``request`` on its host's latest snapshot: a remote
        process must be one of the user's its server acts for, its host connected."""
        host = request.host
        if not host:
            return check(self._latest, request, self.controller.core.terminating())
        view = host_view(self._latest, host)
        if view is None:
            raise RequestError(Refusal.UNKNOWN_PROCESS, f"no host {host!r} is watched")
        if stale(view):
            raise RequestError(Refusal.UNAVAILABLE, stale_action(host, state_text(view)))
        return check(view.snapshot, request, self.controller.core.terminating(host),
                     view.user, here=False)

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
            self.table.terminate_requested.connect(self.terminate_process)  # (pid, host)

    # -- results --------------------------------------------------------------------------------
    def _on_refused(self, request: Request, exc: RequestError) -> None:
        if not isinstance(request, Terminate):
            return
        label = label_of(snapshot_of(self._latest, request.host), request.pid)
        text = on_host(request.host, f"Could not terminate {label}: {exc}")
        self._status(text, error=True)
        self._add_activity(ActivityEntry(time.time(), on_host(request.host, label), "",
                                         _EVENTS[Outcome.REFUSED], reason_text("manual"),
                                         detail=text, error=True, kind="refusal"))
        self._terminate_in_details(request.pid, request.host, text, True)

    def _on_terminate_update(self, action: TerminateAction) -> None:
        """Started, finished or measured: the status bar (and Activity once it ended)."""
        text = terminate_summary(action)
        failed = action.outcome in (Outcome.REFUSED, Outcome.FAILED)
        self._status(text, error=failed)
        self._terminate_in_details(action.pid, action.host, text, failed)
        if action.done and not action.measured:
            r = action.result
            assert r is not None
            self._add_activity(ActivityEntry(
                time.time(), on_host(action.host, action.label), "", _EVENTS[r.outcome],
                reason_text("manual"),
                seconds=r.elapsed_s, detail=text, error=failed,
                kind="refusal" if r.outcome is Outcome.REFUSED else "event"))

    def _terminate_in_details(self, pid: int, host: str, text: str, error: bool) -> None:
        view = self.details
        if view is not None and view.pid == pid and view.host == host:
            view.show_result(text, error=error)


__all__ = ["TerminateViews", "terminate_summary"]
