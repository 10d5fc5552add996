"""Model-event markers: neutral colours from the theme, told apart by their shape."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor

from app.core.agents.events import Marker
from app.core.units import GiB
from app.ui.gpu.panel import GpuPanel
from app.ui.style import palette as pal
from app.ui.style.theme import dark_palette, light_palette

T = 1_700_000_000.0
MARKERS = [Marker(T, 4 * GiB, "unload", True, "Unloaded a", 1, 1),
           Marker(T + 5, 6 * GiB, "reload", True, "Reloaded a", 1, 2),
           Marker(T + 9, 6 * GiB, "unload", False, "Unload failed", 1, 3)]


def near_a_level(color: QColor) -> bool:
    for level in pal.LEVEL_COLORS.values():
        level = QColor(level)
        d = abs(color.hsvHueF() - level.hsvHueF()) * 360 % 360
        if color.hsvSaturationF() > 0.15 and min(d, 360 - d) < 30:
            return True
    return False


@pytest.fixture
def panel(qtbot):
    p = GpuPanel("0")
    qtbot.addWidget(p)
    return p


@pytest.mark.parametrize("theme", [light_palette, dark_palette])
def test_markers_take_a_neutral_theme_colour_never_a_level(panel, theme):
    panel.setPalette(theme())
    panel.set_markers(MARKERS, version=1)
    layer = panel.plot.markers
    fills = [m.opts["brush"].color() for m in layer.items]
    assert all(c == pal.marker_color(theme()) for c in fills)
    assert not any(near_a_level(c) for c in fills + [layer.failed.opts["pen"].color()])


def test_a_theme_change_recolours_the_markers_already_placed(panel):
    panel.setPalette(light_palette())
    panel.set_markers(MARKERS, version=1)
    panel.setPalette(dark_palette())
    assert panel.unload_markers.opts["brush"].color() == pal.marker_color(dark_palette())


def test_unload_reload_and_failure_have_their_own_shapes(panel):
    panel.set_markers(MARKERS, version=1)
    layer = panel.plot.markers
    assert [len(m.data) for m in layer.items] == [1, 1, 1]
    unload, reload, failed = (m.opts["symbol"] for m in layer.items)
    assert unload != reload  # ▼ and ▲
    assert failed == "x"
