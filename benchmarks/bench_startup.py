"""Start to first frame of ``main.py --demo --screenshot``, beyond interpreter start.

Spawns the real command, reads the "first-frame" time it prints when
VRAM_STEWARD_REPORT_FIRST_FRAME is set (measured from the process's first
line of code to the first rendered frame with data), and adds the import of
``main`` itself by measuring wall time from spawn, minus a bare ``python -c pass``.
Target: <= 1.0 s (on a 2-core machine).  ``--json`` prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bare_start_s(runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _first_frame_s(png: Path) -> float:
    env = dict(os.environ, VRAM_STEWARD_REPORT_FIRST_FRAME="1", QT_QPA_PLATFORM="offscreen")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "main.py", "--demo", "--screenshot", str(png),
                             "--after", "0.5"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("first-frame"):
            elapsed = time.perf_counter() - t0
            break
    else:
        raise SystemExit("no first-frame line: " + proc.stderr.read())
    proc.communicate(timeout=30)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runs = args.runs
    bare = _bare_start_s(runs)
    with tempfile.TemporaryDirectory() as tmp:
        _first_frame_s(Path(tmp) / "warm.png")  # warm the file cache
        frames = [_first_frame_s(Path(tmp) / f"{i}.png") for i in range(runs)]
    median = statistics.median(frames)
    if args.json:
        print(json.dumps({"first_frame_from_spawn_s": round(median, 3),
                          "bare_interpreter_s": round(bare, 3),
                          "beyond_interpreter_s": round(median - bare, 3), "runs": runs,
                          "cpus": os.cpu_count()}))
        return
    print(f"start to first frame, --demo --screenshot, {os.cpu_count()} cores, {runs} runs:")
    print(f"  {median:.3f} s from spawn, bare interpreter {bare:.3f} s, "
          f"beyond interpreter start {median - bare:.3f} s (target <= 1.0 s)")


if __name__ == "__main__":
    main()
