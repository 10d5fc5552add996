"""The GPU panel's "PyTorch memory" section: one VRAM breakdown bar per agent
process on the GPU (parameters, other tensors, cache, context), a legend and
"Free all caches (≈X)".  The process detail view reuses the bar.

Per snapshot these widgets only set text and bar values; rows are pooled and
created only when more are needed than ever before.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.core.agents.types import AgentReport, VramBreakdown
from app.core.monitor.naming import label_or_pid
from app.core.monitor.samples import GpuSample, ProcessSample
from app.core.units import fmt_bytes
from app.ui.style import palette as pal
from app.ui.style.painting import rounded_track
from app.ui.style.text import elide_keeping_pid, plain_label, plain_tip

# -- breakdown figures ----------------------------------------------------------------------

SEGMENTS = ("parameters", "tensors", "cache", "context")
SEGMENT_NAMES = {
    "parameters": "Parameters",
    "tensors": "Other tensors",
    "cache": "Cache (freeable)",
    "context": "Context & non-PyTorch",
}
#: The same names where the panel is narrow (the tooltip keeps the long ones).
SHORT_NAMES = {"parameters": "Params", "tensors": "Tensors", "cache": "Cache",
               "context": "Context"}


def segment_color(name: str, palette: QPalette) -> QColor:
    if name == "parameters":
        return QColor(pal.BREAKDOWN_PARAMS)
    if name == "tensors":
        return QColor(pal.BREAKDOWN_TENSORS)
    if name == "cache":
        return QColor(pal.BREAKDOWN_CACHE)
    return pal.context_color(palette)


def fill_segment(p: QPainter, rect: QRectF, name: str, palette: QPalette) -> None:
    """Fill ``rect`` as segment ``name``; the cache is hatched (freeable, not in use)."""
    p.fillRect(rect, segment_color(name, palette))
    if name == "cache":
        p.fillRect(rect, QBrush(QColor(pal.BREAKDOWN_CACHE_HATCH), Qt.BrushStyle.BDiagPattern))


def breakdown_of(report: AgentReport, gpu_index: int, nvml_used: int | None,
                 gpu_uuid: str | None = None) -> VramBreakdown:
    """This process's VRAM on NVML GPU ``gpu_index``, split with its agent's figures
    (the agent's device found by UUID where it reports one, see device_for_gpu)."""
    return VramBreakdown.of(nvml_used, report.device_for_gpu(gpu_index, gpu_uuid),
                            report.param_bytes_for_gpu(gpu_index, gpu_uuid))


def segment_sizes(b: VramBreakdown) -> dict[str, int | None]:
    """Bytes per bar segment; "tensors" is live tensors other than parameters."""
    tensors = None
    if b.tensors is not None:
        tensors = max(0, b.tensors - (b.parameters or 0))
    return {"parameters": b.parameters, "tensors": tensors, "cache": b.cache,
            "context": b.context}


def bar_total(b: VramBreakdown) -> int:
    known = sum(v for v in segment_sizes(b).values() if v)
    return max(b.nvml_used or 0, known)


def breakdown_tooltip(title: str, b: VramBreakdown) -> str:
    def f(v: int | None) -> str:
        return fmt_bytes(v)
    lines = [
        title,
        f"NVML used: {f(b.nvml_used)}",
        f"  Context & non-PyTorch: {f(b.context)}  (NVML used − reserved: CUDA context, "
        "cuBLAS/cuDNN workspaces, other libraries)",
        f"  Cache: {f(b.cache)}  (reserved − allocated: what Free cache can return)",
        f"  Live tensors: {f(b.tensors)}  (allocated)",
        f"    of which model parameters: {f(b.parameters)}",
    ]
    return "\n".join(lines)


def breakdown_figures(b: VramBreakdown) -> str:
    """The short text beside a bar: "12.5 GiB · cache 3.2 GiB"."""
    return f"{fmt_bytes(b.nvml_used)} · cache {fmt_bytes(b.cache)}"


class BreakdownBar(QWidget):
    """One stacked horizontal bar: parameters | other tensors | cache | context.

    ``scale`` (bytes) is the full width, shared by the bars of one list so their
    lengths compare; the rest of the width is an empty track.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sizes: dict[str, int | None] = {}
        self.scale = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(80)
        self.setFixedHeight(12)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(300, 12)

    def set_breakdown(self, b: VramBreakdown | None, scale: int) -> None:
        sizes = segment_sizes(b) if b is not None else {}
        if sizes != self.sizes or scale != self.scale:
            self.sizes = sizes
            self.scale = scale
            self.update()

    def paintEvent(self, event) -> None:  # noqa: N802
        p, rect = rounded_track(self)
        palette = self.palette()
        if self.scale > 0:
            x = rect.left()
            for name in SEGMENTS:
                v = self.sizes.get(name)
                if not v:
                    continue
                w = rect.width() * v / self.scale
                fill_segment(p, QRectF(x, rect.top(), w, rect.height()), name, palette)
                x += w
        p.end()


class BreakdownLegend(QWidget):
    """Swatch + name for each segment on one line, painted (cheap, theme-aware)."""

    SW = 10
    GAP = 14

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setToolTip(
            "Parameters: model weights (live tensors)\n"
            "Other tensors: activations, gradients, optimizer state (live tensors)\n"
            "Cache: reserved by PyTorch's caching allocator but unused; Free cache returns it\n"
            "Context & non-PyTorch: NVML used − reserved (CUDA context, libraries)")

    def _width(self, names: dict[str, str]) -> int:
        fm = self.fontMetrics()
        w = sum(self.SW + 5 + fm.horizontalAdvance(names[s]) for s in SEGMENTS)
        return w + self.GAP * (len(SEGMENTS) - 1) + 2

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self._width(SEGMENT_NAMES), self.fontMetrics().height() + 2)

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(self._width(SHORT_NAMES), self.fontMetrics().height() + 2)

    def names(self) -> dict[str, str]:
        """The long names where they fit, else the short ones."""
        return SEGMENT_NAMES if self.width() >= self._width(SEGMENT_NAMES) else SHORT_NAMES

    def paintEvent(self, event) -> None:  # noqa: N802
        p = QPainter(self)
        palette = self.palette()
        fm = self.fontMetrics()
        h = self.height()
        x = 1
        p.setPen(pal.muted(palette))
        names = self.names()
        for name in SEGMENTS:
            top = (h - self.SW) // 2
            fill_segment(p, QRectF(x, top, self.SW, self.SW), name, palette)
            x += self.SW + 5
            text = names[name]
            p.drawText(x, 0, fm.horizontalAdvance(text) + 1, h,
                       int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), text)
            x += fm.horizontalAdvance(text) + self.GAP
        p.end()



class BreakdownRow(QWidget):
    """``name  [bar]  figures`` — one process on one GPU (or one GPU of a process)."""

    double_clicked = Signal(int)

    NAME_WIDTH = 190

    def __init__(self, parent: QWidget | None = None, name_width: int = NAME_WIDTH) -> None:
        super().__init__(parent)
        self.pid = 0
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        self.name = plain_label(QLabel(self))  # a process's name: its owner's words
        self.name.setFixedWidth(name_width)
        self.bar = BreakdownBar(self)
        self.figures = QLabel(self)
        self.figures.setObjectName("secondary")
        self.figures.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.figures.setMinimumWidth(
            self.figures.fontMetrics().horizontalAdvance("000.0 GiB · cache 00.0 GiB") + 4)
        lay.addWidget(self.name)
        lay.addWidget(self.bar, 1)
        lay.addWidget(self.figures)
        self._name_text = ""
        self._tip = ""

    def set(self, pid: int, name: str, b: VramBreakdown, scale: int, tooltip: str) -> None:
        self.pid = pid
        if name != self._name_text:
            self._name_text = name
            self.name.setText(elide_keeping_pid(self.name.fontMetrics(), name,
                                                 self.name.width() or self.NAME_WIDTH))
        self.bar.set_breakdown(b, scale)
        text = breakdown_figures(b)
        if self.figures.text() != text:
            self.figures.setText(text)
        if tooltip != self._tip:
            self._tip = tooltip
            for w in (self, self.name, self.bar, self.figures):
                w.setToolTip(plain_tip(tooltip))

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802
        self.double_clicked.emit(self.pid)
        super().mouseDoubleClickEvent(event)


def free_button_text(cache: int | None, busy: bool, all_: bool) -> str:
    base = "Free all caches" if all_ else "Free cache"
    if busy:
        return "Freeing…"
    if cache:
        return f"{base} (≈{fmt_bytes(cache)})"
    return base


# -- GPU panel section ------------------------------------------------------------------------

class AgentSection(QWidget):
    """The GPU panel's "PyTorch memory" part: one breakdown bar per agent process
    on this GPU, a legend and "Free all caches (≈X)"."""

    free_all_requested = Signal()
    details_requested = Signal(int)  # pid

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("agentSection")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 4, 0, 0)
        outer.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(12)
        self.title = QLabel("PyTorch memory", self)
        tf = self.title.font()
        tf.setBold(True)
        self.title.setFont(tf)
        self.title.setToolTip("Reported by the VRAM Steward agent inside each PyTorch process")
        self.legend = BreakdownLegend(self)
        self.result_label = plain_label(QLabel("", self))  # an action's outcome, names in it
        self.result_label.setObjectName("secondary")
        self.result_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.result_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.free_all_button = QPushButton("Free all caches", self)
        self.free_all_button.setObjectName("freeAllButton")
        self.free_all_button.setEnabled(False)
        self.free_all_button.clicked.connect(self.free_all_requested)
        head.addWidget(self.title)
        head.addWidget(self.legend)
        head.addWidget(self.result_label, 1)
        head.addWidget(self.free_all_button)
        outer.addLayout(head)
        self.rows_box = QVBoxLayout()
        self.rows_box.setSpacing(3)
        outer.addLayout(self.rows_box)
        self.empty_label = QLabel("No process on this GPU has a VRAM Steward agent.", self)
        self.empty_label.setObjectName("secondary")
        outer.addWidget(self.empty_label)
        self.rows: list[BreakdownRow] = []
        #: pids whose cache "Free all caches" would free, and their labels.
        self.freeable: dict[int, str] = {}
        self._labels: dict[tuple, str] = {}

    def visible_rows(self) -> list[BreakdownRow]:
        return [r for r in self.rows if not r.isHidden()]

    def update_gpu(self, gpu: GpuSample, agents: Mapping[int, AgentReport], busy: bool,
                   can_act: bool) -> None:
        entries: list[tuple[ProcessSample, AgentReport, VramBreakdown]] = []
        for p in gpu.processes:
            report = agents.get(p.pid)
            if report is not None:
                entries.append((p, report, breakdown_of(report, gpu.index, p.gpu_memory, gpu.uuid)))
        entries.sort(key=lambda e: -(e[0].gpu_memory or 0))
        scale = max((bar_total(b) for _, _, b in entries), default=0)
        while len(self.rows) < len(entries):
            row = BreakdownRow(self)
            row.double_clicked.connect(self.details_requested)
            self.rows_box.addWidget(row)
            self.rows.append(row)
        labels = {}
        freeable: dict[int, str] = {}
        total = None
        for row, (p, report, b) in zip(self.rows, entries):
            label = self._labels.get(p.key)
            if label is None:
                label = label_or_pid(p)
            labels[p.key] = label
            title = f"{label} on GPU {gpu.display_id}"
            if report.torch is None:
                title += " — torch not loaded"
            row.set(p.pid, label, b, scale, breakdown_tooltip(title, b)
                    + "\n\nDouble-click for details")
            row.setVisible(True)
            if b.cache is not None:
                total = (total or 0) + b.cache
                if b.cache > 0:
                    freeable[p.pid] = label
        for row in self.rows[len(entries):]:
            row.setVisible(False)
        self._labels = labels
        self.freeable = freeable
        self.empty_label.setVisible(not entries)

        button = self.free_all_button
        text = free_button_text(total, busy, all_=True)
        if button.text() != text:
            button.setText(text)
        if busy:
            tip = "Freeing the caches…"
        elif not entries:
            tip = "No process on this GPU has an agent"
        elif not can_act:
            tip = "Agent actions are not available"
        elif not freeable:
            tip = "Nothing to free: no agent process on this GPU holds cached memory"
        else:
            tip = (f"Empty the PyTorch cache of {len(freeable)} process"
                   f"{'es' if len(freeable) != 1 else ''} on this GPU (gc + empty_cache), "
                   f"about {fmt_bytes(total)}:\n" + "\n".join(freeable.values()))
        button.setToolTip(plain_tip(tip))
        button.setEnabled(bool(freeable) and can_act and not busy)

    def set_result(self, text: str, tooltip: str = "") -> None:
        self.result_label.setText(text)
        self.result_label.setToolTip(plain_tip(tooltip or text))
