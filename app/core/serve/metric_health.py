"""The server's own families of ``/metrics``: whether sampling works, what a tick
costs, how many agents answer, OOMs counted since start, and the Doctor's
current diagnoses by kind and severity.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from app.core.diagnosis.types import KINDS, SEVERITIES
from app.core.monitor.samples import Snapshot
from app.core.serve.state import ServeState


def health_families(state: ServeState) -> Iterator[Metric]:
    """``up`` (0 before the first tick and while the source fails), the last tick's
    cost, the agents reporting, the server's start time."""
    snapshot = state.snapshot
    up = snapshot is not None and snapshot.error is None
    yield GaugeMetricFamily(
        "vram_steward_up",
        "1 when the latest sample read the GPUs, 0 before the first one or while the "
        "driver fails.", value=1 if up else 0)
    if state.started_at > 0:
        yield GaugeMetricFamily(
            "vram_steward_start_timestamp_seconds",
            "When the server started (epoch seconds); OOM counts start from 0 then.",
            value=state.started_at, unit="seconds")
    if snapshot is None:
        return
    yield GaugeMetricFamily(
        "vram_steward_collector_tick_duration_seconds",
        "What the latest sampler tick took to read the GPUs, processes and agents.",
        value=snapshot.sample_cost, unit="seconds")
    yield GaugeMetricFamily(
        "vram_steward_agents", "Processes whose agent reported in the latest tick.",
        value=len(snapshot.agents))


def oom_family(state: ServeState) -> Metric:
    """``vram_steward_oom_total{gpu,uuid}``: every GPU of the snapshot has a series
    from the start (0), so ``increase()`` sees the first OOM too; ``gpu`` and
    ``uuid`` are "" for OOMs that could not be placed on a GPU."""
    family = CounterMetricFamily(
        "vram_steward_oom_total",
        "Out-of-memory errors the agents captured since the server started, by GPU.",
        labels=("gpu", "uuid"))
    counts: dict[tuple[str, str], int] = {}
    if state.snapshot is not None:
        counts.update({(g.display_id, g.uuid or ""): 0 for g in state.snapshot.gpus})
    counts.update(state.oom_total)
    for (gpu, uuid), count in sorted(counts.items()):
        family.add_metric([gpu, uuid], count)
    return family


def diagnoses_family(snapshot: Snapshot) -> Metric:
    """``vram_steward_diagnoses{kind,severity}``: every known kind and severity has a
    series (0 when none holds), so a dashboard sees each one before it happens."""
    family = GaugeMetricFamily(
        "vram_steward_diagnoses", "Current diagnoses of the Doctor, by kind and severity.",
        labels=("kind", "severity"))
    counts: Counter[tuple[str, str]] = Counter({(k, s): 0 for k in KINDS for s in SEVERITIES})
    counts.update((str(d.kind), str(d.severity)) for d in snapshot.diagnoses)
    for (kind, severity), count in sorted(counts.items()):
        family.add_metric([kind, severity], count)
    return family
