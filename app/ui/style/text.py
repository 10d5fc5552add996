"""Text that must fit: eliding labels without losing what identifies them."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics


def elide_keeping_pid(metrics: QFontMetrics, name: str, width: int) -> str:
    """Shorten "vllm.entrypoints.openai.api_server (9121)" without losing the pid."""
    if metrics.horizontalAdvance(name) <= width:
        return name
    head, sep, pid = name.rpartition(" (")
    if not sep or not pid.endswith(")"):
        return metrics.elidedText(name, Qt.TextElideMode.ElideMiddle, width)
    tail = f" ({pid}"
    room = max(24, width - metrics.horizontalAdvance(tail))
    return metrics.elidedText(head, Qt.TextElideMode.ElideRight, room) + tail
