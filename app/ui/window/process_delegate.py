"""Paints the process table's cells straight from their row objects.

Qt's own delegate asks the model for every cell's text, font, alignment, colour,
icon and more: a dozen crossings from C++ into Python per cell on every repaint,
most of the table's cost at 4 Hz.  This delegate makes one: it takes the cell's
row object (its texts formatted once a row,
:meth:`~app.ui.window.process_rows.ProcessRow.shown`) and draws the selection,
the icon and the text the way the style's item view does: the same text, elided
at the right, muted where the value is unknown, the highlighted text colour when
selected.  Laid-out texts are kept (``QStaticText``, plain text: names and
commands are their owners' words), so an unchanged cell is not laid out again.
The model still answers every role (filtering, tooltips, tests); only painting
comes here.
"""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRect, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QIcon,
    QPainter,
    QPalette,
    QRegion,
    QStaticText,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionFocusRect,
    QStyleOptionViewItem,
    QTableView,
)

from app.ui.style import palette as pal
from app.ui.window.process_model import ProcessSortProxy, ProcessTableModel
from app.ui.window.process_rows import (
    COL_AGENT,
    COL_COMMAND,
    COLUMNS,
    NUMERIC,
    ProcessRow,
    UnattributedRow,
    agent_icon,
    swatch_icon,
)

_State = QStyle.StateFlag
_SELECTED = _State.State_Selected.value
_ENABLED = _State.State_Enabled.value
_ACTIVE = _State.State_Active.value
_FOCUS = _State.State_HasFocus.value
_ALTERNATE = QStyleOptionViewItem.ViewItemFeature.Alternate
_RIGHT = tuple(col in NUMERIC for col in range(len(COLUMNS)))
#: Laid-out texts kept (text, italic) before the cache starts again.
_TEXTS_KEPT = 2048


class _Looks(NamedTuple):
    """What every cell of one paint shares."""

    plain: tuple[QFont, QFontMetrics]
    italic: tuple[QFont, QFontMetrics]
    text: QColor
    muted: QColor  # an unknown figure, an ended process
    selected: QColor
    margin: int  # px each side of a cell's text, and of its icon
    icon_room: int  # px an icon and its margins take


class ProcessRowDelegate(QStyledItemDelegate):
    """Paints a row from its row object in one call (:meth:`paint_rows`, the view's
    paint event), or one cell (:meth:`paint`, Qt's delegate call): no ``data()`` role
    is asked on the way."""

    def __init__(self, view: QAbstractItemView, model: ProcessTableModel,
                 proxy: ProcessSortProxy) -> None:
        super().__init__(view)
        self._view = view
        self._model = model
        self._proxy = proxy
        self._texts: dict[tuple[str, bool], tuple[QStaticText, float]] = {}
        self._elided: dict[tuple[str, bool, int], str] = {}
        self._fonts: dict[bool, tuple[QFont, QFontMetrics]] = {}
        self._colors: dict[tuple[int, int], QColor] = {}  # (palette key, kind) -> colour
        self._margin: int | None = None

    def paint_rows(self, view: QTableView, painter: QPainter, region: QRegion) -> None:
        """Every row of ``region`` (viewport pixels), each from its row object: its
        background as the style draws an item view's row (alternate colour, the
        selection), then its cells.  The view's own painting, cell by cell, asks the
        model and the style a dozen things a cell."""
        count = self._proxy.rowCount()
        if not count:
            return
        option = QStyleOptionViewItem()
        view.initViewItemOption(option)
        columns = [(c, view.columnViewportPosition(c), view.columnWidth(c))
                   for c in range(len(COLUMNS)) if not view.isColumnHidden(c)]
        height = view.rowHeight(0)  # every row is as high (one line a row)
        first_y = view.rowViewportPosition(0)
        current = view.currentIndex()
        focused = current.isValid() and (view.hasFocus() or view.viewport().hasFocus())
        focus = (current.row(), current.column()) if focused else None
        selection = view.selectionModel()
        alternate = view.alternatingRowColors()
        style = view.style()
        base_state = option.state
        looks = self._looks(option)
        done: set[tuple[int, int]] = set()
        several = region.rectCount() > 1  # cells on the edges of two rects: painted once
        for rect in region:
            top = max(0, (rect.top() - first_y) // height)
            bottom = min(count - 1, (rect.bottom() - first_y) // height)
            cells = [(c, x, w) for c, x, w in columns
                     if x < rect.right() + 1 and x + w > rect.left()]
            if not cells or top > bottom:
                continue
            left = cells[0][1]
            right = cells[-1][1] + cells[-1][2]
            for r in range(top, bottom + 1):
                y = first_y + r * height
                selected = selection.isRowSelected(r)
                option.state = base_state | _State.State_Selected if selected else base_state
                if alternate:
                    option.features = (option.features | _ALTERNATE if r & 1
                                       else option.features & ~_ALTERNATE)
                option.rect = QRect(left, y, right - left, height)
                style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewRow, option,
                                    painter, view)
                if selected:
                    style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, option,
                                        painter, view)
                row = self._model.row_at(self._source_row(r))
                shown = row.shown()
                ended = self._model.has_ended(row)
                for c, x, w in cells:
                    if several:
                        if (r, c) in done:
                            continue
                        done.add((r, c))
                    self._cell(painter, looks, row, shown[c], c, x, y, w, height,
                               bool(selected), ended)
                    if focus == (r, c):
                        cell = QStyleOptionViewItem(option)
                        cell.rect = QRect(x, y, w, height)
                        cell.state = option.state | _State.State_HasFocus
                        self._focus(painter, cell)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        """One cell, as Qt's views ask a delegate (the process table paints whole
        rows instead: :meth:`paint_rows`)."""
        row = self._model.row_at(self._source_row(index.row()))
        col = index.column()
        state = option.state.value
        view = self._view
        if state & _SELECTED:  # the row's background (alternate colour) is the view's own
            view.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, option,
                                       painter, view)
        rect = option.rect
        self._cell(painter, self._looks(option), row, row.shown()[col], col, rect.x(),
                   rect.y(), rect.width(), rect.height(), bool(state & _SELECTED),
                   self._model.has_ended(row))
        if state & _FOCUS:
            self._focus(painter, option)

    def _source_row(self, row: int) -> int:
        """The model row of view row ``row``: the same without a filter."""
        proxy = self._proxy
        return proxy.mapToSource(proxy.index(row, 0)).row() if proxy.filtering else row

    def _looks(self, option: QStyleOptionViewItem) -> _Looks:
        """What every cell of one paint shares: fonts, text colours, margins."""
        margin = self._margin
        if margin is None:
            view = self._view
            margin = self._margin = view.style().pixelMetric(
                QStyle.PixelMetric.PM_FocusFrameHMargin, None, view) + 1
        font = option.font
        palette, state = option.palette, option.state.value
        return _Looks(self._font(font, False), self._font(font, True),
                      self._text_color(palette, state, False),
                      self._text_color(palette, state, True),
                      self._text_color(palette, state | _SELECTED, False),
                      margin, option.decorationSize.width() + 2 * margin)

    def _cell(self, painter: QPainter, looks: _Looks, row: ProcessRow | UnattributedRow,
              cell: tuple[str, bool], col: int, x: int, y: int, width: int, height: int,
              selected: bool, ended: bool) -> None:
        """The cell's icon and text, as the style's item view lays them out."""
        text, unknown = cell
        margin = looks.margin
        if col in (COL_AGENT, COL_COMMAND):
            icon = self._icon(row, col, ended)
            if icon is not None:
                room = looks.icon_room
                icon.paint(painter, QRect(x, y, room, height), Qt.AlignmentFlag.AlignCenter,
                           QIcon.Mode.Selected if selected else QIcon.Mode.Normal,
                           QIcon.State.Off)
                x, width = x + room, width - room
        if not text:
            return
        italic = row.proc is None  # a GPU's unattributed memory, not a process
        font, metrics = looks.italic if italic else looks.plain
        width -= 2 * margin
        shown, text_width = self._laid_out(self._elide(text, italic, width, metrics),
                                           italic, font)
        left = x + margin + (width - text_width if _RIGHT[col] else 0)
        painter.setFont(font)
        painter.setPen(looks.selected if selected else
                       looks.muted if unknown or ended else looks.text)
        painter.drawStaticText(QPointF(left, y + (height - metrics.height()) / 2), shown)

    # -- pieces ----------------------------------------------------------------------------
    def _icon(self, row: ProcessRow | UnattributedRow, col: int, ended: bool) -> QIcon | None:
        if col == COL_AGENT:
            return agent_icon() if row.agent is not None and not ended else None
        if col == COL_COMMAND and self._model.has_colors:
            return swatch_icon(self._model.color_of(row))
        return None

    def _text_color(self, palette: QPalette, state: int, muted: bool) -> QColor:
        """As the style's item view: the highlighted text when selected, else the
        model's foreground (muted: unknown or ended) or the palette's text."""
        selected = bool(state & _SELECTED)
        kind = (2 if selected else 1 if muted else 0) + (
            0 if not state & _ENABLED else 4 if state & _ACTIVE else 8)
        key = (palette.cacheKey(), kind)
        color = self._colors.get(key)
        if color is None:
            if len(self._colors) > 64:
                self._colors.clear()
            group = (QPalette.ColorGroup.Disabled if not state & _ENABLED
                     else QPalette.ColorGroup.Normal if state & _ACTIVE
                     else QPalette.ColorGroup.Inactive)
            if selected:
                color = palette.color(group, QPalette.ColorRole.HighlightedText)
            elif muted:
                color = pal.muted(QGuiApplication.palette())
            else:
                color = palette.color(group, QPalette.ColorRole.Text)
            self._colors[key] = color
        return color

    def _font(self, font: QFont, italic: bool) -> tuple[QFont, QFontMetrics]:
        """The view's font (italic: the model's font of unattributed rows) and its
        metrics, measured once until :meth:`fonts_changed`."""
        known = self._fonts.get(italic)
        if known is None:
            shown = QFont(self._model.unattributed_font) if italic else QFont(font)
            known = self._fonts[italic] = (shown, QFontMetrics(shown))
        return known

    def _elide(self, text: str, italic: bool, width: int, metrics: QFontMetrics) -> str:
        key = (text, italic, width)
        shown = self._elided.get(key)
        if shown is None:
            if len(self._elided) >= _TEXTS_KEPT:
                self._elided.clear()
            shown = self._elided[key] = metrics.elidedText(text, Qt.TextElideMode.ElideRight,
                                                           width)
        return shown

    def _laid_out(self, text: str, italic: bool, font: QFont) -> tuple[QStaticText, float]:
        key = (text, italic)
        known = self._texts.get(key)
        if known is None:
            if len(self._texts) >= _TEXTS_KEPT:
                self._texts.clear()
            static = QStaticText(text)
            static.setTextFormat(Qt.TextFormat.PlainText)  # never rich text
            static.prepare(font=font)
            known = self._texts[key] = (static, static.size().width())
        return known

    def _focus(self, painter: QPainter, option: QStyleOptionViewItem) -> None:
        """The current cell's focus frame, as the style's item view draws it."""
        focus = QStyleOptionFocusRect()
        focus.rect = option.rect
        focus.state = option.state | _State.State_KeyboardFocusChange | _State.State_Item
        focus.palette = option.palette
        focus.backgroundColor = option.palette.color(
            QPalette.ColorRole.Highlight if option.state.value & _SELECTED
            else QPalette.ColorRole.Window)
        view = self._view
        view.style().drawPrimitive(QStyle.PrimitiveElement.PE_FrameFocusRect, focus, painter, view)

    def fonts_changed(self) -> None:
        """The view's font or style changed: measure, elide and lay out again."""
        self._fonts.clear()
        self._elided.clear()
        self._texts.clear()
        self._colors.clear()
        self._margin = None


__all__ = ["ProcessRowDelegate"]
