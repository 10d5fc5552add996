"""ProcessTable: rendering of unknown values and host statuses, numeric sorting, the
container column and the per-GPU unattributed row."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.core.monitor.samples import Container, GpuSample, HostStatus, ProcessSample, Snapshot
from app.core.units import GiB, MiB
from app.ui.style import palette as pal
from app.ui.window.process_rows import (
    AGENT_ROLE,
    COL_COMMAND,
    COL_CONTAINER,
    COL_CPU,
    COL_GPU,
    COL_PCT,
    COL_PID,
    COL_RSS,
    COL_SM,
    COL_UPTIME,
    COL_USER,
    COL_VRAM,
    COLUMNS,
    KEY_ROLE,
    UNATTRIBUTED_KEY,
    UNATTRIBUTED_TEXT,
)
from app.ui.window.process_table import ProcessTable

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


def test_container_column_gives_way_to_the_command_in_a_narrow_table(table, qtbot):
    table.update_snapshot(snap(gpu([proc(1, GiB, container=SHY)])))
    table.resize(1600, 300)
    table.show()
    qtbot.waitExposed(table)
    wide = table.columnWidth(COL_CONTAINER)
    assert wide >= table.fontMetrics().horizontalAdvance("podman 3f4e2a1b9c0d")
    table.resize(860, 300)
    qtbot.wait(10)
    assert table.columnWidth(COL_CONTAINER) < wide
    assert table.columnWidth(COL_COMMAND) >= 160  # squeezed, never to nothing
    # The full label stays in the cell (elided when drawn) and in the tooltip.
    assert cell(table, 0, COL_CONTAINER) == "podman 3f4e2a1b9c0d"


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
    qtbot.mouseDClick(table.viewport(), Qt.MouseButton.LeftButton,
                      pos=table.visualRect(table.model().index(r, COL_COMMAND)).center())
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
    events = []
    model.rowsRemoved.connect(lambda *args: events.append("removed"))
    model.rowsInserted.connect(lambda *args: events.append("inserted"))
    model.modelReset.connect(lambda *args: events.append("reset"))
    model.dataChanged.connect(lambda *args: events.append("changed"))
    for extra in (310, 320, 330):
        table.update_snapshot(snap(gpu_used([a, b], used=3 * GiB + extra * MiB),
                                   gpu_used([proc(3, GiB)], used=GiB + 5 * MiB, index=1)))
        assert cell(table, rest_row(table), COL_VRAM) == f"{extra} MiB"
    assert events == ["changed"] * 3  # one row changed in place per tick
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
