"""A GPU tile: its own index in the title (the group header names the host),
and, while its host is not connected, the last figures greyed with since when."""

from __future__ import annotations

from PySide6.QtGui import QColor

from app.ui.gpu.panel import GpuPanel
from app.ui.gpu.tile import GpuTile, strip_width
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


# -- the name: whole when there is room ------------------------------------------------------

LONG = "NVIDIA GeForce RTX 4090 Laptop GPU (demo)"


def test_the_name_shows_whole_at_the_width_the_tile_asks_for_and_elides_below(qtbot):
    tile = GpuTile("0")
    qtbot.addWidget(tile)
    tile.set_sample(gpu(0, name=LONG))
    name = LONG.removeprefix("NVIDIA ")
    hint = tile.sizeHint().width()
    assert hint > 220  # a long name asks for more than the smallest tile
    tile.resize(hint, 74)
    assert tile.shown_name() == name
    tile.resize(hint - 30, 74)
    shown = tile.shown_name()
    assert shown != name and shown.endswith("…") and name.startswith(shown[:-1])
    short = GpuTile("1")
    qtbot.addWidget(short)
    short.set_sample(gpu(1, name="NVIDIA A10"))
    assert short.sizeHint().width() == 220  # no smaller than the default
    short.resize(220, 74)
    assert short.shown_name() == "A10"


def test_the_strip_is_as_wide_as_its_widest_name_within_bounds(qtbot):
    tiles = []
    for i, name in enumerate(("NVIDIA A10", LONG)):
        tile = GpuTile(str(i))
        qtbot.addWidget(tile)
        tile.set_sample(gpu(i, name=name))
        tiles.append(tile)
    widest = max(t.sizeHint().width() for t in tiles)
    assert strip_width(tiles, 232, 1000, 18) == widest + 18
    assert strip_width(tiles, 232, 260, 18) == 260  # the area is short: the most it may take
    assert strip_width(tiles[:1], 232, 1000, 0) == 232  # short names: the default


def test_the_overview_strip_shows_every_name_whole_on_a_wide_window(qtbot):
    from app.ui.window.gpu_area import GpuArea

    area = GpuArea(lambda did: GpuPanel(did))
    qtbot.addWidget(area)
    area.resize(1900, 300)  # too short for the panels: the overview
    area.show()
    qtbot.waitExposed(area)
    area.update_gpus([gpu(i, name=LONG) for i in range(4)])
    qtbot.waitUntil(lambda: area.arrangement == "overview")
    qtbot.waitUntil(lambda: all(t.width() >= t.sizeHint().width() for t in area.tiles.values()))
    assert all(t.shown_name() == LONG.removeprefix("NVIDIA ") for t in area.tiles.values())


def test_new_figures_repaint_their_line_and_a_new_level_the_whole_tile(qtbot, monkeypatch):
    import numpy as np

    tile = GpuTile("0")
    qtbot.addWidget(tile)
    tile.resize(232, 80)
    tile.set_sample(gpu(0, "", 10))
    tile.set_history(np.array([-60.0, -30.0, 0.0]), np.array([9.0, 10.0, 10.0]) * 2**30,
                     80 * 2**30, 600.0)
    tile.show()
    qtbot.waitExposed(tile)
    qtbot.wait(50)  # its first whole paint
    drawn: list[int] = []
    paint = GpuTile._paint_history
    monkeypatch.setattr(GpuTile, "_paint_history",
                        lambda self, *a: (drawn.append(1), paint(self, *a)))
    tile.set_sample(gpu(0, "", 11))  # 11.0 GiB: the same level, new figures
    qtbot.wait(30)
    assert tile.memory_text.startswith("11.0 GiB") and drawn == []
    tile.set_sample(gpu(0, "", 78))  # past the warning level: the history's colour too
    qtbot.waitUntil(lambda: bool(drawn), timeout=2000)
    assert tile.memory_text.startswith("78.0 GiB")
