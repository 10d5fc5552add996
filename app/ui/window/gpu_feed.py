"""A snapshot fanned out to the GPU area: every host's GPUs to their tiles and
panels, and to each panel the agents of the host its GPU is on.

Pids are their host's own, so a panel's agents, and the busy set it is told
about, come from its GPU's host (``snapshot_of``, ``busy_pids(host)``), never
from this machine's for a remote GPU."""

from __future__ import annotations

from app.core.monitor.hosts import every_gpu, host_view, snapshot_of
from app.core.monitor.samples import GpuSample, Snapshot
from app.ui.gpu.panel import GpuPanel
from app.ui.shell.controller import ControllerAdapter
from app.ui.style.hosts import stale
from app.ui.window.gpu_area import GpuArea


def feed_gpu_area(area: GpuArea, snapshot: Snapshot, controller: ControllerAdapter) -> None:
    """Tiles and panels for every GPU of ``snapshot`` (this machine's and each host's)."""
    gpus = every_gpu(snapshot)
    area.update_gpus(gpus, snapshot.hosts)
    busy: dict[str, set[int]] = {}
    for gpu in gpus:
        panel = area.panels.get(gpu.display_id)
        if panel is None:
            continue  # behind the overview, not made yet
        if gpu.host not in busy:
            busy[gpu.host] = controller.busy_pids(gpu.host)
        feed_agents(panel, gpu, snapshot, controller, busy[gpu.host])
    if area.tiles and area.wanted_arrangement() != (area.arrangement, area.columns):
        area.arrange()  # a panel's minimum height changed (its PyTorch section)


def feed_agents(panel: GpuPanel, gpu: GpuSample, snapshot: Snapshot | None,
                controller: ControllerAdapter, busy: set[int] | None = None) -> None:
    """``panel``'s "PyTorch memory" section from the agents of ``gpu``'s host.
    A host not connected is shown, not acted on: its actions stay disabled."""
    own = snapshot_of(snapshot, gpu.host)
    agents = own.agents if own is not None else {}
    if not agents and panel.agent_section.isHidden():
        return
    busy = controller.busy_pids(gpu.host) if busy is None else busy
    gpu_busy = bool(busy) and any(p.pid in busy for p in gpu.processes)
    can_act = controller.available and not stale(host_view(snapshot, gpu.host))
    panel.update_agents(gpu, agents, gpu_busy, can_act)
