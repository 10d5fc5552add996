"""An OOM report, opened: what happened in plain sentences, who held the GPU's
memory at that instant (a bar and a table, in the processes' own colours),
the request against what was free and the largest free block, the batch that
would have fitted (``batch_section``), and the fixes ranked by what they would
give.  Non-modal; "Copy report as JSON" copies the stored form
(``OomReport.to_json``).

The title and the buttons stay put; the body scrolls, so on a small screen no
fix is ever cut off.  It opens as tall as its contents, up to most of the screen.  A remote host's
report names its host in the title, and its fixes act on that host."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPainter, QPen
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.samples import Snapshot
from app.core.units import NA, fmt_bytes, fmt_duration
from app.ui.doctor.batch_section import BatchSection
from app.ui.doctor.fixes import FixList
from app.ui.doctor.texts import verdict_text
from app.ui.style import palette as pal
from app.ui.style.hosts import gpu_text
from app.ui.style.layouts import add_figure
from app.ui.style.tables import Selection, flat_list
from app.ui.style.text import plain_label, plain_tip

HOLDER_COLUMNS = ("Process", "PID", "GPU memory", "Live tensors", "Cache", "Agent",
                  "Idle models")
HCOL_PROCESS, HCOL_PID, HCOL_GPU, HCOL_LIVE, HCOL_CACHE, HCOL_AGENT, HCOL_IDLE = range(
    len(HOLDER_COLUMNS))

ColorOf = Callable[[int], QColor | None]
#: The dialog's widest default, and the share of the screen it may take at most.
DEFAULT_WIDTH = 980
SCREEN_SHARE = 0.9
NO_AGENT_TIP = "No VRAM Steward agent in this process: its allocator figures are unknown"


def figures(report: Any) -> list[tuple[str, str, str]]:
    """(caption, value, tooltip) of the request against what could have served it."""
    cap = report.capture if isinstance(report.capture, dict) else {}
    seg = cap.get("segments") if isinstance(cap.get("segments"), dict) else {}
    free_gpu = cap.get("free")
    if free_gpu is None and report.memory_total is not None and report.memory_used is not None:
        free_gpu = max(0, report.memory_total - report.memory_used)
    return [
        ("Asked for", fmt_bytes(report.request), "The allocation that failed"),
        ("Free on the GPU", fmt_bytes(free_gpu),
         "What the driver had left on the device for anyone"),
        ("Cached in the process", fmt_bytes(seg.get("free")),
         "Reserved by the process's allocator but not in use: reusable by a request "
         "that fits in one block"),
        ("Largest free block", fmt_bytes(seg.get("largest_free_block")),
         "The biggest single free block the allocator held; smaller than the request "
         "means fragmentation explains the failure"),
        ("GPU used / total", f"{fmt_bytes(report.memory_used)} / "
                             f"{fmt_bytes(report.memory_total)}", "NVML at the instant"),
    ]


def explanation_text(report: Any) -> str:
    """The explanation one sentence a line, as a Doctor card lists its evidence."""
    lines = [line for line in report.explanation if line.strip()]
    return "\n".join(f"·  {line}" for line in lines) if lines else "No explanation was made."


def idle_text(holder: Any) -> str:
    parts = []
    for m in holder.idle_models:
        idle = "" if m.idle_s is None else f", idle {fmt_duration(m.idle_s)}"
        parts.append(f"{m.name} ({fmt_bytes(m.bytes)}{idle})")
    return "; ".join(parts)


class HoldersBar(QWidget):
    """The GPU's memory at the OOM: one segment per holder, what no process held,
    the free rest; the request drawn where it would have had to fit."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("holdersBar")
        self.segments: list[tuple[str, int, QColor]] = []
        self.total: int | None = None
        self.used = 0
        self.request: int | None = None
        self.setMinimumHeight(30)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set(self, segments: list[tuple[str, int, QColor]], total: int | None,
            request: int | None) -> None:
        self.segments = segments
        self.used = sum(b for _, b, _ in segments)
        self.total = total if total else None
        self.request = request
        self.setToolTip(plain_tip("\n".join(f"{name}: {fmt_bytes(b)}"
                                            for name, b, _ in segments)))
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(400, 30)

    def paintEvent(self, _event: Any) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(0.5, 4.5, -0.5, -4.5)
        # The scale holds the card and the request past what was used: a request
        # that does not fit shows beyond the card's end (the tick).
        total = self.total or self.used or 1
        scale = max(total, self.used + (self.request or 0), 1)
        card = QRectF(r.left(), r.top(), r.width() * total / scale, r.height())
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(pal.faint(self.palette()))
        p.drawRoundedRect(card, 4, 4)
        x = r.left()
        for _name, size, color in self.segments:
            w = r.width() * size / scale
            p.setBrush(color)
            p.drawRect(QRectF(x, r.top(), max(0.0, w - 1), r.height()))
            x += w
        if self.request:
            w = max(3.0, r.width() * self.request / scale)
            box = QRectF(x + 1, r.top() - 3, min(w, r.right() - x - 2), r.height() + 6)
            pen = QPen(QColor(pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]), 2, Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(box)
        p.setPen(QPen(pal.foreground(self.palette()), 2))
        p.drawLine(card.topRight() + QPointF(0, -4), card.bottomRight() + QPointF(0, 4))
        p.end()


class OomDialog(QDialog):
    """One OomReport, explained (see the module's docstring)."""

    request = Signal(object)  # a typed request a fix sends
    record_requested = Signal(int, str)  # (pid, host): its detail view at "Record allocations"

    def __init__(self, report: Any, parent: QWidget | None = None,
                 color_of: ColorOf | None = None, can_act: bool = True,
                 snapshot: Snapshot | None = None, host: str = "",
                 user: str | None = None) -> None:
        """``snapshot``: the latest of ``host`` ("" this machine), where the report's
        process ran; ``user``: whom that host's server acts for."""
        super().__init__(parent)
        self.setObjectName("oomDialog")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.report = report
        self.host = host
        self._color_of = color_of
        on = f" on {host}" if host else ""
        self.setWindowTitle(f"Out of memory{on} — {report.command or f'pid {report.pid}'}")
        outer = self.outer = QVBoxLayout(self)
        outer.setContentsMargins(18, 14, 18, 12)
        outer.setSpacing(10)

        # The title, the GPU's name and the explanation name processes and models.
        self.title = plain_label(QLabel(f"{host}: {report.title}" if host else report.title,
                                        self))
        self.title.setObjectName("oomTitle")
        self.title.setWordWrap(True)
        tf = self.title.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.25)
        self.title.setFont(tf)
        outer.addWidget(self.title)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(report.time))
        gpu = gpu_text(report.gpu) if report.gpu is not None else "GPU n/a"
        sub = [when, gpu + (f" ({report.gpu_name})" if report.gpu_name else ""),
               f"pid {report.pid}", "cause: " + verdict_text(report.verdict)]
        if report.demo:
            sub.append("simulated by the demo")
        self.subtitle = plain_label(QLabel(" · ".join(sub), self))
        self.subtitle.setObjectName("secondary")
        self.subtitle.setWordWrap(True)
        outer.addWidget(self.subtitle)

        # The body scrolls between the title and the buttons.
        self.body_scroll = QScrollArea(self)
        self.body_scroll.setObjectName("oomScroll")
        self.body_scroll.setWidgetResizable(True)
        self.body_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.body_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.body = QWidget(self.body_scroll)
        self.body.setObjectName("oomBody")
        body = self.body_layout = QVBoxLayout(self.body)
        body.setContentsMargins(0, 0, 6, 0)  # clear of the scroll bar when it shows
        body.setSpacing(10)

        self.explanation = plain_label(QLabel(explanation_text(report), self.body))
        self.explanation.setObjectName("oomExplanation")
        self.explanation.setWordWrap(True)
        self.explanation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        body.addWidget(self.explanation)

        grid = QGridLayout()
        grid.setHorizontalSpacing(24)
        grid.setVerticalSpacing(2)
        self.figure_labels: dict[str, QLabel] = {}
        for col, (caption, value, tip) in enumerate(figures(report)):
            self.figure_labels[caption] = add_figure(grid, col, caption, value, tip,
                                                     self.body)
        grid.setColumnStretch(len(self.figure_labels), 1)
        body.addLayout(grid)

        bhead = QLabel("Who held the GPU's memory at that instant", self.body)
        bf = bhead.font()
        bf.setBold(True)
        bhead.setFont(bf)
        body.addSpacing(4)
        body.addWidget(bhead)
        self.bar = HoldersBar(self.body)
        body.addWidget(self.bar)
        self.bar_legend = QLabel("", self.body)
        self.bar_legend.setObjectName("secondary")
        self.bar_legend.setWordWrap(True)
        body.addWidget(self.bar_legend)
        self.holders = flat_list(self.body, "oomHolders", HOLDER_COLUMNS,
                                 Selection.NoSelection)
        self.holders.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        fm = self.fontMetrics()
        for col, sample in ((HCOL_PROCESS, "serve_embeddings.py (this one)"), (HCOL_PID, "000000"),
                            (HCOL_GPU, "00.0 GiB"), (HCOL_LIVE, "00.0 GiB"),
                            (HCOL_CACHE, "000.0 MiB"), (HCOL_AGENT, "yes")):
            self.holders.header().resizeSection(col, max(
                fm.horizontalAdvance(sample), fm.horizontalAdvance(HOLDER_COLUMNS[col])) + 32)
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for col in (HCOL_PID, HCOL_GPU, HCOL_LIVE, HCOL_CACHE):
            self.holders.headerItem().setTextAlignment(col, right)
        body.addWidget(self.holders)

        self.batch = BatchSection(report, self.body)  # its estimate runs in a child process
        body.addSpacing(4)
        body.addWidget(self.batch)

        fhead = QLabel("Fixes, best first", self.body)
        fhead.setFont(bf)
        body.addSpacing(4)
        body.addWidget(fhead)
        self.fixes = FixList(self.body, host)
        self.fixes.set_fixes(tuple(report.fixes))
        self.fixes.set_can_act(can_act)
        self.fixes.check_terminate(snapshot, user)
        self.fixes.request.connect(self.request)
        self.fixes.record_requested.connect(self.record_requested)
        body.addWidget(self.fixes)
        self.no_fixes = QLabel("No fix could be ranked from the figures.", self.body)
        self.no_fixes.setObjectName("secondary")
        self.no_fixes.setVisible(not report.fixes)
        body.addWidget(self.no_fixes)
        body.addStretch(1)
        self.body_scroll.setWidget(self.body)
        outer.addWidget(self.body_scroll, 1)

        foot = QHBoxLayout()
        self.copied = QLabel("", self)
        self.copied.setObjectName("secondary")
        self.copy_button = QPushButton("Copy report as JSON", self)
        self.copy_button.setObjectName("copyJsonButton")
        self.copy_button.clicked.connect(self.copy_json)
        close = QPushButton("Close", self)
        close.clicked.connect(self.close)
        for b in (self.copy_button, close):
            b.setAutoDefault(False)
        foot.addWidget(self.copied, 1)
        foot.addWidget(self.copy_button)
        foot.addWidget(close)
        outer.addLayout(foot)
        self.setStyleSheet("QScrollArea#oomScroll, QWidget#oomBody { background: transparent; }")
        self._fill_holders()
        self.resize(self.default_size())

    def default_size(self) -> QSize:
        """As wide as :data:`DEFAULT_WIDTH` and as tall as the contents, within
        :data:`SCREEN_SHARE` of the screen's free area (the body scrolls past that)."""
        host = self.parentWidget() or self
        screen = host.screen() or QGuiApplication.primaryScreen()
        avail = screen.availableGeometry() if screen is not None else None
        width = DEFAULT_WIDTH if avail is None else min(
            DEFAULT_WIDTH, int(avail.width() * SCREEN_SHARE))
        outer = self.outer
        inner = width - outer.contentsMargins().left() - outer.contentsMargins().right()
        body_h = self.body_layout.totalHeightForWidth(inner - 2 * self.body_scroll.frameWidth())
        chrome = outer.totalHeightForWidth(width) - self.body_scroll.sizeHint().height()
        height = chrome + body_h + 2 * self.body_scroll.frameWidth() + 4
        if avail is not None:
            height = min(height, int(avail.height() * SCREEN_SHARE))
        return QSize(width, height)

    def _color(self, pid: int, index: int) -> QColor:
        color = self._color_of(pid) if self._color_of is not None else None
        colors = pal.process_colors(self.palette())
        return color if color is not None else QColor(colors[index % len(colors)])

    def _fill_holders(self) -> None:
        r = self.report
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        segments: list[tuple[str, int, QColor]] = []
        for i, h in enumerate(r.holders):
            name = h.command or f"pid {h.pid}"
            color = self._color(h.pid, i)
            # Without an agent the allocator figures are unknown: "n/a", never 0.
            item = QTreeWidgetItem([
                name + (" (this one)" if h.is_oom_process else ""), str(h.pid),
                fmt_bytes(h.gpu_memory), fmt_bytes(h.allocated if h.has_agent else None),
                fmt_bytes(h.cache if h.has_agent else None), "yes" if h.has_agent else "no",
                idle_text(h)])
            item.setData(HCOL_PROCESS, Qt.ItemDataRole.DecorationRole, color)
            for col in (HCOL_PID, HCOL_GPU, HCOL_LIVE, HCOL_CACHE):
                item.setTextAlignment(col, right)
            item.setToolTip(HCOL_PROCESS, plain_tip(name))
            if not h.has_agent:
                for col in (HCOL_LIVE, HCOL_CACHE, HCOL_AGENT):
                    item.setToolTip(col, NO_AGENT_TIP)
            for col in (HCOL_GPU, HCOL_LIVE, HCOL_CACHE):
                if item.text(col) == NA:  # muted, as the process table shows an unknown
                    item.setForeground(col, pal.muted(self.palette()))
            item.setToolTip(HCOL_IDLE, idle_text(h))
            if h.is_oom_process:
                f = item.font(HCOL_PROCESS)
                f.setBold(True)
                item.setFont(HCOL_PROCESS, f)
            self.holders.addTopLevelItem(item)
            if h.gpu_memory:
                segments.append((name, h.gpu_memory, color))
        if r.unattributed:
            segments.append(("not held by a listed process", r.unattributed,
                             pal.unattributed_color(self.palette())))
        self.bar.set(segments, r.memory_total, r.request)
        # As tall as its rows (up to ten): the room below goes to the fixes.
        rows = max(1, min(10, len(r.holders)))
        row_h = self.holders.sizeHintForRow(0) if r.holders else self.fontMetrics().height() + 6
        self.holders.setFixedHeight(self.holders.header().sizeHint().height() + rows * row_h
                                    + 2 * self.holders.frameWidth() + 2)
        free = None if r.memory_total is None or r.memory_used is None else max(
            0, r.memory_total - r.memory_used)
        others = ", and by no listed process (violet)" if r.unattributed else ""
        self.bar_legend.setText(
            f"Coloured: held by the processes below{others}; grey: not in use at the app's "
            f"sample{_age(r.snapshot_age_s)} ({fmt_bytes(free)}, the driver's reserve included; "
            "the figures above are the agent's, at the OOM itself); "
            f"the tick: the card's end; dashed: the request ({fmt_bytes(r.request)}), "
            "where it would have had to fit.")

    def copy_json(self) -> str:
        text = json.dumps(self.report.to_json(), indent=2, sort_keys=True)
        QGuiApplication.clipboard().setText(text)
        self.copied.setText("Copied.")
        return text

    def holder_rows(self) -> list[list[str]]:
        return [[self.holders.topLevelItem(i).text(c) for c in range(len(HOLDER_COLUMNS))]
                for i in range(self.holders.topLevelItemCount())]


__all__ = ["HoldersBar", "OomDialog", "explanation_text", "figures"]


def _age(seconds: float | None) -> str:
    """" 0.2 s before the OOM" (the joined snapshot's distance from it), or ""."""
    return "" if seconds is None else f" {seconds:.1f} s before the OOM"
