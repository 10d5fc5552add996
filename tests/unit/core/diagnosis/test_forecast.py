""""Full in ~N min": fires once per episode, does not flap, clears."""

from __future__ import annotations

import pytest

from app.core.diagnosis.forecast import ForecastConfig, FullSoon, seconds_to_full


def test_seconds_to_full_from_the_peak():
    assert seconds_to_full(100, 40, 2.0) == 30.0
    assert seconds_to_full(100, 120, 2.0) == 0.0
    assert seconds_to_full(100, 40, 0.0) is None
    assert seconds_to_full(None, 40, 1.0) is None


def test_fires_after_two_evaluations_once_and_does_not_flap():
    fs = FullSoon(ForecastConfig(alert_s=900))
    assert fs.update("1", 800, 0.0) == (False, False)  # one is not enough
    assert fs.update("1", 700, 2.0) == (True, True)  # fired
    fired = [fs.update("1", eta, 4.0 + i)[1] for i, eta in enumerate(
        [880, 920, 890, 1100, 950, 1300, 600])]  # hovering around the threshold
    assert not any(fired)
    assert fs.fired_at("1") == 2.0


def test_clears_above_one_and_a_half_times_the_threshold_or_when_the_trend_is_gone():
    fs = FullSoon(ForecastConfig(alert_s=900))
    fs.update("0", 100, 0.0)
    fs.update("0", 100, 1.0)
    assert fs.update("0", 1300, 2.0) == (True, False)  # under 1.5 x 900: still on
    assert fs.update("0", 1400, 3.0) == (False, False)  # above it: the episode is over
    assert fs.fired_at("0") is None
    # A new episode fires again (after two evaluations).
    fs.update("0", 100, 4.0)
    assert fs.update("0", 100, 5.0) == (True, True)
    assert fs.update("0", None, 6.0) == (False, False)


def test_a_single_dip_does_not_fire():
    fs = FullSoon(ForecastConfig(alert_s=900))
    assert fs.update("0", 100, 0.0) == (False, False)
    assert fs.update("0", 2000, 1.0) == (False, False)
    assert fs.update("0", 100, 2.0) == (False, False)


def test_bad_config_is_refused():
    with pytest.raises(ValueError):
        ForecastConfig(alert_s=0)
    with pytest.raises(ValueError):
        ForecastConfig(clear_factor=0.5)
