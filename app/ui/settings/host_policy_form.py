"""A remote host's pressure policy, changed on its server.

The policy runs where the GPU is; this form shows the server's values and
sends what the user changed (``apply_requested``); the dialog runs the
request on a worker thread and hands the server's answer, or its refusal,
back to :meth:`HostPolicyForm.set_answer`.  The controls follow the server's
policy as it changes, but never while the user is editing them; their ranges
are the bounds the server's ``set_policy`` takes.
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
from app.ui.settings.host_list import (
    IDLE_MIN_RANGE,
    THRESHOLD_PCT_RANGE,
    HostEntry,
    policy_changes,
    policy_values,
)
from app.ui.style.text import plain_label


class HostPolicyForm(QGroupBox):
    apply_requested = Signal(str, object)  # host key, changes (dict for set_policy)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Auto-unload on the host", parent)
        self.setObjectName("hostPolicyForm")
        lay = QVBoxLayout(self)
        lay.setSpacing(6)
        self.note = plain_label(QLabel(self))  # with the server's words (why_not)
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
        self.threshold_spin = spin_box(self.controls, *THRESHOLD_PCT_RANGE, " %",
                                       "hostPolicyThreshold",
                                       "The server acts when one of its GPUs' used memory "
                                       "reaches this share of its total")
        self.idle_spin = spin_box(self.controls, *IDLE_MIN_RANGE, " min", "hostPolicyMinIdle",
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
        self.status = plain_label(QLabel(self))  # the server's answer, or its refusal
        self.status.setObjectName("hostPolicyStatus")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        self.key = ""
        #: The RemotePolicy the controls were set from: what a change is measured against.
        self.policy: Any = None
        #: The server's policy now: whether it runs one and whether the user may change it.
        self.latest: Any = None
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
        self.latest = policy
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
        elif policy != self.policy and (not self._edited() or not self._differs(policy)):
            # The server's new policy, unless the user is editing (what the form shows
            # is already the new policy's: nothing of the user's is lost).
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
            self.policy = self.latest = policy
            self._show(policy)
        self._sync()

    # -- internals ------------------------------------------------------------------------
    def changes(self) -> dict[str, Any]:
        """The values the user changed from the server's policy shown, as
        ``set_policy`` takes them (nothing else is sent)."""
        return {} if self.policy is None else self._changes_from(self.policy)

    def _changes_from(self, policy: Any) -> dict[str, Any]:
        return policy_changes(policy, self.enabled_box.isChecked(),
                              self.threshold_spin.value(), self.idle_spin.value())

    def _edited(self) -> bool:
        return bool(self.changes())

    def _differs(self, policy: Any) -> bool:
        return bool(self._changes_from(policy))

    def _show(self, policy: Any) -> None:
        widgets = (self.enabled_box, self.threshold_spin, self.idle_spin)
        for w in widgets:
            w.blockSignals(True)
        enabled, threshold_pct, idle_min = policy_values(policy)
        self.enabled_box.setChecked(enabled)
        self.threshold_spin.setValue(threshold_pct)
        self.idle_spin.setValue(idle_min)
        for w in widgets:
            w.blockSignals(False)

    def _sync(self, *_args: object) -> None:
        p = self.latest if self.policy is not None else None
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
