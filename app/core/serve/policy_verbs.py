"""The server's pressure policy as verbs: ``policy`` reads it, ``set_policy``
changes it.

The policy of a GPU runs where the GPU is: a window watching this host
shows the engine's ``PolicyRunner`` config and changes it here, never runs
one of its own.  Who may change it follows whose models it unloads: a
per-user server's policy unloads its user's models, so that user (or root)
may change it; the system service reads every user's agents, so only root
may.  Values are held to the bounds of the window's own Auto-unload
settings (``app.core.policies.thresholds``); a value outside them is
refused and nothing changes.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from app.core.policies.pressure import PolicyRunner
from app.core.policies.thresholds import (
    POLICY_MIN_IDLE_MAX_S,
    POLICY_MIN_INTERVAL_MAX_S,
    POLICY_REARM_GAP,
    POLICY_REARM_MAX,
    POLICY_REARM_MIN,
    POLICY_THRESHOLD_MAX,
    POLICY_THRESHOLD_MIN,
)
from app.core.remote.policy import POLICY_FIELDS, RemotePolicy
from app.core.serve.access import CONTROL, Caller
from app.core.serve.params import ApiError, Params

NO_POLICY = "this server runs no pressure policy"
SSH_SESSION = ("an SSH session runs no pressure policy of its own: it would last only as long "
               "as this connection, beside any other. Run `vram-steward serve` on the host "
               "(or its window) for one that runs whether you are connected or not")
SYSTEM_SERVICE = ("this server acts for every user of the host (the system service): only "
                  "root changes its pressure policy; ask the host's administrator, or watch "
                  "the host through your own server (ssh://)")


def reads_every_user(directory: Any) -> bool:
    """Whether ``directory`` (or one it wraps, as ``WithServers`` does) reads
    every user's agents: the system service run as root."""
    seen = 0
    while directory is not None and seen < 8:
        if getattr(directory, "all_users", False) is True:
            return True
        directory, seen = getattr(directory, "agents", None), seen + 1
    return False


def refusal(runner: PolicyRunner | None, caller: Caller, every_user: bool,
            server_uid: int | None, session: bool = False) -> ApiError | None:
    """Why ``caller``'s change would be refused (None: it would be taken).
    ``session``: the server lives as long as one SSH connection."""
    if session:
        return ApiError(SSH_SESSION, 409, "session")
    if runner is None:
        return ApiError(NO_POLICY, 409, "no_policy")
    if not caller.may(CONTROL):
        return ApiError("this token has no control scope", 403, "forbidden")
    if caller.uid == 0:
        return None
    if every_user:
        return ApiError(SYSTEM_SERVICE, 403, "not_allowed")
    if caller.uid is None or (server_uid is not None and caller.uid != server_uid):
        return ApiError(f"this server's policy unloads another user's models: only that user "
                        f"or root changes it, not {caller.user}", 403, "not_allowed")
    return None


def answer(runner: PolicyRunner | None, caller: Caller, every_user: bool,
           server_uid: int | None = None, session: bool = False) -> RemotePolicy:
    """The policy as ``caller`` sees it: its values and whether they may change them."""
    why = refusal(runner, caller, every_user, server_uid, session)
    if runner is None or (session and not runner.config.enabled):
        return RemotePolicy(False, 0.0, 0.0, 0.0, 0.0, available=False, why_not=str(why))
    cfg = runner.config
    return RemotePolicy(cfg.enabled, cfg.threshold, cfg.rearm, cfg.min_idle_s,
                        cfg.min_interval_s, available=True, may_change=why is None,
                        why_not=None if why is None else str(why))


def change(runner: PolicyRunner | None, p: Params, caller: Caller, every_user: bool,
           server_uid: int | None = None, session: bool = False) -> RemotePolicy:
    """Apply ``p`` (any of :data:`POLICY_FIELDS`) to the runner; ApiError, with
    nothing changed, for a caller refused or a value out of bounds."""
    why = refusal(runner, caller, every_user, server_uid, session)
    if why is not None or runner is None:
        raise why or ApiError(NO_POLICY, 409, "no_policy")
    cfg = runner.config
    enabled = p.flag("enabled", default=cfg.enabled)
    threshold = p.number("threshold", required=False, low=POLICY_THRESHOLD_MIN,
                         high=POLICY_THRESHOLD_MAX)
    rearm = p.number("rearm", required=False, low=POLICY_REARM_MIN, high=POLICY_REARM_MAX)
    min_idle = p.number("min_idle_s", required=False, low=0.0, high=POLICY_MIN_IDLE_MAX_S)
    interval = p.number("min_interval_s", required=False, low=0.0,
                        high=POLICY_MIN_INTERVAL_MAX_S)
    p.done()
    if not any(name in p.given for name in POLICY_FIELDS):
        raise ApiError(f"nothing to change: give any of {', '.join(POLICY_FIELDS)}")
    threshold = cfg.threshold if threshold is None else round(threshold, 4)
    if rearm is None:  # kept, but below a lowered threshold (as the window's settings do)
        rearm = min(cfg.rearm, round(threshold - POLICY_REARM_GAP, 4))
    elif rearm > threshold - POLICY_REARM_GAP + 1e-9:
        raise ApiError(f"'rearm' ({rearm:g}) must be at least {POLICY_REARM_GAP:g} below "
                       f"'threshold' ({threshold:g})")
    new = dataclasses.replace(
        cfg, enabled=enabled, threshold=threshold, rearm=round(rearm, 4),
        min_idle_s=cfg.min_idle_s if min_idle is None else min_idle,
        min_interval_s=cfg.min_interval_s if interval is None else interval)
    runner.set_config(new)
    return answer(runner, caller, every_user, server_uid)


def server_uid() -> int | None:
    """The uid this server runs as (None where there are none)."""
    return os.getuid() if hasattr(os, "getuid") else None


__all__ = ["NO_POLICY", "SYSTEM_SERVICE", "answer", "change", "reads_every_user", "refusal",
           "server_uid"]
