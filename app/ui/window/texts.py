"""The main window's header and status-bar texts, from a snapshot (Qt-free)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from app.core.monitor.samples import DeviceState, Snapshot
from app.core.units import fmt_bytes


def source_text(snapshot: Snapshot) -> str:
    """"Demo (simulated GPUs)", "NVML, driver 550.54", or the source's name."""
    if snapshot.source == "demo":
        return "Demo (simulated GPUs)"
    if snapshot.source == "nvml":
        return ("NVML" if not snapshot.driver_version
                else f"NVML, driver {snapshot.driver_version}")
    return snapshot.source


def summary_texts(snapshot: Snapshot) -> tuple[str, str]:
    """The header's "2 GPUs · 7 processes · 30.1 of 48.0 GiB in use" and the
    process tab's "7 on 2 GPUs"."""
    gpus = snapshot.gpus
    nproc = sum(len(g.processes) for g in gpus)
    ok = [g for g in gpus if g.state == DeviceState.OK]
    used = [g.memory_used for g in ok if g.memory_used is not None]
    total = [g.memory_total for g in ok if g.memory_total is not None]
    gpus_text = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
    parts = [gpus_text, f"{nproc} process{'es' if nproc != 1 else ''}"]
    if used and total:
        parts.append(f"{fmt_bytes(sum(used))} of {fmt_bytes(sum(total))} in use")
    bad = len(gpus) - len(ok)
    if bad:
        parts.append(f"{bad} unavailable")
    return "  ·  ".join(parts), f"{nproc} on {gpus_text}"


def median_period(arrivals: Iterable[float], default: float) -> float:
    """Seconds between snapshots (the median gap of their monotonic times)."""
    times = list(arrivals)
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return statistics.median(gaps) if gaps else default


def span_text(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def display_order(display_id: str) -> tuple[int, str]:
    """GPUs by number, MIG instances after their GPU ("0", "0/1", "1", ...)."""
    head, _, rest = display_id.partition("/")
    try:
        return (int(head), rest)
    except ValueError:
        return (1 << 30, display_id)


__all__ = ["display_order", "median_period", "source_text", "span_text", "summary_texts"]


def folder_notice_title(count: int) -> str:
    """The title of the banner about folders refused as not private."""
    return ("A folder was refused: it is not yours alone" if count == 1
            else f"{count} folders were refused: they are not yours alone")
