"""Idle models a model server holds: unload them through the server's API.

The same finding as an agent's idle models (``idle_model``), from the
server's own figures: its models loaded, not generating, idle since … by
what the server says (its queue empty, Ollama's last request).  The fix is
the app's own unload, which the server's API carries out.
"""

from __future__ import annotations

from app.core.diagnosis.types import Diagnosis, Fix
from app.core.monitor.samples import Snapshot
from app.core.servers.attribution import usage_of
from app.core.units import fmt_bytes, fmt_duration


def idle_server_models(snapshot: Snapshot, min_idle_s: float) -> list[Diagnosis]:
    out = []
    gpus = {g.index: g for g in snapshot.gpus if g.mig_index is None}
    for server in snapshot.servers:
        if not server.can_unload or server.owner == "other":
            continue
        fixes, longest = [], 0.0
        for m in server.models:
            if m.busy or (m.busy is None and server.busy) or m.idle_since is None \
                    or m.state != "loaded":
                continue
            idle = max(0.0, snapshot.timestamp - m.idle_since)
            if idle < min_idle_s:
                continue
            longest = max(longest, idle)
            fixes.append(Fix("unload_model", f"Unload {m.name} from {server.label} (idle "
                             f"{fmt_duration(idle)}): gives {fmt_bytes(m.vram_bytes)}; "
                             f"{m.unload or server.unload_note}", m.vram_bytes, server.pid,
                             m.id, m.name))
        if not fixes:
            continue
        usage = usage_of(snapshot, server.pids)
        gpu = gpus.get(usage.only_gpu) if usage.only_gpu is not None else None
        known = [f.gain_bytes for f in fixes if f.gain_bytes is not None]
        total = sum(known) if known else None
        fixes.sort(key=lambda f: -(f.gain_bytes or 0))
        out.append(Diagnosis(
            "idle_model", "info",
            f"{server.display} holds {len(fixes)} idle model{'s' if len(fixes) > 1 else ''}"
            f" ({fmt_bytes(total)})",
            tuple([f"{f.model_name}: {fmt_bytes(f.gain_bytes)}" for f in fixes]
                  + [f"Unused for up to {fmt_duration(longest)}, by {server.label}'s own "
                     "figures."]),
            tuple(fixes), gpu=gpu.display_id if gpu else None, gpu_uuid=gpu.uuid if gpu else None,
            pid=server.pid, command=f"{server.label} at {server.endpoint}",
            figures={"idle_model_bytes": total, "idle_s": longest}))
    return out


__all__ = ["idle_server_models"]
