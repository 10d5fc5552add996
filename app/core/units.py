"""Units: the byte constants and the text of bytes, percentages, counts and
durations, for the UI, the CLI and the reports alike.  Qt-free, stdlib only.

``None`` means *unknown* throughout the app and is always written :data:`NA`
("n/a"), never 0 (NaN and infinities too).  Memory uses binary units
(1 GiB = 1024**3 bytes), the units NVIDIA tools and drivers report in.
"""

from __future__ import annotations

import math

NA = "n/a"

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_UNITS = ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"))


def is_unknown(value: object) -> bool:
    """None, NaN or an infinity: a figure nobody could read."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


# ------------------------------------------------------------------- bytes


def fmt_bytes(value: float | None, digits: int = 1) -> str:
    """``12.3 GiB``, ``512 MiB``, ``0 B``; ``n/a`` for None/NaN.

    Whole-unit values under 1 GiB drop the decimals ("512 MiB"), because
    drivers report memory in whole MiB and "512.0 MiB" is noise.
    """
    if value is None or is_unknown(value):
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


def fmt_gib(value: float | None, digits: int = 1) -> str:
    """Always in GiB (``17.7 GiB``), for figures that are compared side by side."""
    if value is None or is_unknown(value):
        return NA
    return f"{value / GiB:.{digits}f} GiB"


def fmt_size(value: float | None, kib_below_mib: bool = False) -> str:
    """A terminal table's column: ``1.6 GiB`` from 1 GiB up, else whole ``512 MiB``;
    ``n/a`` for None/NaN.  ``kib_below_mib``: sizes under 1 MiB in KiB with one
    decimal (``0.5 KiB``), for model weights that can be tiny."""
    if value is None or is_unknown(value):
        return NA
    if kib_below_mib and value < MiB:
        return f"{value / KiB:.1f} KiB"
    if value >= GiB:
        return f"{value / GiB:.1f} GiB"
    return f"{value / MiB:.0f} MiB"


# ---------------------------------------------------- percentages and counts


def fmt_percent(value: float | None, digits: int = 0) -> str:
    """``74 %``; ``n/a`` for None/NaN.  Values are percent (0-100), not fractions."""
    if value is None or is_unknown(value):
        return NA
    return f"{value:.{digits}f} %"


def fmt_fraction(value: float | None, digits: int = 0) -> str:
    """A 0..1 fraction as a percentage: ``0.74`` → ``74 %``."""
    if value is None or is_unknown(value):
        return NA
    return fmt_percent(value * 100.0, digits)


def fmt_count(value: float | None) -> str:
    """Parameter counts: ``512``, ``950 K``, ``25.6 M``, ``1.2 B``; ``n/a`` for None."""
    if value is None or is_unknown(value):
        return NA
    n = float(value)
    for unit, name in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= unit:
            scaled = n / unit
            return f"{scaled:.1f} {name}" if abs(scaled) < 100 else f"{scaled:.0f} {name}"
    return f"{int(n)}"


# --------------------------------------------------------------- durations


def fmt_duration(seconds: float | None, sep: str = " ") -> str:
    """Compact, fixed-width-ish durations: ``42s``, ``4m 05s``, ``3h 02m``, ``2d 07h``
    (whole seconds, cut not rounded; negative reads 0).  ``sep=""`` packs them for
    narrow table columns: ``4m05s``."""
    if seconds is None or is_unknown(seconds):
        return NA
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{sep}{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{sep}{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{sep}{hours:02d}h"


def fmt_elapsed(seconds: float) -> str:
    """How long a step took: ``40 ms`` under 0.1 s, else ``0.4 s``."""
    return f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.1f} s"


def fmt_ago(seconds: float | None) -> str:
    """Time before now: ``now``, ``12s ago``, ``4m 05s ago`` (the sign is ignored)."""
    if seconds is None or is_unknown(seconds):
        return NA
    seconds = abs(seconds)
    if seconds < 0.5:
        return "now"
    return f"{fmt_duration(seconds)} ago"


def fmt_since(seconds: float | None) -> str:
    """How long ago something happened: ``just now``, ``42 s ago``, ``3 min ago``,
    ``2 h ago``, ``3 d ago``; ``never`` for None (it has not happened)."""
    if seconds is None:
        return "never"
    if is_unknown(seconds):
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
