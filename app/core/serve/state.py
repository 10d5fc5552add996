"""What the server's readers see of the engine: the latest snapshot and
the running counts that outlive one snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.core.monitor.samples import Snapshot


@dataclass(frozen=True, slots=True)
class ServeState:
    """One consistent view, replaced whole after every tick."""

    snapshot: Snapshot | None  # None until the first tick
    seq: int = 0  # ticks so far: a reader's cursor
    # OOM reports seen since the server started, by (GPU display id, GPU uuid);
    # ("", "") for an OOM that could not be placed on a GPU.
    oom_total: Mapping[tuple[str, str], int] = field(default_factory=dict)
    started_at: float = 0.0  # epoch seconds the server started
