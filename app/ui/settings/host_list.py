"""The Hosts dialog's data and words (Qt-free): which hosts are watched, which
are kept in the settings and which were given for this run only, what each
row says, and the changes a host's policy form sends its server.

The hosts watched are the saved ones, then those given with ``--host`` that
are not saved; their keys are the Fleet's (``unique_keys``), so a row finds
its host's view in the latest snapshot without asking anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.monitor.hosts import CONNECTED, HostView
from app.core.policies.thresholds import (
    POLICY_MIN_IDLE_MAX_S,
    POLICY_THRESHOLD_MAX,
    POLICY_THRESHOLD_MIN,
)
from app.core.remote.host_config import HostConfig, check_host, unique_keys
from app.core.serve.access import ANONYMOUS
from app.ui.style.hosts import state_text

FOR_THIS_RUN = "for this run"
SAVED = "saved"

#: The policy form's ranges: whole percents and minutes within the bounds a
#: server's ``set_policy`` takes, so every value it runs can be shown.
THRESHOLD_PCT_RANGE = (math.ceil(POLICY_THRESHOLD_MIN * 100 - 1e-6),
                       math.floor(POLICY_THRESHOLD_MAX * 100 + 1e-6))
IDLE_MIN_RANGE = (0, math.floor(POLICY_MIN_IDLE_MAX_S / 60 + 1e-6))


def watched_hosts(saved: Sequence[HostConfig], given: Sequence[HostConfig]
                  ) -> list[HostConfig]:
    """The saved hosts, then those given for this run that are not saved."""
    urls = {h.url for h in saved}
    return [*saved, *(h for h in given if h.url not in urls)]


@dataclass(frozen=True, slots=True)
class HostEntry:
    """One row: a watched host, whether the settings keep it, its latest view."""

    key: str
    config: HostConfig
    saved: bool
    view: HostView | None

    @property
    def tag(self) -> str:
        return SAVED if self.saved else FOR_THIS_RUN

    @property
    def connected(self) -> bool:
        return self.view is not None and self.view.state == CONNECTED


def host_entries(saved: Sequence[HostConfig], given: Sequence[HostConfig],
                 views: Sequence[HostView]) -> list[HostEntry]:
    """The rows, in the Fleet's order and with its keys."""
    watched = watched_hosts(saved, given)
    by_key = {v.key: v for v in views}
    saved_urls = {h.url for h in saved}
    return [HostEntry(key, config, config.url in saved_urls, by_key.get(key))
            for key, config in zip(unique_keys(watched), watched, strict=True)]


def added(saved: Sequence[HostConfig], given: Sequence[HostConfig],
          config: HostConfig) -> tuple[HostConfig, ...]:
    """The saved hosts with ``config`` checked and added; ValueError saying what
    is wrong (a bad address, a token file others may read, a duplicate)."""
    try:
        checked = check_host(config, watched_hosts(saved, given))
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix("--host ")) from None
    return (*saved, checked)


def removed(saved: Sequence[HostConfig], url: str) -> tuple[HostConfig, ...]:
    return tuple(h for h in saved if h.url != url)


def state_line(entry: HostEntry) -> str:
    """"connected · as alice on gpu-box-1", "disconnected since 15:04:12", "connecting…"."""
    view = entry.view
    if view is None:
        return "connecting…"
    text = state_text(view)
    if view.state == CONNECTED:
        who = "read only (no token)" if view.user == ANONYMOUS else \
            f"as {view.user}" if view.user else ""
        where = f"on {view.name}" if view.name and view.name != entry.key else ""
        extra = " ".join(p for p in (who, where) if p)
        return f"{text} · {extra}" if extra else text
    return text


def reason_line(entry: HostEntry) -> str:
    """Why the host is not connected and what to do ("" while it is)."""
    view = entry.view
    if view is None or view.state == CONNECTED or not view.reason:
        return ""
    return " ".join(view.reason.split())


def policy_line(entry: HostEntry) -> str:
    """The server's pressure policy in a line ("" until it is connected)."""
    view = entry.view
    if view is None or view.state != CONNECTED:
        return ""
    if view.policy is None:
        return "Auto-unload: not known (this server does not say)"
    if not view.policy.available:
        return view.policy.text()
    return f"{view.policy.text()} (the server's)"


def _within(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


def policy_values(policy: Any) -> tuple[bool, int, int]:
    """What the form shows for ``policy`` (a ``RemotePolicy``): enabled, the
    threshold in whole percents and the minimum idle time in whole minutes,
    within the form's ranges."""
    return (bool(policy.enabled), _within(round(policy.threshold * 100), THRESHOLD_PCT_RANGE),
            _within(round(policy.min_idle_s / 60), IDLE_MIN_RANGE))


def policy_changes(policy: Any, enabled: bool, threshold_pct: int,
                   idle_min: int) -> dict[str, Any]:
    """What the form changed from ``policy`` (a ``RemotePolicy``), as
    ``set_policy`` takes it: only the values the user changed.  Each is
    measured against what the form showed for the server's value
    (:func:`policy_values`), so a value the form rounds (87.5 %, 90 s) is never
    sent back rounded when the user left it alone."""
    shown = policy_values(policy)
    changes: dict[str, Any] = {}
    if enabled != shown[0]:
        changes["enabled"] = enabled
    if threshold_pct != shown[1]:
        changes["threshold"] = threshold_pct / 100
    if idle_min != shown[2]:
        changes["min_idle_s"] = idle_min * 60.0
    return changes


__all__ = ["FOR_THIS_RUN", "IDLE_MIN_RANGE", "SAVED", "THRESHOLD_PCT_RANGE", "HostEntry", "added",
           "host_entries", "policy_changes", "policy_line", "policy_values", "reason_line",
           "removed", "state_line", "watched_hosts"]
