"""The process table with remote hosts: two hosts' pid 1234 on their GPU 0 kept
apart, the Host column and the filter on it, a disconnected host's rows greyed
with their last figures, and the host carried by every signal a row sends."""

from __future__ import annotations

import dataclasses
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.core.monitor.hosts import DISCONNECTED
from app.ui.style import palette as pal
from app.ui.window.process_rows import (
    COL_COMMAND,
    COL_GPU,
    COL_HOST,
    COL_PID,
    COL_UPTIME,
    COL_VRAM,
    HOST_ROLE,
    KEY_ROLE,
)
from app.ui.window.process_table import ProcessTable
from tests.unit.ui.window.two_hosts import EPOCH, PID, world


@pytest.fixture
def table(qtbot):
    t = ProcessTable()
    qtbot.addWidget(t)
    return t


def rows(table):
    """(host cell, GPU cell, pid, VRAM) of every row shown, sorted."""
    m = table.model()
    return sorted((m.index(r, COL_HOST).data(), m.index(r, COL_GPU).data(),
                   m.index(r, COL_PID).data(), m.index(r, COL_VRAM).data())
                  for r in range(m.rowCount()))


def row_of(table, host):
    m = table.model()
    return next(r for r in range(m.rowCount()) if m.index(r, 0).data(HOST_ROLE) == host)


def test_the_same_pid_on_the_same_gpu_id_of_two_hosts_is_two_rows(table):
    table.update_snapshot(world())
    assert rows(table) == [("gpu1", "0", "1234", "10.0 GiB"), ("gpu2", "0", "1234", "20.0 GiB"),
                           ("this machine", "0", "1234", "1.0 GiB")]
    keys = {table.model().index(r, 0).data(KEY_ROLE)[0] for r in range(3)}
    assert keys == {"0", "0@gpu1", "0@gpu2"}  # the key's GPU id names the host
    assert not table.isColumnHidden(COL_HOST)
    # A host's row keeps its identity across ticks: selected, it stays selected.
    assert table.select_key("0@gpu1", (PID, EPOCH - 600))
    table.update_snapshot(world(t=1.0))
    assert table.selected_key() == ("0@gpu1", (PID, EPOCH - 600))


def test_the_host_column_is_hidden_without_remote_hosts(table):
    table.update_snapshot(dataclasses.replace(world(), hosts=()))
    assert table.isColumnHidden(COL_HOST)
    assert rows(table) == [("this machine", "0", "1234", "1.0 GiB")]


def test_the_filter_matches_host_names(table):
    table.update_snapshot(world())
    table.proxy.setFilterFixedString("gpu2")
    assert rows(table) == [("gpu2", "0", "1234", "20.0 GiB")]
    table.proxy.setFilterFixedString("this machine")
    assert [r[0] for r in rows(table)] == ["this machine"]
    table.proxy.setFilterFixedString("train.py")
    assert [r[0] for r in rows(table)] == ["gpu1"]


def test_a_disconnected_hosts_rows_are_greyed_with_their_last_figures(table):
    since = EPOCH - 120
    table.update_snapshot(world(gpu2=DISCONNECTED, since=since))
    clock = time.strftime("%H:%M:%S", time.localtime(since))
    r = row_of(table, "gpu2")
    m = table.model()
    assert m.index(r, COL_HOST).data() == f"gpu2 · disconnected since {clock}"
    assert m.index(r, COL_VRAM).data() == "20.0 GiB"  # the last known, never 0
    muted = pal.muted(QGuiApplication.palette())
    for col in (COL_HOST, COL_COMMAND, COL_VRAM):
        assert m.index(r, col).data(Qt.ItemDataRole.ForegroundRole) == muted
    tip = m.index(r, COL_VRAM).data(Qt.ItemDataRole.ToolTipRole)
    assert f"disconnected since {clock}" in tip and "is `serve` running on gpu2?" in tip
    assert "last it sent" in tip
    # The other host's rows are current: not greyed.
    live = row_of(table, "gpu1")
    assert m.index(live, COL_VRAM).data(Qt.ItemDataRole.ForegroundRole) != muted
    # Its menu offers no action, and says why; its details still open.
    actions = {a.text(): a for a in table.menu_for(m.index(r, COL_COMMAND)).actions()}
    assert not actions["Terminate…"].isEnabled()
    assert "gpu2 is disconnected since" in actions["Terminate…"].toolTip()
    assert actions["Details…"].isEnabled()


def test_a_remote_processs_uptime_is_counted_on_its_hosts_clock(table):
    """gpu1's clock is an hour behind this one: its process started 10 min ago
    by its clock, while the snapshot is stamped on this machine's."""
    snap = world()
    one = snap.hosts[0]
    behind = 3600.0
    started = one.snapshot.gpus[0].processes[0]._replace(create_time=EPOCH - behind - 600)
    gpu0 = dataclasses.replace(one.snapshot.gpus[0], processes=(started,))
    one = dataclasses.replace(one, clock_skew_s=behind, snapshot=dataclasses.replace(
        one.snapshot, gpus=(gpu0, *one.snapshot.gpus[1:])))
    table.update_snapshot(dataclasses.replace(snap, hosts=(one, *snap.hosts[1:])))
    m = table.model()
    assert m.index(row_of(table, "gpu1"), COL_UPTIME).data() == "10 min 00 s"
    assert m.index(row_of(table, ""), COL_UPTIME).data() == "10 min 00 s"  # no skew here


def test_a_remote_rows_signals_name_its_host(table, qtbot):
    table.update_snapshot(world())
    index = table.model().index(row_of(table, "gpu1"), COL_COMMAND)
    actions = {a.text(): a for a in table.menu_for(index).actions()}
    with qtbot.waitSignal(table.details_requested) as details:
        actions["Details…"].trigger()
    assert details.args == [PID, "gpu1"]
    with qtbot.waitSignal(table.terminate_requested) as terminate:
        actions["Terminate…"].trigger()
    assert terminate.args == [PID, "gpu1"]
    with qtbot.waitSignal(table.details_requested) as double:
        table.doubleClicked.emit(index)
    assert double.args == [PID, "gpu1"]
    table.selectRow(index.row())
    assert table.selected_details() == (PID, "gpu1")
