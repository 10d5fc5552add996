"""The words the Doctor tab, the OOM dialog and the Activity log use for
diagnoses and OOM reports (figures formatted by :mod:`app.core.units`)."""

from __future__ import annotations

import time
from typing import Any

from app.core.monitor.hosts import split_id
from app.core.units import fmt_bytes
from app.ui.style.hosts import host_label

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
SEVERITY_TEXT = {"critical": "Critical", "warning": "Warning", "info": "Note"}

#: What the app carries out itself, and the button that does it.
APP_FIXES = {"free_cache": "Free cache", "unload_model": "Unload"}

#: The settings a "Copy" fix puts on the clipboard, exactly as they are set.
SNIPPETS = {
    "expandable_segments": "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "tf_memory_growth": "TF_FORCE_GPU_ALLOW_GROWTH=true",
}

VERDICTS = {
    "fragmentation": "fragmentation: no free block was as large as the request",
    "other_processes": "other processes held the memory",
    "cache": "the allocator's cache held the memory",
    "live_tensors": "live tensors filled the card",
    "unknown": "cause unknown",
}


#: The Activity log's Reason column (narrow).
SHORT_VERDICTS = {"fragmentation": "fragmentation", "other_processes": "other processes",
                  "cache": "cache held it", "live_tensors": "live tensors", "unknown": "unknown"}


def short_verdict(verdict: str) -> str:
    return SHORT_VERDICTS.get(verdict, verdict.replace("_", " "))


def verdict_text(verdict: str) -> str:
    return VERDICTS.get(verdict, verdict.replace("_", " "))


def gain_text(gain_bytes: int | None) -> str:
    """``gives 2.1 GiB``; empty when the fix is not a byte figure."""
    return "" if gain_bytes is None else f"gives {fmt_bytes(gain_bytes)}"


def fix_button_text(fix: Any) -> str:
    if fix.action == "unload_model":
        return f"Unload {fix.model_name or fix.model or 'model'}"
    return APP_FIXES.get(fix.action, "")


def where_text(d: Any, host: str | None = None, state: str | None = None) -> str:
    """``GPU 0 · train.py (20417) · since 14:02``; with ``host`` given (remote hosts
    are watched) it is named first and the GPU is that host's own id: ``gpu1 · GPU 0
    · …``, ``this machine · GPU 0 · …``; ``state``: why its figures are not current
    ("disconnected since 15:04:12")."""
    parts = []
    if host is not None:
        parts.append(host_label(host) + (f" ({state})" if state else ""))
    if d.gpu is not None:
        parts.append(f"GPU {d.gpu if host is None else split_id(d.gpu)[1]}")
    if d.pid is not None:
        parts.append(f"{d.command or 'pid'} ({d.pid})" if d.command else f"pid {d.pid}")
    if d.since is not None:
        parts.append("since " + time.strftime("%H:%M", time.localtime(d.since)))
    return " · ".join(parts)


def oom_line(report: Any) -> str:
    """``OOM in train.py on GPU 0: asked for 2.0 GiB; other processes held the memory``."""
    gpu = f" on GPU {report.gpu}" if report.gpu is not None else ""
    who = report.command or f"pid {report.pid}"
    return f"OOM in {who}{gpu}: asked for {fmt_bytes(report.request)}; " \
           f"{verdict_text(report.verdict)}"


def report_row(report: Any) -> list[str]:
    """A past report's row: time, process, asked for, verdict."""
    return [time.strftime("%d %b %H:%M", time.localtime(report.time)),
            report.command or f"pid {report.pid}", fmt_bytes(report.request),
            verdict_text(report.verdict)]


__all__ = ["APP_FIXES", "SEVERITY_RANK", "SEVERITY_TEXT", "SNIPPETS", "fix_button_text",
           "gain_text", "oom_line", "report_row", "short_verdict", "verdict_text", "where_text"]
