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
    fmt_elapsed,
    fmt_fraction,
    fmt_percent,
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


@pytest.mark.parametrize("fn", [fmt_bytes, fmt_percent, fmt_fraction,
                                fmt_count, fmt_duration])
def test_unknown_is_na_never_zero(fn):
    assert fn(None) == NA == "n/a"
    assert fn(math.nan) == NA
    assert fn(math.inf) == NA


# ------------------------------------------------------------------- bytes


@pytest.mark.parametrize("value, text", [
    (0, "0 B"),
    (512, "512 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1536, "1.5 KiB"),
    (MiB - 1, "1 MiB"),  # never "1024.0 KiB"
    (int(1.5 * MiB), "2 MiB"),  # whole MiB under 1 GiB: drivers count in MiB
    (512 * MiB, "512 MiB"),
    (698 * MiB, "698 MiB"),
    (GiB - MiB, "1023 MiB"),
    (1023.6 * MiB, "1.0 GiB"),  # never "1024 MiB"
    (GiB, "1.0 GiB"),
    (int(12.3 * GiB), "12.3 GiB"),
    (24 * GiB, "24.0 GiB"),
    (3 * 1024 * GiB, "3.0 TiB"),
    (-2 * GiB, "-2.0 GiB"),
])
def test_fmt_bytes_is_the_one_byte_rule(value, text):
    assert fmt_bytes(value) == text


def test_one_number_reads_the_same_at_every_size_class():
    """The legend and the table once disagreed ("0.7 GiB" vs "698 MiB")."""
    assert fmt_bytes(698 * MiB) == "698 MiB"
    assert fmt_bytes(int(0.7 * GiB)) == "717 MiB"


# ------------------------------------------------------ percentages, counts


def test_zero_is_not_unknown():
    assert fmt_bytes(0) == "0 B"
    assert fmt_percent(0) == "0 %"
    assert fmt_fraction(0) == "0 %"
    assert fmt_count(0) == "0"
    assert fmt_duration(0) == "0 s"


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
    (0, "0 s"), (42.9, "42 s"), (59.99, "59 s"), (60, "1 min 00 s"), (65, "1 min 05 s"),
    (245, "4 min 05 s"), (3599, "59 min 59 s"), (3600, "1 h 00 min"),
    (3 * 3600 + 2 * 60 + 9, "3 h 02 min"), (2 * 3600 + 18 * 60, "2 h 18 min"),
    (86399, "23 h 59 min"), (86400, "1 d 00 h"), (2 * 86400 + 7 * 3600, "2 d 07 h"),
    (-5, "0 s"),
])
def test_fmt_duration_is_the_one_duration_style(seconds, text):
    assert fmt_duration(seconds) == text


def test_fmt_ago_is_a_duration_before_now():
    assert fmt_ago(None) == "never"
    assert fmt_ago(math.nan) == "n/a"
    assert fmt_ago(0) == "now"
    assert fmt_ago(0.99) == "now"
    assert fmt_ago(-12) == "12 s ago"
    assert fmt_ago(1500) == "25 min 00 s ago"
    assert fmt_ago(1500) == f"{fmt_duration(1500)} ago"


@pytest.mark.parametrize("seconds, text", [
    (0.04, "40 ms"), (0.4, "0.4 s"), (9.94, "9.9 s"), (65, "1 min 05 s"),
])
def test_fmt_elapsed(seconds, text):
    assert fmt_elapsed(seconds) == text
