"""Whole-app CPU at 4 Hz: the real ``main.py`` offscreen, its process's CPU time.

Default: the default demo (``--demo``: 2 GPUs, agents), the window at its
default size, a warm-up, then several measured windows; the median is the
figure.  ``--scenario 8x64`` runs the big demo; ``--fake-nvml`` runs the real
sampler path (pynvml against the ABI fake of libnvidia-ml, real psutil) at
4 GPUs x 16 processes instead of the demo.  Target: <= 3 % of one core on the
default demo.  ``--json`` prints one JSON object instead of the text.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from benchmarks._app import app_env, cpu_percent, running_app


def demo_cpu(scenario: str | None, seconds: float, windows: int, warmup_s: float) -> list[float]:
    """CPU % of one core of ``main.py --demo`` in each of ``windows`` measured windows."""
    with tempfile.TemporaryDirectory() as tmp:
        demo = "--demo" if scenario is None else f"--demo={scenario}"
        with running_app([demo, "--period", "0.25"], app_env(tmp, os.environ),
                         warmup_s) as proc:
            return [cpu_percent(proc, seconds)[0] for _ in range(windows)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default=None, help="demo scenario GxP, e.g. 8x64")
    parser.add_argument("--seconds", type=float, default=10.0, help="one measured window")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--fake-nvml", action="store_true",
                        help="the real sampler path against the NVML ABI fake (4 x 16)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    if args.fake_nvml:
        from benchmarks.bench_tick import gui_cpu

        runs = [gui_cpu(4, 16, args.seconds, args.warmup)["cpu_percent_of_one_core"]
                for _ in range(args.windows)]
        what = "fake NVML, 4 GPUs x 16 processes"
    else:
        runs = demo_cpu(args.scenario, args.seconds, args.windows, args.warmup)
        what = f"demo {args.scenario or 'default (2 GPUs, agents)'}"
    median = statistics.median(runs)
    if args.json:
        print(json.dumps({"source": what, "cpu_percent_of_one_core_median": round(median, 2),
                          "cpu_percent_of_one_core_runs": [round(r, 2) for r in runs],
                          "seconds_per_window": args.seconds, "cpus": os.cpu_count()}))
        return 0
    print(f"whole app at 4 Hz, {what}, {args.windows} windows of {args.seconds:g} s after "
          f"{args.warmup:g} s warm-up, {os.cpu_count()} cores:")
    print(f"  {median:.2f} % of one core (median; runs "
          f"{', '.join(f'{r:.2f}' for r in runs)}; target <= 3 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
