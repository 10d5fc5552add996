"""Cost of one sampler tick with the demo source at 8 GPUs x 64 processes.

Measures what the sampler thread does every period: read the source and build
the immutable snapshot (collector included).  Target: <= 0.5 ms median.
"""

from __future__ import annotations

import argparse
import statistics
import time

from app.core.collector import Collector
from app.core.demo_source import DemoSource, scaled_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--ticks", type=int, default=2000)
    args = parser.parse_args()

    clock = [0.0]
    gpus, procs = scaled_scenario(args.gpus, args.processes)
    collector = Collector(DemoSource(gpus=gpus, processes=procs, clock=lambda: clock[0]))
    collector.open()
    for _ in range(50):  # warm-up
        clock[0] += 0.25
        collector.collect()
    costs_ms = []
    n_procs = 0
    for _ in range(args.ticks):
        clock[0] += 0.25
        t0 = time.perf_counter()
        snapshot = collector.collect()
        costs_ms.append((time.perf_counter() - t0) * 1e3)
        n_procs = sum(len(g.processes) for g in snapshot.gpus)
    costs_ms.sort()
    print(f"sampler tick, demo source, {args.gpus} GPUs x {args.processes} processes "
          f"({n_procs} present in the last tick), {args.ticks} ticks:")
    print(f"  median {statistics.median(costs_ms):.3f} ms   p90 {costs_ms[int(0.9 * len(costs_ms))]:.3f} ms"
          f"   p99 {costs_ms[int(0.99 * len(costs_ms))]:.3f} ms   (target <= 0.5 ms median)")


if __name__ == "__main__":
    main()
