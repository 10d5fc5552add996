"""Agents' processes as rows while the driver cannot be read."""

from __future__ import annotations

from app.core.agents.types import AgentReport, DeviceMemory
from app.core.monitor.samples import Snapshot
from app.core.units import NA, fmt_bytes
from app.ui.window.agent_rows import NO_DEVICE, NO_DRIVER_NOTE, agent_only_rows
from app.ui.window.process_model import ProcessTableModel
from app.ui.window.process_rows import COL_CACHE, COL_GPU, COL_PCT, COL_VRAM, COLUMNS

G = 1 << 30


def report(pid: int, *devices: DeviceMemory) -> AgentReport:
    return AgentReport(pid, ("python", "train.py", "--lr", "3e-4"), "3.11.9", "2.13.0",
                       "loaded", bool(devices), "native", devices, ())


def test_one_row_per_cuda_device_with_the_allocators_figures_and_no_vram():
    agents = {41: report(41, DeviceMemory(0, 3 * G, 5 * G), DeviceMemory(1, G, G + 512)),
              42: report(42)}
    rows = agent_only_rows(agents, set(), 0, user="ada")
    assert [(r.proc.pid, r.text(COL_GPU)) for r in rows] == [
        (41, "cuda:0"), (41, "cuda:1"), (42, NO_DEVICE)]
    first = rows[0]
    assert first.text(COL_CACHE) == fmt_bytes(2 * G)  # reserved − allocated, the agent's
    assert first.text(COL_VRAM) == NA and first.text(COL_PCT) == NA  # only NVML knows
    assert first.tooltip(COL_VRAM) == NO_DRIVER_NOTE
    assert first.command_text() == "python train.py --lr 3e-4" and first.proc.user == "ada"
    assert len({r.key for r in rows}) == 3  # one row each, none overwrites another


def test_a_pid_a_gpu_lists_is_not_repeated():
    assert agent_only_rows({41: report(41)}, {41}, 0) == []


def test_the_table_shows_them_only_when_no_gpu_is_read(qapp):
    model = ProcessTableModel()
    agents = {41: report(41, DeviceMemory(0, G, 2 * G))}
    model.update_snapshot(Snapshot(1.0, 1.0, "nvml", None, (), "no NVIDIA driver", 0.0, agents))
    assert model.rowCount() == 1
    assert model.index(0, COLUMNS.index("GPU")).data() == "cuda:0"


def test_the_summary_counts_the_agents_not_zero_processes():
    from app.ui.window.texts import summary_texts

    agents = {41: report(41), 42: report(42)}
    summary, count = summary_texts(
        Snapshot(1.0, 1.0, "nvml", None, (), "no NVIDIA driver", 0.0, agents))
    assert summary == "no GPU figures  ·  2 processes with an agent"
    assert count == "2 processes with an agent"
