"""Snapshots as JSON (the ``status --json`` contract) and as a terminal table.

JSON contract: memory in bytes, utilisation in percent, temperature in °C,
``null`` where unknown.  Keys beyond the documented ones may be added; none
are ever removed or renamed.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from app.core.monitor.samples import Snapshot
from app.core.units import NA, fmt_bytes, fmt_fraction, fmt_percent


def snapshot_to_json(s: Snapshot) -> dict[str, Any]:
    """The wire format's encoding: one encoder for every JSON snapshot."""
    from app.core.wire.snapshot import encode_snapshot

    return encode_snapshot(s)


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
