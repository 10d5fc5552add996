"""Painting shared by the small painted widgets: a rounded track to fill segments
into, and areas under a series with unknown stretches left blank."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPainter, QPainterPath
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


def fill_known_runs(painter: QPainter, px: np.ndarray, py: np.ndarray, bottom: float,
                    color: QColor) -> None:
    """Fill the area under (``px``, ``py``) down to ``bottom``, one region per run of
    finite ``py``: an unknown stretch stays blank, never drawn as zero."""
    known = np.isfinite(py)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], known.astype(np.int8), [0]))))
    for start, stop in zip(edges[::2], edges[1::2]):
        rx = np.concatenate(([px[start]], px[start:stop], [px[stop - 1]]))
        ry = np.concatenate(([bottom], py[start:stop], [bottom]))
        painter.fillPath(pg.arrayToQPath(rx, ry), color)
