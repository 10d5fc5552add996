"""The main window's header and status-bar texts, from a snapshot (Qt-free)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from app.core.monitor.hosts import every_gpu, live_gpus, split_id
from app.core.monitor.samples import DeviceState, Snapshot
from app.core.units import fmt_bytes
from app.ui.window.host_texts import hosts_count_text, hosts_status_text


def source_text(snapshot: Snapshot) -> str:
    """"Demo (simulated GPUs)", "NVML, driver 550.54", or the source's name."""
    if snapshot.source == "demo":
        return "Demo (simulated GPUs)"
    if snapshot.source == "nvml":
        return ("NVML" if not snapshot.driver_version
                else f"NVML, driver {snapshot.driver_version}")
    return snapshot.source


def reaches(snapshot: Snapshot) -> bool:
    """Whether the window has anything to show beside an error: this machine's
    GPUs, a remote host, or an agent (agents answer without the driver)."""
    return bool(snapshot.gpus or snapshot.hosts or snapshot.agents)


def summary_texts(snapshot: Snapshot) -> tuple[str, str]:
    """The header's "2 GPUs · 7 processes · 30.1 of 48.0 GiB in use" and the
    process tab's "7 on 2 GPUs".  With remote hosts: "3 hosts · 7 GPUs · …",
    every host's GPUs counted; the memory in use only of those whose figures
    are current (a disconnected host's last ones are not)."""
    gpus = every_gpu(snapshot)
    nproc = sum(len(g.processes) for g in gpus)
    live = [g for _, g in live_gpus(snapshot)]
    ok = [g for g in live if g.state == DeviceState.OK]
    used = [g.memory_used for g in ok if g.memory_used is not None]
    total = [g.memory_total for g in ok if g.memory_total is not None]
    gpus_text = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
    parts = [gpus_text, f"{nproc} process{'es' if nproc != 1 else ''}"]
    if snapshot.hosts:
        parts.insert(0, hosts_count_text(len(snapshot.gpus), snapshot.hosts))
    if used and total:
        parts.append(f"{fmt_bytes(sum(used))} of {fmt_bytes(sum(total))} in use")
    bad = len(live) - len(ok)
    if bad:
        parts.append(f"{bad} unavailable")
    if not gpus and snapshot.agents and snapshot.error:  # no driver: what the agents say
        n = len(snapshot.agents)
        agents_text = f"{n} process{'es' if n != 1 else ''} with an agent"
        return f"no GPU figures  ·  {agents_text}", agents_text
    return "  ·  ".join(parts), f"{nproc} on {gpus_text}"


def status_texts(snapshot: Snapshot, period_s: float) -> tuple[str, str, str, str]:
    """The status bar's (source, sampling period, a sample's cost, problem).

    Without a local GPU and without hosts there is nothing sampled: the source
    is "unavailable" and the rest empty; with hosts, they are named after it."""
    source = source_text(snapshot)
    hosts = hosts_status_text(snapshot)
    local_down = bool(snapshot.error) and not snapshot.gpus
    if local_down:
        source = f"{source}: unavailable"
        if not hosts:
            return source, "", "", ""
    if hosts:
        source = f"{source}  ·  {hosts}"
    problem = f"⚠ {snapshot.error}" if snapshot.error and snapshot.gpus else ""
    return (source, f"Sampling every {period_s * 1000:.0f} ms",
            f"· a sample takes {snapshot.sample_cost * 1000:.1f} ms", problem)


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


def display_order(display_id: str, hosts: Sequence[str] = ()) -> tuple[int, int, str]:
    """GPUs by host group (this machine first, then ``hosts`` in their order),
    then by number, MIG instances after their GPU ("0", "0/1", "1", "0@gpu1", ...)."""
    host, local = split_id(display_id)
    group = 0 if not host else (hosts.index(host) + 1 if host in hosts else len(hosts) + 1)
    head, _, rest = local.partition("/")
    try:
        return (group, int(head), rest)
    except ValueError:
        return (group, 1 << 30, local)


__all__ = ["display_order", "median_period", "source_text", "span_text", "status_texts",
           "summary_texts"]


def folder_notice_title(count: int) -> str:
    """The title of the banner about folders refused as not private."""
    return ("A folder was refused: it is not yours alone" if count == 1
            else f"{count} folders were refused: they are not yours alone")
