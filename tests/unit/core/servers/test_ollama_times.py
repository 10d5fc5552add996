"""Ollama's times as Go writes them, and its keep-alive durations."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.core.servers.adapters.ollama import parse_duration, parse_time


def test_rfc3339_with_nanoseconds_and_an_offset() -> None:
    want = datetime(2026, 11, 27, 14, 38, 31, 837530, tzinfo=UTC).timestamp()
    assert parse_time("2026-11-27T06:38:31.837530123-08:00") == pytest.approx(want)
    assert parse_time("2026-11-27T14:38:31.83753Z") == pytest.approx(want)
    assert parse_time("0001-01-01T00:00:00Z") is not None
    assert parse_time("yesterday") is None and parse_time(None) is None
    assert parse_time("2026-11-27T14:38:31") is None  # no zone: not a time Ollama writes


@pytest.mark.parametrize("text, seconds", [
    ("300", 300.0), ("5m", 300.0), ("1h30m", 5400.0), ("10s", 10.0), ("0", 0.0),
    ("-1", None), ("-1m", None), ("", None), ("forever", None), ("5m garbage", None),
])
def test_keep_alive(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds
