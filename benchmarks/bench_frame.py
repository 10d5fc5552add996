"""Main-window frame cost offscreen: 8 GPUs x 64 process series x 1 h at 4 Hz.

One frame = a new snapshot arrives (``on_snapshot``), the display timer's
``refresh()`` redraws the plots from history, and the whole window is rendered
(``grab()``: the process table and the tiles too); for comparison, a full
redraw with the shown panels rendered alone.  Figures are GUI-thread CPU time
(``time.thread_time``), medians.  Target: <= 12 ms for a full redraw of every
panel shown, the whole window rendered.  ``--json`` prints one JSON object
instead of the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks._scenario import PERIOD_S, filled_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--span", type=float, default=3600.0, help="plotted range in seconds")
    parser.add_argument("--size", default="1600x1000", help="window size, WxH")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))

    from PySide6.QtWidgets import QApplication

    from app.ui.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    history, collector, clock, snapshot, fill_s = filled_history()
    window = MainWindow(history, span_s=args.span)
    window.display_timer.stop()  # frames are driven by hand here
    window.resize(width, height)
    window.show()
    window.on_snapshot(snapshot)
    window.refresh()
    window.grab()
    app.processEvents()

    def render_panels() -> None:
        for panel in window.panels.values():
            if panel.isVisible():
                panel.grab()

    def measure(redraw, render=window.grab) -> tuple[float, float, float]:
        refresh_ms, render_ms = [], []
        for _ in range(args.frames):
            clock[0] += PERIOD_S
            window.on_snapshot(collector.collect())
            t0 = time.thread_time()
            redraw()
            t1 = time.thread_time()
            render()
            t2 = time.thread_time()
            app.processEvents()
            refresh_ms.append((t1 - t0) * 1e3)
            render_ms.append((t2 - t1) * 1e3)
        total = sorted(a + b for a, b in zip(refresh_ms, render_ms))
        return statistics.median(refresh_ms), statistics.median(render_ms), statistics.median(total)

    def redraw_all() -> None:
        for did, panel in window.panels.items():
            window._refresh_panel(did, panel)

    cases = [
        ("as_app_runs", "as the app runs (display timer: redraw at most once per pixel of time)",
         window.refresh, window.grab),
        ("full_redraw_shown", "full redraw of every panel shown", lambda: window.refresh(force=True),
         window.grab),
        ("full_redraw_all_8", "full redraw of all 8 panels, shown or not", redraw_all,
         window.grab),
        ("full_redraw_shown_panel_only", "the same, the panels rendered alone (no table, tiles)",
         lambda: window.refresh(force=True), render_panels),
    ]
    shown = sum(1 for p in window.panels.values() if p.isVisible())
    result: dict[str, object] = {
        "window": args.size, "span_s": args.span, "frames": args.frames,
        "arrangement": window.gpu_area.arrangement, "panels_shown": shown,
        "history_fill_s": round(fill_s, 2)}
    for key, _, redraw, render in cases:
        refresh, render_ms, frame = measure(redraw, render)
        result[f"{key}_redraw_ms"] = round(refresh, 2)
        result[f"{key}_render_ms"] = round(render_ms, 2)
        result[f"{key}_frame_ms"] = round(frame, 2)
    if args.json:
        print(json.dumps(result))
        return
    print(f"frame = new snapshot + redraw + render, GUI-thread CPU; 8 GPUs x 64 processes, "
          f"{args.span:.0f} s shown of 1 h at 4 Hz (history filled in {fill_s:.1f} s), window "
          f"{args.size} ({result['arrangement']}: {shown} panel(s) shown), {args.frames} frames "
          f"each (target for a full redraw <= 12 ms median):")
    for key, name, _, _ in cases:
        print(f"  {name}: redraw {result[key + '_redraw_ms']:.1f} ms + render "
              f"{result[key + '_render_ms']:.1f} ms = frame median {result[key + '_frame_ms']:.1f} ms")


if __name__ == "__main__":
    main()
