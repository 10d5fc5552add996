"""The texts of a free-cache or gc action (status bar, tooltips, the detail view,
a GPU panel's result line).

The action itself is the controller's record
(:class:`app.core.control.records.CacheAction`): the agents' answers, and the
NVML figures at the click and once the driver settled.  These texts compare
what the agent *says* it freed with what the driver *shows* was released.
"""

from __future__ import annotations

from app.core.control.records import FREE, GC, CacheAction
from app.core.units import fmt_bytes
from app.ui.style.hosts import gpu_text


def cache_summary(action: CacheAction) -> str:
    """One line for the status bar."""
    if action.kind == GC:
        return _gc_text(action)
    if not action.done:
        return ("Freeing caches…" if len(action.pids) > 1
                else f"Freeing cache of {action.label(action.pids[0])}…")
    subject = (f"{gpu_text(action.display_id)}: " if action.display_id is not None
               else f"{action.label(action.pids[0])}: ")
    ok = [pid for pid, r in action.results.items() if r.ok]
    errors = action.errors
    if not ok:
        pid, err = errors[0] if errors else (action.pids[0], "no answer")
        who = f" ({action.label(pid)})" if len(action.pids) > 1 else ""
        return f"{subject}free cache failed{who}: {err}"
    text = f"{subject}freed {fmt_bytes(action.freed)}"
    if len(action.pids) > 1:
        text += f" in {len(ok)} process{'es' if len(ok) != 1 else ''}"
    text += " — " + _nvml_text(action)
    if errors:
        text += f" ({len(errors)} failed: {errors[0][1]})"
    return text


def cache_details(action: CacheAction) -> list[str]:
    """One line per process (tooltips, the detail view)."""
    if action.kind == GC:
        return [_gc_text(action)]
    lines = []
    for pid in action.pids:
        r = action.results.get(pid)
        if r is None:
            lines.append(f"{action.label(pid)}: {'no answer' if action.done else 'waiting…'}")
        elif not r.ok:
            lines.append(f"{action.label(pid)}: failed: {r.error or 'no reason given'}")
        else:
            line = f"{action.label(pid)}: freed {fmt_bytes(r.freed)}"
            if action.measured:
                nvml = _released_text(action.released.get(pid), pid in action.released)
                line += f", NVML {nvml}"
            lines.append(line)
    return lines


def cache_failed(action: CacheAction) -> bool:
    """Shown as an error: a free where no process freed, a gc that failed."""
    if action.kind == FREE:
        return action.done and not any(r.ok for r in action.results.values())
    return action.done and bool(action.errors)


def panel_text(action: CacheAction) -> str:
    """The short result beside a panel's "Free all caches" button."""
    if not action.done:
        return "Freeing…"
    if not any(r.ok for r in action.results.values()):
        return "Free cache failed"
    text = f"Freed {fmt_bytes(action.freed)}"
    if not action.measured:
        return text + " · measuring…"
    if action.gpu_released is None:
        return text + " · NVML n/a"
    return text + f" · NVML shows {fmt_bytes(max(0, action.gpu_released))} released"


def _nvml_text(action: CacheAction) -> str:
    if not action.measured:
        return "measuring with NVML…"
    if action.display_id is not None:
        value = action.gpu_released
        where = f" on GPU {action.display_id}"
    else:
        value = action.released.get(action.pids[0])
        where = ""
        if value is None and action.baseline.get(action.pids[0]) is not None:
            return "NVML: the process has ended"
    if value is None:
        return "NVML release unknown"
    if value <= 0:
        return f"NVML shows nothing released{where}"
    return f"NVML shows {fmt_bytes(value)} released{where}"


def _gc_text(action: CacheAction) -> str:
    who = action.label(action.pids[0])
    r = action.gc_result
    if r is None:
        return f"Running gc in {who}…"
    if not r.get("ok", True):
        return f"{who}: gc failed: {r.get('error') or 'no reason given'}"
    collected = r.get("collected")
    seconds = r.get("seconds")
    text = f"{who}: gc collected {collected if collected is not None else 'n/a'} objects"
    if isinstance(seconds, (int, float)):
        text += f" in {seconds * 1000:.0f} ms"
    return text


def _released_text(value: int | None, known_pid: bool) -> str:
    if value is None:
        return "ended" if known_pid else "n/a"
    if value <= 0:
        return "nothing released"
    return f"{fmt_bytes(value)} released"


__all__ = ["cache_details", "cache_failed", "cache_summary", "panel_text"]
