"""How long each tier keeps its samples, and what that costs on disk.

* **fine**: the peak of each second (the max of the ticks in it) for
  ``fine_s`` (default 1 h): the window's 1 h view at a resolution a plot of
  that width can show;
* **coarse**: the peak of each ``COARSE_STEP_S`` (5 s) for ``coarse_s``
  (default 7 days): peaks, because the question asked of old history is "how
  close did we get to OOM?"; 7 days answers "what ran here last week".

The bound counts the rows the tiers can hold (one per GPU per step: 3 600 +
120 960 per GPU at the defaults) times the bytes of a row: ``ROW_BYTES`` for
the key, used, total, utilisation and SQLite's record and page overhead, plus
``ENTRY_BYTES`` (8) per process.  At the defaults: 2 GPUs with 3 processes
each, 27 MiB (0.8 MiB of it the fine tier); 8 GPUs with 64 processes each,
572 MiB (16.5 MiB fine), reached only if every GPU held 64 processes for the
whole week.  ``benchmarks/bench_history.py`` measures the real bytes per row.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.store.packing import ENTRY_BYTES

FINE_STEP_S = 1
COARSE_STEP_S = 5
ROW_BYTES = 90  # key, used, total, util, record and B-tree page overhead (measured: 38-88)
PRUNE_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Retention:
    fine_s: float = 3600.0
    coarse_s: float = 7 * 86400.0

    def __post_init__(self) -> None:
        if not (self.fine_s > 0 and self.coarse_s > 0):
            raise ValueError("retention must be positive")

    def bound_bytes(self, gpus: int, processes_per_gpu: float) -> int:
        """Largest the sample table can grow to, in bytes."""
        row = ROW_BYTES + ENTRY_BYTES * processes_per_gpu
        rows = self.fine_s / FINE_STEP_S + self.coarse_s / COARSE_STEP_S
        return int(gpus * rows * row)
