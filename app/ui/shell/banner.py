"""The in-window banner: the last resort for alerts, and one-time hints.

Its title and body wrap; its buttons sit beside the text while the text keeps a
readable column, under it (right-aligned, in as many rows as they need) when the
banner is narrow; they never cover a word.  :meth:`AlertBanner.heightForWidth`
is the height that shows all of it at a width, so a layout gives a banner the
room its text needs.  A banner in no layout is an overlay instead: it follows
its parent's width and stacks up from the bottom edge with its siblings.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QFrame, QLabel, QLayout, QPushButton, QSizePolicy, QWidget

from app.core.policies.alerts import Alert
from app.ui.style import palette as pal
from app.ui.style.text import plain_label


@dataclass(frozen=True, slots=True)
class BannerGeometry:
    """Where a banner's parts go at one width (frame coordinates), and its height."""

    title: QRect
    body: QRect | None
    buttons: tuple[QRect, ...]  # in the order of AlertBanner.buttons()
    height: int
    beside: bool  # buttons beside the text (else under it)


def _in_layout(layout: QLayout, widget: QWidget) -> bool:
    for i in range(layout.count()):
        item = layout.itemAt(i)
        if item.widget() is widget:
            return True
        sub = item.layout()
        if sub is not None and _in_layout(sub, widget):
            return True
    return False


class AlertBanner(QWidget):
    """A framed message with a bold title, a body and buttons (Dismiss at the end).

    :meth:`retract` hides it when what it says no longer holds; Dismiss hides it
    at once."""

    free_requested = Signal(str)  # display id ("" = every GPU)
    dismissed = Signal()

    #: As an overlay: the gap to the parent's bottom and sides, and between two banners.
    MARGIN = 10
    #: As an overlay: the widest a banner gets (centred in a wider window).
    MAX_WIDTH = 860
    #: Inside the frame (its 1 px border included): left, top, right, bottom.
    PADDING = (12, 8, 8, 8)
    #: Between the text and the buttons, and between two buttons.
    GAP = 8
    #: Between the title and the body.
    LINE_GAP = 2
    #: The narrowest text column kept beside the buttons, in average characters;
    #: narrower, the buttons go under the text.
    TEXT_COLUMN_CHARS = 32

    _made = itertools.count()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._order = next(self._made)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.frame = QFrame(self)
        self.frame.setObjectName("alertBanner")
        self.frame.setFrameShape(QFrame.Shape.StyledPanel)
        # An alert names hosts, GPUs, processes and models.
        self.title = plain_label(QLabel("", self.frame))
        self.title.setObjectName("bannerTitle")
        self.title.setWordWrap(True)
        f = self.title.font()
        f.setBold(True)
        self.title.setFont(f)
        self.body = plain_label(QLabel("", self.frame))
        self.body.setWordWrap(True)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.free_button = QPushButton("Free caches", self.frame)
        self.free_button.clicked.connect(lambda: self.free_requested.emit(self._display_id))
        self.close_button = QPushButton("Dismiss", self.frame)
        self.close_button.clicked.connect(self._dismiss)
        for button in (self.free_button, self.close_button):
            button.installEventFilter(self)  # shown or hidden: the others move
        self._display_id = ""
        self.kind = ""
        #: The alert shown (None: a hint, or nothing).
        self.alert: Alert | None = None
        self._action_buttons: list[QPushButton] = []  # show_actions' own, until the next
        self.hide()
        if parent is not None:
            parent.installEventFilter(self)

    # -- what it says -----------------------------------------------------------------------
    def show_message(self, title: str, body: str, kind: str = "alert",
                     free_display_id: str | None = None, alert: Alert | None = None) -> None:
        """``free_display_id`` not None: offer "Free caches" for that GPU ("" = all);
        ``alert``: the alert this message tells of (see :attr:`alert`)."""
        self.kind = kind
        self.alert = alert
        self._drop_actions()
        self.title.setText(title)
        self.body.setText(body)
        self.body.setVisible(bool(body))
        self._display_id = free_display_id or ""
        self.free_button.setVisible(free_display_id is not None)
        self._style()
        self.show()
        self._relayout()

    def retract(self) -> None:
        """Hide: what the banner says no longer holds."""
        self.alert = None
        self.hide()

    def _dismiss(self) -> None:
        self.retract()
        self.dismissed.emit()

    def show_actions(self, title: str, body: str,
                     actions: Sequence[tuple[str, Callable[[], None]]],
                     kind: str = "hint", alert: Alert | None = None) -> None:
        """A message with buttons of its own, before Dismiss: (label, what a click
        does); a click also hides the banner.  The next message drops them."""
        self.show_message(title, body, kind, alert=alert)
        for label, run in actions:
            button = QPushButton(label, self.frame)
            button.clicked.connect(lambda *_args, run=run: run())
            button.clicked.connect(self._dismiss)
            button.show()
            self._action_buttons.append(button)
        self._relayout()

    def action_labels(self) -> list[str]:
        """The labels of :meth:`show_actions`' buttons shown now."""
        return [b.text() for b in self._action_buttons]

    def buttons(self) -> list[QPushButton]:
        """The buttons shown, in their order: Free caches, the actions, Dismiss."""
        return [b for b in (self.free_button, *self._action_buttons, self.close_button)
                if not b.isHidden()]

    def _drop_actions(self) -> None:
        for button in self._action_buttons:
            button.hide()
            button.deleteLater()
        self._action_buttons.clear()

    def _style(self) -> None:
        # Opaque: the content under an overlay must not show through its text.
        level = {"alert": pal.LEVEL_CRITICAL, "warning": pal.LEVEL_WARNING}.get(
            self.kind, pal.LEVEL_NORMAL)
        edge = QColor(pal.LEVEL_COLORS[level])
        base = self.palette().color(QPalette.ColorRole.Window)
        fill = pal.blend(base, edge, 0.16 if self.kind in ("alert", "warning") else 0.12)
        self.frame.setStyleSheet(
            "QFrame#alertBanner { border-radius: 6px; border: 1px solid %s; background: %s; }"
            % (pal.hex_color(edge), pal.hex_color(fill)))

    # -- size -------------------------------------------------------------------------------
    def arrangement(self, width: int) -> BannerGeometry:
        """Where the title, body and buttons go at ``width``: the buttons beside the
        text while it keeps :attr:`TEXT_COLUMN_CHARS` characters, else under it."""
        left, top, right, bottom = self.PADDING
        inner = max(1, width - left - right)
        hints = [b.sizeHint() for b in self.buttons()]
        row_w = sum(h.width() for h in hints) + self.GAP * max(0, len(hints) - 1)
        button_h = max((h.height() for h in hints), default=0)
        column = self.TEXT_COLUMN_CHARS * self.body.fontMetrics().averageCharWidth()
        beside = not hints or inner - row_w - self.GAP >= column
        text_w = inner - row_w - self.GAP if hints and beside else inner
        title_h = self.title.heightForWidth(text_w)
        body_h = self.body.heightForWidth(text_w) if self.body.text() else 0
        text_h = title_h + (self.LINE_GAP + body_h if body_h else 0)
        buttons: list[QRect] = []
        if beside:
            content_h = max(text_h, button_h)
            text_y = top + (content_h - text_h) // 2
            x = left + inner
            for hint in reversed(hints):
                x -= hint.width()
                buttons.append(QRect(x, top + (content_h - hint.height()) // 2,
                                     hint.width(), hint.height()))
                x -= self.GAP
            buttons.reverse()
        else:
            text_y = top
            content_h = text_h + self.GAP + self._flow(hints, inner, left, top + text_h
                                                       + self.GAP, buttons)
        title = QRect(left, text_y, text_w, title_h)
        body = QRect(left, text_y + title_h + self.LINE_GAP, text_w, body_h) if body_h else None
        return BannerGeometry(title, body, tuple(buttons), content_h + top + bottom, beside)

    def _flow(self, hints: list[QSize], inner: int, left: int, y0: int,
              out: list[QRect]) -> int:
        """Buttons in right-aligned rows under the text, from ``y0``; returns the
        rows' height."""
        rows: list[list[QSize]] = [[]]
        used = 0
        for hint in hints:
            w = min(hint.width(), inner)
            if rows[-1] and used + self.GAP + w > inner:
                rows.append([])
                used = 0
            used += (self.GAP if rows[-1] else 0) + w
            rows[-1].append(QSize(w, hint.height()))
        y = y0
        for row in rows:
            x = left + inner - sum(h.width() for h in row) - self.GAP * (len(row) - 1)
            row_h = max(h.height() for h in row)
            for hint in row:
                out.append(QRect(x, y + (row_h - hint.height()) // 2, hint.width(),
                                 hint.height()))
                x += hint.width() + self.GAP
            y += row_h + self.GAP
        return y - self.GAP - y0

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        # No: a top-level window whose layout has a height-for-width item takes the
        # layout's height for its width, summed from *preferred* heights, as its
        # minimum, and would not fit a laptop's screen.  The banner's hints follow
        # the width it has instead (see resizeEvent).
        return False

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self.arrangement(width).height

    def sizeHint(self) -> QSize:  # noqa: N802
        left, _top, right, _bottom = self.PADDING
        hints = [b.sizeHint().width() + self.GAP for b in self.buttons()]
        natural = left + right + self.title.fontMetrics().horizontalAdvance(
            self.title.text()) + sum(hints)
        width = max(self.minimumSizeHint().width(), min(self.MAX_WIDTH, natural))
        if self.overlay():
            return QSize(width, self.heightForWidth(width))
        return QSize(width, self.heightForWidth(self._laid_width(width)))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        left, _top, right, _bottom = self.PADDING
        widest = max((b.sizeHint().width() for b in self.buttons()), default=0)
        width = left + right + max(widest, 12 * self.body.fontMetrics().averageCharWidth())
        return QSize(width, self.heightForWidth(self._laid_width(width)))

    def _laid_width(self, least: int) -> int:
        """The width the banner's text wraps at: the width it has, or before a layout
        gave it one, its window's (about what it will get).  Never its narrowest:
        a window's minimum would grow by every line the narrowest width wraps, and
        a window does not shrink back on its own."""
        guess = self.window().width() if not self.isVisible() else 0
        return max(least, self.width(), guess)

    def _relayout(self) -> None:
        """The text or the buttons changed: a new height, parts moved."""
        self.updateGeometry()
        self._arrange_parts()
        self._place_all()

    def _arrange_parts(self) -> None:
        self.frame.setGeometry(self.rect())
        geometry = self.arrangement(self.width())
        self.title.setGeometry(geometry.title)
        if geometry.body is not None:
            self.body.setGeometry(geometry.body)
        for button, rect in zip(self.buttons(), geometry.buttons):
            button.setGeometry(rect)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._arrange_parts()
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()  # its minimum height follows its width

    # -- as an overlay ----------------------------------------------------------------------
    def overlay(self) -> bool:
        """True when no layout places the banner: it places itself over its parent."""
        parent = self.parentWidget()
        layout = parent.layout() if parent is not None else None
        return parent is not None and (layout is None or not _in_layout(layout, self))

    def _siblings(self) -> list[AlertBanner]:
        parent = self.parentWidget()
        if parent is None:
            return [self]
        return sorted((w for w in parent.children() if isinstance(w, AlertBanner)),
                      key=lambda b: b._order)

    def _place_all(self) -> None:
        # Stacked up from the bottom edge, the oldest banner lowest: the GPU headers
        # an alert is about stay in sight.
        parent = self.parentWidget()
        y = (parent.height() if parent is not None else 0) - self.MARGIN
        for banner in self._siblings():
            if not banner.isHidden() and banner.overlay():
                y = banner._place(y) - self.MARGIN

    def _place(self, bottom: int) -> int:
        """Put the banner over its parent, ending at ``bottom``, above its siblings;
        returns its top."""
        parent = self.parentWidget()
        if parent is None:
            return bottom - self.height()
        width = max(0, min(self.MAX_WIDTH, parent.width() - 2 * self.MARGIN))
        height = self.heightForWidth(width)
        self.setGeometry((parent.width() - width) // 2, bottom - height, width, height)
        self._arrange_parts()
        self.raise_()
        return bottom - height

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        kind = event.type()
        if obj is self.parentWidget():
            if kind == QEvent.Type.Resize and not self.isHidden():
                self._place_all()
        elif kind in (QEvent.Type.ShowToParent, QEvent.Type.HideToParent):
            self._relayout()  # a button shown or hidden
        return False

    def event(self, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.Show, QEvent.Type.Hide):
            self._place_all()  # the banners under it move
        elif kind in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._relayout()
        elif kind == QEvent.Type.PaletteChange and self.kind:
            self._style()
        return super().event(event)


__all__ = ["AlertBanner", "BannerGeometry"]
