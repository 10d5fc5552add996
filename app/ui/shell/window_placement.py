"""The main window on the screen it opens on.

The first start fits the screen's available geometry (the desktop less its
panels), never larger, at the window's preferred size where there is room;
later starts come back at the last size, position and maximised state, moved
onto a screen that still exists and made no larger than it.  Rects here are
the window's inner geometry; a position given to the window is its frame's
(``move``: window managers place the frame's corner where a window asks).
The frame is the window manager's, known only once the window is shown, so
an allowance stands in for it until then and :func:`keep_on_screen` corrects
afterwards.  A :class:`WindowPlacement` holds the frame's corner and the
inner size.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

from app.ui.settings.values import WindowPlacement

#: The window's size on a screen with room for it.
PREFERRED_SIZE = QSize(1280, 860)
#: A title bar and borders, until the window manager says what its frame is.
FRAME_ALLOWANCE = QMargins(4, 32, 4, 4)
#: After showing, how long the window manager gets to frame the window.
SETTLE_MS = 400


def _inside(inner: QRect, frame: QMargins, available: QRect) -> QRect:
    """``inner`` made no larger than ``available`` less ``frame`` and moved so
    that inner plus frame lies within ``available``."""
    room = available.marginsRemoved(frame)
    width = max(1, min(inner.width(), room.width()))
    height = max(1, min(inner.height(), room.height()))
    x = min(max(inner.x(), room.left()), room.left() + room.width() - width)
    y = min(max(inner.y(), room.top()), room.top() + room.height() - height)
    return QRect(x, y, width, height)


def first_rect(available: QRect, preferred: QSize = PREFERRED_SIZE,
               frame: QMargins = FRAME_ALLOWANCE) -> QRect:
    """The first start: ``preferred`` where it fits, else the available room;
    centred in ``available``."""
    room = available.marginsRemoved(frame)
    width, height = min(preferred.width(), room.width()), min(preferred.height(), room.height())
    centred = QRect(0, 0, width, height)
    centred.moveCenter(room.center())
    return _inside(centred, frame, available)


def restored_rect(saved: WindowPlacement, screens: Sequence[QRect], primary: QRect,
                  frame: QMargins = FRAME_ALLOWANCE) -> QRect:
    """The last inner rect, on the screen it overlaps most (the primary one
    when it overlaps none: that screen is gone), clamped to that screen."""
    rect = QRect(saved.x + frame.left(), saved.y + frame.top(), saved.width, saved.height)
    best, overlap = primary, 0
    for available in screens:
        common = available.intersected(rect.marginsAdded(frame))
        area = common.width() * common.height() if not common.isEmpty() else 0
        if area > overlap:
            best, overlap = available, area
    return _inside(rect, frame, best)


def _screens() -> tuple[list[QRect], QRect]:
    screens = [s.availableGeometry() for s in QGuiApplication.screens()]
    primary = QGuiApplication.primaryScreen()
    main = primary.availableGeometry() if primary is not None else (
        screens[0] if screens else QRect(0, 0, PREFERRED_SIZE.width(), PREFERRED_SIZE.height()))
    return screens, main


def place(window: QWidget, saved: WindowPlacement) -> None:
    """Give ``window`` its first or restored geometry (before it is shown)."""
    screens, primary = _screens()
    rect = restored_rect(saved, screens, primary) if saved.placed else first_rect(primary)
    _apply(window, rect, FRAME_ALLOWANCE)


def _apply(window: QWidget, inner: QRect, frame: QMargins) -> None:
    window.resize(inner.size())
    window.move(inner.x() - frame.left(), inner.y() - frame.top())


def show_placed(window: QWidget, saved: WindowPlacement) -> None:
    """Place and show ``window`` (maximised if it was), then keep its frame on
    its screen once the window manager has framed it."""
    place(window, saved)
    if saved.placed and saved.maximised:
        window.showMaximized()
    else:
        window.show()
    refit = not saved.placed
    QTimer.singleShot(SETTLE_MS, window, lambda: keep_on_screen(window, refit))


def keep_on_screen(window: QWidget, refit: bool = False) -> None:
    """Shrink and move a shown, normal window whose frame passes its screen's
    available geometry (a frame taller than the allowance, a panel that took
    room); ``refit`` (the first start): fit it again with the real frame, so it
    fills the room the allowance left."""
    if not window.isVisible() or window.isMaximized() or window.isFullScreen():
        return
    screen = window.screen()
    if screen is None:
        return
    available = screen.availableGeometry()
    frame_rect, inner = window.frameGeometry(), window.geometry()
    frame = QMargins(inner.left() - frame_rect.left(), inner.top() - frame_rect.top(),
                     frame_rect.right() - inner.right(), frame_rect.bottom() - inner.bottom())
    if refit:
        _apply(window, first_rect(available, PREFERRED_SIZE, frame), frame)
    elif not available.contains(frame_rect):
        _apply(window, _inside(inner, frame, available), frame)


def remember(window: QWidget, before: WindowPlacement | None = None) -> WindowPlacement:
    """Where ``window`` is now, to be restored next start: maximised, its normal
    geometry (so un-maximising gives back the size it had), or ``before``'s
    where the platform never gave it one (shown maximised from the start)."""
    maximised = window.isMaximized()
    if maximised:
        inner = window.normalGeometry()
        corner = inner.topLeft() - QPoint(FRAME_ALLOWANCE.left(), FRAME_ALLOWANCE.top())
    else:
        inner, corner = window.geometry(), window.pos()
    if inner.width() <= 0 or inner.height() <= 0:
        kept = before or WindowPlacement()
        return WindowPlacement(kept.x, kept.y, kept.width, kept.height,
                               maximised and kept.placed)
    return WindowPlacement(corner.x(), corner.y(), inner.width(), inner.height(),
                           maximised).normalised()


__all__ = ["first_rect", "keep_on_screen", "place", "remember", "restored_rect",
           "show_placed", "PREFERRED_SIZE"]
