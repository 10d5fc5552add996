"""Unattributed memory in the UI: its explanation and when the table shows it.

``GpuSample.unattributed_memory`` is the one figure (used memory minus the
listed processes' memory); the table row, the graph (``SeriesView.unattributed``
from the history) and the legend show it and never recompute it.  Qt-free.
"""

from __future__ import annotations

from app.core.monitor.plot_data import UNATTRIBUTED_KEY
from app.core.monitor.plot_data import UNATTRIBUTED_LABEL as LABEL
from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.units import NA, fmt_bytes

_CAN_BE = ("It can be:\n"
           "• processes in other containers or PID namespaces, which the driver does not list"
           " here\n"
           "• memory of processes that have exited and that the driver has not released yet\n"
           "• the driver's own allocations (CUDA contexts, page tables)")


def explanation(display_id: str, value: int | None, reason: str | None = None) -> str:
    """The tooltip of the unattributed row: what the figure is and what it can be."""
    if value is None:
        why = f": {reason}" if reason else ""
        return (f"How much of GPU {display_id}'s used memory no listed process holds is "
                f"unknown{why}.\n\n{_CAN_BE}")
    return (f"{fmt_bytes(value)} of GPU {display_id}'s used memory is held by no process "
            f"listed here.\n\n{_CAN_BE}\n\n"
            "(Used memory minus the memory of the listed processes.)")


def unknown_reason(gpu: GpuSample) -> str | None:
    """Why ``gpu.unattributed_memory`` is None, in words (None when it is known)."""
    if gpu.unattributed_memory is not None:
        return None
    if gpu.state is not DeviceState.OK:
        return gpu.message or "the GPU does not answer"
    if gpu.memory_used is None:
        return _with_note("its used memory is unknown", gpu.notes.get("memory"))
    if "processes" in gpu.notes:
        return _with_note("the driver does not list this GPU's processes",
                          gpu.notes["processes"])
    return _with_note("the driver does not report the memory of every process",
                      gpu.notes.get("process_memory"))


def _with_note(text: str, note: str | None) -> str:
    """``"text (no permission)"`` from a note ``"n/a (no permission)"``."""
    if not note:
        return text
    if note.startswith(NA + " "):
        note = note[len(NA) + 1:]
    return f"{text} {note}" if note.startswith("(") else f"{text} ({note})"


def row_shown(gpu: GpuSample, snapshot: Snapshot) -> bool:
    """Whether the process table shows an unattributed row for ``gpu``.

    Shown when the figure is above 0.  When it is unknown, shown only where it
    explains something: a GPU using memory whose processes the driver does not
    list at all (no permission, not supported), so the row is the only one of
    its GPU.  Not beside processes whose own memory is already n/a, not for a
    MIG-enabled GPU whose processes are listed on its MIG devices, not for a
    lost GPU: there an n/a row would only repeat what the other rows say.
    """
    value = gpu.unattributed_memory
    if value is not None:
        return value > 0
    if gpu.state is not DeviceState.OK or not gpu.memory_used or gpu.processes:
        return False
    if gpu.mig_index is None and any(g.index == gpu.index and g.mig_index is not None
                                     for g in snapshot.gpus):
        return False
    return "processes" in gpu.notes


__all__ = ["UNATTRIBUTED_KEY", "LABEL", "explanation", "row_shown", "unknown_reason"]
