"""The main window's Activity tab and status line for what arrives with the
snapshots: model events (markers, log rows) and the pressure policy's
decisions; and the Auto-unload control, whose settings go to the controller.

A remote host's events, decisions (its server's policy: none runs here for it)
and OOM reports arrive with its view's snapshot, once, while the view is
``fresh``; each is shown naming its host ("gpu1: train.py (1234)").

:class:`ActivityViews` is mixed into :class:`MainWindow`.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTreeWidgetItem

from app.core.agents.events import DecisionUpdate, ModelEventRecord, event_line, target_text
from app.core.agents.types import ModelEvent
from app.core.control.measure import ActionFigures, released_text
from app.core.control.records import UNLOAD, ModelAction
from app.core.control.requests import SetAutoUnload
from app.core.control.targets import label_of
from app.core.diagnosis.types import OomReport
from app.core.monitor.hosts import host_view, qualified_id, snapshot_of, split_id
from app.core.monitor.samples import Snapshot
from app.core.policies.server_models import SERVER_DEVICE
from app.core.units import fmt_bytes, fmt_fraction
from app.ui.agents.activity import ActivityEntry, on_host, reason_text
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.agents.auto_unload import LastUnload
from app.ui.doctor.doctor_view import DoctorView
from app.ui.doctor.oom_dialog import OomDialog
from app.ui.doctor.texts import oom_line, short_verdict
from app.ui.settings.values import AutoUnloadSettings
from app.ui.style import palette as pal
from app.ui.style.hosts import stale
from app.ui.style.text import plain_tip


def auto_unload_request(settings: AutoUnloadSettings) -> SetAutoUnload:
    s = settings.normalised()
    return SetAutoUnload(s.enabled, s.threshold, s.rearm, s.min_idle_s, s.min_interval_s)


class ActivityViews:
    """Events and decisions rendered; mixed into the main window."""

    _latest: Snapshot | None
    #: The GUI's handle on the app's memory-pressure policy (set_policy): where the
    #: controller finds the PolicyRunner the Auto-unload settings apply to.
    policy: Any

    # -- the Doctor tab and OOM reports ---------------------------------------------------------
    def _make_doctor(self) -> None:
        self.doctor = DoctorView(self.lower_tabs)
        self.lower_tabs.addTab(self.doctor, "Doctor")
        self.doctor.request.connect(self.submit)
        self.doctor.record_requested.connect(self.open_recording)
        self.doctor.open_report.connect(self.open_oom_report)
        self.doctor.count_changed.connect(self._on_doctor_count)
        self.activity.tree.itemDoubleClicked.connect(self._on_activity_activated)
        #: Activity rows of OOM reports: entry key (host, pid, -n) -> report.
        self._oom_rows: dict[tuple[str, int, int], OomReport] = {}
        self._oom_seq = itertools.count(1)

    def _on_diagnoses(self, snapshot: Snapshot) -> None:
        """Every host's diagnoses in the Doctor tab; new OOM reports in the Activity log
        (a remote host's: those its fresh view brought, once)."""
        self.doctor.update_snapshot(snapshot, self.controller.available)
        for report in snapshot.oom_reports:
            self._log_oom(report)
        for view in snapshot.hosts:
            if view.fresh and view.snapshot is not None:
                for report in view.snapshot.oom_reports:
                    self._log_oom(report, view.key)

    def _on_host_events(self, snapshot: Snapshot) -> None:
        """Each remote host's model events and its server's policy decisions, from
        the views that brought them (``fresh``: each arrives with one view only)."""
        for view in snapshot.hosts:
            own = view.snapshot
            if not view.fresh or own is None:
                continue
            if own.model_events:
                self._on_model_events(own.model_events, view.key)
            for update in own.policy_decisions:
                self._on_policy_decision(update, view.key)

    def _log_oom(self, report: OomReport, host: str = "") -> None:
        """An Activity row for a new OOM report; double-clicking it opens the report."""
        key = (host, report.pid, -next(self._oom_seq))  # never a model event's key
        self._oom_rows[key] = report
        if len(self._oom_rows) > 200:
            self._oom_rows.pop(next(iter(self._oom_rows)))
        label = label_of(snapshot_of(self._latest, host), report.pid)
        where = f"OOM on GPU {report.gpu}" if report.gpu is not None else "OOM"
        self._add_activity(ActivityEntry(
            report.time,
            on_host(host, label if label != f"pid {report.pid}" else (report.command or label)),
            "", where, short_verdict(report.verdict),
            detail=f"{on_host(host, oom_line(report))} (double-click: the report)",
            error=True, kind="oom", key=key))

    def _on_activity_activated(self, item: QTreeWidgetItem, _column: int) -> None:
        index = self.activity.tree.indexOfTopLevelItem(item)
        entries = self.activity.entries
        key = entries[index].key if 0 <= index < len(entries) else None
        if key in self._oom_rows:
            self.open_oom_report(self._oom_rows[key], key[0])

    def open_oom_report(self, report: OomReport | str,
                        host: str | None = None) -> OomDialog | None:
        """Show an OOM report (or the one with that id) in its dialog; ``host``: where
        it happened (None: where the Doctor tab says it did, else this machine)."""
        if isinstance(report, str):
            found = self.doctor.reports.get(report)
            if found is None:
                return None
            report = found
        if host is None:
            host = self.doctor.report_hosts.get(report.id, "")
        view = host_view(self._latest, host)
        dialog = OomDialog(report, self, color_of=lambda pid: self._color_of_pid(pid, host),
                           can_act=self.controller.available and not stale(view),
                           snapshot=snapshot_of(self._latest, host), host=host,
                           user=None if view is None else view.user)
        dialog.request.connect(self.submit)
        dialog.record_requested.connect(self.open_recording)
        dialog.show()
        dialog.raise_()
        return dialog

    def open_recording(self, pid: int, host: str = "") -> ProcessDetailView:
        """The detail view of ``pid`` (of ``host``) at its "Record allocations"
        section; the user chooses the length and starts it."""
        view: ProcessDetailView = self.open_details(pid, host)
        view.record_view.bring_into_view()
        return view

    def _color_of_pid(self, pid: int, host: str = "") -> QColor | None:
        snap = snapshot_of(self._latest, host)
        for p in (p for g in (snap.gpus if snap else ()) for p in g.processes if p.pid == pid):
            return self.process_colors.color_of(p.key)
        return None

    def _on_doctor_count(self, warnings: int) -> None:
        index = self.lower_tabs.indexOf(self.doctor)
        self.lower_tabs.setTabText(index, f"Doctor ({warnings})" if warnings else "Doctor")

    # -- the pressure policy's settings -------------------------------------------------------
    def set_policy(self, runner: Any) -> None:
        """The app's memory-pressure policy: its ``PolicyRunner``, or a callable that
        returns the current one (it changes with the source); None for none.  The
        Auto-unload control edits its settings through the controller; its
        decisions arrive with the snapshots."""
        getter = runner if runner is None or callable(runner) else (lambda: runner)
        self.policy = getter
        core = self.controller.core
        core.set_policy_runner(getter)
        self.controller.submit(auto_unload_request(self.settings.auto_unload))
        self.auto_unload.set_available(getter is not None,
                                       (core.policy_error or "") if getter is not None else "")

    def set_auto_unload(self, settings: AutoUnloadSettings) -> None:
        """New auto-unload settings (from the control, or restored from storage)."""
        self.settings.auto_unload = settings.normalised()
        if self.auto_unload.settings() != self.settings.auto_unload:
            self.auto_unload.set_settings(self.settings.auto_unload)
        self.controller.submit(auto_unload_request(self.settings.auto_unload))
        self._add_activity(ActivityEntry(
            time.time(), "", "", "Auto-unload " + ("on" if settings.enabled else "off"),
            self.settings.auto_unload.summary().removeprefix("Auto-unload: ")
            if settings.enabled else "", kind="setting",
            detail=self.auto_unload.policy_text(self.settings.auto_unload)), count=False,
            coalesce=True)

    # -- decisions ---------------------------------------------------------------------------------
    def _on_policy_decision(self, update: DecisionUpdate, host: str = "") -> None:
        """A pressure-policy decision, new or with its results: this machine's
        policy's, or (``host``) the one a remote host's server runs."""
        d = update.decision
        local = not host
        runner = self.controller.core.policy_runner()
        if local and runner is not self._decisions_of:
            # A new source brings a new runner: its decisions count from 1 again, and
            # the old one's unloads will never report back.
            self._decisions_of = runner
            for key in [k for k in self._policy_pending if not k[0]]:
                del self._policy_pending[key]
            for akey in [k for k in self._policy_actions if not k[0]]:
                del self._policy_actions[akey]
            self.auto_unload.set_acting(None)
        from app.core.policies import pressure as pp

        own = snapshot_of(self._latest, host)
        did = next((g.display_id for g in (own.gpus if own else ())
                    if (d.gpu_uuid and g.uuid == d.gpu_uuid) or
                    (not d.gpu_uuid and g.index == d.gpu)), qualified_id(str(d.gpu), host))
        gpu = f"GPU {split_id(did)[1]}"  # the line names its host already
        for a in d.actions:
            if d.done:
                self._policy_pending.pop((host, a.pid, a.model), None)
            else:
                self._policy_pending[(host, a.pid, a.model)] = d
        threshold = d.threshold if d.threshold is not None or host else \
            self.settings.auto_unload.threshold
        if d.kind == pp.UNLOAD:
            names = ", ".join(f"{a.name} ({fmt_bytes(a.bytes)})" for a in d.actions)
            if not d.done:
                over = "" if threshold is None else f" ≥ {fmt_fraction(threshold)}"
                text = (f"Auto-unload: {gpu} at {fmt_fraction(d.fraction)}{over}: "
                        f"unloading {names}")
            else:
                ok = sum(1 for r in d.results if r.ok)
                failed = [r for r in d.results if not r.ok]
                done = ActionFigures.total(ActionFigures.of_event(r.event)
                                           for r in d.results if r.ok)
                text = (f"Auto-unload: {gpu}: unloaded {ok} of {len(d.actions)} "
                        f"({names}), {released_text(done)}")
                if failed:
                    text += f"; {failed[0].model}: {failed[0].error or failed[0].code}"
            self._status(on_host(host, text), d.reason,
                         error=d.done and not any(r.ok for r in d.results))
            if d.done:
                if local:  # the Auto-unload control is this machine's policy's
                    self.auto_unload.set_last(LastUnload.of(d, gpu))
                    self.auto_unload.set_acting(None)
                for r in d.results:  # the detail view's last action on each model
                    record = self._policy_action(d, r.pid, r.model, host)
                    record.result, record.done_at = r, time.monotonic()
            elif local:
                self.auto_unload.set_acting(
                    f"unloading {', '.join(a.name for a in d.actions)} on {gpu}")
            for a in (d.actions if update.new else ()):  # (it may arrive already done)
                self._add_activity(ActivityEntry(
                    d.time, self._process_label(a.pid, host), a.name, "Decided: unload",
                    reason_text("pressure"), detail=f"{gpu}: {d.reason}", kind="decision"))
            if d.done:
                for r in d.results:
                    if not r.ok:
                        a = next((x for x in d.actions if x.model == r.model), None)
                        self._add_activity(ActivityEntry(
                            time.time(), self._process_label(r.pid, host),
                            a.name if a else r.model,
                            "Refused: unload" if r.code in ("refused", "managed")
                            else "Unload failed",
                            reason_text("pressure"), detail=f"{r.error or r.code}",
                            error=True, kind="refusal"))
        elif d.kind == pp.NOTHING_ELIGIBLE:
            text = f"Auto-unload: {gpu} at {fmt_fraction(d.fraction)}, nothing eligible to unload"
            self._status(on_host(host, text), d.reason)
            self._add_activity(ActivityEntry(d.time, host, "", f"{gpu}: nothing to unload",
                                             reason_text("pressure"), detail=d.reason,
                                             kind="decision"), count=False, coalesce=True)
        else:  # deferred: the log only
            self._add_activity(ActivityEntry(d.time, host, "", f"{gpu}: deferred",
                                             reason_text("pressure"), detail=d.reason,
                                             kind="decision"), count=False, coalesce=True)
        if d.actions:
            self._refresh_agent_widgets()

    def _policy_action(self, d: Any, pid: int, model: str, host: str = "") -> ModelAction:
        """A policy unload in flight, as the detail view shows a pending action."""
        key = (host, pid, model, d.seq)
        action = self._policy_actions.get(key)
        if action is None:
            a = next((x for x in d.actions if x.model == model), None)
            runner = None if host else self.controller.core.policy_runner()
            to = getattr(getattr(runner, "config", None), "target", "cpu")
            if a is not None and a.device == SERVER_DEVICE:
                to = SERVER_DEVICE  # a model server's API unloads it (its texts say so)
            action = ModelAction(UNLOAD, pid, model, a.name if a else model, to=to,
                                 reason="pressure", size=a.bytes if a else None,
                                 label=label_of(snapshot_of(self._latest, host), pid),
                                 nvml=False, host=host)
            if len(self._policy_actions) > 64:
                self._policy_actions.clear()
            self._policy_actions[key] = action
        return action

    def _with_policy_last(self, pid: int, last: dict[str, ModelAction], host: str = ""
                          ) -> dict[str, ModelAction]:
        """``last`` (the controller's last action per model of ``pid`` on ``host``) with
        the policy's unloads where they are newer."""
        out = dict(last)
        for (h, p, m, _seq), action in sorted(self._policy_actions.items(),
                                              key=lambda kv: kv[0][3]):
            if (h, p) != (host, pid) or action.done_at is None:
                continue
            mine = out.get(m)
            if mine is None or (mine.done_at or 0.0) <= action.done_at:
                out[m] = action
        return out

    # -- model events ---------------------------------------------------------------------------
    def _on_model_events(self, records: tuple[ModelEventRecord, ...], host: str = "") -> None:
        """New unload / reload events (of ``host``'s processes): the Activity log,
        markers (a remote event's GPU id names its host), the status bar."""
        for rec in records:
            self.markers.add(rec)
            ev = rec.event
            label = self._process_label(rec.pid, host)
            if ev.action == "unload":
                what = f"Unloaded → {target_text(ev.target)}" if ev.ok else "Unload failed"
            else:
                what = "Reloaded" if ev.ok else "Reload failed"
            action = self._action_of_event(rec.pid, ev, host)
            figures = action.figures if action is not None else ActionFigures.of_event(ev)
            line = event_line(ev, figures, action is not None and action.force)
            where = f" on GPU {rec.display_id}" if rec.display_id else ""
            self._add_activity(ActivityEntry(
                rec.time, label, ev.name, what, reason_text(ev.reason),
                figures.own if ev.action == "unload" and ev.ok else None, ev.seconds,
                detail=f"{label}{where}: {line}", error=not ev.ok, key=(host, rec.pid, ev.seq)))
            if ev.reason != "manual":
                self._status(f"{label}: {rec.text}", error=not ev.ok)
        # Markers: draw the changed panels at the next refresh.
        self._dirty = True

    def _action_of_event(self, pid: int, ev: ModelEvent, host: str = "") -> ModelAction | None:
        """The controller's record whose answer ``ev`` is (its figures include NVML's);
        None for an event no action of this window asked for."""
        action = self.controller.last_model_actions(pid, host).get(ev.model)
        if action is not None and action.event is not None and action.event.seq == ev.seq:
            return action
        return None

    def _log_measured(self, action: ModelAction) -> None:
        """A measured action's Activity row gets NVML's figure too (the detail view's
        line, word for word)."""
        ev = action.event
        if ev is None:
            return
        where = f" on GPU {action.display_id}" if action.display_id else ""
        label = (on_host(action.host, action.label) if action.label
                 else self._process_label(action.pid, action.host))
        line = event_line(ev, action.figures, action.force)
        self.activity.update((action.host, action.pid, ev.seq), f"{label}{where}: {line}")

    # -- the Activity tab and the status line -------------------------------------------------
    def add_activity(self, entry: ActivityEntry) -> None:
        self._add_activity(entry)

    def _add_activity(self, entry: ActivityEntry, count: bool = True,
                      coalesce: bool = False) -> None:
        self.activity.add(entry, coalesce)
        if count and self.lower_tabs.currentWidget() is not self.activity:
            self._unseen_activity += 1
            self.lower_tabs.setTabText(self.lower_tabs.indexOf(self.activity),
                                       f"Activity ({self._unseen_activity})")

    def _on_tab_changed(self, index: int) -> None:
        if self.lower_tabs.widget(index) is self.activity and self._unseen_activity:
            self._unseen_activity = 0
            self.lower_tabs.setTabText(index, "Activity")

    #: The action whose outcome the status line tells (None: another message).
    _status_owner: object = None

    def _status(self, text: str, tooltip: str = "", error: bool = False,
                owner: object = None) -> None:
        self._status_owner = owner
        self.action_label.setText(text)
        self.action_label.setToolTip(plain_tip(tooltip or text))
        crit = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        self.action_label.setStyleSheet(f"color: {crit};" if error else "")


__all__ = ["ActivityViews", "auto_unload_request"]
