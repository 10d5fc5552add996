"""A request's parameters, checked before anything is done.

Bad input is a clear ``bad_request`` that changes nothing: a wrong type, a
value out of its bounds, or a parameter the method does not take.
"""

from __future__ import annotations

import math
from typing import Any


class ApiError(Exception):
    """A call refused; ``status`` is the HTTP status it maps to, ``code`` the
    machine-readable reason."""

    def __init__(self, message: str, status: int = 400, code: str = "bad_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def wire_refusal(ours: int, theirs: object) -> ApiError:
    """The answer to a client that speaks wire version ``theirs``."""
    return ApiError(f"this server speaks wire version {ours}, the client {theirs!r}: use the "
                    "same VRAM Steward version on both sides", 400, "version")


class Params:
    def __init__(self, raw: Any) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ApiError("params must be a JSON object")
        self._raw = raw
        self._used: set[str] = set()

    def _get(self, name: str, required: bool) -> Any:
        self._used.add(name)
        value = self._raw.get(name)
        if value is None and required:
            raise ApiError(f"{name!r} is required")
        return value

    def integer(self, name: str, required: bool = True, low: int | None = None) -> Any:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ApiError(f"{name!r} must be an integer")
        if low is not None and value < low:
            raise ApiError(f"{name!r} must be at least {low}")
        return value

    def number(self, name: str, required: bool = True, low: float | None = None,
               high: float | None = None) -> Any:
        value = self._get(name, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ApiError(f"{name!r} must be a number")
        if (low is not None and value < low) or (high is not None and value > high):
            raise ApiError(f"{name!r} must be between {low:g} and {high:g}"
                           if low is not None and high is not None
                           else f"{name!r} is out of bounds")
        return float(value)

    def text(self, name: str, max_len: int = 512) -> str:
        value = self._get(name, True)
        if not isinstance(value, str) or not value or len(value) > max_len:
            raise ApiError(f"{name!r} must be a non-empty string of at most {max_len} "
                           "characters")
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        value = self._get(name, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ApiError(f"{name!r} must be true or false")
        return value

    def choice(self, name: str, options: tuple[str, ...], required: bool = True) -> Any:
        value = self._get(name, required)
        if value is not None and value not in options:
            raise ApiError(f"{name!r} must be one of {', '.join(options)}")
        return value

    @property
    def given(self) -> set[str]:
        """The names the caller sent a value for (null is no value)."""
        return {k for k, v in self._raw.items() if v is not None}

    def done(self) -> None:
        """Refuse parameters the method does not take (a typo must not pass)."""
        extra = sorted(set(self._raw) - self._used)
        if extra:
            raise ApiError(f"unknown parameter {extra[0]!r}")

    def summary(self) -> str:
        """The parameters as the audit log shows them."""
        return " ".join(f"{k}={self._raw[k]!r}" for k in sorted(self._raw)
                        if k in self._used or k in ("pid", "model"))[:300]
