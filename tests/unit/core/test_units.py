"""The units module: bytes, percentages, counts and durations as the UI, the CLI
and the reports print them; unknown (None, NaN) is "n/a", never 0."""

from __future__ import annotations

import math

import pytest

from app.core.units import (
    NA,
    GiB,
    KiB,
    MiB,
    TiB,
    fmt_ago,
    fmt_bytes,
    fmt_count,
    fmt_duration,
    fmt_fraction,
    fmt_gib,
    fmt_percent,
    fmt_since,
    fmt_size,
    is_unknown,
)


def test_binary_constants():
    assert (KiB, MiB, GiB, TiB) == (1024, 1024**2, 1024**3, 1024**4)


@pytest.mark.parametrize("value, unknown", [
    (None, True), (math.nan, True), (math.inf, True), (-math.inf, True),
    (0, False), (0.0, False), (-1, False), (2**60, False),
])
def test_is_unknown(value, unknown):
    assert is_unknown(value) is unknown


@pytest.mark.parametrize("fn", [fmt_bytes, fmt_gib, fmt_size, fmt_percent, fmt_fraction,
                                fmt_count, fmt_duration, fmt_ago])
def test_unknown_is_na_never_zero(fn):
    assert fn(None) == NA == "n/a"
    assert fn(math.nan) == NA
    assert fn(math.inf) == NA


# ------------------------------------------------------------------- bytes


@pytest.mark.parametrize("value, text", [
    (0, "0 B"),
    (512, "512 B"),
    (1023, "1023 B"),
    (1024, "1 KiB"),
    (1536, "1.5 KiB"),
    (512 * MiB, "512 MiB"),
    (int(1.5 * MiB), "1.5 MiB"),
    (int(12.3 * GiB), "12.3 GiB"),
    (24 * GiB, "24.0 GiB"),
    (1023.99 * MiB, "1.0 GiB"),  # never "1024.0 MiB"
    (1023.99 * KiB, "1 MiB"),  # whole units under 1 GiB drop the decimals
    (3 * 1024 * GiB, "3.0 TiB"),
    (-2 * GiB, "-2.0 GiB"),
])
def test_fmt_bytes_binary_units(value, text):
    assert fmt_bytes(value) == text


def test_fmt_bytes_digits():
    assert fmt_bytes(int(12.346 * GiB), digits=2) == "12.35 GiB"


@pytest.mark.parametrize("value, digits, text", [
    (int(17.7 * GiB), 1, "17.7 GiB"), (0, 1, "0.0 GiB"), (512 * MiB, 2, "0.50 GiB"),
    (int(1.234 * GiB), 2, "1.23 GiB"),
])
def test_fmt_gib(value, digits, text):
    assert fmt_gib(value, digits) == text


@pytest.mark.parametrize("value, text", [
    (0, "0 MiB"), (1000, "0 MiB"), (512 * MiB, "512 MiB"), (GiB - MiB, "1023 MiB"),
    (GiB, "1.0 GiB"), (int(1.6 * GiB), "1.6 GiB"), (48 * GiB, "48.0 GiB"),
])
def test_fmt_size_is_a_tables_mib_or_gib_column(value, text):
    assert fmt_size(value) == text


@pytest.mark.parametrize("value, text", [
    (40, "0.0 KiB"), (512, "0.5 KiB"), (MiB - 1, "1024.0 KiB"), (MiB, "1 MiB"),
    (2 * GiB, "2.0 GiB"), (None, "n/a"),
])
def test_fmt_size_of_tiny_models_in_kib(value, text):
    assert fmt_size(value, kib_below_mib=True) == text


# ------------------------------------------------------ percentages, counts


def test_zero_is_not_unknown():
    assert fmt_bytes(0) == "0 B"
    assert fmt_size(0) == "0 MiB"
    assert fmt_percent(0) == "0 %"
    assert fmt_fraction(0) == "0 %"
    assert fmt_count(0) == "0"
    assert fmt_duration(0) == "0s"


def test_percent_and_fraction():
    assert fmt_percent(74.4) == "74 %"
    assert fmt_percent(3.84, 1) == "3.8 %"
    assert fmt_percent(100) == "100 %"
    assert fmt_fraction(0.74) == "74 %"
    assert fmt_fraction(0.9, 1) == "90.0 %"


@pytest.mark.parametrize("value, text", [
    (None, "n/a"), (512, "512"), (999, "999"), (1000, "1.0 K"), (950_000, "950 K"),
    (25_557_032, "25.6 M"), (859_520_964, "860 M"), (1_200_000_000, "1.2 B"),
    (175_000_000_000, "175 B"), (0, "0"), (2e12, "2.0 T"),
])
def test_fmt_count(value, text):
    assert fmt_count(value) == text


# --------------------------------------------------------------- durations


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (42.9, "42s"), (59.99, "59s"), (60, "1m 00s"), (245, "4m 05s"),
    (3599, "59m 59s"), (3600, "1h 00m"), (3 * 3600 + 2 * 60 + 9, "3h 02m"),
    (86399, "23h 59m"), (86400, "1d 00h"), (2 * 86400 + 7 * 3600, "2d 07h"), (-5, "0s"),
])
def test_fmt_duration(seconds, text):
    assert fmt_duration(seconds) == text


@pytest.mark.parametrize("seconds, text", [
    (42, "42s"), (119.6, "1m59s"), (612, "10m12s"), (2 * 3600 + 15 * 60, "2h15m"),
    (26 * 3600, "1d02h"), (None, "n/a"),
])
def test_fmt_duration_packed_for_table_columns(seconds, text):
    assert fmt_duration(seconds, sep="") == text


def test_fmt_ago():
    assert fmt_ago(0) == "now"
    assert fmt_ago(0.49) == "now"
    assert fmt_ago(-12) == "12s ago"
    assert fmt_ago(245) == "4m 05s ago"


@pytest.mark.parametrize("seconds, text", [
    (None, "never"), (math.nan, "n/a"), (2, "just now"), (4.99, "just now"), (5, "5 s ago"),
    (42, "42 s ago"), (180, "3 min ago"), (2 * 3600 + 17 * 60, "2 h ago"), (3 * 86400, "3 d ago"),
    (-4, "just now"),
])
def test_fmt_since(seconds, text):
    assert fmt_since(seconds) == text
