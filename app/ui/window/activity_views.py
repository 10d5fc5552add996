"""The main window's Activity tab and status line for what arrives with the
snapshots: model events (markers, log rows) and the pressure policy's
decisions; and the Auto-unload control, whose settings go to the controller.

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
from app.core.diagnosis.types import OomReport
from app.core.monitor.samples import Snapshot
from app.core.policies.server_models import SERVER_DEVICE
from app.core.units import fmt_bytes, fmt_fraction
from app.ui.agents.activity import ActivityEntry, reason_text
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.agents.auto_unload import LastUnload
from app.ui.doctor.doctor_view import DoctorView
from app.ui.doctor.oom_dialog import OomDialog
from app.ui.doctor.texts import oom_line, short_verdict
from app.ui.settings.values import AutoUnloadSettings
from app.ui.style import palette as pal


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
        #: Activity rows of OOM reports: entry key -> report (double-click opens it).
        self._oom_rows: dict[tuple[int, int], OomReport] = {}
        self._oom_seq = itertools.count(1)

    def _on_diagnoses(self, snapshot: Snapshot) -> None:
        self.doctor.update_snapshot(snapshot, self.controller.available)
        for report in snapshot.oom_reports:
            self._log_oom(report)

    def _log_oom(self, report: OomReport) -> None:
        """An Activity row for a new OOM report; double-clicking it opens the report."""
        key = (report.pid, -next(self._oom_seq))  # never a model event's (pid, seq)
        self._oom_rows[key] = report
        if len(self._oom_rows) > 200:
            self._oom_rows.pop(next(iter(self._oom_rows)))
        label = self._process_label(report.pid)
        where = f"OOM on GPU {report.gpu}" if report.gpu is not None else "OOM"
        self._add_activity(ActivityEntry(
            report.time, label if label != f"pid {report.pid}" else (report.command or label),
            "", where, short_verdict(report.verdict),
            detail=f"{oom_line(report)} (double-click: the report)", error=True, kind="oom",
            key=key))

    def _on_activity_activated(self, item: QTreeWidgetItem, _column: int) -> None:
        index = self.activity.tree.indexOfTopLevelItem(item)
        entries = self.activity.entries
        if 0 <= index < len(entries) and entries[index].key in self._oom_rows:
            self.open_oom_report(self._oom_rows[entries[index].key])

    def open_oom_report(self, report: OomReport | str) -> OomDialog | None:
        """Show an OOM report (or the one with that id) in its dialog."""
        if isinstance(report, str):
            found = self.doctor.reports.get(report)
            if found is None:
                return None
            report = found
        dialog = OomDialog(report, self, color_of=self._color_of_pid,
                           can_act=self.controller.available, snapshot=self._latest)
        dialog.request.connect(self.submit)
        dialog.record_requested.connect(self.open_recording)
        dialog.show()
        dialog.raise_()
        return dialog

    def open_recording(self, pid: int) -> ProcessDetailView:
        """The detail view of ``pid`` at its "Record allocations" section; the user
        chooses the length and starts it."""
        view: ProcessDetailView = self.open_details(pid)
        view.record_view.bring_into_view()
        return view

    def _color_of_pid(self, pid: int) -> QColor | None:
        snap = self._latest
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
    def _on_policy_decision(self, update: DecisionUpdate) -> None:
        """A pressure-policy decision, new or with its results."""
        d = update.decision
        runner = self.controller.core.policy_runner()
        if runner is not self._decisions_of:
            # A new source brings a new runner: its decisions count from 1 again, and
            # the old one's unloads will never report back.
            self._decisions_of = runner
            self._policy_pending.clear()
            self._policy_actions.clear()
            self.auto_unload.set_acting(None)
        from app.core.policies import pressure as pp

        did = next((g.display_id for g in (self._latest.gpus if self._latest else ())
                    if (d.gpu_uuid and g.uuid == d.gpu_uuid) or
                    (not d.gpu_uuid and g.index == d.gpu)), str(d.gpu))
        gpu = f"GPU {did}"
        for a in d.actions:
            if d.done:
                self._policy_pending.pop((a.pid, a.model), None)
            else:
                self._policy_pending[(a.pid, a.model)] = d
        if d.kind == pp.UNLOAD:
            names = ", ".join(f"{a.name} ({fmt_bytes(a.bytes)})" for a in d.actions)
            if not d.done:
                text = (f"Auto-unload: {gpu} at {fmt_fraction(d.fraction)} ≥ "
                        f"{fmt_fraction(self.settings.auto_unload.threshold)}: unloading {names}")
            else:
                ok = sum(1 for r in d.results if r.ok)
                failed = [r for r in d.results if not r.ok]
                done = ActionFigures.total(ActionFigures.of_event(r.event)
                                           for r in d.results if r.ok)
                text = (f"Auto-unload: {gpu}: unloaded {ok} of {len(d.actions)} "
                        f"({names}), {released_text(done)}")
                if failed:
                    text += f"; {failed[0].model}: {failed[0].error or failed[0].code}"
            self._status(text, d.reason, error=d.done and not any(r.ok for r in d.results))
            if d.done:
                self.auto_unload.set_last(LastUnload.of(d, gpu))
                self.auto_unload.set_acting(None)
                for r in d.results:  # the detail view's last action on each model
                    record = self._policy_action(d, r.pid, r.model)
                    record.result, record.done_at = r, time.monotonic()
            else:
                self.auto_unload.set_acting(
                    f"unloading {', '.join(a.name for a in d.actions)} on {gpu}")
            for a in (d.actions if update.new else ()):  # (it may arrive already done)
                self._add_activity(ActivityEntry(
                    d.time, self._process_label(a.pid), a.name, "Decided: unload",
                    reason_text("pressure"), detail=f"{gpu}: {d.reason}", kind="decision"))
            if d.done:
                for r in d.results:
                    if not r.ok:
                        a = next((x for x in d.actions if x.model == r.model), None)
                        self._add_activity(ActivityEntry(
                            time.time(), self._process_label(r.pid), a.name if a else r.model,
                            "Refused: unload" if r.code in ("refused", "managed")
                            else "Unload failed",
                            reason_text("pressure"), detail=f"{r.error or r.code}",
                            error=True, kind="refusal"))
        elif d.kind == pp.NOTHING_ELIGIBLE:
            text = f"Auto-unload: {gpu} at {fmt_fraction(d.fraction)}, nothing eligible to unload"
            self._status(text, d.reason)
            self._add_activity(ActivityEntry(d.time, "", "", f"{gpu}: nothing to unload",
                                             reason_text("pressure"), detail=d.reason,
                                             kind="decision"), count=False, coalesce=True)
        else:  # deferred: the log only
            self._add_activity(ActivityEntry(d.time, "", "", f"{gpu}: deferred",
                                             reason_text("pressure"), detail=d.reason,
                                             kind="decision"), count=False, coalesce=True)
        if d.actions:
            self._refresh_agent_widgets()

    def _policy_action(self, d: Any, pid: int, model: str) -> ModelAction:
        """A policy unload in flight, as the detail view shows a pending action."""
        key = (pid, model, d.seq)
        action = self._policy_actions.get(key)
        if action is None:
            a = next((x for x in d.actions if x.model == model), None)
            runner = self.controller.core.policy_runner()
            to = getattr(getattr(runner, "config", None), "target", "cpu")
            if a is not None and a.device == SERVER_DEVICE:
                to = SERVER_DEVICE  # a model server's API unloads it (its texts say so)
            action = ModelAction(UNLOAD, pid, model, a.name if a else model, to=to,
                                 reason="pressure", size=a.bytes if a else None,
                                 label=self._process_label(pid), nvml=False)
            if len(self._policy_actions) > 64:
                self._policy_actions.clear()
            self._policy_actions[key] = action
        return action

    def _with_policy_last(self, pid: int, last: dict[str, ModelAction]
                          ) -> dict[str, ModelAction]:
        """``last`` (the controller's last action per model of ``pid``) with the policy's
        unloads where they are newer."""
        out = dict(last)
        for (p, m, _seq), action in sorted(self._policy_actions.items(), key=lambda kv: kv[0][2]):
            if p != pid or action.done_at is None:
                continue
            mine = out.get(m)
            if mine is None or (mine.done_at or 0.0) <= action.done_at:
                out[m] = action
        return out

    # -- model events ---------------------------------------------------------------------------
    def _on_model_events(self, records: tuple[ModelEventRecord, ...]) -> None:
        """New unload / reload events: the Activity log, markers, the status bar."""
        for rec in records:
            self.markers.add(rec)
            ev = rec.event
            label = self._process_label(rec.pid)
            if ev.action == "unload":
                what = f"Unloaded → {target_text(ev.target)}" if ev.ok else "Unload failed"
            else:
                what = "Reloaded" if ev.ok else "Reload failed"
            action = self._action_of_event(rec.pid, ev)
            figures = action.figures if action is not None else ActionFigures.of_event(ev)
            line = event_line(ev, figures, action is not None and action.force)
            where = f" on GPU {rec.display_id}" if rec.display_id else ""
            self._add_activity(ActivityEntry(
                rec.time, label, ev.name, what, reason_text(ev.reason),
                figures.own if ev.action == "unload" and ev.ok else None, ev.seconds,
                detail=f"{label}{where}: {line}", error=not ev.ok, key=(rec.pid, ev.seq)))
            if ev.reason != "manual":
                self._status(f"{label}: {rec.text}", error=not ev.ok)
        # Markers: draw the changed panels at the next refresh.
        self._dirty = True

    def _action_of_event(self, pid: int, ev: ModelEvent) -> ModelAction | None:
        """The controller's record whose answer ``ev`` is (its figures include NVML's);
        None for an event no action of this window asked for."""
        action = self.controller.last_model_actions(pid).get(ev.model)
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
        label = action.label or self._process_label(action.pid)
        line = event_line(ev, action.figures, action.force)
        self.activity.update((action.pid, ev.seq), f"{label}{where}: {line}")

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

    def _status(self, text: str, tooltip: str = "", error: bool = False) -> None:
        self.action_label.setText(text)
        self.action_label.setToolTip(tooltip or text)
        crit = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        self.action_label.setStyleSheet(f"color: {crit};" if error else "")


__all__ = ["ActivityViews", "auto_unload_request"]
