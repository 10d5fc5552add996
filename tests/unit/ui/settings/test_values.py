"""UiSettings: defaults, clamping, and what a hand-edited or old file turns into."""

from __future__ import annotations

import math

from app.agent.protocol import IDLE_UNLOAD_MAX_S, IDLE_UNLOAD_MIN_S
from app.ui.settings.values import (
    IDLE_TIMER_MAX_MIN,
    IDLE_TIMER_MIN_MIN,
    AlertSettings,
    AutoUnloadSettings,
    GpuAlertLevels,
    UiSettings,
)


def test_round_trip_through_plain_dict_keeps_every_value():
    s = UiSettings()
    s.theme = "dark"
    s.sample_period_s = 0.5
    s.history_s = 1800.0
    s.start_minimised = True
    s.close_to_tray = False
    s.alerts = AlertSettings(notifications=False, threshold=0.8, rearm=0.7, min_interval_s=60.0,
                             oom_alerts=False, per_gpu={"GPU-1": GpuAlertLevels(0.95, 0.9)})
    s.auto_unload = AutoUnloadSettings(False, 0.85, 0.8, 120.0, 10.0)
    assert UiSettings.from_dict(s.to_dict()) == s


def test_missing_or_garbage_input_gives_defaults():
    assert UiSettings.from_dict(None) == UiSettings()
    assert UiSettings.from_dict({}) == UiSettings()
    assert UiSettings.from_dict({"alerts": "nonsense", "auto_unload": 3}) == UiSettings()


def test_out_of_range_values_are_clamped_and_wrong_types_replaced():
    s = UiSettings.from_dict({
        "sample_period_s": 0.001, "history_s": 10**9, "theme": "purple",
        "markers_per_gpu": "many", "start_minimised": "yes", "close_to_tray": "off",
        "alerts": {"threshold": 5, "rearm": math.nan, "min_interval_s": -3},
    })
    assert s.sample_period_s == 0.1
    assert s.history_s == 6 * 3600.0
    assert s.theme == "system"
    assert s.markers_per_gpu == UiSettings().markers_per_gpu
    assert s.start_minimised is True and s.close_to_tray is False
    assert s.alerts.threshold == 0.99
    assert s.alerts.rearm == 0.85  # NaN is not a number: default
    assert s.alerts.min_interval_s == 0.0


def test_rearm_is_kept_below_threshold_for_defaults_and_per_gpu():
    s = UiSettings.from_dict({"alerts": {"threshold": 0.8, "rearm": 0.95,
                                         "per_gpu": {"GPU-a": {"threshold": 0.5, "rearm": 0.7},
                                                     "GPU-b": "bad", "7": {}}}})
    assert (s.alerts.threshold, s.alerts.rearm) == (0.8, 0.79)
    assert s.alerts.per_gpu["GPU-a"] == GpuAlertLevels(0.5, 0.49)
    assert "GPU-b" not in s.alerts.per_gpu
    # Empty per-GPU entry: inherits the default levels.
    assert s.alerts.per_gpu["7"] == GpuAlertLevels(0.8, 0.79)
    assert s.alerts.levels_for("GPU-zzz") == GpuAlertLevels(0.8, 0.79)


def test_unknown_keys_from_a_newer_version_are_ignored():
    s = UiSettings.from_dict({"theme": "light", "future_option": 1,
                              "alerts": {"threshold": 0.7, "sound": True}})
    assert s.theme == "light" and s.alerts.threshold == 0.7


def test_copy_is_independent():
    s = UiSettings()
    c = s.copy()
    c.alerts.per_gpu["x"] = GpuAlertLevels()
    c.auto_unload.enabled = False
    assert s.alerts.per_gpu == {} and s.auto_unload.enabled is True


def test_the_idle_timer_default_spans_the_agents_bounds_in_whole_minutes():
    assert (IDLE_TIMER_MIN_MIN - 1) * 60 < IDLE_UNLOAD_MIN_S <= IDLE_TIMER_MIN_MIN * 60
    assert IDLE_TIMER_MAX_MIN * 60 == IDLE_UNLOAD_MAX_S
    read = [UiSettings.from_dict({"idle_unload_default_min": v}).idle_unload_default_min
            for v in (IDLE_TIMER_MAX_MIN, IDLE_TIMER_MAX_MIN + 1, 0, 0.5)]
    assert read == [IDLE_TIMER_MAX_MIN, IDLE_TIMER_MAX_MIN, IDLE_TIMER_MIN_MIN,
                    IDLE_TIMER_MIN_MIN]


def test_read_names_the_values_whose_reading_raised_and_keeps_the_rest():
    huge = 10 ** 400  # a valid JSON number no float can hold
    s, failed = UiSettings.read({"sample_period_s": huge, "theme": "dark",
                                 "alerts": {"threshold": 0.8, "rearm": huge},
                                 "auto_unload": {"min_idle_s": huge, "enabled": False}})
    assert sorted(failed) == ["alerts/rearm", "auto_unload/min_idle_s", "sample_period_s"]
    # As if the values that raised were not there at all.
    assert s == UiSettings.from_dict({"theme": "dark", "alerts": {"threshold": 0.8},
                                      "auto_unload": {"enabled": False}})
    assert s.theme == "dark" and s.alerts.threshold == 0.8 and not s.auto_unload.enabled
    assert UiSettings.read(UiSettings().to_dict()) == (UiSettings(), [])
