"""The pressure policy's view of model servers' models (``Snapshot.servers``).

A server's model is a candidate on a GPU its processes hold memory on, when
the server offers an unload, the model is loaded and not generating, and its
idle time comes from the server's own figures (its queue empty since …,
Ollama's last request) and has lasted the minimum, in the policy's view
too.  A server that says nothing about use (LM Studio, text-generation-webui)
is never unloaded automatically: its idle time is unknown.  Nor is a model
whose unload does not come back by itself on the next request (AUTOMATIC1111
leaves its checkpoint on the CPU until Reload; text-generation-webui, vLLM),
nor one of another user's server (a system account's, the ``ollama``
service user's, is the user's own desktop service and counts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.core.units import fmt_duration

if TYPE_CHECKING:
    from app.core.monitor.samples import GpuSample, Snapshot
    from app.core.servers.types import ModelServer, ServerModel

#: ``UnloadAction.device`` of a server's model: the server's API does the unload.
SERVER_DEVICE = "server"


def server_model_key(model_id: str) -> str:
    """The policy's key of a server's model (apart from agents' model ids)."""
    return "server:" + model_id


def why_not(server: ModelServer, model: ServerModel, seen_at: float, min_idle_s: float,
            watched_s: float) -> tuple[str | None, float | None]:
    """(why ``model`` may not be unloaded automatically, None: it may; its idle seconds)."""
    if not server.can_unload:
        return server.unload_note or "the server offers no unload", None
    if not server.reloads_on_use:
        return (f"{server.label}'s unload does not come back by itself: "
                "unloaded by hand only"), None
    if server.owner == "other":
        return f"another user's server ({server.user}): unloaded by hand only", None
    if model.state != "loaded":
        return model.state, None
    if model.busy or (model.busy is None and server.busy):
        return "generating now", None
    if model.idle_since is None:
        return "idle time unknown (the server does not say)", None
    idle = max(0.0, seen_at - model.idle_since)
    if idle < min_idle_s:
        return f"idle {idle:.0f} s (< {min_idle_s:g} s)", idle
    if watched_s < min_idle_s:
        return (f"found {watched_s:.0f} s ago (< {min_idle_s:g} s; idle "
                f"{fmt_duration(idle)} by {server.label})"), idle
    return None, idle


def candidates(snapshot: Snapshot, gpu: GpuSample, min_idle_s: float,
               watched: Callable[[int, str], float]
               ) -> list[tuple[ModelServer, ServerModel, int, float | None, str | None]]:
    """(server, model, bytes, idle seconds, why not) for each server model on ``gpu``."""
    out = []
    on_gpu = {p.pid: p.gpu_memory for p in gpu.processes}
    for server in snapshot.servers:
        held = [on_gpu[p] for p in server.pids if p in on_gpu]
        if not held:
            continue  # nothing of this server on that GPU
        for m in server.models:
            if m.gpu is not None and m.gpu != gpu.index:
                continue
            why, idle = why_not(server, m, snapshot.timestamp, min_idle_s,
                                watched(server.pid, server_model_key(m.id)))
            nbytes = m.vram_bytes if m.vram_bytes is not None else sum(b or 0 for b in held)
            out.append((server, m, nbytes, idle, why))
    return out


__all__ = ["SERVER_DEVICE", "candidates", "server_model_key", "why_not"]
