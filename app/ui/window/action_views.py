"""The main window's part in actions: it sends requests to the controller and
renders what comes back (status bar, GPU panels, the detail view).

No verb's logic lives here: the controller
(:class:`app.ui.shell.controller.ControllerAdapter` around
:class:`app.core.control.controller.AppController`) validates each request,
keeps the busy set, runs it off the GUI thread and measures NVML before and
after.  :class:`ActionViews` is mixed into :class:`MainWindow`.

A process is (host, pid): requests name their host, results say it ("gpu1:
Freed …"), and the busy sets and action records are read per host.
"""

from __future__ import annotations

import time
from typing import Any

from app.core.control.records import FREE, IDLE_TTL, CacheAction, ModelAction, TerminateAction
from app.core.control.requests import (
    FreeCache,
    Request,
    Terminate,
)
from app.core.control.targets import label_of
from app.core.monitor.hosts import every_gpu, host_view, snapshot_of
from app.core.monitor.samples import Snapshot
from app.core.servers.types import holding
from app.ui.agents.activity import ActivityEntry, on_host, reason_text
from app.ui.agents.agent_actions import cache_details, cache_failed, cache_summary, panel_text
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.agents.model_actions import model_summary
from app.ui.shell.controller import ControllerAdapter
from app.ui.style.hosts import stale, state_text
from app.ui.window.gpu_feed import feed_agents
from app.ui.window.terminate_views import TerminateViews


class ActionViews(TerminateViews):
    """Requests out, results in; mixed into the main window (its widgets are ``self``'s)."""

    controller: ControllerAdapter
    details: ProcessDetailView | None
    #: The last finished or running free / gc (its summary is the status bar's text).
    last_action: CacheAction | None
    _latest: Snapshot | None
    _panels: dict[str, Any]
    #: Model actions measured while a snapshot is taken in (None: not taking one in),
    #: and those to show once its events and decisions are shown.
    _measured_models: list[ModelAction] | None = None
    _measured_later: tuple[ModelAction, ...] = ()
    #: Unloads the policies decided that have not finished: (host, pid, model) -> decision;
    #: their records as the detail view shows them: (host, pid, model, seq) -> action.
    _policy_pending: dict[tuple[str, int, str], Any]
    _policy_actions: dict[tuple[str, int, str, int], ModelAction]

    # -- the controller ----------------------------------------------------------------------
    def set_controller(self, controller: ControllerAdapter) -> None:
        """Send requests to ``controller`` and render its results.  Without an agent
        directory (the default) the agent figures are shown but the action buttons
        stay disabled."""
        old = getattr(self, "controller", None)
        if old is not None:
            for sig, slot in ((old.started, self._on_started), (old.progress, self._on_progress),
                              (old.finished, self._on_finished),
                              (old.measured, self._on_measured)):
                sig.disconnect(slot)
        self.controller = controller
        self._wire_terminate(controller, old)
        controller.started.connect(self._on_started)
        controller.progress.connect(self._on_progress)
        controller.finished.connect(self._on_finished)
        controller.measured.connect(self._on_measured)
        policy = getattr(self, "policy", None)
        if policy is not None:
            self.set_policy(policy)
        if self._latest is not None:
            controller.on_snapshot(self._latest)
        self._refresh_agent_widgets()

    def submit(self, request: Request) -> Any:
        """The controller's record(s) of ``request``; None when refused (nothing to
        do, busy, unknown process).  A Terminate opens its confirmation instead."""
        if isinstance(request, Terminate):
            return self.ask_terminate(request)
        return self.controller.submit(request)

    # -- verbs the panels send (one line each: the logic is the controller's) ---------------
    def free_cache(self, pid: int, host: str = "") -> CacheAction | None:
        """Empty the PyTorch cache of process ``pid`` of ``host`` (off the GUI thread)."""
        return self.submit(FreeCache.of(pid, host))

    def free_all_caches(self, display_id: str) -> CacheAction | None:
        """Empty the cache of every agent process on GPU ``display_id``, one after another."""
        return self.submit(FreeCache.on_gpu(display_id))

    # -- the detail view ------------------------------------------------------------------------
    def open_details(self, pid: int, host: str = "") -> ProcessDetailView:
        """Show the detail view of process ``pid`` of ``host`` ("" this machine;
        non-modal; follows snapshots)."""
        if self.details is None:
            self.details = ProcessDetailView(self)
            self.details.request.connect(self.submit)
        view = self.details
        view.set_process(pid, host)
        if self._latest is not None:
            self._update_details(self._latest)
        last = self.last_action
        if last is not None and pid in last.pids and last.host == host:
            self._show_in_details(last)
        view.show()
        view.raise_()
        return view

    def _process_label(self, pid: int, host: str = "") -> str:
        """"train.py (1234)" on this machine, "gpu1: train.py (1234)" on a remote host."""
        return on_host(host, label_of(snapshot_of(self._latest, host), pid))

    def _on_details_button(self) -> None:
        target = self.table.selected_details()
        if target is not None:
            self.open_details(*target)

    def _update_details_button(self) -> None:
        enabled = self.table.selected_details() is not None
        if self.details_button.isEnabled() != enabled:
            self.details_button.setEnabled(enabled)

    def _update_details(self, snapshot: Snapshot, busy: bool | None = None,
                        can_act: bool | None = None) -> None:
        """The detail view follows its process's host's snapshot; ``busy`` / ``can_act``
        default to that host's busy set and whether actions are available."""
        view = self.details
        if view is None or view.pid is None:
            return
        host = view.host
        snap = snapshot_of(snapshot, host)
        hv = host_view(snapshot, host)
        if snap is None:  # a host not watched any more, or not heard from yet
            snap = Snapshot(snapshot.timestamp, snapshot.monotonic, "remote", None, ())
        late = (state_text(hv), hv.reason) if hv is not None and stale(hv) else None
        if host and hv is None:
            late = ("not watched any more", None)
        if busy is None:
            busy = view.pid in self.controller.busy_pids(host)
        if can_act is None:
            can_act = self.controller.available
        # A model server's runner shows the server's actions (they are the server pid's).
        server = holding(snap.servers, view.pid)
        pid = view.pid if server is None else server.pid
        pending: dict[str, ModelAction] = {}
        idle_pending = False
        for a in self.controller.pending_models(pid, host):
            if a.kind == IDLE_TTL:
                idle_pending = True
            elif a.model is not None:
                pending[a.model] = a
        for (h, p, m), d in self._policy_pending.items():
            if (h, p) == (host, pid) and m not in pending:
                pending[m] = self._policy_action(d, p, m, h)
        last = self._with_policy_last(pid, self.controller.last_model_actions(pid, host), host)
        view.update_snapshot(snap, busy, can_act, pending, last, idle_pending, late)

    # -- results --------------------------------------------------------------------------------
    def _measure(self, snapshot: Snapshot) -> None:
        """The controller takes ``snapshot`` (every host's) and measures what finished;
        the model actions' texts wait for :meth:`_show_measured_models` (after the
        snapshot's events and decisions, whose texts they follow in the status bar).
        The remote hosts' new events and decisions are shown here, before this
        machine's."""
        self._measured_models = []
        try:
            self.controller.on_snapshot(snapshot)
        finally:
            self._measured_later = tuple(self._measured_models)
            self._measured_models = None
        self._on_host_events(snapshot)

    def _show_measured_models(self) -> None:
        later, self._measured_later = self._measured_later, ()
        for action in later:
            self._show_measured_model(action)

    def _on_started(self, action: CacheAction | ModelAction | TerminateAction) -> None:
        if isinstance(action, TerminateAction):
            self._on_terminate_update(action)
        elif isinstance(action, CacheAction):
            self._on_action_update(action)
        else:
            if action.reason != "pressure":
                self._status(on_host(action.host, model_summary(action)), owner=action)
            self._refresh_agent_widgets()

    def _on_progress(self, action: CacheAction, _pid: int) -> None:
        self._on_action_update(action)

    def _on_finished(self, action: CacheAction | ModelAction | TerminateAction) -> None:
        if isinstance(action, TerminateAction):
            self._on_terminate_update(action)
        elif isinstance(action, CacheAction):
            self._on_action_update(action)
        else:
            self._on_model_finished(action)

    def _on_measured(self, action: CacheAction | ModelAction | TerminateAction) -> None:
        if isinstance(action, TerminateAction):
            self._on_terminate_update(action)
        elif isinstance(action, CacheAction):
            # Its figures, late: the status line keeps a newer outcome it may show now.
            self._show_action(action, status=self._status_owner is action)
        elif self._measured_models is not None:
            self._measured_models.append(action)
        else:
            self._show_measured_model(action)

    def _show_measured_model(self, action: ModelAction) -> None:
        self._log_measured(action)
        last = self.controller.last_model_actions(action.pid, action.host)
        if (last.get(action.model or "") is action and action.reason != "pressure"
                and self._status_owner is action):
            self._status(on_host(action.host, model_summary(action)), owner=action)

    def _on_action_update(self, action: CacheAction) -> None:
        self.last_action = action
        self._show_action(action)
        self._refresh_agent_widgets()

    def _show_action(self, action: CacheAction, status: bool = True) -> None:
        """Put an action's outcome in the status bar (``status``), its GPU panel
        and the detail view."""
        text = on_host(action.host, cache_summary(action))
        details = "\n".join(cache_details(action))
        if status:
            self._status(text, details, error=cache_failed(action), owner=action)
        if action.display_id is not None and action.display_id in self._panels:
            self._panels[action.display_id].agent_section.set_result(
                panel_text(action), f"{text}\n{details}")
        self._show_in_details(action)

    def _show_in_details(self, action: CacheAction) -> None:
        view = self.details
        if view is None or view.pid not in action.pids or view.host != action.host:
            return
        lines = cache_details(action)
        if len(action.pids) == 1:
            text = cache_summary(action)
        else:
            line = next((t for t in lines if t.startswith(action.label(view.pid) + ":")), "")
            text = (f"{line} — part of “Free all caches” on GPU {action.display_id}"
                    if line else cache_summary(action))
        r = action.results.get(view.pid)
        error = (r is not None and not r.ok) or (action.kind != FREE and action.done
                                                and bool(action.errors))
        view.show_result(text, "\n".join(lines), error=error)

    def _on_model_finished(self, action: ModelAction) -> None:
        if not action.ok and action.kind != IDLE_TTL:
            kind = "refusal" if action.refused else "event"
            event = (f"Refused: {action.kind}" if action.refused
                     else f"{action.kind.capitalize()} failed")
            self._add_activity(ActivityEntry(
                time.time(), on_host(action.host, action.label), action.who(), event,
                reason_text(action.reason), detail=on_host(action.host, model_summary(action)),
                error=True, kind=kind))
        elif action.kind == IDLE_TTL:
            self._add_activity(ActivityEntry(
                time.time(), on_host(action.host, action.label), "", "Idle timer",
                model_summary(action, with_process=False),
                detail=on_host(action.host, model_summary(action)),
                error=not action.ok, kind="setting"), count=False)
        self._status(on_host(action.host, model_summary(action)),
                     error=action.done and not action.ok, owner=action)
        self._refresh_agent_widgets()

    def _refresh_agent_widgets(self) -> None:
        """Button states right away (not only at the next snapshot), each host's
        panels with that host's busy set."""
        latest = self._latest
        if latest is None:
            return
        for gpu in every_gpu(latest):
            panel = self._panels.get(gpu.display_id)
            if panel is not None:
                feed_agents(panel, gpu, latest, self.controller)
        if self.details is not None and self.details.isVisible():
            self._update_details(latest)


__all__ = ["ActionViews"]
