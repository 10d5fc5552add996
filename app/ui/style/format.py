"""The GPU panel's readouts (temperature, power, the memory gauge); every other
figure is formatted by :mod:`app.core.units`.

``None`` means *unknown* throughout the app and is always rendered as
:data:`NA` ("n/a"), never as 0.
"""

from __future__ import annotations

from app.core.units import NA, fmt_bytes, fmt_percent, is_unknown

__all__ = ["fmt_memory_usage", "fmt_temp", "fmt_watts"]


def fmt_temp(celsius: float | None) -> str:
    """``54 °C``; ``n/a`` for None."""
    if celsius is None or is_unknown(celsius):
        return NA
    return f"{celsius:.0f} °C"


def fmt_watts(draw: float | None, limit: float | None = None) -> str:
    """``212 W``, or ``212 W / 450 W`` with a known limit; ``n/a`` for an unknown draw."""
    if draw is None or is_unknown(draw):
        return NA if limit is None or is_unknown(limit) else f"{NA} / {limit:.0f} W"
    if limit is None or is_unknown(limit):
        return f"{draw:.0f} W"
    return f"{draw:.0f} W / {limit:.0f} W"


def fmt_memory_usage(used: int | None, total: int | None) -> str:
    """The gauge text: ``17.7 GiB / 24.0 GiB (74 %)``; parts unknown read ``n/a``."""
    if is_unknown(used) and is_unknown(total):
        return NA
    pct = NA if used is None or is_unknown(used) or not total \
        else fmt_percent(100.0 * used / total)
    return f"{fmt_bytes(used)} / {fmt_bytes(total)} ({pct})"
