"""Prometheus metrics of ``serve``: a collector that turns the latest
``ServeState`` into fresh const families on every scrape, on a private registry.

The families are built from the snapshot the engine already took (no second
sampling loop, no timestamps), so vanished GPUs and processes disappear with
the next scrape.  Names follow Prometheus' rules: prefix ``vram_steward_``,
base units in the name (``_bytes``, ``_seconds``, ``_celsius``, ``_watts``,
ratios 0-1), ``_total`` on counters; an unknown figure has no series, never 0.

Series per process are bounded by ``process_limit``: the N processes holding
the most GPU memory on the host (their NVML memory summed over every GPU; a
process NVML does not list ranks by its allocator's reserved bytes) keep their
``pid``-labelled series: NVML per-process memory, the PyTorch allocator and
models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from app.core.agents.types import AgentReport
from app.core.monitor.samples import Snapshot
from app.core.serve.metric_agents import model_families, torch_families
from app.core.serve.metric_gpus import gpu_families, process_families
from app.core.serve.metric_health import diagnoses_family, health_families, oom_family
from app.core.serve.state import ServeState


def chosen_pids(snapshot: Snapshot, limit: int | None) -> frozenset[int] | None:
    """The pids that get per-process series: None for all, else the ``limit``
    largest on the host by GPU memory (ties: lower pid first)."""
    if limit is None:
        return None
    held: dict[int, int] = {}
    for g in snapshot.gpus:
        for p in g.processes:
            if p.gpu_memory is not None:
                held[p.pid] = held.get(p.pid, 0) + p.gpu_memory
    for pid, report in snapshot.agents.items():
        if pid not in held and isinstance(report, AgentReport):
            held[pid] = sum(d.reserved or 0 for d in report.devices)
    ranked = sorted(held, key=lambda pid: (-held[pid], pid))
    return frozenset(ranked[:limit])


class SnapshotMetrics:
    """A prometheus_client collector over the server's latest state."""

    def __init__(self, state: Callable[[], ServeState], process_limit: int | None = None,
                 gpu_series: bool = True) -> None:
        if process_limit is not None and process_limit < 0:
            raise ValueError(f"process_limit must be None or >= 0, not {process_limit}")
        self._state = state
        self._process_limit = process_limit
        self._gpu_series = gpu_series

    def collect(self) -> Iterator[Metric]:
        """Every family with at least one series, from one read of the state."""
        for family in self._families(self._state()):
            if family.samples:
                yield family

    def _families(self, state: ServeState) -> Iterator[Metric]:
        yield from health_families(state)
        yield oom_family(state)
        snapshot = state.snapshot
        if snapshot is None:
            return
        yield diagnoses_family(snapshot)
        if self._gpu_series:
            yield from gpu_families(snapshot)
        if self._process_limit == 0:
            return
        chosen = chosen_pids(snapshot, self._process_limit)
        yield from process_families(snapshot, chosen)
        yield from torch_families(snapshot, chosen)
        yield from model_families(snapshot, chosen)


def metrics_registry(state: Callable[[], ServeState], process_limit: int | None = None,
                     gpu_series: bool = True) -> CollectorRegistry:
    """A private registry (no default process/gc collectors) holding the collector.

    ``process_limit``: None = every process, 0 = no per-process series, N = the
    N largest processes on the host.  ``gpu_series`` False leaves out the
    per-GPU families, for a per-user server on a host whose system service
    already exports them.
    """
    registry = CollectorRegistry()
    registry.register(SnapshotMetrics(state, process_limit, gpu_series))
    return registry


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """(body, content type) of one scrape: OpenMetrics when ``accept`` asks for it,
    else the Prometheus text format."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
