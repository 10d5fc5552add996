"""Rows for processes whose agent reports while the driver cannot be read.

Without NVML no GPU lists its processes, yet an agent still answers over its
own socket: its process, its CUDA devices with the caching allocator's
figures, its models.  Each such process gets one row per CUDA device it uses
(``cuda:0`` as the process numbers it: without the driver there is no mapping
onto the machine's GPU numbers), or one row when it uses none.  What only the
driver knows (the process's VRAM, its share of the GPU, SM %) is n/a, with
the reason in the cell's tooltip; nothing is made up.
"""

from __future__ import annotations

import os

from app.core.agents.types import AgentReport
from app.core.control.terminate import current_user
from app.core.monitor.hosts import qualified_id
from app.core.monitor.samples import ProcessSample
from app.ui.window.process_rows import ProcessRow

#: The GPU column of a process that has not initialised CUDA.
NO_DEVICE = "no CUDA"
#: Why VRAM, % and SM % are n/a in these rows.
NO_DRIVER_NOTE = ("The NVIDIA driver cannot be read, so what this process holds on the GPU "
                  "is unknown; its agent's PyTorch figures are under Cache and in Details")
#: After every GPU's index in the GPU column's sort.
_AFTER_GPUS = 1 << 20


def _sample(report: AgentReport, user: str | None) -> ProcessSample:
    argv = report.argv
    name = os.path.basename(argv[0]) if argv and argv[0] else None
    command = " ".join(argv) if argv else None
    return ProcessSample(report.pid, None, name=name, user=user, command=command)


def agent_only_rows(agents: dict[int, AgentReport], listed: set[int], rank: int,
                    host: str = "", user: str | None = None, now: float = 0.0,
                    stale: str | None = None, stale_tip: str | None = None) -> list[ProcessRow]:
    """The rows of ``agents`` whose pid no GPU lists (``listed``), on host
    ``host`` (ranked ``rank``); ``user``: whose agents they are (an agent
    answers only its own user; None: this machine's user)."""
    if user is None and not host:
        user = current_user()  # as the driver's rows spell their owners
    rows: list[ProcessRow] = []
    for pid, report in sorted(agents.items()):
        if pid in listed:
            continue
        proc = _sample(report, user)
        devices = report.devices or (None,)
        for device in devices:
            local_id = NO_DEVICE if device is None else f"cuda:{device.index}"
            order = (rank, _AFTER_GPUS + (-1 if device is None else device.index), -1)
            rows.append(ProcessRow(qualified_id(local_id, host), order, proc, None, None,
                                   NO_DRIVER_NOTE, agent=report, device=device, now=now,
                                   host=host, stale=stale, stale_tip=stale_tip))
    return rows


__all__ = ["agent_only_rows", "NO_DEVICE", "NO_DRIVER_NOTE"]
