"""Defensive readers for fields of an agent's JSON: a missing or mistyped
field becomes None ("n/a"), never a crash and never 0."""

from __future__ import annotations

import math
from typing import Any


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def float_or_none(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def time_or_none(value: Any) -> float | None:
    """Epoch seconds: a finite number, else None (an infinity is no moment)."""
    number = float_or_none(value)
    return number if number is not None and math.isfinite(number) else None


def str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None
