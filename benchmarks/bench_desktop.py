"""GUI-thread cost of the desktop shell per snapshot: 8 GPUs x 64 processes, and the
default demo (2 GPUs, its processes with agents and models).

What the shell adds on the GUI thread for every snapshot: the alert policy's
evaluation (every snapshot) and the tray's refresh (tooltip, menu lines, icon
when the percent changes, the idle-model count; at most once a second).
Both must stay far below the 250 ms sample period; the figures say by how much.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--snapshots", type=int, default=400)
    args = parser.parse_args()
    run(args.gpus, args.processes, args.snapshots)
    run(None, None, args.snapshots)


def run(gpu_count: int | None, processes: int | None, count: int) -> None:

    from PySide6.QtWidgets import QApplication

    from app.core.agents.demo import DemoAgents
    from app.core.control.targets import idle_models
    from app.core.monitor.collector import Collector
    from app.core.monitor.demo_source import DemoSource, scaled_scenario
    from app.core.policies.alerts import AlertPolicy
    from app.ui.settings.values import AutoUnloadSettings
    from app.ui.shell.tray import TrayController

    app = QApplication.instance() or QApplication([])
    clock = [0.0]
    if gpu_count is None:
        source = DemoSource(clock=lambda: clock[0])
    else:
        gpus, procs = scaled_scenario(gpu_count, processes or 0)
        source = DemoSource(gpus=gpus, processes=procs, clock=lambda: clock[0])
    collector = Collector(source, agents=DemoAgents(source))
    collector.open()
    snapshots = []
    for _ in range(count):
        clock[0] += 0.25
        snapshots.append(collector.collect())
    agents = len(snapshots[-1].agents)

    policy = AlertPolicy()
    tray = TrayController()
    settings = AutoUnloadSettings()
    alert_ms, tray_ms = [], []
    for snap in snapshots:
        t0 = time.perf_counter()
        policy.evaluate(snap)
        t1 = time.perf_counter()
        tray.update(snap)
        tray.set_agent_actions(len(snap.agents), len(idle_models(snap, settings.min_idle_s)))
        t2 = time.perf_counter()
        alert_ms.append((t1 - t0) * 1e3)
        tray_ms.append((t2 - t1) * 1e3)
    app.processEvents()

    def line(name: str, values: list[float]) -> str:
        values = sorted(values)
        return (f"  {name:<28} median {statistics.median(values):.3f} ms   "
                f"p99 {values[int(len(values) * 0.99) - 1]:.3f} ms")

    scenario = ("default demo" if gpu_count is None
                else f"{gpu_count} GPUs x {processes} processes")
    print(f"desktop shell per snapshot, {scenario}, {agents} processes with agents, "
          f"{len(snapshots)} snapshots")
    print(line("alert policy (every sample)", alert_ms))
    print(line("tray refresh (<= 1 per s)", tray_ms))


if __name__ == "__main__":
    main()
