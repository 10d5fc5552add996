"""How a host is named and its state told, the same in every view (Qt-free)."""

from __future__ import annotations

import time

from app.core.monitor.hosts import CONNECTED, CONNECTING, HostView, split_id

THIS_MACHINE = "this machine"


def host_label(key: str) -> str:
    """A host's name in tables and texts: its key, or "this machine"."""
    return key or THIS_MACHINE


def clock_text(epoch_s: float | None) -> str:
    """"15:04:12" today, "26 Nov 15:04" on another day, "n/a" unknown."""
    if epoch_s is None:
        return "n/a"
    then = time.localtime(epoch_s)
    if time.strftime("%Y%m%d", then) == time.strftime("%Y%m%d"):
        return time.strftime("%H:%M:%S", then)
    return time.strftime("%d %b %H:%M", then)


def state_text(view: HostView) -> str:
    """"connected", "connecting…", "disconnected since 15:04:12"."""
    if view.state == CONNECTED:
        return "connected"
    if view.state == CONNECTING and view.snapshot is None:
        return "connecting…"
    return f"disconnected since {clock_text(view.since)}"


def stale(view: HostView | None) -> bool:
    """Whether the figures shown for ``view``'s host are its last known, not current."""
    return view is not None and view.state != CONNECTED


def gpu_text(display_id: str) -> str:
    """A window-wide GPU id in words: "GPU 0", "GPU 0 on gpu1"."""
    host, local = split_id(display_id)
    return f"GPU {local}" + (f" on {host}" if host else "")
