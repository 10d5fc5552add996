"""Axes of the VRAM plot: time before now, and GiB with one tick level only.

Method and argument names follow pyqtgraph's, which they override."""

from __future__ import annotations

import pyqtgraph as pg

# Nice tick spacings for a time axis, in seconds.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400)


class TimeAxis(pg.AxisItem):
    """Seconds relative to now (<= 0) shown as ``now``, ``30 s``, ``5 min``, ``2 h``."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        span = abs(maxVal - minVal)
        if span <= 0 or size <= 0:
            return super().tickSpacing(minVal, maxVal, size)
        wanted = max(2.0, size / 90.0)  # about one label every 90 px
        major = next((s for s in _TIME_STEPS if span / s <= wanted), _TIME_STEPS[-1])
        # One level only: every tick level is also a grid level, and grid lines are
        # what costs most when the plot is painted.
        return [(float(major), 0.0)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (Qt naming)
        out = []
        for v in values:
            ago = -v
            if abs(ago) < 1e-6:
                out.append("now")
            elif spacing >= 3600:
                out.append(f"{ago / 3600:g} h")
            elif spacing >= 60:
                out.append(f"{ago / 60:g} min")
            else:
                out.append(f"{ago:g} s")
        return out


class ValueAxis(pg.AxisItem):
    """pyqtgraph's spacing, major level only (fewer grid lines: ~10x cheaper to paint)."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        levels = super().tickSpacing(minVal, maxVal, size)
        return levels[:1]
