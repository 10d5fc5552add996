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


def fmt_bytes(value: float | None) -> str:
    """The one byte format: ``12.3 GiB`` from 1 GiB up (one decimal), whole
    ``698 MiB`` from 1 MiB, ``0.5 KiB`` below (one decimal), ``0 B``; ``n/a``
    for None/NaN.  Drivers report memory in whole MiB, so a decimal under 1 GiB
    is noise; above, one decimal tells 23.6 from 24.0 GiB.
    """
    if value is None or is_unknown(value):
        return NA
    sign = "-" if value < 0 else ""
    size = abs(float(value))
    if size == 0:
        return "0 B"
    if round(size / TiB, 1) >= 1:
        return f"{sign}{size / TiB:.1f} TiB"
    if round(size / MiB) >= 1024:  # 1023.6 MiB reads 1.0 GiB, never "1024 MiB"
        return f"{sign}{size / GiB:.1f} GiB"
    if round(size / KiB, 1) >= 1024:
        return f"{sign}{round(size / MiB)} MiB"
    if size >= KiB:
        return f"{sign}{size / KiB:.1f} KiB"
    return f"{sign}{int(size)} B"


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


def fmt_duration(seconds: float | None) -> str:
    """The one duration format: ``42 s``, ``4 min 05 s``, ``3 h 02 min``,
    ``2 d 07 h`` (whole seconds, cut not rounded; negative reads 0 s)."""
    if seconds is None or is_unknown(seconds):
        return NA
    total = max(0, int(seconds))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours:02d} h"


def fmt_elapsed(seconds: float) -> str:
    """How long a step took: ``40 ms`` under 0.1 s, ``0.4 s`` under 10 s, then
    :func:`fmt_duration`."""
    if seconds < 0.1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 10 else fmt_duration(seconds)


def fmt_ago(seconds: float | None) -> str:
    """Time before now in the duration format: ``now`` under a second, else
    ``12 s ago``, ``4 min 05 s ago`` (the sign is ignored); ``never`` for None
    (it has not happened)."""
    if seconds is None:
        return "never"
    if is_unknown(seconds):
        return NA
    seconds = abs(seconds)
    if seconds < 1:
        return "now"
    return f"{fmt_duration(seconds)} ago"
