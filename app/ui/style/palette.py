"""Colours: each family means one thing.

* Levels (normal / warning / critical: blue, orange, vermillion from Okabe & Ito)
  are only for how full a GPU is and for errors.  No other family comes within
  30° of their hues.
* Processes take a qualitative set of eight per theme from the hues the levels
  leave free: greens and teals, purples and pinks (no orange, yellow or blue, no
  pure red).  On one panel every two of them, and each of them and each level
  colour, are at least ΔE 20 apart (CIE76) for normal colour vision and under
  simulated deuteranopia (Machado 2009), and at least ΔE2000 20 apart for normal
  vision (see :mod:`app.ui.style.color_difference` and its test).  The light set
  is darker and the dark set lighter, so both keep at least 3:1 contrast on their
  plot background.  :class:`ProcessColors` gives a process one colour on every
  panel, taken from the set of the theme in use.
* The PyTorch memory breakdown is one indigo hue in a dark and a light step,
  with the cache (what "free cache" returns) hatched: shape, not hue, tells it
  apart, on either theme and for any colour vision.
* Everything else (totals, "other processes", context memory, event and agent
  markers) is a grey taken from the widget's :class:`QPalette`, so a dark theme
  only has to change the palette; unattributed memory is a greyed violet.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from PySide6.QtGui import QColor, QGuiApplication, QPalette

from app.core.policies.thresholds import ALERT_AT

# Ordered so that the first few, taken when a panel shows few processes, are of
# different families (pink, teal, purple, olive) and the furthest apart for every
# colour vision.  Found by a search that maximised the smallest CIEDE2000 distance,
# normal and deuteranopic, under the rules above (hue bands, contrast, lightness and
# chroma bounds), then checked by eye on both plot backgrounds.
PROCESS_COLORS_LIGHT: tuple[str, ...] = (
    "#FE5496",  # pink
    "#006A5B",  # dark teal
    "#85308F",  # plum
    "#5B7201",  # olive
    "#AB82D3",  # lilac
    "#24A09E",  # teal
    "#48A559",  # green
    "#A02542",  # raspberry
)
# The same families, one by one, lighter: a process keeps its family when the theme
# changes.
PROCESS_COLORS_DARK: tuple[str, ...] = (
    "#FF4679",  # pink
    "#2D8F84",  # teal
    "#B65EB4",  # orchid
    "#00932C",  # green
    "#D2A8FE",  # lavender
    "#17E1DD",  # cyan
    "#6EDF72",  # light green
    "#FFB2C2",  # light pink
)
#: The light theme's set: where no palette says otherwise.
PROCESS_COLORS = PROCESS_COLORS_LIGHT


def process_colors(palette: QPalette) -> tuple[str, ...]:
    """The process colours for a theme: the dark set on a dark palette."""
    return PROCESS_COLORS_DARK if is_dark(palette) else PROCESS_COLORS_LIGHT

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


# VRAM breakdown of a PyTorch process (agent figures): model parameters dark and
# other live tensors light indigo; the allocator's cache (what "free cache" returns)
# is a pale indigo hatched with the dark one; the CUDA context and non-PyTorch
# memory take a theme grey (context_color).
BREAKDOWN_PARAMS = "#3C389C"
BREAKDOWN_TENSORS = "#A8A4EC"
BREAKDOWN_CACHE = "#D8D6F8"
BREAKDOWN_CACHE_HATCH = BREAKDOWN_PARAMS
# The dot marking processes with an agent: a neutral mid grey, legible on a light and
# a dark table (a status light in a level or warm colour would read as an alarm).
AGENT_COLOR = "#8C8C8C"


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


class ProcessColors:
    """One colour per process, shared by every GPU panel of a window.

    Each panel (an *owner*: a display id, or any hashable) says which process
    keys it draws now with :meth:`assign`.  A process keeps its colour while any
    panel draws it, on every panel; once none does, the colour is free again.  A
    newcomer takes the first colour that no process sharing a panel with it has,
    preferring one no panel uses at all, so the curves on one panel never share a
    colour while there are no more of them than colours (the top eight; a ninth,
    highlighted process may repeat one while the others are dimmed).
    """

    def __init__(self, colors: Sequence[str] | None = None) -> None:
        """``colors``: a fixed set; None: the set of the application's theme, as it
        is at each call (a process keeps its slot when the theme changes)."""
        self._fixed = tuple(QColor(c) for c in colors) if colors is not None else None
        self._themed = {dark: tuple(QColor(c) for c in cs) for dark, cs in (
            (False, PROCESS_COLORS_LIGHT), (True, PROCESS_COLORS_DARK))}
        self._slot: dict[Hashable, int] = {}
        self._drawn: dict[Hashable, tuple[Hashable, ...]] = {}  # owner -> keys drawn

    def assign(self, owner: Hashable, keys: Iterable[Hashable]) -> dict[Hashable, QColor]:
        """The colours of the process ``keys`` that ``owner`` draws from now on."""
        keys = list(dict.fromkeys(keys))
        before = set(self._drawn.get(owner, ()))
        self._drawn[owner] = tuple(keys)
        alive = {k for drawn in self._drawn.values() for k in drawn}
        self._slot = {k: s for k, s in self._slot.items() if k in alive}
        # Keys this owner drew before keep their colour first; a key that met one of
        # the same colour here (it was drawn only on other panels) is given a new one.
        taken: set[int] = set()
        for key in sorted(keys, key=lambda k: k not in before):
            slot = self._slot.get(key)
            if slot is not None and slot not in taken:
                taken.add(slot)
            else:
                self._slot.pop(key, None)
        for key in keys:
            if key not in self._slot:
                slot = self._free_slot(key, taken)
                self._slot[key] = slot
                taken.add(slot)
        colors = self._colors()
        return {k: QColor(colors[self._slot[k]]) for k in keys}

    def _colors(self) -> tuple[QColor, ...]:
        if self._fixed is not None:
            return self._fixed
        dark = QGuiApplication.instance() is not None and is_dark(QGuiApplication.palette())
        return self._themed[dark]

    def _free_slot(self, key: Hashable, taken: set[int]) -> int:
        near = set(taken)  # colours of the keys that share a panel with ``key``
        for drawn in self._drawn.values():
            if key in drawn:
                near.update(self._slot[k] for k in drawn if k in self._slot)
        used = set(self._slot.values())
        n = len(self._themed[False]) if self._fixed is None else len(self._fixed)
        for pool in ([i for i in range(n) if i not in near and i not in used],
                     [i for i in range(n) if i not in near]):
            if pool:
                return pool[0]
        # Every colour is near: one on this panel's curves never repeats (while there
        # are colours left), and of those the one least used on the key's other panels.
        counts = [0] * n
        for drawn in self._drawn.values():
            if key in drawn:
                for k in drawn:
                    if k in self._slot:
                        counts[self._slot[k]] += 1
        here = [i for i in range(n) if i not in taken] or list(range(n))
        return min(here, key=counts.__getitem__)

    def release(self, owner: Hashable) -> None:
        """``owner`` draws nothing any more (its panel closed)."""
        if self._drawn.pop(owner, None) is not None:
            alive = {k for drawn in self._drawn.values() for k in drawn}
            self._slot = {k: s for k, s in self._slot.items() if k in alive}

    def drawn_colors(self) -> dict[tuple[Hashable, Hashable], QColor]:
        """(owner, key) -> colour of every curve drawn now: the process table's swatches."""
        colors = self._colors()
        return {(owner, key): QColor(colors[self._slot[key]])
                for owner, keys in self._drawn.items() for key in keys if key in self._slot}

    def color_of(self, key: Hashable, owner: Hashable | None = None) -> QColor | None:
        """The colour of ``key``'s curve now: on ``owner``'s panel, or on any panel
        when ``owner`` is None.  None while it has no curve of its own there (summed
        into "other processes", or not on that GPU)."""
        slot = self._slot.get(key)
        if slot is None or (owner is not None and key not in self._drawn.get(owner, ())):
            return None
        return QColor(self._colors()[slot])


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


def util_color(palette: QPalette) -> QColor:
    """SM utilisation history: a theme grey between muted and foreground (it is
    neither a level nor a process)."""
    return blend(muted(palette), foreground(palette), 0.35)


def marker_color(palette: QPalette) -> QColor:
    """Model-event markers on a graph: the text colour, neutral on either theme."""
    return foreground(palette)


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
