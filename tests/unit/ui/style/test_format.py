import math

import pytest

from app.ui.style.format import (
    NA,
    GiB,
    MiB,
    fmt_ago,
    fmt_bytes,
    fmt_duration,
    fmt_gib,
    fmt_memory_usage,
    fmt_percent,
    fmt_temp,
    fmt_watts,
)


@pytest.mark.parametrize("value, text", [
    (0, "0 B"),
    (512, "512 B"),
    (512 * MiB, "512 MiB"),
    (int(1.5 * MiB), "1.5 MiB"),
    (int(12.3 * GiB), "12.3 GiB"),
    (24 * GiB, "24.0 GiB"),
    (1023.99 * MiB, "1.0 GiB"),  # never "1024.0 MiB"
    (3 * 1024 * GiB, "3.0 TiB"),
])
def test_fmt_bytes_binary_units(value, text):
    assert fmt_bytes(value) == text


@pytest.mark.parametrize("fn", [fmt_bytes, fmt_gib, fmt_percent, fmt_duration, fmt_temp,
                                fmt_watts, fmt_ago])
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


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (42.9, "42s"), (245, "4m 05s"), (3 * 3600 + 2 * 60 + 9, "3h 02m"),
    (2 * 86400 + 7 * 3600, "2d 07h"), (-5, "0s"),
])
def test_fmt_duration(seconds, text):
    assert fmt_duration(seconds) == text


def test_fmt_ago():
    assert fmt_ago(0) == "now"
    assert fmt_ago(-12) == "12s ago"


def test_memory_usage_gauge_text():
    assert fmt_memory_usage(int(17.7 * GiB), 24 * GiB) == "17.7 GiB / 24.0 GiB (74 %)"
    assert fmt_memory_usage(None, 24 * GiB) == "n/a / 24.0 GiB (n/a)"
    assert fmt_memory_usage(None, None) == NA


@pytest.mark.parametrize("value, text", [
    (None, "n/a"), (512, "512"), (950_000, "950 K"), (25_557_032, "25.6 M"),
    (859_520_964, "860 M"), (1_200_000_000, "1.2 B"), (175_000_000_000, "175 B"), (0, "0"),
])
def test_fmt_count(value, text):
    from app.ui.style.format import fmt_count

    assert fmt_count(value) == text


@pytest.mark.parametrize("seconds, text", [
    (None, "never"), (2, "just now"), (42, "42 s ago"), (180, "3 min ago"),
    (2 * 3600 + 17 * 60, "2 h ago"), (3 * 86400, "3 d ago"), (-4, "just now"),
])
def test_fmt_since(seconds, text):
    from app.ui.style.format import fmt_since

    assert fmt_since(seconds) == text
