"""The UI's own readouts (temperature, power, the memory gauge) and the shared
units it re-exports (their outputs are pinned in tests/unit/core/test_units.py)."""

import math

import pytest

from app.core import units
from app.core.units import NA, GiB, fmt_bytes, fmt_duration, fmt_percent
from app.ui.style import format as ui_format
from app.ui.style.format import fmt_memory_usage, fmt_temp, fmt_watts


def test_widgets_format_bytes_and_durations_with_the_one_units_module():
    # The UI module adds the panel's readouts only; it defines no formatter of its own
    # for what app.core.units formats.
    assert set(ui_format.__all__) == {"fmt_memory_usage", "fmt_temp", "fmt_watts"}
    own = {n for n, v in vars(ui_format).items()
           if callable(v) and getattr(v, "__module__", "") == ui_format.__name__}
    assert own == {"fmt_memory_usage", "fmt_temp", "fmt_watts"}
    assert not own & set(vars(units))


@pytest.mark.parametrize("fn", [fmt_bytes, fmt_percent, fmt_duration, fmt_temp,
                                fmt_watts])
def test_unknown_is_na_never_zero(fn):
    assert fn(None) == NA
    assert fn(math.nan) == NA


def test_zero_is_not_unknown():
    assert fmt_bytes(0) == "0 B"
    assert fmt_percent(0) == "0 %"
    assert fmt_temp(0) == "0 °C"


def test_percent_temp_watts():
    assert fmt_percent(74.4) == "74 %"
    assert fmt_percent(3.84, 1) == "3.8 %"
    assert fmt_temp(54.4) == "54 °C"
    assert fmt_watts(212.4) == "212 W"
    assert fmt_watts(212.4, 450) == "212 W / 450 W"
    assert fmt_watts(None, 450) == "n/a / 450 W"
    assert fmt_watts(math.nan, math.nan) == NA


def test_memory_usage_gauge_text():
    assert fmt_memory_usage(int(17.7 * GiB), 24 * GiB) == "17.7 GiB / 24.0 GiB (74 %)"
    assert fmt_memory_usage(None, 24 * GiB) == "n/a / 24.0 GiB (n/a)"
    assert fmt_memory_usage(None, None) == NA
    assert fmt_memory_usage(3 * GiB, 0) == "3.0 GiB / 0 B (n/a)"  # no total: no share
