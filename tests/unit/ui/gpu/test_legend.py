"""The legend's names: whole whenever the panel has room for them, elided (keeping
the pid) only when it is really short, measured on the rows as laid out."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QHBoxLayout, QWidget

from app.core.monitor.plot_data import LegendEntry, Role
from app.ui.gpu.legend import MIN_WIDTH, PANEL_SHARE, LegendPanel

GiB = 1024**3
VLLM = "vllm.entrypoints.openai.api_server (9121)"
ENTRIES = [
    LegendEntry("total", Role.TOTAL, "Device total", 25 * GiB),
    LegendEntry((9121, 1.0), Role.PROCESS, VLLM, 23 * GiB),
    LegendEntry((23890, 1.0), Role.PROCESS, "serve_embeddings.py (23890)", 2 * GiB),
]
SHORT = [ENTRIES[0], LegendEntry((1843, 1.0), Role.PROCESS, "Xorg (1843)", GiB)]


@pytest.fixture
def panel(qtbot):
    """A panel-like row: a stretching plot stand-in, then the legend."""
    page = QWidget()
    lay = QHBoxLayout(page)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(QWidget(page), 1)
    legend = LegendPanel(page)
    lay.addWidget(legend, 0)
    qtbot.addWidget(page)
    page.show()
    qtbot.waitExposed(page)
    return page, legend


def show(page: QWidget, legend: LegendPanel, width: int, entries=ENTRIES) -> dict:
    page.resize(width, 300)
    legend.fit_width(width)
    legend.set_entries(entries, lambda e: QColor("#8447BD"))
    page.layout().activate()
    for row in legend._rows:
        row.layout().activate()
    return {row.name.full_text(): row.name for row in legend._rows if row.isVisibleTo(legend)}


def test_a_long_name_shows_whole_on_a_wide_panel(panel):
    page, legend = panel
    names = show(page, legend, 950)  # one of two panels on a 1920 px window
    assert names[VLLM].text() == VLLM and not names[VLLM].elided()
    assert legend.width() <= 950 * PANEL_SHARE
    # The name's label really is that wide: the text is measured, not guessed.
    metrics = names[VLLM].fontMetrics()
    assert names[VLLM].contentsRect().width() >= metrics.horizontalAdvance(VLLM)


def test_a_long_name_is_elided_keeping_its_pid_only_on_a_narrow_panel(panel):
    page, legend = panel
    # A panel with room for "serve_embeddings.py (23890)" but not for vLLM's name.
    show(page, legend, 2400, [ENTRIES[0], ENTRIES[2]])
    serve_px = legend.width()
    names = show(page, legend, round(serve_px / PANEL_SHARE) + 4)
    label = names[VLLM]
    assert label.elided()
    assert label.text().endswith("… (9121)")
    metrics = label.fontMetrics()
    assert metrics.horizontalAdvance(label.text()) <= label.contentsRect().width()
    assert metrics.horizontalAdvance(VLLM) > label.contentsRect().width()  # really short
    assert names["serve_embeddings.py (23890)"].text() == "serve_embeddings.py (23890)"


def test_short_names_keep_the_legend_narrow(panel):
    page, legend = panel
    show(page, legend, 2400, SHORT)
    assert legend.width() == MIN_WIDTH
    names = show(page, legend, 2400)  # a long name arrives: the legend widens for it
    assert legend.width() > MIN_WIDTH and not names[VLLM].elided()
    show(page, legend, 2400, SHORT)  # and narrows when it goes
    assert legend.width() == MIN_WIDTH
