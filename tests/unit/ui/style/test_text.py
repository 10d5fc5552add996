"""Text from elsewhere stays text: a label shows it as it is, a tooltip shows it
escaped with its line breaks and spaces, and ordinary text is left alone."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import Qt as GuiQt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QLabel

from app.ui.style.text import plain_label, plain_tip

HOSTILE = "python <img src=/etc/x> <b>x</b>  &lt; R&D\nsecond <i>line</i>"


def shown(tip: str) -> str:
    """The text a tooltip shows: Qt takes it for HTML as it does (first line)."""
    doc = QTextDocument()
    if GuiQt.mightBeRichText(tip):
        doc.setHtml(tip)
    else:
        doc.setPlainText(tip)
    return doc.toPlainText()


def test_a_tooltip_shows_markup_literally_with_its_lines_and_spaces(qapp):
    tip = plain_tip(HOSTILE)
    assert "<img" not in tip and "&lt;img src=/etc/x&gt;" in tip
    assert shown(tip) == HOSTILE
    assert shown(HOSTILE) != HOSTILE  # what it would have shown: an image, bold x


def test_ordinary_text_is_left_as_it_is(qapp):
    text = "gpu1:8443: https://gpu1:8443\nconnection refused: is serve up?"
    assert plain_tip(text) == text and shown(text) == text
    assert plain_tip("") == ""
    assert plain_tip("Context & non-PyTorch") == "Context & non-PyTorch"
    assert shown(plain_tip("a < b")) == "a < b"
    assert shown(plain_tip("R&D: &lt;b&gt;")) == "R&D: &lt;b&gt;"  # Qt decodes a bare one


def test_a_plain_label_never_renders_html(qtbot):
    label = plain_label(QLabel())
    qtbot.addWidget(label)
    label.setText(HOSTILE)
    assert label.textFormat() == Qt.TextFormat.PlainText
    assert label.text() == HOSTILE
