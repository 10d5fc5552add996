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


def object_or_none(value: Any) -> dict[str, Any] | None:
    """A JSON object with string keys (a model's config), else None."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return None
    return value


def shape_or_none(value: Any) -> tuple[int, ...] | None:
    """A tensor shape: a list of ints ≥ 0, else None."""
    if not isinstance(value, list) or not value:
        return None
    dims = []
    for item in value:
        dim = int_or_none(item)
        if dim is None or dim < 0:
            return None
        dims.append(dim)
    return tuple(dims)
