"""The Auto-unload control: the main window's compact button and its popup form.

It edits an :class:`~app.ui.settings.values.AutoUnloadSettings`; the window
sends them to the application controller (``SetAutoUnload``), which applies
them to the memory-pressure policy running in the Collector.  It shows the
policy's state (off, armed at its threshold, acting) and its last unload.

Also here: the texts of the notice of an automatic unload (:func:`notice_texts`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
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

from app.agent.protocol import RELOAD_GRACE_S
from app.core.control.measure import ActionFigures
from app.core.units import fmt_ago, fmt_bytes, fmt_duration, fmt_fraction
from app.ui.settings.values import AutoUnloadSettings
from app.ui.style.text import plain_label, plain_tip

log = logging.getLogger(__name__)


# -- what the policy did -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LastUnload:
    """The policy's last unload, as the control tells of it."""

    time: float  # epoch seconds it was done
    gpu: str  # "GPU 0"
    names: tuple[str, ...]  # the models unloaded
    freed: int | None  # bytes: the models' own share (PolicyDecision.freed)
    failed: int = 0  # unloads refused or failed

    @classmethod
    def of(cls, decision: Any, gpu: str, when: float | None = None) -> LastUnload:
        """From a done PolicyDecision (app.core.policies.pressure)."""
        done = decision.unloaded
        return cls(time.time() if when is None else when, gpu,
                   tuple(a.name for a, _ in done), decision.freed,
                   len(decision.actions) - len(done))

    def text(self, now: float | None = None) -> str:
        """"last: unloaded pipe.text_encoder 2 min 05 s ago, freed 235 MiB"."""
        ago = fmt_ago((time.time() if now is None else now) - self.time)
        if not self.names:
            return f"last: nothing unloaded on {self.gpu} {ago} ({self.failed} refused or failed)"
        text = f"last: unloaded {', '.join(self.names)} {ago}"
        if self.freed is not None:
            text += f", freed {fmt_bytes(self.freed)}"
        if self.failed:
            text += f" ({self.failed} refused or failed)"
        return text


def notice_texts(decision: Any, gpu: str, label_of: Callable[[int], str]) -> tuple[str, str]:
    """(title, body) of the notice of an automatic unload: "Auto-unload freed 235 MiB
    from pipe.text_encoder in ipykernel (18822)" ("from 2 models", named with their
    own share in the body), then why and how they come back.  ``label_of``: a pid's
    process label."""
    done = decision.unloaded
    pids = sorted({a.pid for a, _ in done})
    where = label_of(pids[0]) if len(pids) == 1 else f"{len(pids)} processes"
    what = done[0][0].name if len(done) == 1 else f"{len(done)} models"
    freed = decision.freed
    title = (f"Auto-unload freed {fmt_bytes(freed)} from {what} in {where}" if freed is not None
             else f"Auto-unload unloaded {what} in {where}")
    threshold = getattr(decision, "threshold", None)
    body = ""
    if len(done) > 1:
        body = ", ".join(f"{a.name} ({fmt_bytes(f.own)})" for a, f in done) + ": "
    body += f"{gpu} reached {fmt_fraction(decision.fraction)}"
    if threshold is not None:
        body += f" (the threshold is {fmt_fraction(threshold)})"
    idle = min(a.idle_s for a, _ in done)
    many = len(done) > 1
    body += (f". {'They' if many else 'It'} had been idle for {fmt_duration(idle)}"
             f" and went to host memory; {'they reload on their' if many else 'it reloads on its'}"
             " next use, or now.")
    cache = ActionFigures.total(f for _, f in done).cache_before
    if cache:
        body += f" The allocator also returned {fmt_bytes(cache)} of cache held before."
    return title, body


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
                                  "saw them), and only once the app has seen them that long "
                                  "too; pinned models, models with training evidence and "
                                  f"models reloaded in the last {RELOAD_GRACE_S:g} s never "
                                  "are")
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
        # The policy's state and last unload, naming models (the control sets it).
        self.status = plain_label(QLabel(self))
        self.status.setObjectName("autoUnloadStatus")
        self.status.setWordWrap(True)
        self.status.setMaximumWidth(320)
        lay.addWidget(self.status)
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
    """"Auto-unload: at 90 %" — a button whose popup is the :class:`AutoUnloadForm`.

    Its text says the policy's state (off, at its threshold, unloading…); its
    tooltip and popup add what it is doing and its last unload."""

    settings_changed = Signal(object)  # AutoUnloadSettings

    def __init__(self, settings: AutoUnloadSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("autoUnloadButton")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        # Room for the menu arrow after the text (under a style sheet Qt draws it over
        # the last characters).
        self.setStyleSheet("QToolButton#autoUnloadButton { padding-right: 16px; }")
        self.menu_ = QMenu(self)
        self.form = AutoUnloadForm(settings, self.menu_)
        action = QWidgetAction(self.menu_)
        action.setDefaultWidget(self.form)
        self.menu_.addAction(action)
        self.setMenu(self.menu_)
        self.form.changed.connect(self._on_changed)
        self.menu_.aboutToShow.connect(lambda: self._show(self.form.settings()))
        self.available = True
        self.acting: str | None = None  # "unloading pipe.unet on GPU 0"
        self.last: LastUnload | None = None
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

    def set_acting(self, what: str | None) -> None:
        """The policy is unloading (``what``: "unloading pipe.unet on GPU 0"), or done."""
        self.acting = what
        self._show(self.form.settings())

    def set_last(self, last: LastUnload) -> None:
        self.last = last
        self._show(self.form.settings())

    def _on_changed(self, s: AutoUnloadSettings) -> None:
        self._show(s)
        self.settings_changed.emit(s)

    def state_text(self) -> str:
        """"Armed: acts when a GPU reaches 90 %", "Acting: …", "Off"; with the last
        unload on a second line."""
        s = self.form.settings()
        if not s.enabled:
            state = "Off"
        elif self.acting:
            state = f"Acting: {self.acting}"
        else:
            state = f"Armed: acts when a GPU reaches {s.threshold * 100:.0f} %"
        if self.last is None:
            return state
        last = self.last.text()
        return f"{state}\n{last[0].upper()}{last[1:]}"

    @staticmethod
    def policy_text(s: AutoUnloadSettings) -> str:
        """What the settings do, in a sentence."""
        if not s.enabled:
            return ("Memory-pressure policy: off (models are unloaded only by hand or by a "
                    "process's own idle timer)")
        return ("Memory-pressure policy: when a GPU's used memory reaches "
                f"{s.threshold * 100:.0f} %, idle models (idle ≥ {s.min_idle_s / 60:g} min, "
                "and seen by the app that long; not pinned; not reloaded in the last "
                f"{RELOAD_GRACE_S:g} s) are unloaded to host memory until it is below; it "
                f"acts again after usage fell under {s.rearm * 100:.0f} %.")

    def _show(self, s: AutoUnloadSettings) -> None:
        self.setText("Auto-unload: unloading…" if s.enabled and self.acting else s.summary())
        state = self.state_text()
        tip = f"{state}\n\n{self.policy_text(s)}"
        if not self.available:
            tip += "\n\nNot available: " + (getattr(self, "_unavailable_why", "") or
                                            "this build has no pressure policy")
        self.setToolTip(plain_tip(tip + "\n\nClick to change."))
        if self.form.status.text() != state:
            self.form.status.setText(state)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and self.last is not None:
            self._show(self.form.settings())  # "… 2 min 05 s ago" as of now
        return super().event(event)


__all__ = ["AutoUnloadControl", "AutoUnloadForm", "LastUnload", "notice_texts"]
