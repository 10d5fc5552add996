"""Trends on scripted histories: saw-tooths and warm-ups are not leaks; a steady rise is."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.diagnosis.trends import Series, TrendConfig, analyse

MiB = 1024**2
GiB = 1024**3
CFG = TrendConfig()


def times(seconds: float, step: float = 2.0) -> np.ndarray:
    return np.arange(0.0, seconds + step / 2, step)


def test_training_saw_tooth_is_not_a_leak():
    t = times(600)
    v = 10 * GiB + 5 * GiB * np.mod(t / 45.0, 1.0)  # cache fills and drops every 45 s
    trend = analyse(t, v, t[-1], CFG)
    assert trend is not None and not trend.leaking
    assert abs(trend.rate) < 0.2 * MiB


def test_steady_leak_is_flagged_with_its_rate():
    t = times(600)
    v = 2 * GiB + 14 * MiB * t
    trend = analyse(t, v, t[-1], CFG)
    assert trend is not None and trend.leaking
    assert trend.rate == pytest.approx(14 * MiB, rel=0.05)
    assert trend.rise_bytes > 5 * GiB


def test_warm_up_then_plateau_is_not_a_leak():
    t = times(600)
    v = np.minimum(1 * GiB + 40 * MiB * t, 9 * GiB)  # fills for ~3.4 min, then holds
    assert not analyse(t, v, t[-1], CFG).leaking
    # Nor at any point once the plateau has held for a few minutes.
    for end in range(420, 601, 20):
        keep = t <= end
        assert not analyse(t[keep], v[keep], float(end), CFG).leaking, end


def test_noisy_leak_on_a_saw_tooth_is_flagged():
    rng = np.random.default_rng(3)
    t = times(600)
    v = (4 * GiB + 3 * MiB * t + 2 * GiB * np.mod(t / 30.0, 1.0)
         + rng.normal(0, 20 * MiB, len(t)))
    trend = analyse(t, v, t[-1], CFG)
    assert trend.leaking
    assert trend.rate == pytest.approx(3 * MiB, rel=0.25)


def test_a_small_rise_under_the_floor_is_not_a_leak():
    t = times(600)
    v = 8 * GiB + 0.05 * MiB * t  # 30 MiB in 10 min
    assert not analyse(t, v, t[-1], CFG).leaking


def test_too_short_a_history_says_nothing():
    t = times(120)
    trend = analyse(t, 1 * GiB + 50 * MiB * t, t[-1], CFG)
    assert trend is None or not trend.leaking


def test_series_keeps_one_sample_per_interval_and_is_bounded():
    s = Series(TrendConfig(keep_s=60.0, sample_every_s=2.0))
    for i in range(1000):
        s.add(i * 0.5, float(i))
    assert len(s) <= 32
    assert s.last_time == pytest.approx(499.5, abs=2.0)
    assert s.peak(since=490.0) >= 980.0
