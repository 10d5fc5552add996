"""The SM strip: a new figure repaints its caption only; new data the whole strip."""

from __future__ import annotations

import numpy as np

from app.ui.gpu.util_strip import UtilStrip


class Recording(UtilStrip):
    def __init__(self) -> None:
        super().__init__()
        self.painted: list = []

    def paintEvent(self, event) -> None:
        self.painted.append(event.rect())
        super().paintEvent(event)


def test_a_new_figure_repaints_the_caption_and_new_data_the_strip(qtbot):
    strip = Recording()
    qtbot.addWidget(strip)
    strip.resize(600, 44)
    strip.show()
    qtbot.waitExposed(strip)
    strip.set_data(np.linspace(-600.0, 0.0, 50), np.full(50, 40.0), 600.0)
    qtbot.waitUntil(lambda: bool(strip.painted))
    left, _width = strip.extent()
    strip.painted.clear()
    strip.set_now(42.0)
    qtbot.waitUntil(lambda: bool(strip.painted))
    assert all(r.right() < left for r in strip.painted)  # the caption, left of the strip
    strip.painted.clear()
    strip.set_now(42.0)  # the same figure: nothing
    strip.set_data(np.linspace(-600.0, 0.0, 50), np.full(50, 60.0), 600.0)
    qtbot.waitUntil(lambda: bool(strip.painted))
    assert any(r.right() > left for r in strip.painted)
