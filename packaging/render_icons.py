"""Render resources/icons/vram-steward.svg to the PNG sizes desktops ask for,
and pack the sizes Windows uses into vram-steward.ico (the .exe icon).

Run after editing the SVG:  python packaging/render_icons.py
"""

import os
import struct
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)  # 256 is the largest an .ico entry can be


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """An .ico holding each PNG as is (PNG entries: Windows Vista and later)."""
    header = struct.pack("<HHH", 0, 1, len(pngs))  # reserved, type 1 = icon, count
    offset = len(header) + 16 * len(pngs)
    entries, data = b"", b""
    for size, png in sorted(pngs.items()):
        # width/height 0 means 256; no palette; 1 plane; 32 bits per pixel
        entries += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32,
                               len(png), offset + len(data))
        data += png
    return header + entries + data


def main() -> None:
    app = QGuiApplication([])  # noqa: F841 - QImage painting needs one
    renderer = QSvgRenderer(str(ICONS / "vram-steward.svg"))
    if not renderer.isValid():
        raise SystemExit("invalid SVG")
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        image.save(str(ICONS / f"vram-steward-{size}.png"))
    pngs = {size: (ICONS / f"vram-steward-{size}.png").read_bytes() for size in ICO_SIZES}
    (ICONS / "vram-steward.ico").write_bytes(ico_bytes(pngs))


if __name__ == "__main__":
    main()
