"""The app's side of the agent channel: one-shot calls and their JSON.

Qt-free and blocking; each call opens a connection of its own
(:mod:`app.core.agents.connection`) under its own deadline and never raises
for an agent's failure: it comes back in the result.  Agents are found with
:func:`read_registry` (:mod:`app.core.agents.registry`); both modules' public
names are re-exported here, so ``client`` is all a caller needs to reach
agents one-shot (``AgentHub`` keeps connections open instead).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.agent import protocol
from app.core.agents.connection import AgentConnection, AgentError, AgentTimeout, AgentUnavailable
from app.core.agents.recording import RecordResult
from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
    ModelInfo,
)

__all__ = [
    "MODEL_ACTION_TIMEOUT_S", "TIMEOUT", "UNAVAILABLE", "collect_garbage", "event_to_json",
    "free_cache", "free_cache_result", "model_event_result", "model_to_json", "pin",
    "query_report", "record", "reload", "report_to_json", "set_idle_unload", "unload",
]


def report_to_json(report: AgentReport | None, entry: AgentEntry | None = None,
                   error: str | None = None) -> dict[str, Any]:
    """The ``agents --json`` record (bytes; None = unknown)."""
    if report is None:
        return {"pid": entry.pid if entry else None,
                "argv": list(entry.argv) if entry else [],
                "python": entry.python if entry else None,
                "torch": entry.torch if entry else None, "torch_status": None,
                "cuda_initialized": None, "allocator_backend": None, "devices": [],
                "models": [], "idle_unload_s": None, "events": [], "managed_by": None,
                "error": error or "no report"}
    return {
        "pid": report.pid, "argv": list(report.argv), "python": report.python,
        "managed_by": report.managed_by,
        "torch": report.torch, "torch_status": report.torch_status,
        "cuda_initialized": report.cuda_initialized,
        "allocator_backend": report.allocator_backend,
        "devices": [{"index": d.index, "allocated": d.allocated, "reserved": d.reserved,
                     "peak_allocated": d.peak_allocated, "peak_reserved": d.peak_reserved,
                     "inactive_split": d.inactive_split,
                     "num_alloc_retries": d.num_alloc_retries, "num_ooms": d.num_ooms}
                    for d in report.devices],
        "models": [model_to_json(m, report.received_at) for m in report.models],
        "idle_unload_s": report.idle_unload_s,
        "events": [event_to_json(e) for e in report.events],
        "error": error,
    }


def model_to_json(m: ModelInfo, seen_at: float) -> dict[str, Any]:
    """A model entry as the protocol spells it, plus ``idle_s``: seconds on the
    agent's idle clock at ``seen_at`` (epoch seconds; None = unknown)."""
    idle = m.idle_s(seen_at) if seen_at else None
    return {"id": m.id, "name": m.name, "class": m.class_name, "params": m.params,
            "param_bytes": m.param_bytes, "buffer_bytes": m.buffer_bytes,
            "placeholder_bytes": m.placeholder_bytes, "device": m.device, "dtype": m.dtype,
            "training": m.training, "requires_grad": m.requires_grad,
            "training_evidence": m.training_evidence, "last_used": m.last_used,
            "first_seen": m.first_seen, "idle_since": m.idle_since,
            "idle_s": None if idle is None else round(idle, 1), "group": m.group,
            "state": m.state, "offloaded_to": m.offloaded_to, "pinned": m.pinned,
            "home_device": m.home_device, "unload_blocker": m.unload_blocker,
            "auto_unload_blocker": m.auto_unload_blocker, "reloaded_at": m.reloaded_at}


def event_to_json(event: ModelEvent) -> dict[str, Any]:
    """A model event as the protocol spells it."""
    return {"seq": event.seq, "time": event.time, "model": event.model, "name": event.name,
            "action": event.action, "state": event.state, "target": event.target,
            "bytes_moved": event.bytes_moved, "bytes_released": event.bytes_released,
            "seconds": event.seconds, "reason": event.reason, "ok": event.ok,
            "error": event.error}


def query_report(entry: AgentEntry, timeout_s: float = 2.0, models: bool = True) -> AgentReport:
    deadline = time.monotonic() + timeout_s
    with AgentConnection(entry, timeout_s) as conn:
        started = time.perf_counter()
        data = conn.call("report", {"models": models}, max(0.001, deadline - time.monotonic()))
        rtt = time.perf_counter() - started
    report = AgentReport.from_json(data, received_at=time.time(), round_trip_s=rtt)
    if report is None:
        raise AgentUnavailable(f"agent {entry.pid}: malformed report")
    return report


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def free_cache_result(pid: int, data: dict[str, Any]) -> FreeCacheResult:
    """A ``free_cache`` reply as a result.  ``freed`` is the agent's own figure
    (it measured before and after around the release): None stays None."""
    return FreeCacheResult(pid=pid, ok=True,
                           reserved_before=_opt_int(data.get("reserved_before")),
                           reserved_after=_opt_int(data.get("reserved_after")),
                           freed=_opt_int(data.get("freed")))


def free_cache(entry: AgentEntry, timeout_s: float = 30.0) -> FreeCacheResult:
    """gc.collect() + empty_cache() in the agent's process; never raises."""
    deadline = time.monotonic() + timeout_s
    try:
        with AgentConnection(entry, min(timeout_s, 5.0)) as conn:
            data = conn.call("free_cache", {}, max(0.001, deadline - time.monotonic()))
    except (AgentUnavailable, AgentError) as exc:
        return FreeCacheResult(pid=entry.pid, ok=False, error=str(exc))
    return free_cache_result(entry.pid, data)


def collect_garbage(entry: AgentEntry, timeout_s: float = 30.0) -> dict[str, Any]:
    """gc.collect() in the agent's process: ``{"ok", "collected", "seconds", "error"}``."""
    deadline = time.monotonic() + timeout_s
    try:
        with AgentConnection(entry, min(timeout_s, 5.0)) as conn:
            data = conn.call("gc", {}, max(0.001, deadline - time.monotonic()))
    except (AgentUnavailable, AgentError) as exc:
        return {"ok": False, "collected": None, "seconds": None, "error": str(exc)}
    return {"ok": True, "collected": _opt_int(data.get("collected")),
            "seconds": data.get("seconds") if isinstance(data.get("seconds"), (int, float))
            and not isinstance(data.get("seconds"), bool) else None, "error": None}


# ------------------------------------------------------------ model manager

#: Unload and reload move whole models (a 2 GB fp16 UNet takes ~0.2 s to pinned
#: host memory, ~1 s to disk, more on a slow disk): generous by default.
MODEL_ACTION_TIMEOUT_S = 300.0
UNAVAILABLE = "unavailable"  # not a protocol code: the agent could not be reached
TIMEOUT = "timeout"  # not a protocol code: no answer in time (the action may still finish)


def _call_once(entry: AgentEntry, method: str, params: dict[str, Any], timeout_s: float,
               on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One request on a connection of its own (never a poller's): raises
    AgentUnavailable / AgentTimeout / AgentError."""
    deadline = time.monotonic() + timeout_s
    with AgentConnection(entry, min(timeout_s, 5.0)) as conn:
        return conn.call(method, params, max(0.001, deadline - time.monotonic()), on_event)


def _action_error(pid: int, model: str, exc: Exception, timeout_s: float) -> ModelActionResult:
    if isinstance(exc, AgentError):
        return ModelActionResult(pid, model, False, error=exc.message or exc.code, code=exc.code)
    if isinstance(exc, AgentTimeout):
        return ModelActionResult(
            pid, model, False, code=TIMEOUT,
            error=f"no answer within {timeout_s:g} s (the agent may still finish it)")
    return ModelActionResult(pid, model, False, error=str(exc), code=UNAVAILABLE)


#: What an older agent answered a reload of a resident model (now a refusal).
_ALREADY_RESIDENT = "already resident"


def model_event_result(pid: int, model: str, data: dict[str, Any]) -> ModelActionResult:
    """An unload/reload reply (the model event) as a ModelActionResult; an older
    agent's "already resident" reload reads as today's refusal, in its words."""
    if data.get("note") == _ALREADY_RESIDENT:
        return ModelActionResult(pid, model, False, code=protocol.REFUSED,
                                 error=protocol.not_offloaded("resident"))
    event = ModelEvent.from_json(data)
    if event is None:
        return ModelActionResult(pid, model, data.get("ok") is not False,
                                 error=_str_or_none(data.get("error")),
                                 code=None if data.get("ok") is not False else protocol.FAILED)
    if not event.ok:
        return ModelActionResult(pid, model, False, event=event,
                                 error=event.error or f"{event.action} failed",
                                 code=protocol.FAILED)
    return ModelActionResult(pid, model, True, event=event)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def unload(entry: AgentEntry, model: str, to: str | None = "cpu", force: bool = False,
           reason: str = "manual", timeout_s: float = MODEL_ACTION_TIMEOUT_S
           ) -> ModelActionResult:
    """Offload model ``model``'s weights (``to`` "cpu" or "disk"; None lets the
    agent choose: cpu for a GPU model, disk for a CPU one); never raises.

    A refusal (training evidence, a forward running, torch.compile, ...) comes
    back as ``ok=False, code="refused"`` with the agent's reason in ``error``.
    """
    params: dict[str, Any] = {"model": model, "force": bool(force)}
    if to is not None:
        params["to"] = to
    if reason != "manual":
        params["reason"] = reason
    try:
        try:
            data = _call_once(entry, "unload", params, timeout_s)
        except AgentError as exc:
            # An agent that validates params strictly may not know "reason": ask again.
            if exc.code != protocol.BAD_PARAMS or "reason" not in params \
                    or "reason" not in exc.message:
                raise
            params.pop("reason")
            data = _call_once(entry, "unload", params, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        return _action_error(entry.pid, model, exc, timeout_s)
    return model_event_result(entry.pid, model, data)


def reload(entry: AgentEntry, model: str, timeout_s: float = MODEL_ACTION_TIMEOUT_S
           ) -> ModelActionResult:
    """Bring an offloaded model back to its home device; never raises."""
    try:
        data = _call_once(entry, "reload", {"model": model}, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        return _action_error(entry.pid, model, exc, timeout_s)
    return model_event_result(entry.pid, model, data)


def pin(entry: AgentEntry, model: str, pinned: bool = True, timeout_s: float = 10.0
        ) -> ModelActionResult:
    """Exempt a model from automatic unloading (or not); never raises."""
    try:
        data = _call_once(entry, "pin", {"model": model, "pinned": bool(pinned)}, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        return _action_error(entry.pid, model, exc, timeout_s)
    value = data.get("pinned")
    return ModelActionResult(entry.pid, model, True,
                             pinned=value if isinstance(value, bool) else bool(pinned))


def set_idle_unload(entry: AgentEntry, seconds: float | None, timeout_s: float = 10.0
                    ) -> dict[str, Any]:
    """The agent's own idle TTL (None = off): ``{"ok", "idle_unload_s", "error", "code"}``."""
    try:
        data = _call_once(entry, "set_policy", {"idle_unload_s": seconds}, timeout_s)
    except (AgentUnavailable, AgentError) as exc:
        code = exc.code if isinstance(exc, AgentError) else (
            TIMEOUT if isinstance(exc, AgentTimeout) else UNAVAILABLE)
        message = exc.message if isinstance(exc, AgentError) else str(exc)
        return {"ok": False, "idle_unload_s": None, "error": message, "code": code}
    value = data.get("idle_unload_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        value = None
    return {"ok": True, "idle_unload_s": value, "error": None, "code": None}


# ------------------------------------------------------------ allocation recording

#: Seconds beyond the recording itself for the snapshot, the file and the reply.
RECORD_MARGIN_S = 60.0


def record(entry: AgentEntry, seconds: float, max_entries: int | None = None,
           timeout_s: float | None = None, on_started: Callable[[], None] | None = None
           ) -> RecordResult:
    """Record the process's CUDA allocations for ``seconds`` (at most
    ``max_entries`` events; None: the agent's default); never raises.
    Blocks for about ``seconds``; ``timeout_s`` defaults to that plus
    ``RECORD_MARGIN_S``.  The agent turns recording off at its deadline even
    if this call gives up first.  ``on_started`` is called once the agent has
    turned the recording on (its ``record_started`` event; an older agent
    sends none, and a refusal comes without it)."""
    params: dict[str, Any] = {"seconds": seconds}
    if max_entries is not None:
        params["max_entries"] = max_entries
    limit = seconds + RECORD_MARGIN_S if timeout_s is None else timeout_s

    def on_event(message: dict[str, Any]) -> None:
        if on_started is not None and message.get("event") == protocol.RECORD_STARTED:
            on_started()

    try:
        data = _call_once(entry, "record", params, limit, on_event)
    except AgentError as exc:
        return RecordResult(entry.pid, False, error=exc.message or exc.code, code=exc.code)
    except AgentTimeout:
        return RecordResult(entry.pid, False, code=TIMEOUT,
                            error=f"no answer within {limit:g} s (the agent turns recording "
                                  "off at its deadline)")
    except AgentUnavailable as exc:
        return RecordResult(entry.pid, False, error=str(exc), code=UNAVAILABLE)
    return RecordResult.from_reply(entry.pid, data)
