"""ProcessTable: rendering of unknown values and host statuses, numeric sorting."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.samples import GpuSample, HostStatus, ProcessSample, Snapshot
from app.ui.format import GiB, MiB
from app.ui.process_table import (
    COL_COMMAND,
    COL_CPU,
    COL_PCT,
    COL_PID,
    COL_RSS,
    COL_SM,
    COL_UPTIME,
    COL_USER,
    COL_VRAM,
    ProcessTable,
)

NOW = 1_700_000_000.0


def gpu(processes, index=0, total=24 * GiB):
    return GpuSample(index=index, name="Test GPU", uuid=f"GPU-{index}", memory_total=total,
                     memory_used=sum(p.gpu_memory or 0 for p in processes), memory_free=None,
                     processes=tuple(processes))


def snap(*gpus):
    return Snapshot(NOW, 10.0, "nvml", "550.54", tuple(gpus))


def proc(pid, mem, **kw):
    defaults = dict(name="python", user="alice", command=f"python job{pid}.py",
                    cpu_percent=10.0, host_rss=GiB, create_time=NOW - 100, sm_util=50.0)
    defaults.update(kw)
    return ProcessSample(pid, mem, **defaults)


@pytest.fixture
def table(qtbot):
    t = ProcessTable()
    qtbot.addWidget(t)
    return t


def cell(table, row, col, role=Qt.ItemDataRole.DisplayRole):
    return table.model().index(row, col).data(role)


def column(table, col):
    return [cell(table, r, col) for r in range(table.model().rowCount())]


def test_numeric_sort_with_unknown_last_in_both_orders(table):
    table.update_snapshot(snap(gpu([
        proc(1, 900 * MiB), proc(2, None), proc(3, 10 * GiB), proc(4, 2 * GiB)])))
    table.sortByColumn(COL_VRAM, Qt.SortOrder.DescendingOrder)
    # Numeric, not text: "10.0 GiB" > "2.0 GiB" > "900 MiB"; unknown last.
    assert column(table, COL_PID) == ["3", "4", "1", "2"]
    assert column(table, COL_VRAM)[-1] == "n/a"
    table.sortByColumn(COL_VRAM, Qt.SortOrder.AscendingOrder)
    assert column(table, COL_PID) == ["1", "4", "3", "2"]


def test_pid_sorts_numerically(table):
    table.update_snapshot(snap(gpu([proc(900, GiB), proc(10000, GiB), proc(95, GiB)])))
    table.sortByColumn(COL_PID, Qt.SortOrder.AscendingOrder)
    assert column(table, COL_PID) == ["95", "900", "10000"]


def test_unknown_values_are_na_not_zero(table):
    p = ProcessSample(42, None)  # everything but the pid unknown
    table.update_snapshot(snap(gpu([p])))
    for col in (COL_USER, COL_COMMAND, COL_VRAM, COL_PCT, COL_SM, COL_CPU, COL_RSS, COL_UPTIME):
        assert cell(table, 0, col) == "n/a", col
    assert cell(table, 0, COL_PID) == "42"


def test_zero_is_shown_as_zero(table):
    table.update_snapshot(snap(gpu([proc(7, 0, sm_util=0.0, cpu_percent=0.0)])))
    assert cell(table, 0, COL_VRAM) == "0 B"
    assert cell(table, 0, COL_SM) == "0 %"


def test_access_denied_rendering(table):
    p = ProcessSample(77, 3 * GiB, host_status=HostStatus.ACCESS_DENIED, name=None, user=None,
                      command=None, cpu_percent=None, host_rss=None, create_time=None)
    table.update_snapshot(snap(gpu([p])))
    assert cell(table, 0, COL_USER) == "access denied"
    assert cell(table, 0, COL_VRAM) == "3.0 GiB"  # NVML still reports the memory
    assert cell(table, 0, COL_CPU) == "n/a"
    assert cell(table, 0, COL_CPU, Qt.ItemDataRole.ToolTipRole) == "access denied"
    assert cell(table, 0, COL_RSS, Qt.ItemDataRole.ToolTipRole) == "access denied"


def test_not_visible_and_exited_rendering(table):
    hidden = ProcessSample(5, GiB, host_status=HostStatus.NOT_VISIBLE)
    gone = ProcessSample(6, GiB, host_status=HostStatus.EXITED)
    gone_named = ProcessSample(8, GiB, host_status=HostStatus.EXITED, command="python a.py")
    table.update_snapshot(snap(gpu([hidden, gone, gone_named])))
    table.sortByColumn(COL_PID, Qt.SortOrder.AscendingOrder)
    assert column(table, COL_COMMAND) == ["pid not visible here", "exited",
                                          "python a.py (exited)"]
    assert "pid not visible here" in cell(table, 0, COL_COMMAND, Qt.ItemDataRole.ToolTipRole)


def test_command_tooltip_holds_full_text(table):
    long_cmd = "python train.py " + " ".join(f"--flag{i}=value{i}" for i in range(40))
    table.update_snapshot(snap(gpu([proc(9, GiB, command=long_cmd)])))
    assert long_cmd in cell(table, 0, COL_COMMAND, Qt.ItemDataRole.ToolTipRole)


def test_percent_of_gpu_and_uptime(table):
    table.update_snapshot(snap(gpu([proc(3, 6 * GiB, create_time=NOW - 3725)], total=24 * GiB)))
    assert cell(table, 0, COL_PCT) == "25 %"
    assert cell(table, 0, COL_UPTIME) == "1h 02m"


def test_pid_reuse_is_a_new_row(table):
    table.update_snapshot(snap(gpu([proc(3, GiB, create_time=NOW - 50)])))
    table.update_snapshot(snap(gpu([proc(3, GiB, create_time=NOW - 5)])))
    assert table.source_model.keys() == [("0", 3, NOW - 5)]


def test_diff_update_signals_and_selection(table, qtbot):
    model = table.source_model
    a, b, c = proc(1, GiB), proc(2, 2 * GiB), proc(3, 3 * GiB)
    table.update_snapshot(snap(gpu([a, b, c])))
    table.select_key("0", b.key)
    events = []
    model.rowsRemoved.connect(lambda *args: events.append("removed"))
    model.rowsInserted.connect(lambda *args: events.append("inserted"))
    model.modelReset.connect(lambda *args: events.append("reset"))
    model.dataChanged.connect(lambda *args: events.append("changed"))
    d = proc(4, 4 * GiB)
    b2 = b._replace(gpu_memory=int(2.5 * GiB))
    table.update_snapshot(snap(gpu([b2, c, d])))
    assert "reset" not in events
    assert events.count("removed") == 1 and events.count("inserted") == 1
    assert "changed" in events
    assert table.selected_key() == ("0", b.key)
    assert sorted(int(p) for p in column(table, COL_PID)) == [2, 3, 4]


def test_selection_signal(table, qtbot):
    a, b = proc(1, GiB), proc(2, 2 * GiB)
    table.update_snapshot(snap(gpu([a]), gpu([b], index=1)))
    row = table.visible_row_of("1", 2)
    with qtbot.waitSignal(table.process_selected) as blocker:
        table.selectRow(row)
    assert blocker.args == ["1", b.key]
    # The selected process leaves: listeners hear the selection is gone.
    with qtbot.waitSignal(table.process_selected) as blocker:
        table.update_snapshot(snap(gpu([a])))
    assert blocker.args == [None, None]


def test_rows_resort_live_and_the_selection_follows_its_process(table):
    # Default order: VRAM, largest first.
    a, b, c = proc(1, 1 * GiB), proc(2, 2 * GiB), proc(3, 3 * GiB)
    table.update_snapshot(snap(gpu([a, b, c])))
    assert [int(p) for p in column(table, COL_PID)] == [3, 2, 1]
    table.select_key("0", a.key)

    # pid 1 grows past the others: it moves to the top, still selected.
    table.update_snapshot(snap(gpu([a._replace(gpu_memory=5 * GiB), b, c])))
    assert [int(p) for p in column(table, COL_PID)] == [1, 3, 2]
    assert table.selected_key() == ("0", a.key)
    assert table.selectionModel().selectedRows()[0].row() == 0


def test_filter_keeps_only_matching_rows(table):
    table.update_snapshot(snap(gpu([proc(1, GiB, command="python train.py"),
                                    proc(2, GiB, command="python serve.py")])))
    table.proxy.setFilterFixedString("serve")
    assert [int(p) for p in column(table, COL_PID)] == [2]
