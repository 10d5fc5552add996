"""The PyTorch memory bar: its own colours, apart from levels; the cache hatched."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QImage

from app.core.agents.types import VramBreakdown
from app.core.units import GiB
from app.ui.gpu.torch_memory import SEGMENTS, BreakdownBar, segment_color
from app.ui.style import palette as pal
from app.ui.style.theme import dark_palette, light_palette


def colors_in(image: QImage, x0: int, x1: int) -> set[str]:
    y = image.height() // 2
    return {image.pixelColor(x, y).name() for x in range(x0, x1)}


@pytest.mark.parametrize("theme", [light_palette, dark_palette])
def test_segments_use_no_level_or_process_colour(theme):
    taken = {QColor(c).name() for c in (*pal.LEVEL_COLORS.values(),
                                         *pal.process_colors(theme()))}
    names = {segment_color(s, theme()).name() for s in SEGMENTS}
    assert len(names) == len(SEGMENTS)
    assert not names & taken


def test_the_cache_is_hatched_and_the_live_parts_are_plain(qtbot):
    bar = BreakdownBar()
    qtbot.addWidget(bar)
    bar.resize(400, 12)
    # 1 GiB parameters, 1 GiB other tensors, 2 GiB cache, no context, on a 4 GiB scale.
    bar.set_breakdown(VramBreakdown(4 * GiB, 0, 2 * GiB, 2 * GiB, 1 * GiB), 4 * GiB)
    image = bar.grab().toImage()
    params, tensors = colors_in(image, 20, 80), colors_in(image, 120, 180)
    assert params == {QColor(pal.BREAKDOWN_PARAMS).name()}
    assert tensors == {QColor(pal.BREAKDOWN_TENSORS).name()}
    cache = colors_in(image, 220, 380)
    assert {QColor(pal.BREAKDOWN_CACHE).name(),
            QColor(pal.BREAKDOWN_CACHE_HATCH).name()} <= cache
