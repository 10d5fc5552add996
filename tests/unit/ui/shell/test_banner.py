"""The banner's own layout: titles wrap, buttons never cover text, and its height
follows its text, so a layout can give it the room it needs."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QPushButton, QVBoxLayout, QWidget

from app.ui.shell.banner import AlertBanner

TITLE = ("Auto-unload freed 1.8 GiB from 2 models in ipykernel_launcher (18822) "
         "(at 14:03)")
BODY = ("pipe.text_encoder (235 MiB), pipe.unet (1.6 GiB): GPU 0 reached 90 % (the "
        "threshold is 90 %). They had been idle for 2 h 17 min and went to host memory; "
        "they reload on their next use, or now.")
ACTIONS = [("Reload now", lambda: None), ("Turn off auto-unload", lambda: None)]


@pytest.fixture
def banner(qtbot):
    banner = AlertBanner()
    qtbot.addWidget(banner)
    banner.show_actions(TITLE, BODY, ACTIONS, kind="alert")
    return banner


def at_width(banner: AlertBanner, width: int) -> None:
    banner.resize(width, banner.heightForWidth(width))


def text_rects(banner: AlertBanner) -> list[QRect]:
    return [banner.title.geometry(), banner.body.geometry()]


@pytest.mark.parametrize("width", [1200, 860, 640, 480, 360, 240])
def test_text_and_buttons_never_overlap_and_the_whole_title_shows(banner, width):
    at_width(banner, width)
    buttons = banner.buttons()
    assert [b.text() for b in buttons] == ["Reload now", "Turn off auto-unload", "Dismiss"]
    inside = banner.frame.rect()
    for rect in text_rects(banner):
        assert inside.contains(rect)
        for button in buttons:
            assert not rect.intersects(button.geometry()), (width, button.text())
    for i, button in enumerate(buttons):
        assert inside.contains(button.geometry()) or button.width() == inside.width()
        for other in buttons[i + 1:]:
            assert not button.geometry().intersects(other.geometry())
    # Tall enough for every wrapped line: nothing is cut.
    for label in (banner.title, banner.body):
        assert label.height() >= label.heightForWidth(label.width())
    assert banner.title.wordWrap()


def test_buttons_go_under_the_text_when_beside_it_the_text_would_be_a_sliver(banner):
    wide, narrow = banner.arrangement(900), banner.arrangement(420)
    assert wide.beside and not narrow.beside
    assert wide.title.width() >= banner.TEXT_COLUMN_CHARS * \
        banner.body.fontMetrics().averageCharWidth()
    left, _top, right, _bottom = banner.PADDING
    assert narrow.title.width() == 420 - left - right  # the whole width for the text
    assert min(r.top() for r in narrow.buttons) > narrow.body.bottom()
    # Right-aligned: the last button (Dismiss) ends where the text column ends.
    assert narrow.buttons[-1].right() == narrow.title.right()


def test_buttons_wrap_into_rows_when_one_row_is_too_wide(banner):
    narrow = banner.arrangement(240)
    tops = sorted({r.top() for r in narrow.buttons})
    assert len(tops) > 1
    for rect in narrow.buttons:
        assert rect.right() <= 240


def test_height_follows_the_wrapped_text(banner, qtbot):
    heights = [banner.heightForWidth(w) for w in (1200, 700, 420, 300)]
    assert heights == sorted(heights) and heights[-1] > heights[0]
    one_line = AlertBanner()
    qtbot.addWidget(one_line)
    one_line.show_message("GPU 0 at 93 %", "", kind="alert")
    assert one_line.heightForWidth(700) < banner.heightForWidth(700)
    longer = AlertBanner()
    qtbot.addWidget(longer)
    longer.show_actions(TITLE, BODY + " " + BODY, ACTIONS)
    assert longer.heightForWidth(700) > banner.heightForWidth(700)
    # Its hints follow the width it has, not Qt's height-for-width: a window whose
    # layout held such an item would take preferred heights as its minimum.
    assert not banner.hasHeightForWidth()
    hint = banner.sizeHint()
    assert hint.height() == banner.heightForWidth(max(banner.width(), hint.width()))


def test_in_a_layout_it_takes_its_room_and_pushes_the_rest_down(qtbot):
    page = QWidget()
    lay = QVBoxLayout(page)
    lay.setContentsMargins(0, 0, 0, 0)
    banner = AlertBanner(page)
    lay.addWidget(banner)
    below = QPushButton("A table row", page)
    lay.addWidget(below)
    lay.addStretch(1)
    qtbot.addWidget(page)
    page.resize(900, 600)
    page.show()
    qtbot.waitExposed(page)
    empty_top = below.y()
    banner.show_actions(TITLE, BODY, ACTIONS, kind="alert")
    assert not banner.overlay()

    def settled(width: int) -> None:
        page.resize(width, 600)
        qtbot.waitUntil(lambda: banner.width() == width
                        and banner.height() == banner.heightForWidth(width))

    settled(900)
    assert below.y() > empty_top
    assert not banner.geometry().intersects(below.geometry())
    wide_h = banner.height()
    settled(420)
    assert banner.height() > wide_h  # more lines: more room taken
    assert not banner.geometry().intersects(below.geometry())
    banner.close_button.click()
    qtbot.waitUntil(lambda: below.y() == empty_top)  # gone: its room comes back
