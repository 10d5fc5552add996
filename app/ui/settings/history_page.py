"""The settings dialog's History page: what is kept on disk between runs,
and the most it can take."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QFormLayout, QLabel, QSpinBox, QWidget

from app.core.paths import history_db_path
from app.core.units import fmt_bytes
from app.ui.agents.auto_unload import spin_box
from app.ui.settings.values import StoredHistorySettings

#: The machines the bound is stated for: (GPUs, processes per GPU).
WORKSTATION = (2, 3)
SHARED_SERVER = (8, 64)


def bound_text(s: StoredHistorySettings, gpus: int = 0) -> str:
    """"At most 17 MiB on disk here (2 GPUs, 3 processes each); …"."""
    if not s.keep:
        return "Nothing is recorded; the history already on disk is kept."
    retention = s.retention()
    here = gpus or WORKSTATION[0]
    small = retention.bound_bytes(here, WORKSTATION[1])
    big = retention.bound_bytes(*SHARED_SERVER)
    gpu_word = "GPU" if here == 1 else "GPUs"
    return (f"At most {fmt_bytes(small)} on disk for {here} {gpu_word} with "
            f"{WORKSTATION[1]} processes each; {fmt_bytes(big)} for "
            f"{SHARED_SERVER[0]} GPUs with {SHARED_SERVER[1]} processes each.")


class HistoryPage(QWidget):
    def __init__(self, gpus: int = 0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._gpus = gpus
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.keep_box = QCheckBox("Keep history between runs", self)
        self.keep_box.setObjectName("keepHistory")
        self.keep_box.setToolTip(history_db_path())
        form.addRow("History", self.keep_box)
        self.fine_spin: QSpinBox = spin_box(self, 1, 24 * 60, " min", "fineMinutes",
                                            "1-second peaks kept for this long")
        form.addRow("1 s peaks for", self.fine_spin)
        self.coarse_spin: QSpinBox = spin_box(self, 1, 365, " days", "coarseDays",
                                              "5-second peaks kept for this long")
        form.addRow("5 s peaks for", self.coarse_spin)
        self.bound_label = QLabel(self)
        self.bound_label.setObjectName("historyBound")
        self.bound_label.setWordWrap(True)
        form.addRow("", self.bound_label)
        for box in (self.fine_spin, self.coarse_spin):
            box.valueChanged.connect(self._update)
        self.keep_box.toggled.connect(self._update)

    def set_settings(self, s: StoredHistorySettings) -> None:
        self.keep_box.setChecked(s.keep)
        self.fine_spin.setValue(s.fine_min)
        self.coarse_spin.setValue(s.coarse_days)
        self._update()

    def settings(self) -> StoredHistorySettings:
        return StoredHistorySettings(self.keep_box.isChecked(), self.fine_spin.value(),
                                     self.coarse_spin.value()).normalised()

    def _update(self, *_args: object) -> None:
        on = self.keep_box.isChecked()
        self.fine_spin.setEnabled(on)
        self.coarse_spin.setEnabled(on)
        self.bound_label.setText(bound_text(self.settings(), self._gpus))
