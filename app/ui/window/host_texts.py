"""What the GPU area says of a host group (Qt-free): its name, its state, why
it is not connected, and its fullest GPU; and the window's count of hosts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.core.monitor.hosts import CONNECTED, HostView, split_id
from app.core.monitor.samples import DeviceState, GpuSample, Snapshot
from app.core.units import fmt_fraction
from app.ui.style.hosts import host_label, state_text


def group_title(key: str, view: HostView | None) -> tuple[str, str]:
    """(the group's name, the host's own name where it differs: "" otherwise)."""
    name = view.name if view is not None and view.name else ""
    return host_label(key), "" if name in ("", key) else name


def group_state(view: HostView | None) -> str:
    """The state a group's header shows; "" for this machine (it has none)."""
    return "" if view is None else state_text(view)


def short_reason(view: HostView | None) -> str:
    """Why a host is not connected, on one line ("" while it is, or unknown)."""
    if view is None or view.state == CONNECTED or not view.reason:
        return ""
    return " ".join(view.reason.split())


def fullest(gpus: Iterable[GpuSample]) -> GpuSample | None:
    """The GPU with the largest share of its memory in use (None: no figure known)."""
    known = [g for g in gpus if g.state is DeviceState.OK and g.memory_fraction is not None]
    return max(known, key=lambda g: g.memory_fraction or 0.0, default=None)


def fullest_text(gpus: Iterable[GpuSample]) -> str:
    """"fullest: GPU 2 · 91 %"; "" when no GPU's figure is known."""
    gpu = fullest(gpus)
    if gpu is None:
        return ""
    return f"fullest: GPU {split_id(gpu.display_id)[1]} · {fmt_fraction(gpu.memory_fraction)}"


def hosts_count_text(local_gpus: int, hosts: Sequence[HostView]) -> str:
    """"3 hosts" (this machine counts while it has GPUs), "1 disconnected" after."""
    n = len(hosts) + (1 if local_gpus else 0)
    text = f"{n} host{'s' if n != 1 else ''}"
    down = sum(1 for h in hosts if h.state != CONNECTED)
    return f"{text} ({down} not connected)" if down else text


def hosts_status_text(snapshot: Snapshot) -> str:
    """The status bar's "hosts: 2 of 3 connected" ("" without hosts)."""
    hosts = snapshot.hosts
    if not hosts:
        return ""
    up = sum(1 for h in hosts if h.state == CONNECTED)
    return f"hosts: {up} of {len(hosts)} connected"
