"""Resident memory of the GUI with 8 GPUs x 64 processes x 1 h of history at 4 Hz.

Builds the real main window, fills the real history, draws a few frames and
reports the process RSS (psutil), with the allocator set as the app sets it at
start-up; and where it goes: Qt and the libraries before any history, the
filled history (and the collector that fed it), the window.  Also prints the
history's stated bound.  Target: <= 150 MB.  ``--json`` prints one JSON object
instead.
"""

from __future__ import annotations

import argparse
import json

import psutil

from benchmarks._scenario import PERIOD_S, filled_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    from PySide6.QtWidgets import QApplication

    from app.ui.shell.memory import return_big_blocks
    from app.ui.window.main_window import MainWindow

    return_big_blocks()  # as run_gui does first
    proc = psutil.Process()
    app = QApplication.instance() or QApplication([])
    base_mb = proc.memory_info().rss / 1e6
    history, collector, clock, snapshot, _ = filled_history()
    filled_mb = proc.memory_info().rss / 1e6
    window = MainWindow(history, span_s=3600.0)
    window.display_timer.stop()
    window.resize(1600, 1000)
    window.show()
    for span in (60.0, 600.0, 3600.0):
        window.set_span(span)
        clock[0] += PERIOD_S
        window.on_snapshot(collector.collect())
        window.refresh()
        window.grab()
        app.processEvents()
    rss_mb = proc.memory_info().rss / 1e6
    if args.json:
        print(json.dumps({"rss_mb": round(rss_mb, 1), "base_rss_mb": round(base_mb, 1),
                          "history_mb": round(filled_mb - base_mb, 1),
                          "window_mb": round(rss_mb - filled_mb, 1),
                          "history_bound_mib": round(history.bound_bytes() / 2**20, 1),
                          "arrangement": window.gpu_area.arrangement}))
        return
    print("GUI RSS, 8 GPUs x 64 processes x 1 h at 4 Hz:")
    print(f"  {rss_mb:.0f} MB resident (target <= 150 MB): Qt + libraries before history "
          f"{base_mb:.0f} MB, the filled history and its collector +{filled_mb - base_mb:.0f} MB, "
          f"the window +{rss_mb - filled_mb:.0f} MB; history bound for {len(history.gpus)} GPUs: "
          f"{history.bound_bytes() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
