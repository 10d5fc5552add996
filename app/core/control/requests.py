"""What the user (or the tray, a notification, the CLI) asks the controller to do.

Every verb is a frozen dataclass: views build one and hand it to
:meth:`app.core.control.controller.AppController.submit`; nothing else is
needed to describe the action.  A request the latest snapshot cannot satisfy
is answered with :class:`RequestError` (a typed reason, nothing changed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


@dataclass(frozen=True, slots=True)
class FreeCache:
    """gc.collect() + empty_cache() in ``pids``, one after another.

    ``display_id`` set and ``pids`` empty: every agent process on that GPU whose
    allocator holds cache ("Free all caches" of a GPU panel).  Both empty:
    every process with an agent, on every GPU (the tray, a notification).
    """

    pids: tuple[int, ...] = ()
    display_id: str | None = None
    host: str = ""  # the remote host ``pids`` are on ("" this machine)

    @classmethod
    def of(cls, pid: int, host: str = "") -> FreeCache:
        return cls((pid,), host=host)

    @classmethod
    def on_gpu(cls, display_id: str) -> FreeCache:
        _, _, host = display_id.partition("@")
        return cls((), display_id, host)

    @classmethod
    def everywhere(cls) -> FreeCache:
        return cls()


@dataclass(frozen=True, slots=True)
class CollectGarbage:
    """gc.collect() alone in process ``pid``."""

    pid: int
    host: str = ""  # the remote host the process is on ("" this machine)


@dataclass(frozen=True, slots=True)
class Unload:
    """Move ``model``'s weights off its GPU (to ``to``: "cpu" or "disk")."""

    pid: int
    model: str  # the agent's model id
    to: str = "cpu"
    force: bool = False  # override a refusal for training evidence
    reason: str = "manual"
    name: str | None = None  # for texts; the model id when None
    device: str | None = None  # the model's home device ("cuda:0"); looked up when None
    size: int | None = None  # bytes of parameters + buffers; looked up when None
    host: str = ""  # the remote host the process is on ("" this machine)


@dataclass(frozen=True, slots=True)
class Reload:
    """Bring ``model``'s offloaded weights back now."""

    pid: int
    model: str
    name: str | None = None
    device: str | None = None
    host: str = ""  # the remote host the process is on ("" this machine)


@dataclass(frozen=True, slots=True)
class Pin:
    """Pinned models are never unloaded automatically."""

    pid: int
    model: str
    pinned: bool
    name: str | None = None
    host: str = ""  # the remote host the process is on ("" this machine)


@dataclass(frozen=True, slots=True)
class SetIdleUnload:
    """The idle timer of the agent in ``pid`` (None: off)."""

    pid: int
    seconds: float | None
    host: str = ""  # the remote host the process is on ("" this machine)


@dataclass(frozen=True, slots=True)
class UnloadIdle:
    """Unload now every model the auto-unload rules call idle (idle at least
    ``min_idle_s``, not pinned, no training evidence), whatever the GPU's level."""

    min_idle_s: float
    reason: str = "idle (from the tray)"


@dataclass(frozen=True, slots=True)
class SetAutoUnload:
    """The app's memory-pressure policy settings (the PolicyRunner's config)."""

    enabled: bool
    threshold: float  # fraction of the GPU's total
    rearm: float  # fraction
    min_idle_s: float  # seconds
    min_interval_s: float  # seconds


#: Seconds between SIGTERM and SIGKILL when a process is terminated.
TERMINATE_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class Terminate:
    """Stop process ``pid`` (SIGTERM, then SIGKILL after ``grace_s``).

    ``create_time`` is the start time the user saw (its ``ProcessSample.key``):
    a process that started later under the same pid is never signalled.  None:
    the process the latest snapshot shows under ``pid``."""

    pid: int
    create_time: float | None = None
    grace_s: float = TERMINATE_GRACE_S
    host: str = ""  # the remote host the process is on ("" this machine)


#: The recording lengths the detail view offers; any length within the bounds is accepted.
RECORD_SECONDS = (5, 10, 30, 60)
RECORD_MAX_S = 600.0


@dataclass(frozen=True, slots=True)
class RecordAllocations:
    """Record process ``pid``'s CUDA allocations for ``seconds`` (PyTorch's
    allocation history, at most ``max_entries`` events; None: the agent's
    default) and summarise them by call site."""

    pid: int
    seconds: float
    max_entries: int | None = None
    host: str = ""  # the remote host the process is on ("" this machine)


Request = (FreeCache | CollectGarbage | Unload | Reload | Pin | SetIdleUnload | UnloadIdle
           | SetAutoUnload | Terminate | RecordAllocations)


class Refusal(StrEnum):
    """Why a request was not started."""

    UNAVAILABLE = "unavailable"  # no agent directory: actions are off
    NO_SNAPSHOT = "no_snapshot"  # nothing sampled yet to check the request against
    UNKNOWN_PROCESS = "unknown_process"  # the pid is in no GPU's list and has no agent
    NO_AGENT = "no_agent"  # the process has no agent reporting
    UNKNOWN_GPU = "unknown_gpu"
    UNKNOWN_MODEL = "unknown_model"
    BUSY = "busy"  # an action on the same process / model is running
    NOTHING_TO_DO = "nothing_to_do"
    NOT_OWNED = "not_owned"  # another user's process (terminate)
    PROTECTED = "protected"  # pid 1, the app itself (terminate)
    NOT_VISIBLE = "not_visible"  # a pid from another PID namespace (terminate)
    GONE = "gone"  # the process has exited, or its pid now names another one
    SIMULATED = "simulated"  # a demo process: nothing real to signal
    NO_CUDA = "no_cuda"  # the process has not initialised CUDA: nothing to record
    INVALID = "invalid"  # a figure out of its bounds (a recording's length, an idle timer)
    NO_UNLOAD = "no_unload"  # a model server whose API offers no unload


class RequestError(ValueError):
    """A request refused before anything ran; ``code`` says why."""

    def __init__(self, code: Refusal, message: str) -> None:
        super().__init__(message)
        self.code = code


__all__ = ["RECORD_MAX_S", "RECORD_SECONDS", "TERMINATE_GRACE_S", "CollectGarbage", "FreeCache",
           "Pin", "RecordAllocations", "Refusal", "Reload", "Request", "RequestError",
           "SetAutoUnload", "SetIdleUnload", "Terminate", "Unload", "UnloadIdle"]


def policy_config(settings: SetAutoUnload, base: Any) -> Any:
    """``base`` (a PressurePolicyConfig) with the settings' values; fields the
    settings do not have (``target``) are kept."""
    names = {f.name for f in dataclasses.fields(base)}
    values = dataclasses.asdict(settings)
    return dataclasses.replace(base, **{k: v for k, v in values.items() if k in names})
