"""At 1024 x 640 every column of the process table can be reached (it scrolls
sideways); where every column fits, the command takes the room left."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication

from app.core.monitor.collector import Collector, default_agents_for
from app.core.monitor.demo_source import DemoSource
from app.core.monitor.history import History, HistoryConfig
from app.ui.window.main_window import MainWindow
from app.ui.window.process_rows import COL_COMMAND, COL_HOST, COLUMNS


@pytest.mark.parametrize("size", [(1024, 640), (1920, 1080)])
def test_every_column_of_the_table_can_be_reached(qtbot, size):
    window = MainWindow(History(HistoryConfig()))
    window.display_timer.stop()
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    t = [1000.0]
    source = DemoSource(clock=lambda: t[0])
    collector = Collector(source, agents=default_agents_for(source))
    for _ in range(20):
        window.on_snapshot(collector.collect())
        t[0] += 0.25
    QApplication.processEvents()
    table = window.table
    # The demo has agents and containers: every column but the remote hosts' applies.
    wanted = [c for c in range(len(COLUMNS)) if c != COL_HOST]
    assert [c for c in wanted if table.isColumnHidden(c)] == []
    viewport = table.viewport().rect()
    for col in wanted:
        index = table.model().index(0, col)
        table.scrollTo(index)
        QApplication.processEvents()
        assert viewport.contains(table.visualRect(index).center()), COLUMNS[col]
    header = table.horizontalHeader()
    if header.length() <= viewport.width():  # it fits: the command reaches the edge
        assert header.length() == viewport.width()
        assert table.horizontalScrollBar().maximum() == 0
    else:
        assert table.horizontalScrollBar().maximum() > 0
        assert table.columnWidth(COL_COMMAND) >= table.fontMetrics().horizontalAdvance("x" * 22)
    assert window.width() == size[0]
