"""A host's stored history, as its server's ``history`` verb answers it,
turned back into the :class:`StoredHistory` the window's rings are seeded
with: its GPUs under their window-wide ids (``"0@gpu1"``), its times moved
onto this machine's clock.  Gaps stay gaps: a time the server was not
running has no record."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.core.monitor.hosts import qualified_id
from app.core.store.query import GpuSeries, ProcessSeries, StoredHistory


def stored_from_records(records: list[dict[str, Any]], host: str,
                        clock_offset_s: float = 0.0) -> StoredHistory:
    """``records`` (oldest first) as stored history; ``clock_offset_s`` is
    added to every time (this machine's clock minus the host's)."""
    gpus: dict[str, dict[str, list[float]]] = {}
    meta: dict[str, tuple[int | None, Any, str | None]] = {}  # index, name, the host's id
    procs: dict[tuple[str, int, float | None], dict[str, Any]] = {}
    for rec in records:
        uuid = rec.get("gpu_uuid")
        t = _num(rec.get("timestamp"))
        if not isinstance(uuid, str) or math.isnan(t):
            continue
        t += clock_offset_s
        cols = gpus.setdefault(uuid, {"t": [], "used": [], "total": [], "util": []})
        index, did = rec.get("gpu_index"), rec.get("display_id")
        if not isinstance(did, str) or not did:  # a server that does not send it: the index
            did = str(index) if isinstance(index, int) else None
        meta.setdefault(uuid, (index if isinstance(index, int) else None, rec.get("gpu_name"),
                               did))
        cols["t"].append(t)
        cols["used"].append(_num(rec.get("memory_used")))
        cols["total"].append(_num(rec.get("memory_total")))
        cols["util"].append(_num(rec.get("utilization_gpu")))
        for p in rec.get("processes") or ():
            pid = p.get("pid")
            if not isinstance(pid, int):
                continue
            create = p.get("create_time")
            key = (uuid, pid, create if isinstance(create, (int, float)) else None)
            series = procs.setdefault(key, {"t": [], "b": [], "command": p.get("command"),
                                             "user": p.get("user"), "name": p.get("name")})
            series["t"].append(t)
            series["b"].append(_num(p.get("gpu_memory")))
    out_gpus = {}
    for uuid, cols in gpus.items():
        index, name, own = meta[uuid]
        did = qualified_id(own, host) if own is not None else None
        arrays = [np.asarray(cols[k], dtype=np.float64) for k in ("t", "used", "total", "util")]
        out_gpus[uuid] = GpuSeries(uuid, index, name if isinstance(name, str) else None,
                                   arrays[0], arrays[1], arrays[2], arrays[3], display_id=did)
    out_procs = [ProcessSeries(pid, create, uuid, _text(s["command"]), _text(s["user"]),
                               np.asarray(s["t"], dtype=np.float64),
                               np.asarray(s["b"], dtype=np.float64), name=_text(s["name"]))
                 for (uuid, pid, create), s in procs.items()]
    return StoredHistory(out_gpus, out_procs)


def _num(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
