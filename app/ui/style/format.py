"""Qt-free text formatting shared by every widget.

``None`` means *unknown* throughout the app and is always rendered as
:data:`NA` ("n/a"), never as 0.  Memory uses binary units (1 GiB = 1024**3
bytes), the units NVIDIA tools and drivers report in.
"""

from __future__ import annotations

import math

NA = "n/a"

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_UNITS = ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"))


def _unknown(value: object) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def fmt_bytes(value: int | float | None, digits: int = 1) -> str:
    """``12.3 GiB``, ``512 MiB``, ``0 B``; ``n/a`` for None/NaN.

    Whole-unit values under 1 GiB drop the decimals ("512 MiB"), because
    drivers report memory in whole MiB and "512.0 MiB" is noise.
    """
    if _unknown(value):
        return NA
    sign = "-" if value < 0 else ""
    size = abs(float(value))
    for unit, name in _UNITS:
        scaled = size / unit
        if scaled >= 1 or (unit != TiB and round(size / unit * 1024, digits) >= 1024):
            if round(scaled, digits) < 1:  # 1023.99 MiB: shown in the bigger unit as 1.0
                scaled = 1.0
            if unit < GiB and abs(scaled - round(scaled)) < 0.05:
                return f"{sign}{round(scaled)} {name}"
            return f"{sign}{scaled:.{digits}f} {name}"
    return f"{sign}{int(size)} B"


def fmt_gib(value: int | float | None, digits: int = 1) -> str:
    """Always in GiB (``17.7 GiB``), for figures that are compared side by side."""
    if _unknown(value):
        return NA
    return f"{value / GiB:.{digits}f} GiB"


def fmt_percent(value: float | None, digits: int = 0) -> str:
    """``74 %``; ``n/a`` for None/NaN.  Values are percent (0-100), not fractions."""
    if _unknown(value):
        return NA
    return f"{value:.{digits}f} %"


def fmt_fraction(value: float | None, digits: int = 0) -> str:
    """A 0..1 fraction as a percentage: ``0.74`` → ``74 %``."""
    if _unknown(value):
        return NA
    return fmt_percent(value * 100.0, digits)


def fmt_duration(seconds: float | None) -> str:
    """Compact, fixed-width-ish durations: ``42s``, ``4m 05s``, ``3h 02m``, ``2d 07h``."""
    if _unknown(seconds):
        return NA
    if seconds < 0:
        seconds = 0.0
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def fmt_ago(seconds: float | None) -> str:
    """Time before now for the plot hover: ``now``, ``12s ago``, ``4m 05s ago``."""
    if _unknown(seconds):
        return NA
    seconds = abs(seconds)
    if seconds < 0.5:
        return "now"
    return f"{fmt_duration(seconds)} ago"


def fmt_temp(celsius: float | None) -> str:
    """``54 °C``; ``n/a`` for None."""
    if _unknown(celsius):
        return NA
    return f"{celsius:.0f} °C"


def fmt_watts(draw: float | None, limit: float | None = None) -> str:
    """``212 W``, or ``212 W / 450 W`` with a known limit; ``n/a`` for an unknown draw."""
    if _unknown(draw):
        return NA if _unknown(limit) else f"{NA} / {limit:.0f} W"
    if _unknown(limit):
        return f"{draw:.0f} W"
    return f"{draw:.0f} W / {limit:.0f} W"


def fmt_memory_usage(used: int | None, total: int | None) -> str:
    """The gauge text: ``17.7 GiB / 24.0 GiB (74 %)``; parts unknown read ``n/a``."""
    if _unknown(used) and _unknown(total):
        return NA
    pct = NA if _unknown(used) or not total else fmt_percent(100.0 * used / total)
    return f"{fmt_gib(used)} / {fmt_gib(total)} ({pct})"


def fmt_count(value: int | float | None) -> str:
    """Parameter counts: ``512``, ``950 K``, ``25.6 M``, ``1.2 B``; ``n/a`` for None."""
    if _unknown(value):
        return NA
    n = float(value)
    for unit, name in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= unit:
            scaled = n / unit
            return f"{scaled:.1f} {name}" if abs(scaled) < 100 else f"{scaled:.0f} {name}"
    return f"{int(n)}"


def fmt_since(seconds: float | None) -> str:
    """How long ago something happened: ``just now``, ``42 s ago``, ``3 min ago``,
    ``2 h ago``, ``3 d ago``; ``never`` for None (it has not happened)."""
    if seconds is None:
        return "never"
    if _unknown(seconds):
        return NA
    seconds = max(0.0, float(seconds))
    if seconds < 5:
        return "just now"
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} d ago"
