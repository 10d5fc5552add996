"""Render resources/icons/vram-steward.svg to the PNG sizes desktops ask for.

Run after editing the SVG:  python packaging/render_icons.py
"""

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


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


if __name__ == "__main__":
    main()
