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

    from app.ui.window.main_window import MainWindow

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

    def measure(redraw) -> tuple[float, float, float]:
        refresh_ms, render_ms = [], []
        for _ in range(args.frames):
            clock[0] += PERIOD_S
            window.on_snapshot(collector.collect())
            t0 = time.perf_counter()
            redraw()
            t1 = time.perf_counter()
            window.grab()
            t2 = time.perf_counter()
            app.processEvents()
            refresh_ms.append((t1 - t0) * 1e3)
            render_ms.append((t2 - t1) * 1e3)
        total = sorted(a + b for a, b in zip(refresh_ms, render_ms))
        return statistics.median(refresh_ms), statistics.median(render_ms), statistics.median(total)

    def redraw_all() -> None:
        for did, panel in window.panels.items():
            window._refresh_panel(did, panel)

    cases = [
        ("as the app runs (display timer: redraw at most once per pixel of time)", window.refresh),
        ("full redraw of the panels on screen", lambda: window.refresh(force=True)),
        ("full redraw of all 8 panels, on screen or not", redraw_all),
    ]
    print(f"frame = new snapshot + redraw + render; 8 GPUs x 64 processes, {args.span:.0f} s shown "
          f"of 1 h at 4 Hz (history filled in {fill_s:.1f} s), window 1600x1000, "
          f"{args.frames} frames each (target <= 16 ms median):")
    for name, redraw in cases:
        refresh, render, frame = measure(redraw)
        print(f"  {name}: redraw {refresh:.1f} ms + render {render:.1f} ms = "
              f"frame median {frame:.1f} ms")


if __name__ == "__main__":
    main()
