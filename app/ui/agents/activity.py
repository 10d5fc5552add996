"""The Activity log: model unloads/reloads and the auto-unload policy's decisions.

Newest first, bounded; one row per entry, added only when something happens
(nothing per snapshot).  An entry of a remote host names it ("gpu1: train.py
(1234)"), as the status bar's line does ("gpu1: Unloaded …").
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.units import NA, fmt_bytes
from app.ui.style import palette as pal
from app.ui.style.tables import flat_list
from app.ui.style.text import plain_tip

ACTIVITY_COLUMNS = ("Time", "Process", "Model", "Event", "Reason", "Freed", "Took",
                    "Details")
(ACOL_TIME, ACOL_PROCESS, ACOL_MODEL, ACOL_EVENT, ACOL_REASON, ACOL_RELEASED,
 ACOL_TOOK, ACOL_DETAILS) = range(len(ACTIVITY_COLUMNS))

_REASONS = {"manual": "by hand", "idle": "idle timer (agent)", "pressure": "memory pressure",
            "forward": "used again"}


def reason_text(reason: str | None) -> str:
    return _REASONS.get(reason or "", reason or NA)


def on_host(host: str, text: str) -> str:
    """``text`` as said of remote host ``host`` ("gpu1: Unloaded …"); as is for this
    machine ("") or an empty text."""
    return f"{host}: {text}" if host and text else text


@dataclass(frozen=True, slots=True)
class ActivityEntry:
    time: float  # epoch seconds
    process: str
    model: str
    event: str  # "Unloaded → CPU", "Reloaded", "Decided: unload", "Refused: training mode"
    reason: str = ""
    released: int | None = None  # bytes freed: the model's own share (ActionFigures.own)
    seconds: float | None = None
    detail: str = ""  # tooltip
    error: bool = False
    kind: str = "event"  # "event", "decision", "refusal", "setting"
    #: (host, pid, seq) of a model event (see ActivityLog.update); an OOM report's own key.
    key: tuple[str, int, int] | None = None


class ActivityLog(QWidget):
    def __init__(self, parent: QWidget | None = None, limit: int = 500) -> None:
        super().__init__(parent)
        self.limit = limit
        self.entries: list[ActivityEntry] = []  # newest first
        self._counts: dict[int, int] = {}
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.tree = flat_list(self, "activityLog", ACTIVITY_COLUMNS)
        self.tree.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        header = self.tree.header()
        header.setStretchLastSection(True)
        fm = self.fontMetrics()
        for col, sample in ((ACOL_TIME, "00:00:00"),
                            (ACOL_PROCESS, "serve_embeddings.py (00000)"),
                            (ACOL_MODEL, "pipe.text_encoder"),
                            (ACOL_EVENT, "GPU 0: nothing to unload"),
                            (ACOL_REASON, "memory pressure"), (ACOL_RELEASED, "000.0 MiB"),
                            (ACOL_TOOK, "00.0 s")):
            header.resizeSection(col, fm.horizontalAdvance(sample) + 28)
        self.tree.headerItem().setTextAlignment(
            ACOL_RELEASED, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.tree.headerItem().setToolTip(
            ACOL_RELEASED, "What an unload gave back to the driver for that model: the part of "
            "the allocator's release its weights account for (cache the process held before "
            "is in the details, not credited to the model)")
        lay.addWidget(self.tree)
        self.placeholder = QTreeWidgetItem(["", "", "", "Nothing yet", "", "", "",
                                            "Model unloads and reloads, and the auto-unload "
                                            "policy's decisions, are listed here."])
        for c in (ACOL_EVENT, ACOL_DETAILS):
            self.placeholder.setForeground(c, pal.muted(self.palette()))
        self.tree.addTopLevelItem(self.placeholder)

    def add(self, entry: ActivityEntry, coalesce: bool = False) -> None:
        """Add ``entry`` on top.  ``coalesce``: when the newest row is the same kind of
        entry (same process, model and event), update it and count instead (a policy
        saying "deferred" again and again is one row, "×12")."""
        if coalesce and self.entries and self._repeats(self.entries[0], entry):
            self._bump(entry)
            return
        if self.placeholder is not None:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(self.placeholder))
            self.placeholder = None
        self.entries.insert(0, entry)
        took = NA if entry.seconds is None else (
            f"{entry.seconds * 1000:.0f} ms" if entry.seconds < 0.1 else f"{entry.seconds:.1f} s")
        item = QTreeWidgetItem([
            time.strftime("%H:%M:%S", time.localtime(entry.time)), entry.process, entry.model,
            entry.event, entry.reason,
            "" if entry.released is None else fmt_bytes(entry.released),
            "" if entry.seconds is None else took, entry.detail.replace("\n", " ")])
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        item.setTextAlignment(ACOL_RELEASED, right)
        item.setTextAlignment(ACOL_TOOK, right)
        tip = plain_tip(entry.detail or entry.event)  # names processes and models
        for c in range(len(ACTIVITY_COLUMNS)):
            item.setToolTip(c, tip)
        item.setForeground(ACOL_DETAILS, pal.muted(self.palette()))
        if entry.error:
            item.setForeground(ACOL_EVENT, QColor(pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]))
        elif entry.kind in ("decision", "setting"):
            item.setForeground(ACOL_EVENT, pal.muted(self.palette()))
        self.tree.insertTopLevelItem(0, item)
        self._counts = {}  # repeat count of the top row (see coalesce)
        while len(self.entries) > self.limit:
            self.entries.pop()
            self.tree.takeTopLevelItem(self.tree.topLevelItemCount() - 1)

    def update(self, key: tuple[str, int, int], detail: str) -> bool:
        """A logged model event's details, now complete (its action was measured);
        False when no row has that key."""
        for i, entry in enumerate(self.entries):
            if entry.key != key:
                continue
            self.entries[i] = dataclasses.replace(entry, detail=detail)
            item = self.tree.topLevelItem(i)  # rows are the entries, in order
            if item is not None:
                item.setText(ACOL_DETAILS, detail.replace("\n", " "))
                for c in range(len(ACTIVITY_COLUMNS)):
                    item.setToolTip(c, plain_tip(detail))
            return True
        return False

    @staticmethod
    def _repeats(a: ActivityEntry, b: ActivityEntry) -> bool:
        return (a.kind, a.process, a.model, a.event) == (b.kind, b.process, b.model, b.event)

    def _bump(self, entry: ActivityEntry) -> None:
        item = self.tree.topLevelItem(0)
        if item is None:
            return
        self._counts[0] = self._counts.get(0, 1) + 1
        self.entries[0] = entry
        item.setText(ACOL_TIME, time.strftime("%H:%M:%S", time.localtime(entry.time)))
        item.setText(ACOL_EVENT, f"{entry.event} (×{self._counts[0]})")
        item.setText(ACOL_DETAILS, entry.detail.replace("\n", " "))
        for c in range(len(ACTIVITY_COLUMNS)):
            item.setToolTip(c, plain_tip(entry.detail or entry.event))

    def rows(self) -> list[list[str]]:
        """Texts of every row, newest first (tests, copying)."""
        out = []
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is self.placeholder:
                continue
            out.append([item.text(c) for c in range(len(ACTIVITY_COLUMNS))])
        return out


__all__ = ["ActivityEntry", "ActivityLog", "on_host", "reason_text"]
