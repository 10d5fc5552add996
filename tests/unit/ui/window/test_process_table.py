"""ProcessTable: rendering of unknown values and host statuses, numeric sorting, the
container column and the per-GPU unattributed row; rows that hold still under the
pointer, the colour swatches, the row menu and a narrow table scrolling sideways."""

from __future__ import annotations

import dataclasses
from html import escape

import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QColor, QEnterEvent, QGuiApplication
from PySide6.QtWidgets import QApplication

from app.core.agents.types import AgentReport
from app.core.monitor.samples import Container, GpuSample, HostStatus, ProcessSample, Snapshot
from app.core.units import GiB, MiB
from app.ui.style import palette as pal
from app.ui.window.process_rows import (
    AGENT_ROLE,
    COL_COMMAND,
    COL_CONTAINER,
    COL_CPU,
    COL_GPU,
    COL_HOST,
    COL_PCT,
    COL_PID,
    COL_RSS,
    COL_SM,
    COL_UPTIME,
    COL_USER,
    COL_VRAM,
    COLUMNS,
    ENDED_TIP,
    KEY_ROLE,
    UNATTRIBUTED_KEY,
    UNATTRIBUTED_TEXT,
)
from app.ui.window.process_table import RESUME_MS, ProcessTable

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


def painted(table):
    """The table rendered once, as a shown table is: its rows are on screen."""
    table.resize(1400, 400)
    table.grab()
    return table


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


def test_a_name_or_command_that_looks_like_html_is_shown_as_text(table):
    hostile = "<b>x</b> <img src=/etc/x>"
    table.update_snapshot(snap(gpu([proc(9, GiB, name=f"python {hostile}",
                                         command=f"python {hostile}", user=hostile)])))
    assert cell(table, 0, COL_COMMAND) == f"python {hostile}"  # display: never HTML
    assert cell(table, 0, COL_USER) == hostile
    tip = cell(table, 0, COL_COMMAND, Qt.ItemDataRole.ToolTipRole)
    assert "<img" not in tip and f"python {escape(hostile, quote=False)}\nPID 9 on" in tip
    assert tip.startswith('<qt style="white-space:pre">')


def test_percent_of_gpu_and_uptime(table):
    table.update_snapshot(snap(gpu([proc(3, 6 * GiB, create_time=NOW - 3725)], total=24 * GiB)))
    assert cell(table, 0, COL_PCT) == "25 %"
    assert cell(table, 0, COL_UPTIME) == "1 h 02 min"


def test_pid_reuse_is_a_new_row(table):
    table.update_snapshot(snap(gpu([proc(3, GiB, create_time=NOW - 50)])))
    table.update_snapshot(snap(gpu([proc(3, GiB, create_time=NOW - 5)])))
    assert table.source_model.keys() == [("0", 3, NOW - 5)]


def test_diff_update_signals_and_selection(table, qtbot):
    model = table.source_model
    a, b, c = proc(1, GiB), proc(2, 2 * GiB), proc(3, 3 * GiB)
    table.update_snapshot(snap(gpu([a, b, c])))
    table.select_key("0", b.key)
    painted(table)
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


# -- container column ------------------------------------------------------------------

TRAINER = Container("docker", "4f" * 32, "trainer")
SHY = Container("podman", "3f4e2a1b9c0d" + "7" * 52)  # name not readable here
IN_POD = Container("containerd", "ab" * 32, "vllm", pod="5a1c0de2-8e39-4a8b-9a7e-3d2b1c0f9e8d")


def test_container_column_appears_with_the_first_containerised_process(table):
    table.update_snapshot(snap(gpu([proc(1, GiB)])))
    assert table.isColumnHidden(COL_CONTAINER)  # no container seen: no empty column
    table.update_snapshot(snap(gpu([proc(1, GiB), proc(2, GiB, container=TRAINER)])))
    assert not table.isColumnHidden(COL_CONTAINER)
    assert COLUMNS[COL_CONTAINER] == "Container" and COL_CONTAINER == COL_USER + 1
    table.update_snapshot(snap(gpu([proc(1, GiB)])))
    assert not table.isColumnHidden(COL_CONTAINER)  # stays: columns do not come and go


def test_container_cell_shows_the_label_and_blank_when_none(table):
    table.update_snapshot(snap(gpu([proc(1, 3 * GiB, container=TRAINER),
                                    proc(2, 2 * GiB, container=SHY),
                                    proc(3, 1 * GiB, container=IN_POD),
                                    proc(4, GiB // 2)])))
    assert column(table, COL_CONTAINER) == ["docker trainer", "podman 3f4e2a1b9c0d",
                                            "containerd (k8s) vllm", ""]
    # Blank is not "unknown": not muted like n/a.
    assert cell(table, 3, COL_CONTAINER, Qt.ItemDataRole.ForegroundRole) is None


def test_container_tooltip_gives_runtime_full_id_name_and_pod(table):
    table.update_snapshot(snap(gpu([proc(1, 3 * GiB, container=IN_POD),
                                    proc(2, 2 * GiB, container=SHY), proc(3, GiB)])))
    tip = cell(table, 0, COL_CONTAINER, Qt.ItemDataRole.ToolTipRole)
    assert tip.splitlines() == ["Runtime: containerd", f"ID: {'ab' * 32}", "Name: vllm",
                                "Kubernetes pod: 5a1c0de2-8e39-4a8b-9a7e-3d2b1c0f9e8d"]
    tip = cell(table, 1, COL_CONTAINER, Qt.ItemDataRole.ToolTipRole)
    assert tip.splitlines() == ["Runtime: podman", f"ID: {SHY.id}"]  # no name, no pod known
    assert "not in a container" in cell(table, 2, COL_CONTAINER, Qt.ItemDataRole.ToolTipRole)


def test_container_sorts_by_label(table):
    table.update_snapshot(snap(gpu([proc(1, GiB, container=TRAINER), proc(2, GiB),
                                    proc(3, GiB, container=SHY)])))
    table.sortByColumn(COL_CONTAINER, Qt.SortOrder.AscendingOrder)
    assert column(table, COL_PID) == ["1", "3", "2"]  # none last


def shown_at(table, qtbot, width):
    table.resize(width, 300)
    qtbot.wait(10)
    return [c for c in range(len(COLUMNS)) if not table.isColumnHidden(c)]


def test_container_column_gives_way_to_the_command_in_a_narrow_table(table, qtbot):
    table.update_snapshot(snap(gpu([proc(1, GiB, container=SHY)])))
    table.resize(1600, 300)
    table.show()
    qtbot.waitExposed(table)
    wide = table.columnWidth(COL_CONTAINER)
    assert wide >= table.fontMetrics().horizontalAdvance("podman 3f4e2a1b9c0d")
    table.resize(1000, 300)
    qtbot.wait(10)
    assert not table.isColumnHidden(COL_CONTAINER)
    assert table.columnWidth(COL_CONTAINER) < wide  # narrower before anything goes
    # The full label stays in the cell (elided when drawn) and in the tooltip.
    assert cell(table, 0, COL_CONTAINER) == "podman 3f4e2a1b9c0d"


def reachable(table, col) -> bool:
    """Whether scrolling to ``col`` brings its header and first cell into view."""
    index = table.model().index(0, col)
    table.scrollTo(index)
    QApplication.processEvents()
    cell_rect = table.visualRect(index)
    return (not table.isColumnHidden(col) and cell_rect.width() > 0
            and table.viewport().rect().contains(cell_rect.center()))


def test_a_narrow_table_scrolls_sideways_and_a_wide_one_stretches_the_command(table, qtbot):
    agents = {1: agent(1)}
    table.update_snapshot(dataclasses.replace(
        snap(gpu([proc(1, GiB, container=SHY), proc(2, GiB)])), agents=agents))
    table.resize(1900, 300)
    table.show()
    qtbot.waitExposed(table)
    every = [c for c in range(len(COLUMNS)) if c != COL_HOST]  # (no remote host: no Host)
    least = table.fontMetrics().horizontalAdvance("x" * 22)
    header = table.horizontalHeader()
    for width in (1900, 1400, 1000, 800, 520, 1900):
        assert shown_at(table, qtbot, width) == every, width  # nothing hidden, ever
        assert table.columnWidth(COL_COMMAND) >= least, width
        scrolls = header.length() > table.viewport().width()
        assert table.horizontalScrollBar().maximum() > 0 if scrolls else \
            table.horizontalScrollBar().maximum() == 0
        if not scrolls:  # room for all: the command takes what is left, to the edge
            assert header.length() == table.viewport().width(), width
        assert all(reachable(table, c) for c in every), width
    assert shown_at(table, qtbot, 520) == every
    assert table.horizontalScrollBar().maximum() > 0  # (520 px cannot hold them)


# -- the unattributed row ----------------------------------------------------------------

def gpu_used(processes, used, index=0, total=24 * GiB, **kw):
    return GpuSample(index=index, name="Test GPU", uuid=f"GPU-{index}", memory_total=total,
                     memory_used=used, memory_free=None, processes=tuple(processes), **kw)


def rest_row(table, display_id="0"):
    """The view row of GPU ``display_id``'s unattributed row, or None."""
    model = table.model()
    for r in range(model.rowCount()):
        if model.index(r, 0).data(KEY_ROLE) == (display_id, UNATTRIBUTED_KEY):
            return r
    return None


def test_unattributed_row_shows_the_core_figure(table):
    g = gpu_used([proc(1, 6 * GiB), proc(2, 3 * GiB)], used=9 * GiB + 437 * MiB)
    assert g.unattributed_memory == 437 * MiB
    table.update_snapshot(snap(g))
    r = rest_row(table)
    assert r is not None
    assert cell(table, r, COL_VRAM) == "437 MiB"  # formatted like the process figures
    assert cell(table, r, COL_GPU) == "0"
    assert cell(table, r, COL_COMMAND) == UNATTRIBUTED_TEXT
    assert cell(table, r, COL_PCT) == "1.8 %"
    # No pid and no host figures: blank (they do not apply), not n/a.
    for col in (COL_PID, COL_USER, COL_CONTAINER, COL_SM, COL_CPU, COL_RSS, COL_UPTIME):
        assert cell(table, r, col) == "", col


def test_unattributed_row_is_italic_and_muted(table):
    table.update_snapshot(snap(gpu_used([proc(1, GiB)], used=GiB + 300 * MiB)))
    r = rest_row(table)
    font = cell(table, r, COL_VRAM, Qt.ItemDataRole.FontRole)
    assert font is not None and font.italic()
    assert cell(table, r, COL_COMMAND, Qt.ItemDataRole.FontRole).italic()
    muted = pal.muted(QGuiApplication.palette())
    assert cell(table, r, COL_VRAM, Qt.ItemDataRole.ForegroundRole) == muted
    process_row = table.visible_row_of("0", 1)
    assert cell(table, process_row, COL_VRAM, Qt.ItemDataRole.FontRole) is None
    assert cell(table, process_row, COL_VRAM, Qt.ItemDataRole.ForegroundRole) is None


def test_unattributed_tooltip_says_what_it_can_be(table):
    table.update_snapshot(snap(gpu_used([proc(1, GiB)], used=GiB + 300 * MiB)))
    r = rest_row(table)
    for col in (COL_COMMAND, COL_VRAM):
        tip = cell(table, r, col, Qt.ItemDataRole.ToolTipRole)
        assert "300 MiB of GPU 0's used memory is held by no process listed here" in tip
        assert "other containers or PID namespaces" in tip
        assert "exited" in tip and "not released yet" in tip
        assert "driver's own allocations" in tip


def test_unattributed_row_is_hidden_at_zero_and_comes_back(table):
    a = proc(1, 2 * GiB)
    table.update_snapshot(snap(gpu_used([a], used=2 * GiB)))
    assert rest_row(table) is None  # nothing unaccounted for: no row
    table.update_snapshot(snap(gpu_used([a], used=2 * GiB + 64 * MiB)))
    assert cell(table, rest_row(table), COL_VRAM) == "64 MiB"
    table.update_snapshot(snap(gpu_used([a], used=2 * GiB)))
    assert rest_row(table) is None


def test_unattributed_na_only_where_it_explains_something(table):
    # Processes not listed at all (no permission): the row says n/a and why.
    hidden = gpu_used([], used=5 * GiB, notes={"processes": "n/a (no permission)"})
    assert hidden.unattributed_memory is None
    table.update_snapshot(snap(hidden))
    r = rest_row(table)
    assert cell(table, r, COL_VRAM) == "n/a"  # unknown, never 0
    assert cell(table, r, COL_PCT) == "n/a"
    tip = cell(table, r, COL_VRAM, Qt.ItemDataRole.ToolTipRole)
    assert "unknown: the driver does not list this GPU's processes (no permission)" in tip
    assert "other containers" in tip

    # Beside a process whose own memory is n/a (WDDM, MIG): no second n/a row.
    wddm = gpu_used([proc(1, None)], used=5 * GiB, notes={"process_memory": "n/a (WDDM)"})
    table.update_snapshot(snap(wddm))
    assert rest_row(table) is None
    # Used memory unknown, or an idle GPU using nothing: no row.
    table.update_snapshot(snap(gpu_used([], used=None), gpu_used([], used=0, index=1)))
    assert rest_row(table, "0") is None and rest_row(table, "1") is None


def test_no_na_row_for_a_mig_parent_whose_processes_are_on_its_mig_devices(table):
    parent = gpu_used([], used=20 * GiB, total=80 * GiB,
                      notes={"processes": "n/a (see MIG devices)"})
    child = gpu_used([proc(1, 9 * GiB)], used=10 * GiB, total=40 * GiB, mig_index=1)
    table.update_snapshot(snap(parent, child))
    assert rest_row(table, "0") is None
    assert cell(table, rest_row(table, "0/mig1"), COL_VRAM) == "1.0 GiB"


def test_unattributed_row_is_not_selectable_and_offers_no_actions(table, qtbot):
    table.update_snapshot(snap(gpu_used([proc(1, GiB)], used=GiB + 300 * MiB)))
    table.show()
    qtbot.waitExposed(table)
    r = rest_row(table)
    index = table.model().index(r, 0)
    assert not (table.model().flags(index) & Qt.ItemFlag.ItemIsSelectable)
    assert table.model().flags(index) & Qt.ItemFlag.ItemIsEnabled  # tooltips still work
    heard = []
    table.process_selected.connect(lambda *args: heard.append(args))
    table.details_requested.connect(lambda pid: heard.append(("details", pid)))
    table.selectRow(r)
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton,
                     pos=table.visualRect(table.model().index(r, COL_COMMAND)).center())
    double_click(table, qtbot, table.visualRect(table.model().index(r, COL_COMMAND)).center())
    assert table.selected_key() is None and table.selected_agent() is None
    assert heard == []
    assert table.model().index(r, 0).data(AGENT_ROLE) is None
    assert table.source_model.process(table.source_model.row_for(
        ("0", UNATTRIBUTED_KEY, None))) is None
    # Clicking it from a selected process selects nothing (as a click on empty space).
    table.selectRow(table.visible_row_of("0", 1))
    assert table.selected_key() == ("0", (1, NOW - 100))
    with qtbot.waitSignal(table.process_selected) as blocker:
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton,
                         pos=table.visualRect(table.model().index(r, COL_COMMAND)).center())
    assert blocker.args == [None, None]
    assert table.selected_key() is None


def test_unattributed_row_updates_in_place_under_a_stable_key(table):
    model = table.source_model
    a, b = proc(1, GiB), proc(2, 2 * GiB)
    table.update_snapshot(snap(gpu_used([a, b], used=3 * GiB + 300 * MiB),
                               gpu_used([proc(3, GiB)], used=GiB + 5 * MiB, index=1)))
    key = ("0", UNATTRIBUTED_KEY, None)
    assert key in model.keys() and ("1", UNATTRIBUTED_KEY, None) in model.keys()  # noqa: SIM118
    painted(table)
    events = []
    model.rowsRemoved.connect(lambda *args: events.append("removed"))
    model.rowsInserted.connect(lambda *args: events.append("inserted"))
    model.modelReset.connect(lambda *args: events.append("reset"))
    model.dataChanged.connect(lambda tl, br, *_: events.append((tl.row(), br.row(), br.column())))
    for extra in (310, 320, 330):
        events.clear()
        table.update_snapshot(snap(gpu_used([a, b], used=3 * GiB + extra * MiB),
                                   gpu_used([proc(3, GiB)], used=GiB + 5 * MiB, index=1)))
        assert cell(table, rest_row(table), COL_VRAM) == f"{extra} MiB"
        # That row changed in place: its VRAM cell repaints, nothing else moves.
        row = model.keys().index(key)
        assert (row, row, COL_VRAM) in events and {e[:2] for e in events} == {(row, row)}
        table.grab()
    assert model.keys().count(key) == 1


def test_unattributed_key_never_collides_with_a_process(table):
    # pid 0 with an unknown create time: the closest a process key gets.
    odd = ProcessSample(0, GiB, create_time=None)
    table.update_snapshot(snap(gpu_used([odd, proc(1, GiB)], used=2 * GiB + 300 * MiB)))
    keys = table.source_model.keys()
    assert len(keys) == len(set(keys)) == 3
    assert ("0", 0, None) in keys and ("0", UNATTRIBUTED_KEY, None) in keys
    assert table.visible_row_of("0", 0) != rest_row(table)
    assert table.select_key("0", odd.key)
    assert table.selected_key() == ("0", odd.key)


def test_unattributed_row_sorts_by_memory_with_the_processes(table):
    procs = [proc(1, 900 * MiB), proc(2, 100 * MiB), proc(3, None)]
    table.update_snapshot(snap(gpu_used(procs, used=None)))  # unknown used: no row yet
    used = 2 * GiB
    table.update_snapshot(snap(gpu_used(procs[:2], used=used)))  # 1024 MiB unattributed
    table.sortByColumn(COL_VRAM, Qt.SortOrder.DescendingOrder)
    assert column(table, COL_VRAM) == ["1.0 GiB", "900 MiB", "100 MiB"]
    assert rest_row(table) == 0
    table.sortByColumn(COL_VRAM, Qt.SortOrder.AscendingOrder)
    assert rest_row(table) == 2
    # Columns it has no value in: after the processes, in either order.
    table.sortByColumn(COL_PID, Qt.SortOrder.DescendingOrder)
    assert column(table, COL_PID) == ["2", "1", ""]
    table.sortByColumn(COL_CPU, Qt.SortOrder.AscendingOrder)
    assert rest_row(table) == 2


# -- rows hold still under the pointer ------------------------------------------------------

def agent(pid):
    return AgentReport(pid=pid, argv=("python", f"job{pid}.py"), python="3.11", torch="2.5.1",
                       torch_status="loaded", cuda_initialized=True, allocator_backend="native",
                       devices=(), models=())


def with_agents(snapshot):
    pids = [p.pid for g in snapshot.gpus for p in g.processes]
    return dataclasses.replace(snapshot, agents={pid: agent(pid) for pid in pids})


def pids(table):
    return [int(p) if p else None for p in column(table, COL_PID)]


def hover(table):
    """The pointer enters the rows."""
    vp = table.viewport()
    pos = QPointF(vp.rect().center())
    QApplication.sendEvent(vp, QEnterEvent(pos, pos, QPointF(vp.mapToGlobal(pos.toPoint()))))


def leave(table):
    QApplication.sendEvent(table.viewport(), QEvent(QEvent.Type.Leave))


def double_click(table, qtbot, pos):
    """What a double-click delivers: press, release, double-click, release."""
    vp = table.viewport()
    qtbot.mouseClick(vp, Qt.MouseButton.LeftButton, pos=pos)
    qtbot.mouseDClick(vp, Qt.MouseButton.LeftButton, pos=pos)
    qtbot.mouseRelease(vp, Qt.MouseButton.LeftButton, pos=pos)


@pytest.fixture
def shown(table, qtbot):
    table.resize(1200, 300)
    table.show()
    qtbot.waitExposed(table)
    return table


def test_rows_hold_still_under_the_pointer(shown, qtbot):
    table = shown
    a, b, c = proc(1, 1 * GiB), proc(2, 2 * GiB), proc(3, 3 * GiB)
    table.update_snapshot(with_agents(snap(gpu([a, b, c]))))
    assert pids(table) == [3, 2, 1]
    hover(table)
    assert table.rows_held
    # The user aims at pid 1; pid 1 grows past the others: its figures change, its
    # row stays, and the double-click opens the process aimed at.
    aim = table.visualRect(table.model().index(table.visible_row_of("0", 1), COL_COMMAND))
    table.update_snapshot(with_agents(snap(gpu([a._replace(gpu_memory=5 * GiB), b, c]))))
    assert pids(table) == [3, 2, 1]
    assert cell(table, 2, COL_VRAM) == "5.0 GiB"
    with qtbot.waitSignal(table.details_requested) as blocker:
        double_click(table, qtbot, aim.center())
    assert blocker.args == [1, ""]
    # The pointer leaves: a moment later the rows take their order.
    leave(table)
    assert pids(table) == [3, 2, 1]
    qtbot.waitUntil(lambda: pids(table) == [1, 3, 2], timeout=RESUME_MS + 2000)
    assert not table.rows_held


def test_coming_back_within_the_moment_keeps_the_rows_held(shown, qtbot):
    table = shown
    a, b = proc(1, 1 * GiB), proc(2, 2 * GiB)
    table.update_snapshot(snap(gpu([a, b])))
    hover(table)
    table.update_snapshot(snap(gpu([a._replace(gpu_memory=5 * GiB), b])))
    leave(table)
    hover(table)  # e.g. over the header and back
    qtbot.wait(RESUME_MS + 200)
    assert table.rows_held and pids(table) == [2, 1]


def test_arrivals_append_and_departures_grey_out_while_held(shown, qtbot):
    table = shown
    a, b, c = proc(1, 1 * GiB), proc(2, 2 * GiB), proc(3, 3 * GiB)
    table.update_snapshot(with_agents(snap(gpu([a, b, c]))))
    table.select_key("0", b.key)
    hover(table)
    heard = []
    table.process_selected.connect(lambda *args: heard.append(args))
    d = proc(4, 10 * GiB)
    table.update_snapshot(with_agents(snap(gpu([a, c, d]))))
    # The new process at the end, the ended one where it was.
    assert pids(table) == [3, 2, 1, 4]
    ended = table.model().index(1, COL_VRAM)
    assert ended.data(Qt.ItemDataRole.ForegroundRole) == pal.muted(QGuiApplication.palette())
    assert ended.data(Qt.ItemDataRole.ToolTipRole) == ENDED_TIP
    assert not (table.model().flags(ended) & Qt.ItemFlag.ItemIsSelectable)
    assert ended.data(AGENT_ROLE) is None  # nothing to open
    assert table.menu_for(ended) is None  # nor to terminate
    # The selection does not stay on a process that has gone.
    assert table.selected_key() is None and heard == [(None, None)]
    # It comes back before the pointer leaves: live again, in place.
    table.update_snapshot(with_agents(snap(gpu([a, b, c, d]))))
    assert pids(table) == [3, 2, 1, 4]
    assert table.model().index(1, COL_VRAM).data(Qt.ItemDataRole.ForegroundRole) is None
    table.update_snapshot(with_agents(snap(gpu([a, c, d]))))
    leave(table)
    qtbot.waitUntil(lambda: pids(table) == [4, 3, 1], timeout=RESUME_MS + 2000)


def test_selection_follows_its_process_when_the_rows_sort_again(shown, qtbot):
    table = shown
    a, b, c = proc(1, 1 * GiB), proc(2, 2 * GiB), proc(3, 3 * GiB)
    table.update_snapshot(snap(gpu([a, b, c])))
    hover(table)
    table.selectRow(table.visible_row_of("0", 1))
    table.update_snapshot(snap(gpu([a._replace(gpu_memory=9 * GiB), b, c])))
    leave(table)
    qtbot.waitUntil(lambda: pids(table) == [1, 3, 2], timeout=RESUME_MS + 2000)
    assert table.selected_key() == ("0", a.key)
    assert table.selectionModel().selectedRows()[0].row() == 0
    table.sortByColumn(COL_PID, Qt.SortOrder.DescendingOrder)
    assert table.selected_key() == ("0", a.key)
    assert table.selectionModel().selectedRows()[0].row() == 2


def test_hidden_table_lets_its_rows_go(shown, qtbot):
    table = shown
    a, b = proc(1, 1 * GiB), proc(2, 2 * GiB)
    table.update_snapshot(snap(gpu([a, b])))
    hover(table)
    table.update_snapshot(snap(gpu([a._replace(gpu_memory=5 * GiB), b])))
    table.hide()  # another tab, or the window went to the tray: no pointer over it
    assert pids(table) == [1, 2]


# -- sorting ----------------------------------------------------------------------------------

def click_header(table, qtbot, col):
    header = table.horizontalHeader()
    x = header.sectionViewportPosition(col) + header.sectionSize(col) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton,
                     pos=header.viewport().rect().center().__class__(x, header.height() // 2))


def test_first_click_sorts_figures_largest_first_and_text_a_to_z(shown, qtbot):
    table = shown
    table.update_snapshot(snap(gpu([proc(1, 2 * GiB, cpu_percent=5.0, command="b.py"),
                                    proc(2, 1 * GiB, cpu_percent=50.0, command="c.py"),
                                    proc(3, 3 * GiB, cpu_percent=20.0, command="a.py")])))
    header = table.horizontalHeader()
    click_header(table, qtbot, COL_CPU)
    assert header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
    assert pids(table) == [2, 3, 1]
    click_header(table, qtbot, COL_COMMAND)
    assert header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder
    assert pids(table) == [3, 1, 2]
    click_header(table, qtbot, COL_PID)  # looked up, not ranked: lowest first
    assert pids(table) == [1, 2, 3]
    click_header(table, qtbot, COL_VRAM)
    assert pids(table) == [3, 1, 2]
    click_header(table, qtbot, COL_VRAM)  # the second click turns it round
    assert pids(table) == [2, 1, 3]


def test_sort_arrow_points_down_for_largest_first(shown):
    from PySide6.QtWidgets import QStyleOptionHeader

    table = shown
    header = table.horizontalHeader()
    for order, arrow in ((Qt.SortOrder.DescendingOrder, QStyleOptionHeader.SortIndicator.SortDown),
                         (Qt.SortOrder.AscendingOrder, QStyleOptionHeader.SortIndicator.SortUp)):
        table.sortByColumn(COL_VRAM, order)
        option = QStyleOptionHeader()
        header.initStyleOptionForIndex(option, COL_VRAM)
        assert option.sortIndicator == arrow
        header.initStyleOptionForIndex(option := QStyleOptionHeader(), COL_PID)
        assert option.sortIndicator == QStyleOptionHeader.SortIndicator.None_


# -- colour swatches ----------------------------------------------------------------------------

def swatch(table, row):
    icon = cell(table, row, COL_COMMAND, Qt.ItemDataRole.DecorationRole)
    if icon is None:
        return None
    image = icon.pixmap(16, 16).toImage()
    return image.pixelColor(image.width() // 2, image.height() // 2)


def test_swatch_shows_the_curve_colour_of_processes_with_a_curve(table):
    a, b, c = proc(1, 3 * GiB), proc(2, 2 * GiB), proc(3, 1 * GiB)
    table.update_snapshot(snap(gpu([a, b, c]), gpu([a._replace(gpu_memory=GiB)], index=1)))
    assert swatch(table, 0) is None  # no colours given: no swatches
    red, green = QColor("#d62728"), QColor("#2ca02c")
    # By process key (every GPU), or by (GPU, process key) for one GPU only.
    table.set_colors({a.key: red, ("0", b.key): green})
    assert swatch(table, table.visible_row_of("0", 1)) == red
    assert swatch(table, table.visible_row_of("1", 1)) == red
    assert swatch(table, table.visible_row_of("0", 2)) == green
    # Summed into "other": room kept, so the commands line up, but no colour.
    assert swatch(table, table.visible_row_of("0", 3)).alpha() == 0
    table.set_colors({a.key: red, ("1", a.key): green})
    assert swatch(table, table.visible_row_of("0", 1)) == red
    assert swatch(table, table.visible_row_of("1", 1)) == green  # the GPU's own wins
    table.set_colors({})
    assert swatch(table, 0) is None


def test_new_colours_repaint_only_the_command_column(table):
    table.update_snapshot(snap(gpu([proc(1, GiB), proc(2, GiB)])))
    changes = []
    table.source_model.dataChanged.connect(lambda tl, br, roles: changes.append(
        (tl.column(), br.column(), list(roles))))
    table.set_colors({(1, NOW - 100): QColor("red")})
    table.set_colors({(1, NOW - 100): QColor("red")})  # the same again: nothing
    assert changes == [(COL_COMMAND, COL_COMMAND, [Qt.ItemDataRole.DecorationRole])]


# -- the row menu ---------------------------------------------------------------------------------

def menu_actions(menu):
    return {a.text(): a for a in menu.actions() if a.text()}


def test_row_menu_terminates_and_opens_by_pid(table, qtbot):
    a, b = proc(1, 2 * GiB), proc(2, GiB)
    table.update_snapshot(dataclasses.replace(snap(gpu_used([a, b], used=4 * GiB)),
                                              agents={1: agent(1)}))
    menu = table.menu_for(table.model().index(table.visible_row_of("0", 1), COL_VRAM))
    actions = menu_actions(menu)
    assert list(actions) == ["Details…", "Terminate…"]
    with qtbot.waitSignal(table.terminate_requested) as blocker:
        actions["Terminate…"].trigger()
    assert blocker.args == [1, ""]
    with qtbot.waitSignal(table.details_requested) as blocker:
        actions["Details…"].trigger()
    assert blocker.args == [1, ""]
    # No agent: no details to open, but it can be terminated.
    actions = menu_actions(table.menu_for(table.model().index(table.visible_row_of("0", 2), 0)))
    assert not actions["Details…"].isEnabled() and actions["Terminate…"].isEnabled()
    with qtbot.waitSignal(table.terminate_requested) as blocker:
        actions["Terminate…"].trigger()
    assert blocker.args == [2, ""]
    # The unattributed memory is no process: no menu.
    assert table.menu_for(table.model().index(rest_row(table), COL_COMMAND)) is None


def test_row_menu_offers_no_terminate_for_a_pid_not_seen_here(table):
    table.update_snapshot(snap(gpu([ProcessSample(7, GiB, host_status=HostStatus.NOT_VISIBLE),
                                    ProcessSample(8, GiB, host_status=HostStatus.EXITED)])))
    for pid in (7, 8):
        menu = table.menu_for(table.model().index(table.visible_row_of("0", pid), 0))
        assert not menu_actions(menu)["Terminate…"].isEnabled()


def test_right_click_opens_the_menu_and_holds_the_rows(shown, qtbot):
    from PySide6.QtCore import QTimer
    from PySide6.QtGui import QContextMenuEvent

    table = shown
    a, b = proc(1, 1 * GiB), proc(2, 2 * GiB)
    table.update_snapshot(snap(gpu([a, b])))
    seen = []

    def while_open():  # a snapshot arrives, then the user picks Terminate…
        menu = QApplication.activePopupWidget()
        seen.append(table.rows_held)
        table.update_snapshot(snap(gpu([a._replace(gpu_memory=5 * GiB), b])))
        seen.append(pids(table))
        menu_actions(menu)["Terminate…"].trigger()
        menu.close()

    QTimer.singleShot(50, while_open)
    pos = table.visualRect(table.model().index(table.visible_row_of("0", 1), COL_GPU)).center()
    with qtbot.waitSignal(table.terminate_requested) as blocker:
        QApplication.sendEvent(table.viewport(), QContextMenuEvent(
            QContextMenuEvent.Reason.Mouse, pos, table.viewport().mapToGlobal(pos)))
    assert blocker.args == [1, ""]
    assert seen == [True, [2, 1]]
    qtbot.waitUntil(lambda: pids(table) == [1, 2], timeout=RESUME_MS + 2000)


def test_a_changed_figure_repaints_its_cell_not_the_whole_table(table):
    """Every sample changes a few figures; the view repaints only the cells that
    look different."""
    model = table.source_model
    a, b = proc(1, GiB), proc(2, 2 * GiB)
    table.update_snapshot(snap(gpu([a, b])))
    painted(table)
    ranges = []
    model.dataChanged.connect(lambda tl, br, *_: ranges.append(
        ((tl.row(), tl.column()), (br.row(), br.column()))))
    table.update_snapshot(snap(gpu([proc(1, GiB, cpu_percent=55.0), b])))
    row = model.keys().index(("0", 1, a.create_time))
    assert ranges == [((row, COL_CPU), (row, COL_CPU))]
    assert cell(table, table.visible_row_of("0", 1), COL_CPU) == "55 %"
    table.grab()
    ranges.clear()
    # A process that exits: its command says so, muted; its figures stay as they were.
    table.update_snapshot(snap(gpu([proc(1, GiB, cpu_percent=55.0,
                                         host_status=HostStatus.EXITED), b])))
    assert ranges == [((row, COL_COMMAND), (row, COL_COMMAND))]
    assert cell(table, table.visible_row_of("0", 1), COL_COMMAND) == "python job1.py (exited)"
    table.grab()
    ranges.clear()
    # Figures that move without changing what a cell says (1.0 GiB and 2 MiB, 55.2 %):
    # nothing to repaint; the row still sorts by the new figure.
    table.update_snapshot(snap(gpu([proc(1, GiB + 2 * MiB, cpu_percent=55.2,
                                         host_status=HostStatus.EXITED), b])))
    assert ranges == []
    assert model.row_at(row).proc.gpu_memory == GiB + 2 * MiB


def test_rows_never_painted_send_no_repaints_unless_a_filter_reads_them(table):
    """A row scrolled out of sight (or in a hidden table) was never painted:
    nothing on screen to repaint.  A filter reads every row's text, so while one
    is set every change is told, and a row whose new figure matches it appears."""
    model = table.source_model
    table.update_snapshot(snap(gpu([proc(1, GiB), proc(2, 2 * GiB)])))
    ranges = []
    model.dataChanged.connect(lambda tl, br, *_: ranges.append((tl.row(), br.row())))
    table.update_snapshot(snap(gpu([proc(1, GiB, cpu_percent=55.0), proc(2, 2 * GiB)])))
    assert ranges == []
    assert cell(table, table.visible_row_of("0", 1), COL_CPU) == "55 %"  # asked: current
    table.proxy.setFilterFixedString("77 %")
    assert table.proxy.rowCount() == 0
    table.update_snapshot(snap(gpu([proc(1, GiB, cpu_percent=77.0), proc(2, 2 * GiB)])))
    assert ranges
    assert table.proxy.rowCount() == 1
    assert cell(table, 0, COL_PID) == "1"


def test_an_agentless_pytorch_process_offers_its_environments_install_command(table):
    from PySide6.QtGui import QGuiApplication

    from app.core.diagnosis.agentless import AgentlessEnv, no_agent

    a, b = proc(1, 2 * GiB), proc(2, GiB)
    shot = snap(gpu_used([a, b], used=4 * GiB))
    env = AgentlessEnv("/home/ana/sd/venv", None, "venv")
    finding = no_agent([(shot.gpus[0], a)], env)
    table.update_snapshot(dataclasses.replace(shot, diagnoses=(finding,)))
    actions = menu_actions(table.menu_for(table.model().index(table.visible_row_of("0", 1), 0)))
    copy = actions["Copy the agent's install command"]
    assert actions["Details…"].isEnabled()  # they say how to invite the agent
    assert copy.toolTip().startswith("vram-steward agent install --env /home/ana/sd/venv\n")
    copy.trigger()
    assert QGuiApplication.clipboard().text() == "vram-steward agent install --env /home/ana/sd/venv"
    # Not a PyTorch process the Doctor named: nothing to install there.
    other = menu_actions(table.menu_for(table.model().index(table.visible_row_of("0", 2), 0)))
    assert "Copy the agent's install command" not in other


# -- model servers --------------------------------------------------------------------------------

def server_table(table):
    from tests.unit.ui.agents import servers as srv

    table.update_snapshot(srv.snapshot())
    return srv


def row_of(table, pid):
    did = next(did for did in ("0", "1") if table.visible_row_of(did, pid) is not None)
    return table.visible_row_of(did, pid)


def test_a_servers_processes_are_named_by_their_server(table):
    srv = server_table(table)
    names = {pid: cell(table, row_of(table, pid), COL_COMMAND)
             for pid in (srv.OLLAMA, srv.RUNNER, srv.COMFY, srv.A1111, srv.LLAMA, srv.VLLM)}
    assert names == {
        srv.OLLAMA: "Ollama 0.12.3 (server)",
        srv.RUNNER: "Ollama runner · qwen2.5:7b, llama3.2:3b",
        srv.COMFY: "ComfyUI 0.3.40 (server)",
        srv.A1111: "AUTOMATIC1111 (server) · sd_xl_base_1.0.safetensors [31e35c80fc]",
        srv.LLAMA: "llama.cpp b4500 (server) · Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        srv.VLLM: "vLLM 0.8.5 (server) · Qwen/Qwen2.5-7B-Instruct",
    }
    # The VRAM column stays NVML's figure of the process itself.
    assert cell(table, row_of(table, srv.RUNNER), COL_VRAM) == "6.9 GiB"
    # The filter finds a server by its name and a runner by its model.
    table.proxy.setFilterFixedString("qwen2.5:7b")
    assert table.proxy.rowCount() == 1
    table.proxy.setFilterFixedString("")


def test_a_server_rows_tooltip_says_what_it_holds_and_what_its_unload_does(table):
    srv = server_table(table)
    tip = cell(table, row_of(table, srv.RUNNER), COL_COMMAND, Qt.ItemDataRole.ToolTipRole)
    lines = tip.splitlines()
    assert lines[0].startswith("Ollama 0.12.3: model server at http://127.0.0.1:11434")
    assert "This process is its runner: the memory is the server's" in lines
    assert any(line.startswith("  qwen2.5:7b: 4.7 GiB, loaded, idle 4 min 05 s") for line in lines)
    assert f"Unload: {srv.OLLAMA_UNLOAD}" in lines
    assert any(line.startswith("/usr/local/bin/ollama runner --model") for line in lines)
    tip = cell(table, row_of(table, srv.LLAMA), COL_COMMAND, Qt.ItemDataRole.ToolTipRole)
    assert f"No unload: {srv.LLAMA_NONE}" in tip.splitlines()


def test_a_server_rows_menu_unloads_its_models_or_says_why_it_cannot(table, qtbot):
    from app.core.control.requests import Reload, Unload

    srv = server_table(table)
    actions = menu_actions(table.menu_for(table.model().index(row_of(table, srv.RUNNER), 0)))
    assert list(actions) == ["Details…", "Unload qwen2.5:7b (Ollama)",
                             "Unload llama3.2:3b (Ollama): generating now", "Terminate…"]
    assert actions["Details…"].isEnabled()
    assert not actions["Unload llama3.2:3b (Ollama): generating now"].isEnabled()
    with qtbot.waitSignal(table.request) as sent:
        actions["Unload qwen2.5:7b (Ollama)"].trigger()
    assert sent.args == [Unload(srv.OLLAMA, "qwen2.5:7b", name="qwen2.5:7b",
                                size=srv.ollama().models[0].vram_bytes)]
    actions = menu_actions(table.menu_for(table.model().index(row_of(table, srv.LLAMA), 0)))
    line = actions["llama.cpp's server has no unload API"]
    assert not line.isEnabled() and line.toolTip() == srv.LLAMA_NONE
    actions = menu_actions(table.menu_for(table.model().index(row_of(table, srv.A1111), 0)))
    (reload_text,) = [t for t in actions if t.startswith("Reload")]
    with qtbot.waitSignal(table.request) as sent:
        actions[reload_text].trigger()
    assert isinstance(sent.args[0], Reload) and sent.args[0].pid == srv.A1111


def test_a_server_row_has_details(table, qtbot):
    srv = server_table(table)
    index = table.model().index(row_of(table, srv.VLLM), 0)
    table.selectRow(index.row())
    assert table.selected_details() == (srv.VLLM, "") and table.selected_agent() is None
    with qtbot.waitSignal(table.details_requested) as blocker:
        table.doubleClicked.emit(index)
    assert blocker.args == [srv.VLLM, ""]
    # A process of no server and without an agent has none.
    table.update_snapshot(snap(gpu([proc(1, GiB)])))
    table.selectRow(0)
    assert table.selected_details() is None


def test_a_server_row_repaints_when_its_models_change(table, qtbot):
    srv = server_table(table)
    runner = row_of(table, srv.RUNNER)
    painted(table)
    changed = []
    table.source_model.dataChanged.connect(lambda a, b, roles=(): changed.append(a.row()))
    o = srv.ollama()
    table.update_snapshot(srv.snapshot(servers=(dataclasses.replace(o, models=o.models[:1]),)))
    assert cell(table, row_of(table, srv.RUNNER), COL_COMMAND) == "Ollama runner · qwen2.5:7b"
    assert changed and runner is not None
