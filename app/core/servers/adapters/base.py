"""What every adapter answers: a probe of the server and the reply to an unload."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from app.core.servers.http import LocalHttp
from app.core.servers.recognise import Found
from app.core.servers.types import Reservation, ServerModel


@dataclass(frozen=True, slots=True)
class Probe:
    """One reading of a server's API."""

    version: str | None = None
    models: tuple[ServerModel, ...] = ()
    busy: bool | None = None  # generating or rendering now (None: the API does not say)
    reservation: Reservation | None = None
    can_unload: bool = False
    unload_note: str = ""


@dataclass(frozen=True, slots=True)
class Ack:
    """The server's answer to an unload."""

    accepted: bool
    text: str
    deferred: bool = False  # it said it frees later (ComfyUI's /free while rendering)


class Adapter(abc.ABC):
    kind: str = ""
    #: Seconds an unload has to show in NVML before it counts as not freed.
    deadline_s: float = 15.0
    #: The server holds an unload asked while it generates until it is idle (Ollama,
    #: ComfyUI): a manual one is sent then and is "pending"; others are refused.
    defers_while_busy: bool = False
    #: A model it unloaded comes back by itself on the next request that needs it.
    reloads_on_use: bool = False

    @abc.abstractmethod
    def probe(self, found: Found, http: LocalHttp) -> Probe:
        """Read the server; raises ServerHttpError when its API gives nothing."""

    def unload(self, http: LocalHttp, model: ServerModel) -> Ack:
        """Ask the server to unload ``model`` (never called while it is busy)."""
        return Ack(False, "this server offers no unload")

    def reload(self, http: LocalHttp, model: ServerModel) -> Ack:
        if self.reloads_on_use:
            return Ack(False, "it loads the model again on the next request that names it")
        return Ack(False, "its API offers no reload: load the model from the server itself")


def number(value: Any) -> int | None:
    """A byte count from JSON: a non-negative int (bool is not one), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value >= 0 else None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


__all__ = ["Ack", "Adapter", "Probe", "items", "mapping", "number", "text"]
