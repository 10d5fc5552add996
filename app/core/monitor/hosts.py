"""Remote hosts as the window sees them: one :class:`HostView` per host,
carried by the local snapshot (``Snapshot.hosts``), each with the host's own
snapshot.

A remote GPU's ``display_id`` names its host (``"0@gpu1"``) and its
``GpuSample.host`` is the host's key, so history, panels, tiles and alerts
keep one GPU apart from another host's GPU 0.  Pids stay the host's own: a
process is (host, pid), and every lookup by pid goes through the host's
snapshot (:func:`snapshot_of`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.core.monitor.samples import GpuSample, Snapshot

CONNECTING = "connecting"
CONNECTED = "connected"
DISCONNECTED = "disconnected"

LOCAL = ""  # the key of this machine


@dataclass(frozen=True, slots=True)
class HostView:
    """One remote host at one tick.

    ``snapshot``: the host's latest snapshot while connected, its last good
    one after (so its tiles and rows stay, greyed, never zero), None before
    the first.  Its clocks are this machine's: stamped when it arrived.
    ``fresh``: it arrived since the previous view (history takes it once).
    ``seed``: the host's stored history (``StoredHistory``), handed out once.
    """

    key: str
    url: str
    state: str  # CONNECTING, CONNECTED or DISCONNECTED
    since: float | None = None  # epoch seconds the state began
    reason: str | None = None  # why it is not connected, and what to do
    snapshot: Snapshot | None = None
    name: str | None = None  # the name the host gives itself
    user: str | None = None  # the user its server acts for (SSH login, token's user)
    fresh: bool = False
    seed: Any = None
    #: The server's pressure policy (``app.core.remote.policy.RemotePolicy``), when known.
    policy: Any = None
    #: This machine's clock minus the host's, in seconds (0.0: within a second, or
    #: unknown).  Times in ``snapshot`` are this machine's already, except the
    #: processes' ``create_time`` (their identity on the host): subtract it first.
    clock_skew_s: float = 0.0

    @property
    def connected(self) -> bool:
        return self.state == CONNECTED

    @property
    def label(self) -> str:
        """What the window calls it: the key the user gave (or derived)."""
        return self.key


def qualified_id(display_id: str, host: str) -> str:
    """The window-wide id of a host's GPU: ``"0@gpu1"``; a local id as is."""
    return f"{display_id}@{host}" if host else display_id


def split_id(display_id: str) -> tuple[str, str]:
    """(host key, the host's own display id) of a window-wide GPU id."""
    local, sep, host = display_id.partition("@")
    return (host, local) if sep else (LOCAL, display_id)


def qualify_gpu(gpu: GpuSample, host: str) -> GpuSample:
    return dataclasses.replace(gpu, display_id=qualified_id(gpu.display_id, host), host=host)


def host_view(snapshot: Snapshot | None, host: str) -> HostView | None:
    if snapshot is None or not host:
        return None
    return next((h for h in snapshot.hosts if h.key == host), None)


def snapshot_of(snapshot: Snapshot | None, host: str) -> Snapshot | None:
    """The snapshot ``host``'s pids belong to: the local one for ``""``."""
    if not host:
        return snapshot
    view = host_view(snapshot, host)
    return None if view is None else view.snapshot


def every_gpu(snapshot: Snapshot | None) -> list[GpuSample]:
    """This machine's GPUs, then every remote host's (the last known of a
    disconnected one included: its ``HostView.state`` says it is stale)."""
    if snapshot is None:
        return []
    gpus = list(snapshot.gpus)
    for view in snapshot.hosts:
        if view.snapshot is not None:
            gpus.extend(view.snapshot.gpus)
    return gpus


def live_gpus(snapshot: Snapshot | None) -> list[tuple[str, GpuSample]]:
    """(host key, GPU) of every GPU whose figures are current: a
    disconnected host's last figures are not (alerts and the tray skip them)."""
    if snapshot is None:
        return []
    out = [(LOCAL, g) for g in snapshot.gpus]
    for view in snapshot.hosts:
        if view.connected and view.snapshot is not None:
            out.extend((view.key, g) for g in view.snapshot.gpus)
    return out


def each_host(snapshot: Snapshot | None) -> list[tuple[HostView | None, Snapshot]]:
    """(view, its snapshot) for this machine (view None) and every host with one."""
    if snapshot is None:
        return []
    out: list[tuple[HostView | None, Snapshot]] = [(None, snapshot)]
    out.extend((v, v.snapshot) for v in snapshot.hosts if v.snapshot is not None)
    return out
