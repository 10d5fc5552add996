"""The process table paints each row from its row object in one call: what it
paints is what Qt's own item painting paints from the model's roles, pixel for
pixel (texts, n/a muted, the unattributed row in italics, swatches, the agent's
mark, the selection), and sorting, filtering and selecting still work."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QStyledItemDelegate, QTableView

from app.core.agents.types import AgentReport
from app.core.monitor.samples import GpuSample, HostStatus, ProcessSample, Snapshot
from app.core.units import GiB, MiB
from app.ui.window.process_rows import COL_COMMAND, COL_PID, COL_VRAM, COLUMNS, KEY_ROLE
from app.ui.window.process_table import ProcessTable

NOW = 1_700_000_000.0


class StockPainting(ProcessTable):
    """The same table, painted the way Qt paints any table: cell by cell through
    the model's roles, by the stock delegate (``stock`` on)."""

    stock = False

    def paintEvent(self, event) -> None:
        if self.stock:
            QTableView.paintEvent(self, event)
        else:
            super().paintEvent(event)


def snapshot() -> Snapshot:
    procs = (
        ProcessSample(101, 13 * GiB, name="python", user="ana", command="python train.py --lr 3e-4",
                      cpu_percent=97.0, host_rss=9 * GiB, create_time=NOW - 4000, sm_util=95.0),
        ProcessSample(102, 700 * MiB, name="Xorg", user=None, command=None, cpu_percent=None,
                      host_rss=None, create_time=NOW - 90000, sm_util=None,
                      host_status=HostStatus.ACCESS_DENIED),
        ProcessSample(103, 300 * MiB, name="python", user="bo", command="python serve.py <b>x</b>",
                      cpu_percent=12.0, host_rss=3 * GiB, create_time=NOW - 60, sm_util=0.0),
    )
    gpu = GpuSample(index=0, name="Test GPU", uuid="GPU-0", memory_total=24 * GiB,
                    memory_used=15 * GiB, memory_free=None, processes=procs)
    agent = AgentReport(101, ["python", "train.py"], "3.11", "2.4.1+cu121", "ok", True,
                        "native", (), ())
    return Snapshot(NOW, 10.0, "nvml", "550.54", (gpu,), agents={101: agent})


@pytest.fixture(params=["light", "dark"])
def table(qtbot, qapp, request):
    from app.ui.style.theme import ThemeManager

    ThemeManager(qapp).apply(request.param)
    t = StockPainting()
    qtbot.addWidget(t)
    t.resize(1400, 260)
    t.show()
    qtbot.waitExposed(t)
    t.update_snapshot(snapshot())
    t.set_colors({(101, NOW - 4000): QColor("#d0406a")})
    yield t
    ThemeManager(qapp).apply("light")


def both(table):
    """The viewport as this table paints it, and as Qt paints it from the roles."""
    table.stock = False
    table.viewport().repaint()
    ours = table.viewport().grab().toImage()
    table.stock = True
    delegate = table.itemDelegate()
    table.setItemDelegate(QStyledItemDelegate(table))
    table.viewport().repaint()
    stock = table.viewport().grab().toImage()
    table.setItemDelegate(delegate)
    table.stock = False
    return ours, stock


def test_rows_paint_what_the_models_roles_say_pixel_for_pixel(table):
    rows = table.model().rowCount()
    assert rows == 4  # three processes and the GPU's unattributed memory
    table.selectRow(1)
    ours, stock = both(table)
    assert ours.size() == stock.size()
    assert ours == stock
    # Not a blank picture: the rows are there.
    background = ours.pixelColor(ours.width() - 2, ours.height() - 2)
    assert any(ours.pixelColor(x, y) != background
               for x in range(0, ours.width(), 7) for y in range(0, 4 * 30, 5))


def test_each_cell_paints_the_text_the_model_shows(table):
    model, source = table.model(), table.source_model
    for r in range(model.rowCount()):
        row = source.row_at(table.proxy.mapToSource(model.index(r, 0)).row())
        texts = [text for text, _ in row.shown()]
        assert texts == [model.index(r, c).data() or "" for c in range(len(COLUMNS))]


def test_sorting_filtering_and_selection_still_work_and_paint_the_same(table, qtbot):
    table.sortByColumn(COL_PID, Qt.SortOrder.AscendingOrder)
    pids = [table.model().index(r, COL_PID).data() for r in range(table.model().rowCount())]
    assert pids[:3] == ["101", "102", "103"]
    table.proxy.setFilterFixedString("serve.py")
    assert table.model().rowCount() == 1
    table.selectRow(0)
    assert table.selected_key() == ("0", (103, NOW - 60))
    ours, stock = both(table)
    assert ours == stock
    table.proxy.setFilterFixedString("")
    table.sortByColumn(COL_VRAM, Qt.SortOrder.DescendingOrder)
    assert table.model().index(0, 0).data(KEY_ROLE) == ("0", (101, NOW - 4000))
    assert table.model().index(0, COL_COMMAND).data() == "python train.py --lr 3e-4"
    ours, stock = both(table)
    assert ours == stock
