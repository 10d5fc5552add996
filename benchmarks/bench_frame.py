"""Main-window frame time offscreen: 8 GPUs x 64 process series x 1 h at 4 Hz.

One frame = a new snapshot arrives (``on_snapshot``), the display timer's
``refresh()`` redraws every plot from history, and the window is rendered
(``grab()``).  Target: <= 16 ms median.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks._scenario import PERIOD_S, filled_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--span", type=float, default=3600.0, help="plotted range in seconds")
    args = parser.parse_args()

    from PySide6.QtWidgets import QApplication

    from app.ui.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    history, collector, clock, snapshot, fill_s = filled_history()
    window = MainWindow(history, span_s=args.span)
    window.display_timer.stop()  # frames are driven by hand here
    window.resize(1600, 1000)
    window.show()
    window.on_snapshot(snapshot)
    window.refresh()
    window.grab()
    app.processEvents()

    refresh_ms, render_ms = [], []
    for _ in range(args.frames):
        clock[0] += PERIOD_S
        snap = collector.collect()
        window.on_snapshot(snap)
        t0 = time.perf_counter()
        window.refresh()
        t1 = time.perf_counter()
        window.grab()
        t2 = time.perf_counter()
        app.processEvents()
        refresh_ms.append((t1 - t0) * 1e3)
        render_ms.append((t2 - t1) * 1e3)
    total = sorted(a + b for a, b in zip(refresh_ms, render_ms))
    print(f"frame, 8 GPUs x 64 processes, {args.span:.0f} s shown of 1 h at 4 Hz "
          f"(history filled in {fill_s:.1f} s), {args.frames} frames, window 1600x1000:")
    print(f"  refresh median {statistics.median(refresh_ms):.1f} ms, "
          f"render median {statistics.median(render_ms):.1f} ms, "
          f"frame median {statistics.median(total):.1f} ms, p90 {total[int(0.9 * len(total))]:.1f} ms "
          f"(target <= 16 ms median)")


if __name__ == "__main__":
    main()
