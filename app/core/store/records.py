"""Stored history as plain records: what ``history --json`` prints and the
server's ``history`` query answers."""

from __future__ import annotations

import math
import time
from typing import Any

from app.core.store.query import StoredHistory


def history_records(stored: StoredHistory, gpu_index: int | None = None,
                    pid: int | None = None) -> list[dict[str, Any]]:
    """One object per GPU per stored sample, oldest first (then by GPU index);
    bytes and percent, null where unknown.  With ``pid``: only the samples
    that process appears in."""
    by_gpu: dict[str, dict[float, list[dict[str, Any]]]] = {}
    for proc in stored.processes:
        slots = by_gpu.setdefault(proc.gpu_uuid, {})
        for t, value in zip(proc.t.tolist(), proc.bytes.tolist(), strict=True):
            slots.setdefault(t, []).append({
                "pid": proc.pid, "create_time": proc.create_time, "gpu_memory": _int(value),
                "name": proc.name, "command": proc.command, "user": proc.user})
    out = []
    for uuid, gpu in stored.gpus.items():
        if gpu_index is not None and gpu.index != gpu_index:
            continue
        procs = by_gpu.get(uuid, {})
        for i, t in enumerate(gpu.t.tolist()):
            if pid is not None and t not in procs:
                continue
            out.append({
                "timestamp": t,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t)),
                "gpu_uuid": uuid, "gpu_index": gpu.index, "gpu_name": gpu.name,
                "display_id": gpu.display_id,
                "memory_used": _int(gpu.used[i]), "memory_total": _int(gpu.total[i]),
                "utilization_gpu": _float(gpu.util[i]),
                "processes": sorted(procs.get(t, []), key=lambda p: p["pid"])})
    out.sort(key=lambda r: (r["timestamp"], -1 if r["gpu_index"] is None else r["gpu_index"]))
    return out


def _int(value: float) -> int | None:
    return None if math.isnan(value) else int(value)


def _float(value: float) -> float | None:
    return None if math.isnan(value) else float(value)
