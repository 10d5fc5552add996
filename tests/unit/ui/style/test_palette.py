"""Colour families: levels apart from processes, breakdown and markers; one colour per
process across panels, never shared on one panel."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor

from app.core.monitor.plot_data import TOP_N
from app.ui.style import palette as pal
from app.ui.style.theme import dark_palette, light_palette

LEVELS = [QColor(c) for c in pal.LEVEL_COLORS.values()]
BREAKDOWN = [QColor(c) for c in (pal.BREAKDOWN_PARAMS, pal.BREAKDOWN_TENSORS,
                                 pal.BREAKDOWN_CACHE, pal.BREAKDOWN_CACHE_HATCH)]
PROCESS = [QColor(c) for c in (*pal.PROCESS_COLORS_LIGHT, *pal.PROCESS_COLORS_DARK)]


def hue_distance(a: QColor, b: QColor) -> float:
    d = abs(a.hsvHueF() - b.hsvHueF()) * 360 % 360
    return min(d, 360 - d)


def is_neutral(c: QColor) -> bool:
    return c.hsvSaturationF() < 0.15


def contrast(a: QColor, b: QColor) -> float:
    def lum(c: QColor) -> float:
        def lin(v: float) -> float:
            return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4
        return 0.2126 * lin(c.redF()) + 0.7152 * lin(c.greenF()) + 0.0722 * lin(c.blueF())
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("color", PROCESS + BREAKDOWN, ids=lambda c: c.name())
def test_process_and_breakdown_hues_stay_30_degrees_from_every_level(color):
    assert color.hsvHueF() >= 0  # not a grey: it has a hue to compare
    assert min(hue_distance(color, level) for level in LEVELS) >= 30


def test_breakdown_categories_are_apart_from_process_colours():
    for part in BREAKDOWN:
        assert min(hue_distance(part, p) for p in PROCESS) >= 25
    # Parameters and other tensors differ in lightness, the cache also in its fill.
    params, tensors, cache = (QColor(pal.BREAKDOWN_PARAMS), QColor(pal.BREAKDOWN_TENSORS),
                              QColor(pal.BREAKDOWN_CACHE))
    assert tensors.lightness() - params.lightness() > 60
    assert cache.lightness() - tensors.lightness() > 30


@pytest.mark.parametrize("theme", [light_palette, dark_palette])
def test_enough_distinct_process_colours_for_one_panel_that_read_on_its_background(theme):
    colors = [QColor(c) for c in pal.process_colors(theme())]
    assert len({c.name() for c in colors}) == len(colors) >= TOP_N
    background = pal.background(theme())
    assert min(contrast(c, background) for c in colors) >= 3.0


@pytest.mark.parametrize("theme", [light_palette, dark_palette])
def test_markers_and_the_agent_dot_are_neutral(theme):
    for color in (pal.marker_color(theme()), QColor(pal.AGENT_COLOR)):
        assert is_neutral(color)
        assert all(color != level for level in LEVELS)


# -- ProcessColors ---------------------------------------------------------------------------

A, B, C = (1, 1.0), (2, 1.0), (3, 1.0)


def names(colors: dict) -> dict:
    return {k: c.name() for k, c in colors.items()}


def test_a_panel_full_of_processes_uses_every_colour_once():
    colors = pal.ProcessColors()
    keys = [(pid, 1.0) for pid in range(TOP_N)]
    assigned = colors.assign("0", keys)
    assert len({c.name() for c in assigned.values()}) == TOP_N


def test_a_process_keeps_its_colour_while_the_ranking_changes():
    colors = pal.ProcessColors()
    first = names(colors.assign("0", [A, B, C]))
    again = names(colors.assign("0", [C, A, B]))
    assert again == first


def test_a_process_has_one_colour_on_every_panel_and_none_is_shared_on_one():
    colors = pal.ProcessColors()
    keys0 = [(pid, 1.0) for pid in range(TOP_N)]
    keys1 = [keys0[3]] + [(pid, 1.0) for pid in range(100, 100 + TOP_N - 1)]
    on0 = names(colors.assign("0", keys0))
    on1 = names(colors.assign("1", keys1))
    assert on1[keys0[3]] == on0[keys0[3]]
    assert len(set(on1.values())) == TOP_N
    assert names(colors.assign("0", keys0)) == on0  # panel 0 unchanged


def test_processes_meeting_on_a_panel_with_the_same_colour_are_told_apart():
    colors = pal.ProcessColors()
    colors.assign("0", [A])
    colors.assign("1", [(pid, 1.0) for pid in range(100, 100 + TOP_N)])  # every colour
    on1 = names(colors.assign("1", [(100, 1.0), A]))  # A now also runs on GPU 1
    assert on1[(100, 1.0)] != on1[A]
    assert colors.color_of(A, "0").name() == on1[A]  # still one colour for A


def test_colour_of_a_key_without_its_own_curve_is_none():
    colors = pal.ProcessColors()
    colors.assign("0", [A, B])
    colors.assign("1", [B])
    assert colors.color_of(A) is not None
    assert colors.color_of(A, "1") is None  # not drawn there (summed or absent)
    assert colors.color_of(C) is None
    colors.assign("0", [B])  # A ended or went into "other processes"
    assert colors.color_of(A) is None
    assert colors.color_of(B, "1") == colors.color_of(B, "0")


def test_a_closed_panel_gives_its_colours_back():
    colors = pal.ProcessColors()
    colors.assign("0", [A])
    colors.release("0")
    assert colors.color_of(A) is None
    assert names(colors.assign("1", [C]))[C] == QColor(pal.PROCESS_COLORS[0]).name()
