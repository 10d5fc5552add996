"""Process colours on one panel stay apart: from each other and from the level colours,
in the light and the dark theme, for normal colour vision and under deuteranopia.

ΔE is measured two ways (app.ui.style.color_difference): CIE76 (Euclidean CIELAB)
and CIEDE2000.  Every pair is at least ΔE76 20 apart in all four cases, and at
least ΔE2000 20 apart for normal vision.  ΔE2000 20 under deuteranopia is out of
reach for any eight colours usable as lines (seen as the dichromat sees them, the
colours lie on a plane of lightness and blue-yellow, where ΔE2000 compresses
chroma): there the floor is lower and is checked too, so it cannot slip."""

from __future__ import annotations

import itertools
import random

import pytest
from PySide6.QtGui import QColor

from app.core.monitor.plot_data import TOP_N
from app.ui.style import palette as pal
from app.ui.style.color_difference import (
    contrast_ratio,
    delta_e_2000,
    deutan,
    difference,
    parse_hex,
    to_lab,
)
from app.ui.style.theme import dark_palette, light_palette

THEMES = {"light": (light_palette, pal.PROCESS_COLORS_LIGHT),
          "dark": (dark_palette, pal.PROCESS_COLORS_DARK)}
LEVELS = tuple(pal.LEVEL_COLORS.values())
#: The least CIEDE2000 distance kept under deuteranopia (see the module's docstring).
DEUTAN_FLOOR_2000 = 9.5


def cie76(a: str, b: str, deuteranopia: bool) -> float:
    la, lb = (to_lab(deutan(parse_hex(c)) if deuteranopia else parse_hex(c)) for c in (a, b))
    return sum((x - y) ** 2 for x, y in zip(la, lb)) ** 0.5


def pairs(colors: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every two process colours, and every process colour with every level colour."""
    return [*itertools.combinations(colors, 2), *itertools.product(colors, LEVELS)]


# -- the colour maths ------------------------------------------------------------------------

@pytest.mark.parametrize("lab1,lab2,expected", [
    # Sharma, Wu & Dalal (2005), test data pairs 1, 7, 17, 25, 33 and 10.
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((2.0776, 0.0795, -1.1350), (0.9033, -0.0636, -0.5514), 0.9082),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0011), 7.2195),
])
def test_ciede2000_matches_the_published_test_data(lab1, lab2, expected):
    assert delta_e_2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert delta_e_2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)


def test_lab_of_the_srgb_primaries_and_white():
    assert to_lab(parse_hex("#FFFFFF")) == pytest.approx((100.0, 0.0, 0.0), abs=0.01)
    assert to_lab(parse_hex("#FF0000")) == pytest.approx((53.24, 80.09, 67.20), abs=0.01)
    assert to_lab(parse_hex("#0000FF")) == pytest.approx((32.30, 79.19, -107.86), abs=0.01)


def test_deuteranopia_keeps_greys_and_folds_red_onto_green():
    for grey in ("#000000", "#777777", "#FFFFFF"):
        assert deutan(parse_hex(grey)) == pytest.approx(parse_hex(grey), abs=2e-3)
    red, green = "#D03030", "#30A030"
    assert difference(red, green, deuteranopia=True) < difference(red, green) / 3
    blue, yellow = "#3050D0", "#D0C030"  # the axis a deutan still sees
    assert difference(blue, yellow, deuteranopia=True) > 40


# -- the palettes ----------------------------------------------------------------------------

@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("deuteranopia", [False, True], ids=["normal", "deutan"])
def test_every_pair_is_at_least_delta_e76_20_apart(theme, deuteranopia):
    _palette, colors = THEMES[theme]
    close = [(a, b, round(cie76(a, b, deuteranopia), 1)) for a, b in pairs(colors)
             if cie76(a, b, deuteranopia) < 20]
    assert close == []


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("deuteranopia,floor", [(False, 20.0), (True, DEUTAN_FLOOR_2000)],
                         ids=["normal", "deutan"])
def test_every_pair_keeps_its_ciede2000_distance(theme, deuteranopia, floor):
    _palette, colors = THEMES[theme]
    close = [(a, b, round(difference(a, b, deuteranopia), 1)) for a, b in pairs(colors)
             if difference(a, b, deuteranopia) < floor]
    assert close == []


@pytest.mark.parametrize("theme", THEMES)
def test_each_set_reads_on_its_plot_background(theme):
    make_palette, colors = THEMES[theme]
    background = pal.hex_color(pal.background(make_palette()))
    foreground = pal.hex_color(pal.foreground(make_palette()))
    assert len(colors) == len(set(colors)) == TOP_N
    for color in colors:
        assert contrast_ratio(parse_hex(color), parse_hex(background)) >= 3.0
        # Apart from the device total's curve (the text colour).
        assert cie76(color, foreground, False) >= 20
    assert pal.process_colors(make_palette()) == colors


@pytest.mark.parametrize("theme", THEMES)
def test_the_first_eight_processes_of_a_panel_get_eight_colours(qapp, theme):
    """Processes come and go on three panels (some on two at once); whenever a panel
    draws at most eight, they have eight different colours, from the theme's set."""
    make_palette, theme_colors = THEMES[theme]
    before = qapp.palette()
    qapp.setPalette(make_palette())
    try:
        colors = pal.ProcessColors()
        allowed = {QColor(c).name() for c in theme_colors}
        rng = random.Random(26)
        drawn: dict[str, list[int]] = {"0": [], "1": [], "2": []}
        for step in range(300):
            panel = rng.choice(list(drawn))
            keys = drawn[panel]
            if keys and (len(keys) == TOP_N or rng.random() < 0.4):
                keys.remove(rng.choice(keys))
            else:
                shared = [k for p, ks in drawn.items() if p != panel for k in ks
                          if k not in keys]
                keys.append(rng.choice(shared) if shared and rng.random() < 0.3
                            else 1000 + step)
            assigned = colors.assign(panel, [(k, 1.0) for k in keys])
            names = [c.name() for c in assigned.values()]
            assert len(set(names)) == len(names), (step, panel, keys)
            assert set(names) <= allowed
            for other, ks in drawn.items():  # one colour per process on every panel
                for k in set(ks) & set(keys):
                    assert colors.color_of((k, 1.0), other).name() == \
                        assigned[(k, 1.0)].name()
    finally:
        qapp.setPalette(before)
