"""Unload and reload requests for a model a model server holds.

Checked against the latest snapshot like an agent's model (the server and
its model must be there), but run by the server's own API, which measures
its outcome from NVML itself (``ModelActionResult.outcome``): the action
carries no NVML baseline of its own.
"""

from __future__ import annotations

from app.core.control.records import RELOAD, UNLOAD, ModelAction
from app.core.control.requests import Refusal, Reload, RequestError, Unload
from app.core.monitor.samples import Snapshot
from app.core.servers.types import holding


def server_action(snapshot: Snapshot, req: Unload | Reload) -> ModelAction | None:
    """The action for ``req`` when a server holds ``req.pid`` and has ``req.model``
    (None: not a server's model); RequestError when the server cannot do it."""
    server = holding(snapshot.servers, req.pid)
    if server is None or req.model is None:
        return None
    model = server.model(req.model)
    if model is None:
        if req.pid in snapshot.agents:
            return None  # the agent's model, in a process that is also a server
        raise RequestError(Refusal.UNKNOWN_MODEL,
                           f"{server.label} ({server.pid}) has no model {req.model!r} loaded")
    if isinstance(req, Unload) and not server.can_unload:
        raise RequestError(Refusal.NO_UNLOAD, server.unload_note or
                           f"{server.label} offers no unload")
    label = f"{server.display} ({server.pid})"
    gpu = next((g.display_id for g in snapshot.gpus if g.index == model.gpu
                and g.mig_index is None), None)
    kind = UNLOAD if isinstance(req, Unload) else RELOAD
    return ModelAction(kind, server.pid, model.id, req.name or model.name, label, to="server",
                       reason=req.reason if isinstance(req, Unload) else "manual",
                       size=model.vram_bytes, display_id=gpu, nvml=False)


__all__ = ["server_action"]
