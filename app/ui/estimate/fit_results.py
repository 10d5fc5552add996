"""The "Will it fit?" results: the three figures, the breakdown bar against the
GPU's free memory, fits or short by, the ranked fixes, the limits and, for an
LLM by formula, the table of context lengths.

The fixes are the Doctor's controls (:class:`~app.ui.doctor.fixes.FixList`):
free a cache, unload a model and stop a process act on the GPU's host through
the window; the others are text with their figures.  A lower bound says so
above everything else.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QLabel,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.diagnosis.types import Fix
from app.core.estimate.types import FitFix, GpuFit
from app.core.monitor.samples import Snapshot
from app.core.units import NA, fmt_bytes
from app.ui.doctor.fixes import FixList
from app.ui.estimate.fit_bar import FitBar, FitLegend, bar_parts
from app.ui.estimate.fit_result import FitResult
from app.ui.estimate.texts import (
    CONTEXT_COLUMNS,
    FIGURES,
    about_text,
    context_rows,
    figure_values,
    fix_text,
    limits_heading,
    margin_text,
    max_batch_text,
    scales_text,
    verdict,
)
from app.ui.style import palette as pal
from app.ui.style.layouts import add_figure, bold
from app.ui.style.tables import Selection, flat_list
from app.ui.style.text import plain_label

#: The figures row: the three, then the GPU's side.
EXTRA_FIGURES = (
    ("free", "Free now", "What the GPU has free now (NVML); n/a when unknown"),
    ("margin", "Margin", "Free now − needs free: negative is what it is short by"),
)


#: Fixes that free memory on the GPU ("gives 2.8 GiB"); the others save from what the
#: step needs, and their text says by how much.
FREEING = ("free_cache", "unload_model", "stop_process")


def as_fix(f: FitFix) -> Fix:
    """A fit's fix in the Doctor's form (its controls take that)."""
    gain = f.gain_bytes if f.action in FREEING else None
    return Fix(f.action, fix_text(f.text, f.fits_after), gain, f.pid, f.model)


def _wrapping(label: QLabel) -> QLabel:
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class FitResults(QWidget):
    """One estimate's answer against one GPU (see the module's docstring)."""

    request = Signal(object)  # a typed request a fix sends

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fitResults")
        self.result: FitResult | None = None
        self.fit: GpuFit | None = None
        lay = self.lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)

        self.verdict = _wrapping(plain_label(bold(QLabel("", self), 1.15)))
        self.verdict.setObjectName("fitVerdict")
        lay.addWidget(self.verdict)
        self.about = _wrapping(plain_label(QLabel("", self)))  # the model's own name
        self.about.setObjectName("secondary")
        lay.addWidget(self.about)

        # A lower bound says so at once; the sentences why are with the limits below.
        self.bound = _wrapping(bold(QLabel("", self)))
        self.bound.setObjectName("fitBound")
        lay.addWidget(self.bound)

        grid = QGridLayout()
        grid.setHorizontalSpacing(20)
        grid.setVerticalSpacing(0)
        self.figure_labels: dict[str, QLabel] = {}
        for col, (key, caption, tip) in enumerate((*FIGURES, *EXTRA_FIGURES)):
            val = add_figure(grid, col, caption, NA, tip, self)
            val.setObjectName(f"fitFigure_{key}")
            self.figure_labels[key] = val
        grid.setColumnStretch(len(self.figure_labels), 1)
        lay.addLayout(grid)

        self.bar = FitBar(self)
        lay.addWidget(self.bar)
        self.legend = FitLegend(self)
        lay.addWidget(self.legend)
        self.notes = _wrapping(QLabel("", self))  # grows with the batch; largest batch
        self.notes.setObjectName("secondary")
        lay.addWidget(self.notes)

        self.fixes_title = bold(QLabel("What would make it fit, best first", self))
        lay.addWidget(self.fixes_title)
        self.fixes = FixList(self)
        self.fixes.request.connect(self.request)
        lay.addWidget(self.fixes)

        self.contexts_title = bold(QLabel("Context lengths", self))
        lay.addWidget(self.contexts_title)
        self.contexts = flat_list(self, "fitContexts", CONTEXT_COLUMNS, Selection.NoSelection)
        self.contexts.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.contexts.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        fm = self.fontMetrics()
        for col, sample in enumerate(("128k", "000.0 GiB", "000.0 GiB", "n/a")):
            self.contexts.header().resizeSection(col, max(
                fm.horizontalAdvance(sample), fm.horizontalAdvance(CONTEXT_COLUMNS[col])) + 40)
        lay.addWidget(self.contexts)

        self.limits = QFrame(self)
        self.limits.setObjectName("fitLimits")
        llay = QVBoxLayout(self.limits)
        llay.setContentsMargins(10, 6, 10, 6)
        llay.setSpacing(2)
        self.limits_title = bold(QLabel("Limits", self.limits))
        self.limits_title.setObjectName("fitLimitsTitle")
        _wrapping(self.limits_title)
        self.limits_text = _wrapping(plain_label(QLabel("", self.limits)))
        llay.addWidget(self.limits_title)
        llay.addWidget(self.limits_text)
        lay.addWidget(self.limits)

        lay.addStretch(1)
        self.set_result(None)

    # -- showing ---------------------------------------------------------------------------------
    def set_result(self, result: FitResult | None, gpu: str | None = None, host: str = "",
                   snapshot: Snapshot | None = None, user: str | None = None,
                   can_act: bool = True) -> None:
        """Show ``result`` against GPU ``gpu`` (a display id; its fit, else the first);
        ``host``, ``snapshot``, ``user``: where the fixes act, as the Doctor's do."""
        self.result = result
        self.fit = fit = result.gpu(gpu) if result is not None else None
        self.setVisible(result is not None)
        if result is None:
            return
        values = figure_values(result, fit)
        values["free"] = fmt_bytes(fit.free_bytes if fit is not None else None)
        values["margin"] = margin_text(fit)
        for key, label in self.figure_labels.items():
            label.setText(values[key])
            label.setProperty("unknown", label.text() == NA)
            label.setProperty("short", key == "margin" and fit is not None
                              and (fit.margin_bytes or 0) < 0)
        level, sentence = verdict(fit)
        self.verdict.setText(sentence)
        self.verdict.setProperty("level", level)
        self.about.setText(about_text(result))
        needs = fit.needs_bytes if fit is not None else result.needs_bytes
        parts = bar_parts(result.breakdown, result.reserved_bytes, needs)
        self.bar.set(parts, fit.free_bytes if fit is not None else None)
        self.legend.set(parts, result.scales_with_batch)
        self.notes.setText(" ".join(t for t in (scales_text(result), max_batch_text(result))
                                    if t))
        self.bound.setText(limits_heading(result))
        self.bound.setVisible(not result.exact)
        self.limits.setVisible(bool(result.limits))
        self.limits_text.setText("\n".join(f"·  {s}" for s in result.limits))
        fixes = tuple(as_fix(f) for f in (fit.fixes if fit is not None else ()))
        self.fixes.host = host
        self.fixes.set_fixes(fixes)
        self.fixes.set_can_act(can_act)
        self.fixes.check_terminate(snapshot, user)
        self.fixes_title.setVisible(bool(fixes))
        self.fixes.setVisible(bool(fixes))
        rows = context_rows(result, fit)
        self.contexts.clear()
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for row in rows:
            item = QTreeWidgetItem(row)
            for col in (1, 2):
                item.setTextAlignment(col, right)
            if row[3] == NA:
                item.setForeground(3, pal.muted(self.palette()))
            self.contexts.addTopLevelItem(item)
        self.contexts_title.setVisible(bool(rows))
        self.contexts.setVisible(bool(rows))
        self._style()
        if rows:  # as tall as its rows: the body scrolls, not the table
            self.contexts.ensurePolished()
            row_h = self.contexts.sizeHintForRow(0)
            head_h = self.contexts.header().sizeHint().height()
            self.contexts.setFixedHeight(head_h + len(rows) * row_h
                                         + 2 * self.contexts.frameWidth() + 4)

    def context_table(self) -> list[list[str]]:
        items = [self.contexts.topLevelItem(i) for i in range(self.contexts.topLevelItemCount())]
        return [[item.text(c) for c in range(len(CONTEXT_COLUMNS))] for item in items if item]

    def figures(self) -> dict[str, str]:
        return {k: v.text() for k, v in self.figure_labels.items()}

    # -- style ----------------------------------------------------------------------------------
    def _style(self) -> None:
        palette = self.palette()
        critical = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        warning = QColor(pal.LEVEL_COLORS[pal.LEVEL_WARNING])
        faint = pal.hex_color(pal.faint(palette))
        tint = pal.hex_color(pal.blend(pal.background(palette), warning, 0.14))
        level = self.verdict.property("level")
        color = {"short": critical, "unknown": pal.hex_color(pal.muted(palette))}.get(
            str(level), pal.hex_color(pal.foreground(palette)))
        css = (f"QLabel#fitBound {{ background: {tint}; border: 1px solid"
               f" {pal.hex_color(warning)}; border-left-width: 4px; border-radius: 6px;"
               " padding: 5px 8px; }"
               f"QFrame#fitLimits {{ border: 1px solid {faint}; border-radius: 6px; }}"
               f"QLabel#fitVerdict {{ color: {color}; }}"
               "QTreeWidget#fitContexts::item { padding: 3px 0px; }"
               f"QLabel[short=\"true\"] {{ color: {critical}; }}"
               f"QLabel[unknown=\"true\"] {{ color: {pal.hex_color(pal.muted(palette))}; }}"
               + pal.view_rules(palette, "fitContexts"))
        if css != self.styleSheet():
            self.setStyleSheet(css)
        for label in self.figure_labels.values():  # their properties may have changed
            label.style().unpolish(label)
            label.style().polish(label)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._style()
        super().changeEvent(event)


__all__ = ["EXTRA_FIGURES", "FitResults", "as_fix"]
