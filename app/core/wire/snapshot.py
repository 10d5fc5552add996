"""The wire format: a whole :class:`Snapshot` as versioned JSON.

Used by ``status --json``, the server's API and stream, and the remote
source, so a snapshot read from another host is the snapshot that host
made.  The top level keeps the ``status --json`` contract (``source``,
``driver_version``, ``timestamp``, ``error``, ``gpus`` with each GPU's
``unattributed_memory``) and adds ``wire`` (the version) and the rest of
the snapshot: agents and their models, model events, policy decisions,
diagnoses, OOM reports and the model servers.  Derived figures are written for readers and
ignored when read back: the decoder computes them again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from app.core.agents.events import DecisionUpdate, ModelEventRecord
from app.core.agents.types import AgentReport, ModelEvent
from app.core.diagnosis.types import Diagnosis, OomReport
from app.core.monitor.samples import GpuSample, Snapshot
from app.core.policies.pressure import PolicyDecision
from app.core.servers.types import ModelServer
from app.core.wire.codec import Decoder, WireError, encode

#: The one version of this format.  A change that an older reader would
#: misread raises it; a key added for readers who may ignore it does not.
WIRE_VERSION = 1

_DECODER = Decoder(
    overrides={
        (Snapshot, "agents"): dict[int, AgentReport],
        (Snapshot, "model_events"): tuple[ModelEventRecord, ...],
        (Snapshot, "policy_decisions"): tuple[DecisionUpdate, ...],
        (Snapshot, "diagnoses"): tuple[Diagnosis, ...],
        (Snapshot, "oom_reports"): tuple[OomReport, ...],
        (Snapshot, "servers"): tuple[ModelServer, ...],
    },
    names={"PolicyDecision": PolicyDecision, "ModelEvent": ModelEvent,
           "AgentReport": AgentReport, "Snapshot": Snapshot})


#: Fields that never travel: the window's own view of other hosts.
LOCAL_ONLY = frozenset({(Snapshot, "hosts"), (GpuSample, "host")})


class WireVersionError(WireError):
    """The peer speaks another version of the wire format."""

    def __init__(self, theirs: object, who: str = "the server") -> None:
        older = isinstance(theirs, int) and theirs < WIRE_VERSION
        hint = ("upgrade VRAM Steward there" if older else "upgrade VRAM Steward here")
        super().__init__(f"{who} speaks wire version {theirs!r}, this one speaks "
                         f"{WIRE_VERSION}: {hint}")
        self.theirs = theirs


def check_version(data: Any, who: str = "the server") -> None:
    """Raise :class:`WireVersionError` unless ``data`` carries our version."""
    theirs = data.get("wire") if isinstance(data, dict) else None
    if theirs != WIRE_VERSION:
        raise WireVersionError(theirs, who)


def encode_snapshot(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot as JSON-ready data, versioned."""
    data: dict[str, Any] = {"wire": WIRE_VERSION}
    if snapshot.hosts:  # the window's view of other hosts: theirs to say
        snapshot = dataclasses.replace(snapshot, hosts=())
    data.update(encode(snapshot))
    data.pop("hosts", None)
    for gpu, out in zip(snapshot.gpus, data["gpus"], strict=True):
        out["unattributed_memory"] = gpu.unattributed_memory
        out.pop("host", None)
    return data


def decode_snapshot(data: Any, who: str = "the server") -> Snapshot:
    """The snapshot ``data`` holds; :class:`WireError` (a version error
    included) when it is not one."""
    check_version(data, who)
    snapshot: Snapshot = _DECODER.decode(Snapshot, data)
    # A peer never says which host a GPU is on, nor which hosts a window watches.
    if snapshot.hosts or any(g.host for g in snapshot.gpus):
        snapshot = dataclasses.replace(snapshot, hosts=(), gpus=tuple(
            dataclasses.replace(g, host="") if g.host else g for g in snapshot.gpus))
    return snapshot


def field_types(cls: type) -> dict[str, Any]:
    """The type each field of ``cls`` travels as (``Any`` fields made concrete)."""
    return _DECODER.hints(cls)


def decode(tp: Any, data: Any) -> Any:
    """Any other typed value of the format (an action's result, a diagnosis)."""
    return _DECODER.decode(tp, data)
