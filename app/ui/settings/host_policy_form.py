"""A remote host's pressure policy, changed on its server.

The policy runs where the GPU is; this form shows the server's values and
sends what the user changed (``apply_requested``); the dialog runs the
request on a worker thread and hands the server's answer, or its refusal,
back to :meth:`HostPolicyForm.set_answer`.  The controls follow the server's
policy as it changes, but never while the user is editing them.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.agents.auto_unload import spin_box
from app.ui.settings.host_list import HostEntry, policy_changes


class HostPolicyForm(QGroupBox):
    apply_requested = Signal(str, object)  # host key, changes (dict for set_policy)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Auto-unload on the host", parent)
        self.setObjectName("hostPolicyForm")
        lay = QVBoxLayout(self)
        lay.setSpacing(6)
        self.note = QLabel(self)
        self.note.setObjectName("secondary")
        self.note.setWordWrap(True)
        lay.addWidget(self.note)
        # The controls, shown once the server has said which policy it runs.
        self.controls = QWidget(self)
        controls = QVBoxLayout(self.controls)
        controls.setContentsMargins(0, 0, 0, 0)
        controls.setSpacing(6)
        lay.addWidget(self.controls)
        self.enabled_box = QCheckBox("Unload idle models when a GPU is nearly full",
                                     self.controls)
        self.enabled_box.setObjectName("hostPolicyEnabled")
        controls.addWidget(self.enabled_box)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        form.setContentsMargins(22, 0, 0, 0)
        self.threshold_spin = spin_box(self.controls, 50, 99, " %", "hostPolicyThreshold",
                                       "The server acts when one of its GPUs' used memory "
                                       "reaches this share of its total")
        self.idle_spin = spin_box(self.controls, 0, 24 * 60, " min", "hostPolicyMinIdle",
                                  "Only models idle at least this long are unloaded")
        self.threshold_spin.setMinimumWidth(self.idle_spin.sizeHint().width())
        form.addRow("Threshold", self.threshold_spin)
        form.addRow("Idle for at least", self.idle_spin)
        controls.addLayout(form)
        row = QHBoxLayout()
        self.apply_button = QPushButton("Apply on the host", self.controls)
        self.apply_button.setObjectName("hostPolicyApply")
        self.apply_button.clicked.connect(self._apply)
        row.addWidget(self.apply_button)
        row.addStretch(1)
        controls.addLayout(row)
        self.status = QLabel(self)
        self.status.setObjectName("hostPolicyStatus")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.key = ""
        self.policy: Any = None  # the RemotePolicy the controls show
        self.busy = False
        for w in (self.enabled_box, self.threshold_spin, self.idle_spin):
            signal = w.toggled if isinstance(w, QCheckBox) else w.valueChanged
            signal.connect(self._sync)
        self.set_entry(None)

    # -- what is shown ------------------------------------------------------------------
    def set_entry(self, entry: HostEntry | None) -> None:
        """Show ``entry``'s host's policy (None: no host selected)."""
        key = entry.key if entry is not None else ""
        view = entry.view if entry is not None and entry.connected else None
        policy = view.policy if view is not None else None
        if key != self.key:
            self.key, self.policy, self.busy = key, None, False
            self.status.clear()
        self.setTitle(f"Auto-unload on {key}" if key else "Auto-unload on the host")
        if entry is None:
            self.note.setText("Select a host to see the policy its server runs.")
        elif view is None:
            self.note.setText("The policy is read from the host's server once it is "
                              "connected.")
        elif policy is None:
            self.note.setText("This server does not say which policy it runs (an older "
                              "VRAM Steward there).")
        elif not policy.available:
            why = policy.why_not or "this server runs no pressure policy"
            self.note.setText(f"{why[:1].upper()}{why[1:]}.")
        else:
            self.note.setText(
                "The host's server runs this policy on its own GPUs, whether this window "
                "is open or not; the window's own Auto-unload applies to this machine only."
                + ("" if policy.may_change else f" Not yours to change: {policy.why_not}."))
        if policy is None:
            self.policy = None
        elif policy != self.policy and not self._edited():  # never under the user's edits
            self.policy = policy
            self._show(policy)
        self._sync()

    def set_answer(self, key: str, policy: Any, error: str | None) -> None:
        """The server's answer to the change sent for ``key``."""
        if key != self.key:
            return
        self.busy = False
        if error is not None:
            self.status.setText(f"Not changed: {error}")
        else:
            self.status.setText(f"{key} now runs: {policy.text()}.")
            self.policy = policy
            self._show(policy)
        self._sync()

    # -- internals ------------------------------------------------------------------------
    def changes(self) -> dict[str, Any]:
        if self.policy is None:
            return {}
        return policy_changes(self.policy, self.enabled_box.isChecked(),
                              self.threshold_spin.value(), self.idle_spin.value())

    def _edited(self) -> bool:
        return bool(self.changes())

    def _show(self, policy: Any) -> None:
        widgets = (self.enabled_box, self.threshold_spin, self.idle_spin)
        for w in widgets:
            w.blockSignals(True)
        self.enabled_box.setChecked(policy.enabled)
        self.threshold_spin.setValue(round(policy.threshold * 100))
        self.idle_spin.setValue(round(policy.min_idle_s / 60))
        for w in widgets:
            w.blockSignals(False)

    def _sync(self, *_args: object) -> None:
        p = self.policy
        self.controls.setVisible(p is not None and p.available)
        usable = p is not None and p.available and p.may_change and not self.busy
        self.enabled_box.setEnabled(usable)
        for spin in (self.threshold_spin, self.idle_spin):
            spin.setEnabled(usable and self.enabled_box.isChecked())
        self.apply_button.setEnabled(usable and bool(self.changes()))

    def _apply(self) -> None:
        changes = self.changes()
        if not changes or not self.key:
            return
        self.busy = True
        self.status.setText(f"Asking {self.key}…")
        self._sync()
        self.apply_requested.emit(self.key, changes)


__all__ = ["HostPolicyForm"]
