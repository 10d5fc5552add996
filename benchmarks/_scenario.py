"""The big-machine scenario shared by the GUI benchmarks: 8 GPUs x 64 processes,
one hour of history at 4 Hz, fed through the real collector and history."""

from __future__ import annotations

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.core.monitor.collector import Collector
from app.core.monitor.demo_source import DemoSource, scaled_scenario
from app.core.monitor.history import History, HistoryConfig

PERIOD_S = 0.25


def filled_history(gpus: int = 8, processes: int = 64, span_s: float = 3600.0):
    """A History holding ``span_s`` of samples, and a collector to continue it."""
    clock = [0.0]
    gpu_specs, procs = scaled_scenario(gpus, processes)
    collector = Collector(DemoSource(gpus=gpu_specs, processes=procs, clock=lambda: clock[0]))
    collector.open()
    history = History(HistoryConfig(period_s=PERIOD_S))
    t0 = time.perf_counter()
    snapshot = None
    for _ in range(int(span_s / PERIOD_S)):
        clock[0] += PERIOD_S
        snapshot = collector.collect()
        history.add(snapshot)
    fill_s = time.perf_counter() - t0
    return history, collector, clock, snapshot, fill_s
