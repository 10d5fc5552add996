"""The settings dialog edits a copy and hands back normalised settings."""

from __future__ import annotations

import os

import pytest

from app.agent.protocol import IDLE_UNLOAD_MAX_S, idle_unload_problem
from app.ui.settings.dialog import DEFAULT_MARK, GpuEntry, SettingsDialog
from app.ui.settings.values import GpuAlertLevels, UiSettings

GPUS = [GpuEntry("GPU-aaaa", "GPU 0 · RTX 4090"), GpuEntry("GPU-bbbb", "GPU 1 · A100")]


@pytest.fixture
def dialog(qtbot):
    s = UiSettings()
    s.alerts.per_gpu["GPU-bbbb"] = GpuAlertLevels(0.8, 0.75)
    s.alerts.per_gpu["GPU-gone"] = GpuAlertLevels(0.7, 0.6)  # a card not in this machine now
    d = SettingsDialog(s, GPUS, autostart_enabled=True, autostart_where="/x/autostart")
    qtbot.addWidget(d)
    return d


def test_shows_the_current_values(dialog):
    assert dialog.period_spin.value() == 0.25
    assert dialog.theme_combo.currentData() == "system"
    assert dialog.threshold_spin.value() == 90 and dialog.rearm_spin.value() == 85
    (t0, r0), (t1, r1) = dialog._gpu_spins
    assert (t0.value(), r0.value()) == (DEFAULT_MARK, DEFAULT_MARK)
    assert t0.text() == "default"
    assert (t1.value(), r1.value()) == (80, 75)
    assert dialog.autostart is True


def test_unchanged_dialog_returns_equal_settings(dialog):
    assert dialog.settings() == dialog._original


def test_edits_come_back_normalised(dialog):
    dialog.period_spin.setValue(1.5)
    dialog.history_combo.setCurrentIndex(dialog.history_combo.findData(1800.0))
    dialog.theme_combo.setCurrentIndex(dialog.theme_combo.findData("dark"))
    dialog.start_minimised_box.setChecked(True)
    dialog.threshold_spin.setValue(80)
    dialog.rearm_spin.setValue(95)  # above the threshold: clamped below it
    dialog.interval_spin.setValue(2)
    (t0, r0), (t1, r1) = dialog._gpu_spins
    t0.setValue(97)  # re-arm left at "default": takes the default level
    t1.setValue(DEFAULT_MARK)
    r1.setValue(DEFAULT_MARK)  # back to default: the override goes
    dialog.unload_form.enabled_box.setChecked(False)
    dialog.idle_default_spin.setValue(45)
    s = dialog.settings()
    assert s.sample_period_s == 1.5 and s.history_s == 1800.0 and s.theme == "dark"
    assert s.start_minimised is True
    assert (s.alerts.threshold, s.alerts.rearm, s.alerts.min_interval_s) == (0.8, 0.79, 120.0)
    assert s.alerts.per_gpu["GPU-aaaa"] == GpuAlertLevels(0.97, 0.95)
    assert "GPU-bbbb" not in s.alerts.per_gpu
    assert s.alerts.per_gpu["GPU-gone"] == GpuAlertLevels(0.7, 0.6)  # kept, not shown
    assert s.auto_unload.enabled is False
    assert s.idle_unload_default_min == 45


def test_the_idle_timer_default_offers_what_the_agent_takes(dialog):
    spin = dialog.idle_default_spin
    assert all(idle_unload_problem(m * 60.0) is None for m in (spin.minimum(), spin.maximum()))
    spin.setValue(spin.maximum())
    assert dialog.settings().idle_unload_default_min * 60 == IDLE_UNLOAD_MAX_S


def test_notifications_off_disables_the_levels(dialog):
    dialog.notify_box.setChecked(False)
    assert not dialog.threshold_spin.isEnabled() and not dialog.gpu_table.isEnabled()
    assert dialog.settings().alerts.notifications is False


def test_restore_defaults(dialog):
    dialog.theme_combo.setCurrentIndex(2)
    dialog.buttons.button(dialog.buttons.StandardButton.RestoreDefaults).click()
    s = dialog.settings()
    assert s.theme == "system" and s.alerts.per_gpu.get("GPU-bbbb") is None
    assert dialog.autostart is False


def test_without_tray_close_to_tray_is_disabled_and_explained(qtbot):
    d = SettingsDialog(UiSettings(), [], tray_available=False, autostart_supported=False)
    qtbot.addWidget(d)
    assert not d.close_to_tray_box.isEnabled()
    assert "no system tray" in d.close_to_tray_box.toolTip()
    assert not d.autostart_box.isEnabled()
    assert d.gpu_table.isHidden()


def test_screenshots_light_and_dark(qtbot, qapp, tmp_path):
    """Renders every page in both themes (written to VRAM_STEWARD_SHOTS when set, to look at)."""
    from app.ui.style.theme import ThemeManager

    out = os.environ.get("VRAM_STEWARD_SHOTS") or str(tmp_path)
    themes = ThemeManager(qapp)
    try:
        for mode in ("light", "dark"):
            themes.apply(mode)
            d = SettingsDialog(UiSettings(), GPUS)
            qtbot.addWidget(d)
            d.show()
            for i in range(d.tabs.count()):
                d.tabs.setCurrentIndex(i)
                qapp.processEvents()
                image = d.grab().toImage()
                assert image.width() >= 500 and image.height() >= 400
                # The page's background follows the theme.
                bg = image.pixelColor(image.width() // 2, image.height() - 60)
                assert (bg.lightness() < 100) == (mode == "dark")
                assert image.save(os.path.join(out, f"settings-{mode}-{i}.png"))
    finally:
        themes.apply("light")
        themes.apply("system")
