"""The Auto-unload control: the main window's compact button and its popup form.

It edits an :class:`~app.ui.settings.values.AutoUnloadSettings`; the window
sends them to the application controller (``SetAutoUnload``), which applies
them to the memory-pressure policy running in the Collector.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QLabel,
    QMenu,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
    QWidgetAction,
)

from app.ui.settings.values import AutoUnloadSettings

log = logging.getLogger(__name__)


# -- settings control ---------------------------------------------------------------------------

def spin_box(parent: QWidget, lo: int, hi: int, suffix: str, name: str, tip: str) -> QSpinBox:
    spin = QSpinBox(parent)
    spin.setObjectName(name)
    spin.setRange(lo, hi)
    spin.setSuffix(suffix)
    spin.setToolTip(tip)
    return spin


class AutoUnloadForm(QWidget):
    """Enabled, threshold %, re-arm %, minimum idle minutes."""

    changed = Signal(object)  # AutoUnloadSettings

    def __init__(self, settings: AutoUnloadSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("autoUnloadForm")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.setSpacing(8)
        self.enabled_box = QCheckBox("Unload idle models when a GPU is nearly full", self)
        self.enabled_box.setObjectName("autoUnloadEnabled")
        lay.addWidget(self.enabled_box)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        form.setContentsMargins(22, 0, 0, 0)
        form.setHorizontalSpacing(10)
        form.setVerticalSpacing(6)
        self.threshold_spin = spin_box(self, 50, 99, " %", "autoUnloadThreshold",
                                       "Act when a GPU's used memory reaches this share of "
                                       "its total")
        self.rearm_spin = spin_box(self, 40, 98, " %", "autoUnloadRearm",
                                   "After acting, act again only once usage has fallen below "
                                   "this share (no back-and-forth around the threshold)")
        self.idle_spin = spin_box(self, 0, 24 * 60, " min", "autoUnloadMinIdle",
                                  "Only models idle at least this long are unloaded (no "
                                  "forward pass; before the first one, since the agent first "
                                  "saw them); pinned models and models with training evidence "
                                  "never are")
        form.addRow("Threshold", self.threshold_spin)
        form.addRow("Re-arm below", self.rearm_spin)
        form.addRow("Idle for at least", self.idle_spin)
        lay.addLayout(form)
        self.note = QLabel(self)
        self.note.setObjectName("secondary")
        self.note.setWordWrap(True)
        self.note.setText("The longest idle models go first, to host memory; the next "
                          "forward pass reloads them.")
        self.note.setMaximumWidth(320)
        lay.addWidget(self.note)
        self._settings = settings
        self.set_settings(settings)
        self.enabled_box.toggled.connect(self._emit)
        for spin in (self.threshold_spin, self.rearm_spin, self.idle_spin):
            spin.valueChanged.connect(self._emit)

    def set_settings(self, s: AutoUnloadSettings) -> None:
        self._settings = s
        widgets = (self.enabled_box, self.threshold_spin, self.rearm_spin, self.idle_spin)
        for w in widgets:
            w.blockSignals(True)
        self.enabled_box.setChecked(s.enabled)
        self.threshold_spin.setValue(round(s.threshold * 100))
        self.rearm_spin.setValue(round(s.rearm * 100))
        self.idle_spin.setValue(round(s.min_idle_s / 60))
        for w in widgets:
            w.blockSignals(False)
        for w in widgets[1:]:
            w.setEnabled(s.enabled)

    def settings(self) -> AutoUnloadSettings:
        return self._settings

    def _emit(self, *_args) -> None:
        s = AutoUnloadSettings(self.enabled_box.isChecked(), self.threshold_spin.value() / 100,
                               self.rearm_spin.value() / 100, self.idle_spin.value() * 60.0,
                               self._settings.min_interval_s).normalised()
        self.set_settings(s)  # shows the clamped values (re-arm below the threshold)
        self.changed.emit(s)


class AutoUnloadControl(QToolButton):
    """"Auto-unload: at 90 %" — a button whose popup is the :class:`AutoUnloadForm`."""

    settings_changed = Signal(object)  # AutoUnloadSettings

    def __init__(self, settings: AutoUnloadSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("autoUnloadButton")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.menu_ = QMenu(self)
        self.form = AutoUnloadForm(settings, self.menu_)
        action = QWidgetAction(self.menu_)
        action.setDefaultWidget(self.form)
        self.menu_.addAction(action)
        self.setMenu(self.menu_)
        self.form.changed.connect(self._on_changed)
        self.available = True
        self._show(settings)

    def set_settings(self, s: AutoUnloadSettings) -> None:
        self.form.set_settings(s)
        self._show(s)

    def settings(self) -> AutoUnloadSettings:
        return self.form.settings()

    def set_available(self, available: bool, why: str = "") -> None:
        self.available = available
        self._unavailable_why = why
        self._show(self.form.settings())

    def _on_changed(self, s: AutoUnloadSettings) -> None:
        self._show(s)
        self.settings_changed.emit(s)

    def _show(self, s: AutoUnloadSettings) -> None:
        self.setText(s.summary())
        tip = ("Memory-pressure policy: when a GPU's used memory reaches "
               f"{s.threshold * 100:.0f} %, idle models (idle ≥ {s.min_idle_s / 60:g} min, not "
               f"pinned) are unloaded to host memory until it is below; it acts again after "
               f"usage fell under {s.rearm * 100:.0f} %."
               if s.enabled else "Memory-pressure policy: off (models are unloaded only by "
               "hand or by a process's own idle timer)")
        if not self.available:
            tip += "\n\nNot available: " + (getattr(self, "_unavailable_why", "") or
                                            "this build has no pressure policy")
        self.setToolTip(tip + "\n\nClick to change.")


__all__ = ["AutoUnloadControl", "AutoUnloadForm"]
