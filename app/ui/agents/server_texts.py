"""A model server as the UI shows it: the texts of its processes, models and
unloads (process table, detail view, status bar, tray), the requests its
context menu offers, and the models "Free all" unloads.  Qt-free.

Every figure is the snapshot's (``Snapshot.servers``, NVML's per-process
rows); these functions only format them with :mod:`app.core.units`.
Unknown is "n/a", never 0.
"""

from __future__ import annotations

import re
from typing import Any

from app.core.control.records import RELOAD, UNLOAD, ModelAction
from app.core.control.requests import Reload, Request, Unload
from app.core.monitor.samples import Snapshot
from app.core.policies.server_models import SERVER_DEVICE
from app.core.servers.attribution import usage_of
from app.core.servers.types import (
    FAILED,
    FREED,
    NOT_FREED,
    PENDING,
    REFUSED,
    RELOADED,
    ModelServer,
    ServerModel,
)
from app.core.units import NA, fmt_bytes, fmt_duration, fmt_fraction

#: Why a model's Unload is disabled while its server is generating.
BUSY_TEXT = "generating now: it can be unloaded once it is idle"
#: Ollama keeps a model loaded "forever" with a negative keep_alive: an expiry this far
#: ahead is no timer.
_FOREVER_S = 365 * 86400.0
_STATES = {"loaded": "Loaded", "on cpu": "On CPU (host RAM)", "sleeping": "Asleep"}


# -- one model ----------------------------------------------------------------------------------

def is_busy(server: ModelServer, model: ServerModel | None = None) -> bool:
    """Generating now, as the model's figure (else the server's) says."""
    return bool(server.busy) or bool(model is not None and model.busy)


def activity_text(busy: bool | None, idle_since: float | None, now: float) -> str:
    """"generating", "idle 4 min 05 s", or "n/a" when the server does not say."""
    if busy:
        return "generating"
    if idle_since is None:
        return NA
    return f"idle {fmt_duration(now - idle_since)}"


def model_activity(server: ModelServer, model: ServerModel, now: float) -> str:
    return activity_text(is_busy(server, model), model.idle_since, now)


def server_activity(server: ModelServer, now: float) -> str:
    """The server as a whole: "generating" (it, or one of its models), "idle 30 s",
    "activity n/a"."""
    busy = bool(server.busy) or any(m.busy for m in server.models)
    text = activity_text(busy, server.idle_since, now)
    return "activity n/a" if text == NA else text


def expires_in(model: ServerModel, now: float) -> str:
    """The "Unloads itself" cell: "in 3 min 00 s", "now", "never"; "n/a" unknown."""
    if model.expires_at is None:
        return NA
    left = model.expires_at - now
    if left > _FOREVER_S:
        return "never"
    return "now" if left <= 0 else f"in {fmt_duration(left)}"


def expires_text(model: ServerModel, now: float) -> str:
    """When the server unloads the model by itself (Ollama's keep_alive), as a
    sentence: "unloads itself in 3 min 00 s"; "" when it does not say."""
    when = expires_in(model, now)
    if when == NA:
        return ""
    return "kept loaded (no timer)" if when == "never" else f"unloads itself {when}"


def state_text(model: ServerModel) -> str:
    return _STATES.get(model.state, model.state.capitalize() if model.state else NA)


def gpu_text(snapshot: Snapshot | None, model: ServerModel) -> str:
    """The GPU's display id ("0"), "n/a" when the server's GPU is unknown."""
    if model.gpu is None:
        return NA
    gpus = snapshot.gpus if snapshot is not None else ()
    return next((g.display_id for g in gpus if g.index == model.gpu and g.mig_index is None),
                str(model.gpu))


def vram_tooltip(server: ModelServer, model: ServerModel) -> str:
    """Where the model's VRAM figure comes from."""
    if model.vram_bytes is None:
        text = f"{server.label} reports no GPU figure for {model.name}"
    else:
        text = f"{fmt_bytes(model.vram_bytes)} on the GPU, as {server.label} reports it"
    if model.figure:
        text += f" ({model.figure})"
    if model.size_bytes is not None:
        text += f"\nWhole model: {fmt_bytes(model.size_bytes)}"
    return text


def unload_tooltip(server: ModelServer, model: ServerModel) -> str:
    """What the model's Unload (or Reload) really does."""
    if model.state in ("on cpu", "sleeping"):
        return f"Load {model.name} back onto the GPU through {server.label}'s API"
    return model.unload or server.unload_note or f"Unload {model.name} through {server.label}"


def short_note(note: str) -> str:
    """The first clause of a server's note: "llama.cpp's server has no unload API"."""
    return re.split(r"[;:] ", note, maxsplit=1)[0] if note else ""


# -- the server ---------------------------------------------------------------------------------

def server_facts(server: ModelServer) -> str:
    """"server at http://127.0.0.1:11434 · user alice · pid 4242, runner 4250"."""
    where = f"server at {server.endpoint}" if server.endpoint else "server (no API port found)"
    others = [p for p in server.pids if p != server.pid]
    pids = f"pid {server.pid}"
    if others:
        pids += f", {child_word(server)} {', '.join(str(p) for p in others)}"
    return " · ".join([where, f"user {server.user or NA}", pids])


def child_word(server: ModelServer) -> str:
    return "runner" if server.kind == "ollama" else "worker"


def reservation_text(server: ModelServer) -> str:
    """The memory it reserves by design and its own fullness; "" without one."""
    res = server.reservation
    if res is None:
        return ""
    return f"{res.text} · KV cache {fmt_fraction(res.usage)} full"


def error_text(server: ModelServer) -> str:
    return f"⚠ {server.label}'s API: {server.error}" if server.error else ""


def unload_note(server: ModelServer) -> str:
    """What its unload does, or why there is none."""
    if server.can_unload:
        return f"Unload: {server.unload_note}" if server.unload_note else ""
    if server.unload_note:
        return f"No unload: {server.unload_note}"
    # An API that did not answer says nothing of its unload (its error line says why).
    return "" if server.error else f"{server.label} offers no unload through its API"


def nvml_text(snapshot: Snapshot | None, server: ModelServer) -> str:
    """What NVML shows for its processes: "NVML: 4.7 GiB on GPU 0 (its processes)"."""
    if snapshot is None:
        return ""
    usage = usage_of(snapshot, server.pids)
    if not usage.listed:
        return "NVML: none of its processes holds GPU memory"
    names = {g.index: g.display_id for g in snapshot.gpus if g.mig_index is None}
    if not usage.known:
        return "NVML: n/a (no per-process figure on this GPU)"
    parts = [f"{fmt_bytes(b)} on GPU {names.get(i, i)}"
             for i, b in sorted(usage.bytes_by_gpu.items())]
    who = "the server and its " + child_word(server) if len(server.pids) > 1 else "the server"
    return f"NVML: {', '.join(parts)} ({who})"


def model_names(server: ModelServer, gpu: int | None = None, most: int = 2,
                pid: int | None = None) -> str:
    """"qwen2.5:7b, llama3.2:3b +1": the models on NVML GPU ``gpu`` (None: all);
    ``pid``: only those a child holds, where the server says which (Ollama's runners)."""
    models = [m for m in server.models if (gpu is None or m.gpu is None or m.gpu == gpu)
              and server.label not in m.name]  # not "models loaded by ComfyUI" after "ComfyUI"
    if pid is not None and any(m.pid == pid for m in models):
        models = [m for m in models if m.pid == pid]
    names = [m.name for m in models]
    if len(names) > most:
        return ", ".join(names[:most]) + f" +{len(names) - most}"
    return ", ".join(names)


def process_name(server: ModelServer, pid: int, gpu: int | None) -> str:
    """The process table's name of one of its processes: "Ollama 0.12.3 (server)",
    "Ollama runner · qwen2.5:7b", "ComfyUI 0.3.40 (server) · models loaded by ComfyUI"."""
    names = model_names(server, gpu)
    if pid == server.pid:
        text = f"{server.display} (server)"
        alone = all(p == server.pid for p in server.pids)
        return f"{text} · {names}" if names and alone else text
    text = f"{server.label} {child_word(server)}"
    names = model_names(server, gpu, pid=pid)
    return f"{text} · {names}" if names else text


def server_tooltip(server: ModelServer, pid: int, now: float) -> list[str]:
    """Lines about the server for a process row's tooltip."""
    lines = [f"{server.display}: model {server_facts(server)}"]
    if pid != server.pid:
        lines.append(f"This process is its {child_word(server)}: the memory is the server's")
    for m in server.models:
        expires = expires_text(m, now)
        lines.append(f"  {m.name}: {fmt_bytes(m.vram_bytes)}, {state_text(m).lower()}, "
                     f"{model_activity(server, m, now)}" + (f", {expires}" if expires else ""))
    if not server.models:
        lines.append("  no model loaded" if server.reachable else "  models unknown")
    for extra in (unload_note(server), reservation_text(server), error_text(server)):
        if extra:
            lines.append(extra)
    return lines


# -- requests -----------------------------------------------------------------------------------

def model_request(server: ModelServer, model: ServerModel, host: str = "") -> Request:
    """The Unload (or, for a checkpoint moved to host RAM, the Reload) of ``model``;
    ``host``: the remote host the server runs on ("" this machine)."""
    if model.state in ("on cpu", "sleeping"):
        return Reload(server.pid, model.id, model.name, host=host)
    return Unload(server.pid, model.id, name=model.name, size=model.vram_bytes, host=host)


def menu_entries(server: ModelServer, host: str = "") -> list[tuple[str, str, Request | None]]:
    """(text, tooltip, request; None: a disabled line) for a process row's menu
    (``host``: where the server runs)."""
    if server.error and not server.models:
        return [(f"{server.label}: {short_note(server.error)}", error_text(server), None)]
    if not server.can_unload:
        note = server.unload_note or f"{server.label} offers no unload through its API"
        return [(short_note(note), note, None)]
    if not server.models:
        return [(f"Nothing loaded in {server.label}", unload_note(server), None)]
    out: list[tuple[str, str, Request | None]] = []
    for m in server.models:
        verb = "Reload" if m.state in ("on cpu", "sleeping") else "Unload"
        text = f"{verb} {m.name} ({server.label})"
        if m.state not in ("on cpu", "sleeping") and is_busy(server, m):
            out.append((f"{text}: generating now", BUSY_TEXT[0].upper() + BUSY_TEXT[1:], None))
        else:
            out.append((text, unload_tooltip(server, m), model_request(server, m, host)))
    return out


def freeable(snapshot: Snapshot | None) -> list[tuple[ModelServer, ServerModel]]:
    """The server models "Free all" unloads: loaded, not generating, on servers of
    yours (or a system service's) whose unload comes back by itself on the next
    request (Ollama, ComfyUI, Forge, LM Studio)."""
    out = []
    for server in (snapshot.servers if snapshot is not None else ()):
        if not server.can_unload or not server.reloads_on_use or server.owner == "other":
            continue
        out.extend((server, m) for m in server.models if m.state == "loaded"
                   and not (m.busy or (m.busy is None and server.busy)))
    return out


# -- an unload's record -------------------------------------------------------------------------

def served(action: Any) -> bool:
    """An unload or reload a model server's own API runs (and measures)."""
    if getattr(action, "kind", None) not in (UNLOAD, RELOAD):
        return False
    r = action.result
    if r is not None and r.outcome is not None:
        return True
    # The controller measures each agent unload it runs against NVML itself; a
    # server's API measures its own (nvml False), as the policy's records do not.
    return action.to == SERVER_DEVICE or (not action.nvml and action.reason != "pressure")


def outcome_line(action: ModelAction) -> str:
    """The result of a server unload in a few words: "freed 2.1 GiB", "still pending —
    …", "not freed — …"; "unloading…" while it runs."""
    if not action.done:
        return "reloading…" if action.kind == RELOAD else "unloading…"
    r = action.result
    outcome = r.outcome if r is not None else None
    note = (r.note if r is not None else None) or action.error or ""
    if outcome == FREED:
        return f"freed {fmt_bytes(r.freed_bytes)}" if r is not None and \
            r.freed_bytes is not None else note
    words = {PENDING: "still pending", NOT_FREED: "not freed", REFUSED: "not unloaded",
             FAILED: "failed", RELOADED: "reloaded"}.get(outcome or "")
    if words is None:
        words = "done" if action.ok else "failed"
    return f"{words} — {note}" if note else words


def outcome_level(action: ModelAction) -> str:
    """"ok", "waiting" (pending, or still running) or "error": the line's colour."""
    r = action.result
    if not action.done or (r is not None and r.outcome == PENDING):
        return "waiting"
    return "ok" if action.ok else "error"


def server_summary(action: ModelAction, prefix: str = "") -> str:
    """One line for the status bar: "Ollama 0.12.3 (4242): qwen2.5:7b: freed 4.4 GiB"."""
    name = action.who()
    if not action.done:
        verb = "reloading" if action.kind == RELOAD else "unloading"
        return f"{prefix}{verb} {name}…"
    return f"{prefix}{name}: {outcome_line(action)}"


__all__ = ["BUSY_TEXT", "activity_text", "child_word", "error_text", "expires_in", "expires_text",
           "freeable", "gpu_text", "is_busy", "menu_entries", "model_activity", "model_names",
           "model_request", "nvml_text", "outcome_level", "outcome_line", "process_name",
           "reservation_text", "served", "server_activity", "server_facts", "server_summary",
           "server_tooltip",
           "short_note", "state_text", "unload_note", "unload_tooltip", "vram_tooltip"]
