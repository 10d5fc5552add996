"""Painting shared by the bar widgets: a rounded track to fill segments into."""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import QPainter, QPainterPath
from PySide6.QtWidgets import QWidget

from app.ui.style import palette as pal


def rounded_track(widget: QWidget) -> tuple[QPainter, QRectF]:
    """A painter on ``widget`` with its pill-shaped track filled in the faint colour
    and clipped to it, and the track's rect: fill segments into it, then ``end()``."""
    p = QPainter(widget)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    rect = QRectF(widget.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
    radius = rect.height() / 2
    track = QPainterPath()
    track.addRoundedRect(rect, radius, radius)
    p.fillPath(track, pal.faint(widget.palette()))
    p.setClipPath(track)
    return p, rect
