"""The model manager's requests: their params checked before anything moves.

Bad input gets a ``bad_params`` reply and changes nothing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .errors import BadParams
from .protocol import idle_unload_problem

#: Reasons a client may give; "idle" belongs to the agent's own timer.
REASONS = ("manual", "pressure")
AUTOMATIC = ("idle", "pressure")
TARGETS = ("cpu", "disk")


class UnloadRequest(NamedTuple):
    """(A NamedTuple: ``dataclasses`` would cost the host 8 ms of imports at start.)"""

    model: str
    to: str | None  # None: "cpu" for a model with CUDA weights, else "disk"
    force: bool  # overrides training evidence only (manual unloads)
    reason: str


def model_id(params: dict) -> str:
    value = params.get("model")
    if not isinstance(value, str) or not value:
        raise BadParams("model must be a model id string")
    return value


def unload(params: dict) -> UnloadRequest:
    model = model_id(params)
    to = params.get("to")
    if to is not None and to not in TARGETS:
        raise BadParams('to must be "cpu" or "disk"')
    force = params.get("force", False)
    if not isinstance(force, bool):
        raise BadParams("force must be true or false")
    reason = params.get("reason", "manual")
    if reason not in REASONS:
        raise BadParams('reason must be "manual" or "pressure"')
    if reason != "manual" and force:
        raise BadParams("force is for manual unloads only")
    return UnloadRequest(model, to, force, reason)


def pinned(params: dict) -> bool:
    value = params.get("pinned", True)
    if not isinstance(value, bool):
        raise BadParams("pinned must be true or false")
    return value


def idle_unload_s(params: dict) -> float | None:
    if "idle_unload_s" not in params:
        raise BadParams("idle_unload_s is required (seconds or null)")
    value: Any = params.get("idle_unload_s")
    if value is None:
        return None
    problem = idle_unload_problem(value)
    if problem is not None:
        raise BadParams(f"idle_unload_s {problem}, or null (off)")
    return float(value)
