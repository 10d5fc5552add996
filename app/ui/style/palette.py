"""Colours: process curves, gauge levels, and theme-derived greys.

Process colours are a colour-blind-friendly qualitative set (Okabe & Ito,
"Color Universal Design", minus its black and yellow, which vanish on one
background or the other, plus two of Paul Tol's mid-tone colours).  Every
entry has mid luminance so it reads on white *and* on a dark theme.

Foreground/background/grey colours are never hard-coded: they are taken from
the widget's :class:`QPalette`, so a dark theme only has to change the palette.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Iterable

from PySide6.QtGui import QColor, QPalette

from app.core.policies.thresholds import ALERT_AT

# Okabe-Ito: orange, sky blue, bluish green, vermillion, blue (lifted a little
# so it survives a dark background), reddish purple; Tol: olive, rose.
PROCESS_COLORS: tuple[str, ...] = (
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#D55E00",
    "#2F7FD0",
    "#CC79A7",
    "#999933",
    "#EE6677",
)

# Gauge levels.  Blue (not green) for "normal" keeps normal/critical apart for
# red-green colour blindness; orange and vermillion differ in luminance too.
LEVEL_NORMAL = "normal"
LEVEL_WARNING = "warning"
LEVEL_CRITICAL = "critical"
LEVEL_UNKNOWN = "unknown"

WARNING_AT = 0.75
CRITICAL_AT = ALERT_AT

LEVEL_COLORS: dict[str, str] = {
    LEVEL_NORMAL: "#2F7FD0",
    LEVEL_WARNING: "#E69F00",
    LEVEL_CRITICAL: "#D55E00",
}


# VRAM breakdown of a PyTorch process (agent figures): model parameters and other
# live tensors in two blues, the allocator's cache (what "free cache" returns) in
# orange; the CUDA context and non-PyTorch memory take a theme grey (context_color).
BREAKDOWN_PARAMS = "#2F7FD0"
BREAKDOWN_TENSORS = "#56B4E9"
BREAKDOWN_CACHE = "#E69F00"
# The marker of processes with an agent (PyTorch's own orange-red).
AGENT_COLOR = "#EE4C2C"
# Model events on the VRAM graph: unload (memory given back) and reload.
MARKER_UNLOAD = "#009E73"
MARKER_RELOAD = "#2F7FD0"


def level_for(fraction: float | None) -> str:
    """``normal`` below 75 %, ``warning`` from 75 % to under 90 %, ``critical`` from 90 %."""
    if fraction is None or fraction != fraction:  # None or NaN
        return LEVEL_UNKNOWN
    if fraction >= CRITICAL_AT:
        return LEVEL_CRITICAL
    if fraction >= WARNING_AT:
        return LEVEL_WARNING
    return LEVEL_NORMAL


def level_color(level: str, palette: QPalette | None = None) -> QColor:
    """The fill colour for a gauge level; unknown is the palette's mid grey."""
    if level in LEVEL_COLORS:
        return QColor(LEVEL_COLORS[level])
    return muted(palette) if palette is not None else QColor("#888888")


def preferred_index(key: Hashable) -> int:
    """A deterministic palette slot for ``key`` (stable across runs, unlike ``hash``)."""
    return zlib.crc32(repr(key).encode()) % len(PROCESS_COLORS)


class ColorAssigner:
    """Gives each visible process a colour that stays with it while it is shown.

    A process keeps its colour for as long as it stays among the assigned keys;
    a newcomer takes its hash-preferred slot when free, else the first free one,
    so the (at most eight) curves on one plot never share a colour.
    """

    def __init__(self) -> None:
        self._slot: dict[Hashable, int] = {}

    def assign(self, keys: Iterable[Hashable]) -> dict[Hashable, QColor]:
        keys = list(keys)
        wanted = set(keys)
        self._slot = {k: s for k, s in self._slot.items() if k in wanted}
        used = set(self._slot.values())
        n = len(PROCESS_COLORS)
        for key in keys:
            if key in self._slot:
                continue
            slot = preferred_index(key)
            if slot in used and len(used) < n:
                slot = next(i for i in range(n) if i not in used)
            self._slot[key] = slot
            used.add(slot)
        return {k: QColor(PROCESS_COLORS[self._slot[k]]) for k in keys}

    def color(self, key: Hashable) -> QColor:
        slot = self._slot.get(key)
        return QColor(PROCESS_COLORS[preferred_index(key) if slot is None else slot])


def blend(a: QColor, b: QColor, t: float) -> QColor:
    """``a`` moved towards ``b`` by ``t`` (0..1)."""
    return QColor(
        round(a.red() + (b.red() - a.red()) * t),
        round(a.green() + (b.green() - a.green()) * t),
        round(a.blue() + (b.blue() - a.blue()) * t),
    )


def foreground(palette: QPalette) -> QColor:
    return palette.color(QPalette.ColorRole.WindowText)


def background(palette: QPalette) -> QColor:
    return palette.color(QPalette.ColorRole.Base)


def muted(palette: QPalette) -> QColor:
    """Secondary text: the text colour pulled 45 % towards the background."""
    return blend(palette.color(QPalette.ColorRole.WindowText),
                 palette.color(QPalette.ColorRole.Window), 0.45)


def faint(palette: QPalette) -> QColor:
    """Grid lines and gauge tracks: text pulled 85 % towards the background."""
    return blend(palette.color(QPalette.ColorRole.WindowText),
                 palette.color(QPalette.ColorRole.Base), 0.85)


def other_color(palette: QPalette) -> QColor:
    """The aggregated "other processes" curve: a neutral grey on either theme."""
    return blend(palette.color(QPalette.ColorRole.WindowText),
                 palette.color(QPalette.ColorRole.Base), 0.5)


# Unattributed memory (used, held by no listed process): a greyed violet, apart from
# the process colours and from the neutral grey of "other processes".
UNATTRIBUTED_HUE = "#8E7CC3"


def unattributed_color(palette: QPalette) -> QColor:
    """The unattributed-memory curve: a greyed violet moved a little towards the text
    colour (darker on a light theme, lighter on a dark one), so its thin dotted line
    keeps its contrast on either."""
    return blend(QColor(UNATTRIBUTED_HUE), palette.color(QPalette.ColorRole.WindowText), 0.2)


def context_color(palette: QPalette) -> QColor:
    """The "context & non-PyTorch" part of a breakdown bar: a grey on either theme."""
    return blend(palette.color(QPalette.ColorRole.WindowText),
                 palette.color(QPalette.ColorRole.Base), 0.62)


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def hex_color(color: QColor) -> str:
    return color.name(QColor.NameFormat.HexRgb)


def view_rules(palette: QPalette, table: str | None = None) -> str:
    """Style-sheet rules every view shares: secondary text, and for the table with
    object name ``table`` a rounded border and bold, ruled header sections."""
    rules = f"QLabel#secondary {{ color: {hex_color(muted(palette))}; }}"
    if table:
        border = hex_color(faint(palette))
        rules += (f"QTableView#{table} {{ border: 1px solid {border}; border-radius: 6px; }}"
                  "QHeaderView::section { font-weight: bold; padding: 4px 16px 4px 6px;"
                  f" border: none; border-bottom: 1px solid {border};"
                  " background: palette(base); }")
    return rules
