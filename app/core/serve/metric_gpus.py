"""The per-GPU and per-process families of ``/metrics``: NVML's figures of one
snapshot, one series per GPU (``gpu`` = its display id, ``uuid``) and one per
process on a GPU.  An unknown figure (None) leaves its series out: a
dashboard shows a gap, never a 0 that did not happen.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, InfoMetricFamily, Metric

from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample, Snapshot

GPU_LABELS = ("gpu", "uuid")
PROCESS_LABELS = ("gpu", "uuid", "pid", "user", "command", "container")
#: Characters of a command line kept in the ``command`` label (bounded label values).
COMMAND_CHARS = 40


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _process_count(gpu: GpuSample) -> int | None:
    """Processes the driver lists; None when the list is unknown this tick."""
    if gpu.state is not DeviceState.OK or "processes" in gpu.notes:
        return None
    return len({p.pid for p in gpu.processes})


#: (name, HELP, unit, reader) of every per-GPU gauge.
GPU_GAUGES: tuple[tuple[str, str, str, Callable[[GpuSample], float | None]], ...] = (
    ("vram_steward_gpu_memory_used_bytes",
     "GPU memory in use, driver-reserved memory not included (NVML).", "bytes",
     lambda g: g.memory_used),
    ("vram_steward_gpu_memory_total_bytes", "GPU memory in all (NVML).", "bytes",
     lambda g: g.memory_total),
    ("vram_steward_gpu_memory_reserved_bytes",
     "GPU memory held by the driver and firmware, unusable by processes (NVML).", "bytes",
     lambda g: g.memory_reserved),
    ("vram_steward_gpu_utilization_ratio",
     "Share of the last sample period in which a kernel ran (NVML utilization.gpu).", "ratio",
     lambda g: _ratio(g.utilization_gpu)),
    ("vram_steward_gpu_memory_utilization_ratio",
     "Share of the last sample period in which device memory was read or written "
     "(bandwidth activity, not the share of memory used).", "ratio",
     lambda g: _ratio(g.utilization_memory)),
    ("vram_steward_gpu_temperature_celsius", "GPU core temperature.", "celsius",
     lambda g: g.temperature),
    ("vram_steward_gpu_power_watts", "Power draw of the board.", "watts",
     lambda g: g.power_draw),
    ("vram_steward_gpu_power_limit_watts", "Power limit the driver enforces.", "watts",
     lambda g: g.power_limit),
    ("vram_steward_gpu_unattributed_memory_bytes",
     "Memory in use that no listed process holds: other namespaces' processes, exited "
     "processes not yet released, the driver's own allocations.", "bytes",
     lambda g: g.unattributed_memory),
    ("vram_steward_gpu_processes", "Processes the driver lists on the GPU.", "",
     _process_count),
)


def gpu_labels(gpu: GpuSample) -> list[str]:
    return [gpu.display_id, gpu.uuid or ""]


def gpu_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Every per-GPU gauge and ``vram_steward_gpu_info``."""
    info = InfoMetricFamily("vram_steward_gpu", "The GPU's name and driver version (value 1).",
                            labels=GPU_LABELS)
    for g in snapshot.gpus:
        info.add_metric(gpu_labels(g), {"name": g.name,
                                        "driver_version": snapshot.driver_version or ""})
    yield info
    for name, doc, unit, read in GPU_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=GPU_LABELS, unit=unit)
        for g in snapshot.gpus:
            value = read(g)
            if value is not None:
                family.add_metric(gpu_labels(g), value)
        yield family


def command_label(process: ProcessSample) -> str:
    """The command line cut to ``COMMAND_CHARS``, else the process name, else ""."""
    text = " ".join((process.command or process.name or "").split())
    return text[:COMMAND_CHARS]


def process_families(snapshot: Snapshot, chosen: Collection[int] | None) -> Iterator[Metric]:
    """``vram_steward_process_gpu_memory_bytes`` of the ``chosen`` pids (None: all);
    a process whose memory NVML cannot give is left out."""
    family = GaugeMetricFamily(
        "vram_steward_process_gpu_memory_bytes",
        "GPU memory a process holds on one GPU (NVML, per process).",
        labels=PROCESS_LABELS, unit="bytes")
    seen: set[tuple[str, int]] = set()
    for g in snapshot.gpus:
        for p in g.processes:
            if p.gpu_memory is None or (chosen is not None and p.pid not in chosen):
                continue
            if (g.display_id, p.pid) in seen:
                continue
            seen.add((g.display_id, p.pid))
            family.add_metric([*gpu_labels(g), str(p.pid), p.user or "", command_label(p),
                               p.container.label if p.container else ""], p.gpu_memory)
    yield family
