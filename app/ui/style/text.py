"""Text that must fit, and text that must stay text.

Fitting: eliding labels without losing what identifies them.

Staying text: a QLabel, a tooltip and an item's ToolTipRole take a string
that looks like HTML as HTML.  Names and words that come from elsewhere (a
host, a server, a process's name, command or user, a reason, an error) are
other people's: another user of a shared GPU server names their process
``python <img src=...>``.  Such a label is :func:`plain_label`, such a
tooltip :func:`plain_tip`.
"""

from __future__ import annotations

import html
from typing import TypeVar

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel

_Label = TypeVar("_Label", bound=QLabel)


def plain_label(label: _Label) -> _Label:
    """``label``, showing its text as it is, whatever it looks like."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_tip(text: str) -> str:
    """A tooltip that shows ``text`` as it is: escaped, its line breaks and
    spaces kept and its lines unwrapped, as Qt shows a plain one.  Text with
    no ``<`` and no ``&lt;`` is not taken for HTML (``Qt::mightBeRichText``)
    and is returned unchanged."""
    if "<" not in text and "&lt;" not in text:
        return text
    return f'<qt style="white-space:pre">{html.escape(text, quote=False)}</qt>'


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
