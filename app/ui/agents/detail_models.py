"""The detail view's model actions: the bar under the model list (Unload to CPU /
disk, Reload, Pin, "Unload anyway…"), its result line, and the process's idle
timer.  Each sends a typed request (app.core.control.requests) through the
view's ``request`` signal; the controller answers through the window.

:class:`ModelControls` is mixed into :class:`ProcessDetailView`.
"""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from app.core.agents.types import AgentReport, ModelInfo
from app.core.control.requests import Pin, Reload, SetIdleUnload, Unload
from app.core.units import fmt_bytes
from app.ui.agents.model_actions import (
    force_consequences,
    is_moving,
    model_blocker_tooltip,
    model_device,
    model_note,
    model_summary,
    state_text,
)
from app.ui.agents.model_list import MODEL_ID_ROLE, model_size
from app.ui.style import palette as pal
from app.ui.style.text import plain_tip

#: What the detail view says where a section has nothing to show.
NO_GPU = "Not on any GPU in the latest sample."
NO_AGENT_GPU = "No breakdown without an agent in the process."
NO_MODELS = "No models with parameters found in this process."
NO_AGENT_MODELS = "Models are known only to an agent in the process."


class ModelControls:
    """The selected model's actions and the idle timer of the detail view."""

    def selected_model(self) -> ModelInfo | None:
        if self._selected_id is None:
            return None
        row = self.model_model.row_of(self._selected_id)
        return self.model_model.model_at(row)

    def select_model(self, model_id: str) -> bool:
        row = self.model_model.row_of(model_id)
        if row < 0:
            return False
        self._selected_id = model_id
        self._reselect()
        self._update_model_bar()
        return True

    def _reselect(self) -> None:
        """Keep the selected model selected across model resets and re-sorts."""
        view = self.models_view
        sel = view.selectionModel()
        if self._selected_id is None:
            if self.model_model.rowCount() and not sel.hasSelection():
                # The first row as the view shows it (largest model).
                self._selected_id = self.model_proxy.index(0, 0).data(MODEL_ID_ROLE)
            else:
                return
        row = self.model_model.row_of(self._selected_id)
        if row < 0:
            self._selected_id = None
            return
        proxy_index = self.model_proxy.mapFromSource(self.model_model.index(row, 0))
        current = sel.selectedRows()
        if len(current) == 1 and current[0].row() == proxy_index.row():
            return
        sel.blockSignals(True)
        view.selectRow(proxy_index.row())
        sel.blockSignals(False)
        view.viewport().update()

    def _on_model_selected(self, *_args) -> None:
        rows = self.models_view.selectionModel().selectedRows()
        if rows:
            self._selected_id = rows[0].data(MODEL_ID_ROLE)
        self._update_model_bar()

    def _update_model_bar(self) -> None:
        m = self.selected_model()
        buttons = (self.unload_cpu_button, self.unload_disk_button, self.reload_button,
                   self.pin_button)
        if m is None:
            self._bar_key = None
            for b in buttons:
                b.setEnabled(False)
            self.force_button.setVisible(False)
            self.model_progress.setVisible(False)
            self._set_model_result("Select a model to unload, reload or pin it.", muted=True)
            return
        pending = self._pending.get(m.id)
        last = self._last.get(m.id)
        live = self.report is not None and self._can_act
        # A model server's process ("ComfyUI"): the server unloads its models, not the agent.
        managed = getattr(self.report, "managed_by", None)
        # Per snapshot this usually changes nothing: skip the widget calls then.
        key = (m, id(pending), id(last), getattr(last, "measured", None), live, managed,
               self._why_not)
        if key == self._bar_key:
            return
        self._bar_key = key
        moving = is_moving(m, pending)
        busy = moving or pending is not None
        self.model_progress.setVisible(busy)
        resident = m.state == "resident"
        # The agent refuses any unload of a model with an unload blocker, or of a managed
        # one: no button for it.
        unloadable = resident and not m.unload_blocker and not managed
        self.unload_cpu_button.setEnabled(live and not busy and unloadable)
        self.unload_disk_button.setEnabled(live and not busy and unloadable)
        self.reload_button.setEnabled(live and not busy and m.state == "offloaded")
        self.pin_button.setText("Unpin" if m.pinned else "Pin")
        self.pin_button.setEnabled(live and not busy)
        size = fmt_bytes(model_size(m))
        if managed or m.unload_blocker:
            refused = (f"{managed} manages {m.name}: use {managed}'s unload (above)" if managed
                       else f"The agent refuses any unload of {m.name}: {m.unload_blocker}")
            self.unload_cpu_button.setToolTip(plain_tip(refused))
            self.unload_disk_button.setToolTip(plain_tip(refused))
        else:
            self.unload_cpu_button.setToolTip(plain_tip(
                f"Move {m.name}'s weights ({size}) to pinned host memory and release the GPU "
                "memory; the next forward pass reloads them (fast)"))
            self.unload_disk_button.setToolTip(plain_tip(
                f"Write {m.name}'s weights ({size}) to a file on disk and release the GPU "
                "memory; frees host memory too, slower to reload"))
        self.reload_button.setToolTip(plain_tip(
            f"Bring {m.name}'s weights back to {model_device(m)} now "
            "(instead of at the next forward pass)"))
        self.pin_button.setToolTip("Pinned models are never unloaded automatically (by the "
                                   "idle timer or the memory-pressure policy)"
                                   if not m.pinned else "Allow automatic unloading again")
        if self._why_not:  # its host is not connected: that is why, whatever else holds
            for b in buttons:
                b.setToolTip(plain_tip(self._why_not))
        can_force = (last is not None and getattr(last, "can_force", False) and resident
                     and not busy and live)
        self.force_button.setVisible(bool(can_force))
        self.force_button.setEnabled(bool(can_force))
        if pending is not None:
            self._set_model_result(model_summary(pending, with_process=False))
        elif moving:
            self._set_model_result(f"{state_text(m)} {m.name}")
        elif last is not None:
            text = model_summary(last, with_process=False)
            if getattr(last, "refused", False):
                text = f"Refused: {last.error}"
                if can_force:
                    text += " — you can override it"
            self._set_model_result(text, error=not last.ok, tooltip=model_summary(last))
        elif managed:
            self._set_model_result(f"Managed by {managed}: use its unload above", muted=True)
        elif note := model_note(m):
            self._set_model_result(note, muted=True, tooltip=model_blocker_tooltip(m))
        else:
            self._set_model_result("", muted=True)

    def _set_model_result(self, text: str, error: bool = False, muted: bool = False,
                          tooltip: str = "") -> None:
        label = self.model_result
        if label.text() != text:
            label.setText(text)
        tip = plain_tip(tooltip or text)
        if label.toolTip() != tip:
            label.setToolTip(tip)
        if error:
            color = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        elif muted:
            color = pal.hex_color(pal.muted(self.palette()))
        else:
            color = pal.hex_color(pal.foreground(self.palette()))
        style = f"color: {color};"
        if label.styleSheet() != style:
            label.setStyleSheet(style)

    def _request_unload(self, to: str, force: bool = False) -> None:
        m = self.selected_model()
        if m is not None and self.pid is not None:
            self.request.emit(Unload(self.pid, m.id, to, force, name=m.name,
                                     device=m.home_device or m.device, size=model_size(m),
                                     host=self.host))

    def _request_reload(self) -> None:
        m = self.selected_model()
        if m is not None and self.pid is not None:
            self.request.emit(Reload(self.pid, m.id, m.name, m.home_device or m.device,
                                     host=self.host))

    def _request_pin(self) -> None:
        m = self.selected_model()
        if m is not None and self.pid is not None:
            self.request.emit(Pin(self.pid, m.id, not m.pinned, m.name, host=self.host))

    def _request_force(self) -> None:
        m = self.selected_model()
        last = self._last.get(m.id) if m is not None else None
        if m is None or last is None or not getattr(last, "can_force", False):
            return
        to = getattr(last, "to", "cpu")
        answer = QMessageBox.warning(
            self, "Unload anyway?", force_consequences(last.error or "refused", m.name, to),
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel)
        if answer == QMessageBox.StandardButton.Yes:
            self._request_unload(to, force=True)

    # -- idle timer ---------------------------------------------------------------------------
    def _update_idle(self, report: AgentReport | None, pending: bool) -> None:
        can = report is not None and self._can_act
        self.idle_box.setEnabled(can and not pending)
        current = report.idle_unload_s if report is not None else None
        if report is None:
            self.idle_state.setText("")
        elif pending:
            self.idle_state.setText("setting…")
        else:
            self.idle_state.setText("(agent: off)" if current is None
                                    else f"(agent: {current / 60:g} min)")
        # Follow the agent's value, unless the user is typing or a change is on its way.
        if report is not None and not pending and not self.idle_spin.hasFocus():
            self.idle_box.blockSignals(True)
            self.idle_spin.blockSignals(True)
            self.idle_box.setChecked(current is not None)
            if current is not None:
                self.idle_spin.setValue(max(1, round(current / 60)))
            self.idle_box.blockSignals(False)
            self.idle_spin.blockSignals(False)
            self._idle_sent = current
        self.idle_spin.setEnabled(can and not pending and self.idle_box.isChecked())

    def idle_seconds_wanted(self) -> float | None:
        return float(self.idle_spin.value() * 60) if self.idle_box.isChecked() else None

    def _on_idle_toggled(self, _checked: bool) -> None:
        self.idle_spin.setEnabled(self.idle_box.isChecked())
        self._send_idle()

    def _on_idle_minutes(self, _value: int) -> None:
        if self.idle_box.isChecked():
            self._send_idle()

    def _send_idle(self) -> None:
        if self.pid is None or self.report is None:
            return
        wanted = self.idle_seconds_wanted()
        if wanted == self._idle_sent:
            return
        self._idle_sent = wanted
        self.idle_state.setText("setting…")
        self.request.emit(SetIdleUnload(self.pid, wanted, host=self.host))


__all__ = ["ModelControls"]
