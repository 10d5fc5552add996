"""An unload through a server's own API, and its outcome measured from NVML.

Never cutting off what the server is generating: the server is asked afresh
first and, when busy, refused, except for a manual unload to a server that
itself holds an unload until it is idle (Ollama, ComfyUI): that one is sent
and is pending until then.  The pressure policy never sends one while busy.
After the server accepts, the snapshots that follow
show whether its processes (the server and its runner children) hold less:

* freed: the drop reached half of what the server said the model held (or
  64 MiB where it says nothing), or at least 64 MiB by the kind's deadline
  (what stays is named: memory outside what the server unloads);
* pending: no drop yet, and the server said it frees later (ComfyUI after
  the prompt it is running) or is busy;
* not freed: no drop by the deadline (memory held outside the server's
  manager, a custom node's, say), with that reason.

Blocks for up to the deadline: call it on a worker thread.
"""

from __future__ import annotations

import time

from app.core.servers.attribution import usage_of
from app.core.servers.directory import ServerDirectory
from app.core.servers.http import ServerHttpError
from app.core.servers.types import (
    FAILED,
    FREED,
    NOT_FREED,
    PENDING,
    REFUSED,
    RELOADED,
    ServerModel,
    ServerUnload,
)
from app.core.units import fmt_bytes, fmt_duration

MIN_DROP_BYTES = 64 * 1024 * 1024


def _measure(directory: ServerDirectory, pids: tuple[int, ...], mode: str | None = None
             ) -> tuple[int | None, str, str | None]:
    """(bytes in the latest snapshot, what that figure is, the mode measured in:
    "process" for the pids' own memory, where a pid gone holds nothing; "gpu"
    for the GPU's used memory when NVML has no per-process figure)."""
    snap = directory.snapshot
    if snap is None:
        return None, "no NVML reading", mode
    usage = usage_of(snap, pids)
    if mode != "gpu" and usage.known and (usage.listed or mode == "process"):
        return sum(usage.bytes_by_gpu.values()), "its processes' memory (NVML)", "process"
    if mode != "process" and usage.gpu_used:
        return (sum(usage.gpu_used.values()), "the GPU's used memory: NVML gives no "
                "per-process figure here, so other processes count in it", "gpu")
    return None, "no NVML reading", mode


def _next_snapshot(directory: ServerDirectory, after: int, until: float) -> bool:
    with directory.snapshots:
        while directory.ticks <= after:
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            directory.snapshots.wait(remaining)
    return True


def unload(directory: ServerDirectory, pid: int, model_id: str,
           deadline_s: float | None = None, automatic: bool = False) -> ServerUnload:
    """Unload ``model_id`` from the server holding ``pid``; never raises.
    ``automatic`` (the pressure policy): never sent while the server is busy,
    even to a server that would hold it until idle."""
    server = directory.owner(pid)
    found = directory.found(pid)
    if server is None or found is None:
        return ServerUnload(pid, "", model_id, REFUSED, f"no model server holds process {pid}",
                            code="not_found")
    adapter = directory.adapters[found.kind]
    deadline = adapter.deadline_s if deadline_s is None else deadline_s

    def result(outcome: str, reason: str, before_bytes: int | None = None,
               after_bytes: int | None = None, seconds: float | None = None,
               code: str | None = None) -> ServerUnload:
        return ServerUnload(server.pid, server.kind, model_id, outcome, reason, before_bytes,
                            after_bytes, deadline, seconds, code)

    if not server.reachable and server.error:
        return result(FAILED, f"{server.label}'s API gives nothing: {server.error}")
    if not server.can_unload:
        return result(REFUSED, server.unload_note or f"{server.label} offers no unload")
    try:
        probe = directory.probe_now(found)
    except ServerHttpError as exc:
        return result(FAILED, f"{server.label} did not answer: {exc}")
    directory.note_probe(found.pid, probe, None)
    model = next((m for m in probe.models if m.id == model_id), None)
    if model is None:
        return result(REFUSED, f"{server.label} has no model {model_id!r} loaded",
                      code="not_found")
    current = next((m for m in server.models if m.id == model_id), None)
    busy = bool(probe.busy or (probe.busy is None and current is not None and current.busy))
    if busy and (automatic or not adapter.defers_while_busy):
        return result(REFUSED, f"{server.label} is generating now: not unloaded, so its "
                      "work is not cut off; try again when it is idle")
    before, figure, mode = _measure(directory, server.pids)
    expect = model.vram_bytes or (current.vram_bytes if current else None)
    wanted = max(MIN_DROP_BYTES, expect // 2) if expect else MIN_DROP_BYTES
    started = time.monotonic()
    tick = start_tick = directory.ticks
    try:
        ack = adapter.unload(directory.http_for(found, timeout_s=60.0), model)
    except (ServerHttpError, ValueError) as exc:
        return result(FAILED, f"{server.label} refused the unload: {exc}", before_bytes=before)
    if not ack.accepted:
        return result(REFUSED, ack.text, before_bytes=before)
    if found.kind in ("a1111", "forge"):
        directory.mark_offloaded(server.pid, model_id, found.kind == "a1111")
    until = started + deadline
    after = before
    while True:
        if not _next_snapshot(directory, tick, until):
            break
        tick = directory.ticks
        after, figure, _ = _measure(directory, server.pids, mode)
        if before is not None and after is not None and before - after >= wanted:
            _next_snapshot(directory, tick, min(until, time.monotonic() + 2.0))
            settled, _, _ = _measure(directory, server.pids, mode)
            after = settled if settled is not None else after
            left = f"; {fmt_bytes(after)} still held by its processes" \
                if after and mode == "process" else ""
            return result(FREED, f"{ack.text}: freed {fmt_bytes(before - after)} "
                          f"({figure}){left}", before_bytes=before, after_bytes=after,
                          seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    if before is not None and after is not None and before - after >= MIN_DROP_BYTES:
        left = f"; {fmt_bytes(after)} is still held, outside what {server.label} unloads" \
            if mode == "process" else ""
        return result(FREED, f"{ack.text}: freed {fmt_bytes(before - after)} ({figure}){left}",
                      before_bytes=before, after_bytes=after, seconds=seconds)
    owner = directory.owner(pid)
    if ack.deferred or busy or (owner is not None and owner.busy):
        return result(PENDING, f"{ack.text}: nothing freed yet after {fmt_duration(seconds)}; "
                      f"{server.label} is busy and frees once its current work ends",
                      before_bytes=before, after_bytes=after, seconds=seconds)
    if before is None or after is None or tick == start_tick:
        return result(NOT_FREED, f"{ack.text}, but no NVML reading arrived in "
                      f"{fmt_duration(seconds)} to confirm it", seconds=seconds)
    return result(NOT_FREED, f"{ack.text}, but NVML shows no drop after "
                  f"{fmt_duration(seconds)} ({fmt_bytes(max(0, before - after))} less): "
                  "the memory is held outside what the server manages", before_bytes=before,
                  after_bytes=after, seconds=seconds)


def reload(directory: ServerDirectory, pid: int, model_id: str) -> ServerUnload:
    """Load ``model_id`` back where the server offers it (A1111's reload-checkpoint)."""
    found = directory.found(pid)
    if found is None:
        return ServerUnload(pid, "", model_id, REFUSED, f"no model server holds process {pid}")
    adapter = directory.adapters[found.kind]
    try:
        ack = adapter.reload(directory.http_for(found, timeout_s=120.0),
                             ServerModel(id=model_id, name=model_id, vram_bytes=None))
    except (ServerHttpError, ValueError) as exc:
        return ServerUnload(found.pid, found.kind, model_id, FAILED, str(exc))
    if ack.accepted:
        directory.mark_offloaded(found.pid, model_id, False)
    return ServerUnload(found.pid, found.kind, model_id, RELOADED if ack.accepted else REFUSED,
                        ack.text)


__all__ = ["MIN_DROP_BYTES", "reload", "unload"]
