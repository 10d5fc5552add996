"""Snapshots as JSON (the ``status --json`` contract) and as a terminal table.

JSON contract: memory in bytes, utilisation in percent, temperature in °C,
``null`` where unknown.  Keys beyond the documented ones may be added; none
are ever removed or renamed.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from app.core.monitor.samples import Container, GpuSample, ProcessSample, Snapshot
from app.core.units import NA, fmt_bytes, fmt_fraction, fmt_percent


def process_to_json(p: ProcessSample) -> dict[str, Any]:
    return {
        "pid": p.pid,
        "name": p.name,
        "user": p.user,
        "command": p.command,
        "gpu_memory": p.gpu_memory,
        "sm_util": p.sm_util,
        "cpu_percent": p.cpu_percent,
        "host_rss": p.host_rss,
        "kind": p.kind,
        "create_time": p.create_time,
        "host_status": p.host_status.value,
        "container": container_to_json(p.container),
    }


def container_to_json(c: Container | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"runtime": c.runtime, "id": c.id, "name": c.name, "pod": c.pod}


def gpu_to_json(g: GpuSample) -> dict[str, Any]:
    return {
        "index": g.index,
        "mig_index": g.mig_index,
        "name": g.name,
        "uuid": g.uuid,
        "state": g.state.value,
        "message": g.message,
        "memory_total": g.memory_total,
        "memory_used": g.memory_used,
        "memory_free": g.memory_free,
        "memory_reserved": g.memory_reserved,
        "utilization_gpu": g.utilization_gpu,
        "utilization_memory": g.utilization_memory,
        "temperature": g.temperature,
        "power_draw": g.power_draw,
        "power_limit": g.power_limit,
        "unattributed_memory": g.unattributed_memory,
        "notes": dict(g.notes),
        "processes": [process_to_json(p) for p in g.processes],
    }


def snapshot_to_json(s: Snapshot) -> dict[str, Any]:
    return {
        "source": s.source,
        "driver_version": s.driver_version,
        "timestamp": s.timestamp,
        "error": s.error,
        "gpus": [gpu_to_json(g) for g in s.gpus],
    }


def snapshot_to_table(s: Snapshot, width: int = 120) -> str:
    """A gpustat-like summary: one line per GPU, one indented line per process."""
    head = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.timestamp))
    driver = s.driver_version or NA
    lines = [f"{socket.gethostname()}  {head}  source {s.source}, driver {driver}"]
    if s.error and not s.gpus:
        lines.append(f"  {s.error}")
    for g in s.gpus:
        ident = f"[{g.index}]" if g.mig_index is None else f"[{g.index}/mig{g.mig_index}]"
        if g.state.value != "ok":
            lines.append(f"{ident} {g.name} | {g.message or g.state.value}")
            continue
        frac = g.memory_fraction
        used = f"{fmt_bytes(g.memory_used)} / {fmt_bytes(g.memory_total)}"
        if frac is not None:
            used += f" ({fmt_fraction(frac)})"
        temp = NA if g.temperature is None else f"{g.temperature:.0f}°C"
        lines.append(f"{ident} {g.name} | {temp}, util {fmt_percent(g.utilization_gpu)} | {used}")
        for note in g.notes.values():
            lines.append(f"      ({note})")
        for p in sorted(g.processes, key=lambda p: -(p.gpu_memory or 0)):
            who = p.user or (p.host_status.label or "?")
            what = p.command or p.host_status.label or p.name or "?"
            if p.container is not None:
                what = f"[{p.container.label}] {what}"  # before the command, which may be cut
            row = (f"    {p.pid:>7}  {who:<10.10} {fmt_bytes(p.gpu_memory):>10}  "
                   f"SM {fmt_percent(p.sm_util):>5}  CPU {fmt_percent(p.cpu_percent):>6}  {what}")
            lines.append(row[:width])
        unattributed = g.unattributed_memory
        if unattributed:  # unknown or 0: nothing to say
            # Its size in the processes' memory column ("unattributed" spans pid and user).
            lines.append(f"    {'unattributed':<19} {fmt_bytes(unattributed):>10}"[:width])
    return "\n".join(lines)
