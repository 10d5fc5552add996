"""The agents' families of ``/metrics``: the PyTorch caching allocator per process
and GPU, and model bytes per process by the model's state.  A CUDA device is
named by the NVML GPU behind it (``placement.gpu_of_device``), so these series
join the per-GPU ones on ``gpu`` and ``uuid``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from app.core.agents.placement import gpu_of_device
from app.core.agents.types import AgentReport, DeviceMemory
from app.core.monitor.samples import Snapshot

TORCH_LABELS = ("gpu", "uuid", "pid")
MODEL_LABELS = ("pid", "state")


def agent_reports(snapshot: Snapshot,
                  chosen: Collection[int] | None) -> list[tuple[int, AgentReport]]:
    """The snapshot's agent reports of the ``chosen`` pids (None: all), by pid."""
    return [(pid, r) for pid, r in sorted(snapshot.agents.items())
            if isinstance(r, AgentReport) and (chosen is None or pid in chosen)]


def placed_devices(snapshot: Snapshot, pid: int,
                   report: AgentReport) -> Iterator[tuple[str, str, DeviceMemory]]:
    """(gpu display id, GPU uuid, device) of each device that maps to an NVML GPU,
    one per GPU; a device no GPU of the snapshot stands for is left out."""
    uuids = {g.display_id: g.uuid or "" for g in snapshot.gpus}
    seen: set[str] = set()
    for dev in report.devices:
        gpu = gpu_of_device(snapshot, report, f"cuda:{dev.index}", pid)
        if gpu is None or gpu in seen:
            continue
        seen.add(gpu)
        yield gpu, uuids.get(gpu, ""), dev


def torch_families(snapshot: Snapshot, chosen: Collection[int] | None) -> Iterator[Metric]:
    """Allocated, reserved and cache bytes of each agent's process on each GPU."""
    allocated = GaugeMetricFamily(
        "vram_steward_torch_allocated_bytes",
        "Bytes of live tensors in a process's PyTorch caching allocator on one GPU.",
        labels=TORCH_LABELS, unit="bytes")
    reserved = GaugeMetricFamily(
        "vram_steward_torch_reserved_bytes",
        "Bytes a process's PyTorch caching allocator holds on one GPU (tensors and cache).",
        labels=TORCH_LABELS, unit="bytes")
    cache = GaugeMetricFamily(
        "vram_steward_torch_cache_bytes",
        "Reserved minus allocated: what empty_cache could give back at most.",
        labels=TORCH_LABELS, unit="bytes")
    for pid, report in agent_reports(snapshot, chosen):
        for gpu, uuid, dev in placed_devices(snapshot, pid, report):
            labels = [gpu, uuid, str(pid)]
            for family, value in ((allocated, dev.allocated), (reserved, dev.reserved),
                                  (cache, dev.cache)):
                if value is not None:
                    family.add_metric(labels, value)
    yield from (allocated, reserved, cache)


def model_bytes_by_state(report: AgentReport) -> dict[str, int]:
    """Parameter plus buffer bytes of the report's models, summed by state; a model
    with neither figure known counts in no state."""
    out: dict[str, int] = {}
    for m in report.models:
        if m.param_bytes is None and m.buffer_bytes is None:
            continue
        out[m.state] = out.get(m.state, 0) + (m.param_bytes or 0) + (m.buffer_bytes or 0)
    return out


def model_families(snapshot: Snapshot, chosen: Collection[int] | None) -> Iterator[Metric]:
    """``vram_steward_model_bytes{pid,state}``."""
    family = GaugeMetricFamily(
        "vram_steward_model_bytes",
        "Bytes of a process's models (parameters and buffers) by the model's state: "
        "resident, unloading, offloaded, reloading.",
        labels=MODEL_LABELS, unit="bytes")
    for pid, report in agent_reports(snapshot, chosen):
        for state, nbytes in sorted(model_bytes_by_state(report).items()):
            family.add_metric([str(pid), state], nbytes)
    yield family
