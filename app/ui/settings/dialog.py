"""The settings dialog: edits a copy of :class:`UiSettings`; OK hands it back.

Pages: General (sampling, history, theme, window behaviour, start at login),
Alerts (notifications, default and per-GPU levels), Auto-unload (the unload
policy's defaults), History (what is kept on disk, ``history_page``).
Nothing is applied while the dialog is open; the caller applies and saves
what :meth:`SettingsDialog.settings` returns.  The remote hosts have their
own dialog (``hosts_dialog``): this one carries them over, even through
Restore Defaults.  The per-GPU alert levels list every host's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.ui.agents.auto_unload import AutoUnloadForm, spin_box
from app.ui.settings.history_page import HistoryPage
from app.ui.settings.values import (
    HISTORY_CHOICES_S,
    IDLE_TIMER_MAX_MIN,
    IDLE_TIMER_MIN_MIN,
    PERIOD_MAX_S,
    PERIOD_MIN_S,
    AlertSettings,
    GpuAlertLevels,
    UiSettings,
)
from app.ui.style.text import plain_tip

THEME_LABELS = (("system", "Follow the system"), ("light", "Light"), ("dark", "Dark"))
#: A per-GPU spin box at this value means "use the default levels".
DEFAULT_MARK = 9


@dataclass(frozen=True, slots=True)
class GpuEntry:
    """A GPU the dialog offers per-GPU levels for."""

    key: str  # UUID (display id when there is none)
    label: str  # "GPU 0 · RTX 4090"


def _history_text(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def _percent_spin(parent: QWidget, lo: int, hi: int, name: str, tip: str) -> QSpinBox:
    return spin_box(parent, lo, hi, " %", name, tip)


class SettingsDialog(QDialog):
    def __init__(self, settings: UiSettings, gpus: list[GpuEntry] | None = None,
                 tray_available: bool = True, autostart_supported: bool = True,
                 autostart_enabled: bool = False, autostart_where: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("VRAM Steward settings")
        self._original = settings.copy()
        self._gpus = list(gpus or [])
        lay = QVBoxLayout(self)
        self.tabs = QTabWidget(self)
        lay.addWidget(self.tabs, 1)
        self.tabs.addTab(self._general_page(tray_available, autostart_supported,
                                            autostart_where), "General")
        self.tabs.addTab(self._alerts_page(), "Alerts")
        self.tabs.addTab(self._unload_page(), "Auto-unload")
        self.history_page = HistoryPage(len(self._gpus), self)
        self.tabs.addTab(self.history_page, "History")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel
                                   | QDialogButtonBox.StandardButton.RestoreDefaults, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        # Defaults for what this dialog shows; the hosts (Hosts…) are not its to reset.
        buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults).clicked.connect(
            lambda: self.set_settings(UiSettings(hosts=self._base.hosts), autostart=False))
        self.buttons = buttons
        lay.addWidget(buttons)
        self.set_settings(settings, autostart=autostart_enabled)
        self.resize(560, 520)

    # -- pages -----------------------------------------------------------------------------
    def _general_page(self, tray: bool, autostart_supported: bool, where: str) -> QWidget:
        page = QWidget(self)
        form = QFormLayout(page)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.period_spin = QDoubleSpinBox(page)
        self.period_spin.setObjectName("periodSpin")
        self.period_spin.setRange(PERIOD_MIN_S, PERIOD_MAX_S)
        self.period_spin.setDecimals(2)
        self.period_spin.setSingleStep(0.05)
        self.period_spin.setSuffix(" s")
        self.period_spin.setToolTip("How often NVML and the agents are read")
        form.addRow("Sample every", self.period_spin)
        self.history_combo = QComboBox(page)
        self.history_combo.setObjectName("historyCombo")
        for seconds in HISTORY_CHOICES_S:
            self.history_combo.addItem(_history_text(seconds), seconds)
        self.history_combo.setToolTip("Samples kept at full rate; 24 h of 5-second peaks are "
                                      "always kept as well")
        form.addRow("Full-rate history", self.history_combo)
        restart = QLabel("Applies at the next start.", page)
        restart.setObjectName("secondary")
        form.addRow("", restart)
        self.theme_combo = QComboBox(page)
        self.theme_combo.setObjectName("themeCombo")
        for key, text in THEME_LABELS:
            self.theme_combo.addItem(text, key)
        form.addRow("Theme", self.theme_combo)
        self.close_to_tray_box = QCheckBox("Keep running in the tray when the window is closed",
                                           page)
        self.close_to_tray_box.setObjectName("closeToTray")
        if not tray:
            self.close_to_tray_box.setEnabled(False)
            self.close_to_tray_box.setToolTip("This desktop shows no system tray: closing the "
                                              "window quits")
        form.addRow("Window", self.close_to_tray_box)
        self.start_minimised_box = QCheckBox(
            "Start minimised" + (" (in the tray)" if tray else ""), page)
        self.start_minimised_box.setObjectName("startMinimised")
        form.addRow("", self.start_minimised_box)
        self.autostart_box = QCheckBox("Start VRAM Steward when I log in", page)
        self.autostart_box.setObjectName("autostart")
        if autostart_supported:
            self.autostart_box.setToolTip(where)
        else:
            self.autostart_box.setEnabled(False)
            self.autostart_box.setToolTip("Not available on this platform")
        form.addRow("Login", self.autostart_box)
        return page

    def _alerts_page(self) -> QWidget:
        page = QWidget(self)
        lay = QVBoxLayout(page)
        self.notify_box = QCheckBox("Show a notification when a GPU is nearly full", page)
        self.notify_box.setObjectName("notifications")
        lay.addWidget(self.notify_box)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.threshold_spin = _percent_spin(page, 10, 99, "alertThreshold",
                                            "Alert when used memory reaches this share of "
                                            "the GPU's total")
        self.rearm_spin = _percent_spin(page, 5, 98, "alertRearm",
                                        "Alert again only after usage fell below this share")
        self.interval_spin = spin_box(page, 0, 24 * 60, " min", "alertInterval",
                                      "At most one alert per GPU in this time")
        form.addRow("Alert at", self.threshold_spin)
        form.addRow("Re-arm below", self.rearm_spin)
        form.addRow("At most every", self.interval_spin)
        lay.addLayout(form)
        self.oom_box = QCheckBox("Alert when a process with an agent runs out of memory", page)
        self.oom_box.setObjectName("oomAlerts")
        self.retry_box = QCheckBox("Alert when its allocator starts retrying allocations", page)
        self.retry_box.setObjectName("retryAlerts")
        lay.addWidget(self.oom_box)
        lay.addWidget(self.retry_box)
        title = QLabel("Per GPU", page)
        f = title.font()
        f.setBold(True)
        title.setFont(f)
        lay.addSpacing(6)
        lay.addWidget(title)
        self.gpu_table = QTableWidget(len(self._gpus), 3, page)
        self.gpu_table.setObjectName("gpuLevels")
        self.gpu_table.setHorizontalHeaderLabels(["GPU", "Alert at", "Re-arm below"])
        self.gpu_table.verticalHeader().setVisible(False)
        self.gpu_table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        header = self.gpu_table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self._gpu_spins: list[tuple[QSpinBox, QSpinBox]] = []
        for row, gpu in enumerate(self._gpus):
            item = QTableWidgetItem(gpu.label)
            item.setToolTip(plain_tip(gpu.key))  # what the GPU's driver calls it
            item.setFlags(Qt.ItemFlag.ItemIsEnabled)
            self.gpu_table.setItem(row, 0, item)
            pair = []
            for col in (1, 2):
                spin = _percent_spin(self.gpu_table, DEFAULT_MARK, 99, f"gpuLevel{row}_{col}",
                                     "“default” uses the levels above")
                spin.setSpecialValueText("default")
                self.gpu_table.setCellWidget(row, col, spin)
                pair.append(spin)
            self._gpu_spins.append((pair[0], pair[1]))
        if not self._gpus:
            empty = QLabel("GPUs appear here once they have been seen.", page)
            empty.setObjectName("secondary")
            lay.addWidget(empty)
            self.gpu_table.hide()
        lay.addWidget(self.gpu_table, 1)
        self.notify_box.toggled.connect(self._sync_enabled)
        return page

    def _unload_page(self) -> QWidget:
        page = QWidget(self)
        lay = QVBoxLayout(page)
        self.unload_form = AutoUnloadForm(self._original.auto_unload, page)
        self.unload_form.note.setMaximumWidth(16777215)
        lay.addWidget(self.unload_form)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        form.setContentsMargins(12, 0, 12, 0)
        self.idle_default_spin = spin_box(page, IDLE_TIMER_MIN_MIN, IDLE_TIMER_MAX_MIN, " min",
                                          "idleDefault",
                                          "What a process's own “Unload idle models after” "
                                          "timer offers when it is switched on")
        form.addRow("Per-process idle timer", self.idle_default_spin)
        lay.addLayout(form)
        lay.addStretch(1)
        return page

    # -- values ------------------------------------------------------------------------------
    def set_settings(self, s: UiSettings, autostart: bool | None = None) -> None:
        self._base = s.copy()
        self.period_spin.setValue(s.sample_period_s)
        index = self.history_combo.findData(s.history_s)
        if index < 0:
            self.history_combo.addItem(_history_text(s.history_s), s.history_s)
            index = self.history_combo.count() - 1
        self.history_combo.setCurrentIndex(index)
        self.theme_combo.setCurrentIndex(max(0, self.theme_combo.findData(s.theme)))
        self.close_to_tray_box.setChecked(s.close_to_tray)
        self.start_minimised_box.setChecked(s.start_minimised)
        if autostart is not None:
            self.autostart_box.setChecked(autostart)
        a = s.alerts
        self.notify_box.setChecked(a.notifications)
        self.threshold_spin.setValue(round(a.threshold * 100))
        self.rearm_spin.setValue(round(a.rearm * 100))
        self.interval_spin.setValue(round(a.min_interval_s / 60))
        self.oom_box.setChecked(a.oom_alerts)
        self.retry_box.setChecked(a.retry_alerts)
        for gpu, (t_spin, r_spin) in zip(self._gpus, self._gpu_spins, strict=True):
            own = a.per_gpu.get(gpu.key)
            t_spin.setValue(round(own.threshold * 100) if own else DEFAULT_MARK)
            r_spin.setValue(round(own.rearm * 100) if own else DEFAULT_MARK)
        self.unload_form.set_settings(s.auto_unload)
        self.idle_default_spin.setValue(s.idle_unload_default_min)
        self.history_page.set_settings(s.stored_history)
        self._sync_enabled()

    def _sync_enabled(self, *_args: object) -> None:
        on = self.notify_box.isChecked()
        for w in (self.threshold_spin, self.rearm_spin, self.interval_spin, self.gpu_table):
            w.setEnabled(on)

    @property
    def autostart(self) -> bool:
        return self.autostart_box.isChecked()

    def settings(self) -> UiSettings:
        """The edited settings, normalised (re-arm below threshold, ranges clamped).

        Settings this dialog does not show (one-time hints, per-GPU levels of GPUs
        not present now) are carried over unchanged."""
        s = self._base.copy()
        s.sample_period_s = self.period_spin.value()
        s.history_s = float(self.history_combo.currentData())
        s.theme = str(self.theme_combo.currentData())
        s.close_to_tray = self.close_to_tray_box.isChecked()
        s.start_minimised = self.start_minimised_box.isChecked()
        per_gpu = dict(s.alerts.per_gpu)
        for gpu, (t_spin, r_spin) in zip(self._gpus, self._gpu_spins, strict=True):
            t, r = t_spin.value(), r_spin.value()
            if t == DEFAULT_MARK and r == DEFAULT_MARK:
                per_gpu.pop(gpu.key, None)
                continue
            default_t = self.threshold_spin.value()
            default_r = self.rearm_spin.value()
            per_gpu[gpu.key] = GpuAlertLevels(
                (t if t != DEFAULT_MARK else default_t) / 100,
                (r if r != DEFAULT_MARK else default_r) / 100)
        s.alerts = AlertSettings(
            notifications=self.notify_box.isChecked(),
            threshold=self.threshold_spin.value() / 100,
            rearm=self.rearm_spin.value() / 100,
            min_interval_s=self.interval_spin.value() * 60.0,
            oom_alerts=self.oom_box.isChecked(),
            retry_alerts=self.retry_box.isChecked(),
            per_gpu=per_gpu)
        s.auto_unload = self.unload_form.settings()
        s.idle_unload_default_min = self.idle_default_spin.value()
        s.stored_history = self.history_page.settings()
        return UiSettings.from_dict(s.to_dict())


__all__ = ["SettingsDialog", "GpuEntry", "THEME_LABELS"]
