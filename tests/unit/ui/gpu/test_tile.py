"""A GPU tile: its own index in the title (the group header names the host),
and, while its host is not connected, the last figures greyed with since when."""

from __future__ import annotations

from PySide6.QtGui import QColor

from app.ui.gpu.tile import GpuTile
from app.ui.style import palette as pal
from tests.unit.ui.window.host_snapshots import gpu


def colours(tile: GpuTile) -> set[str]:
    image = tile.grab().toImage()
    return {image.pixelColor(x, y).name() for x in range(image.width())
            for y in range(image.height())}


def test_a_remote_tile_is_titled_by_its_index_and_tells_its_host(qtbot):
    tile = GpuTile("1@gpu1")
    qtbot.addWidget(tile)
    tile.set_sample(gpu(1, "gpu1", 40))
    assert tile.title == "GPU 1" and tile.host == "gpu1"
    assert tile.toolTip().startswith("GPU 1 on gpu1: A100-SXM4-80GB")


def test_a_stale_tile_keeps_its_figures_greyed_and_says_since_when(qtbot):
    tile = GpuTile("0@gpu1")
    qtbot.addWidget(tile)
    tile.resize(220, 74)
    tile.set_sample(gpu(0, "gpu1", 76))  # a warning level
    warn = QColor(pal.LEVEL_COLORS[pal.LEVEL_WARNING]).name()
    tile.set_stale("disconnected since 15:04:12")
    assert tile.memory_text == "76.0 GiB / 80.0 GiB"
    assert "disconnected since 15:04:12" in tile.toolTip()
    assert warn in colours(tile)  # the "disconnected since" text
    tile.set_stale(None)
    assert tile.stale_text is None and "disconnected" not in tile.toolTip()
