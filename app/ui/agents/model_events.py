"""Model unload/reload events collected from agent reports (Qt-free).

Every report carries its agent's recent model events (the last 64); the same
event arrives with every report until it ages out, and once more through the
result of an action the app started.  :class:`ModelEventLog` keeps each
(pid, seq) once, works out which GPU it concerns, and keeps a bounded list of
graph markers per GPU.

Per snapshot the cost is one identity check per agent (a report whose events
tuple is the one seen last time is skipped) plus a set lookup per event of a
changed report.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from app.core.agents.types import AgentReport, ModelEvent
from app.core.monitor.samples import Snapshot
from app.ui.agents.model_actions import event_text, gpu_of_device


@dataclass(frozen=True, slots=True)
class Marker:
    """One event on one GPU's graph."""

    time: float  # epoch seconds on the snapshots' clock
    y: float | None  # bytes: the GPU's used memory when the event was seen
    action: str  # "unload" or "reload"
    ok: bool
    text: str  # "Unloaded pipe.unet (1.6 GiB → CPU, 0.4 s, idle)"
    pid: int
    seq: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A new event, for the activity log and the status bar."""

    pid: int
    event: ModelEvent
    display_id: str | None
    time: float  # epoch seconds on the snapshots' clock
    text: str


class ModelEventLog:
    def __init__(self, per_gpu: int = 200, remember: int = 20_000) -> None:
        self.per_gpu = per_gpu
        self._remember = remember
        self._seen: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._last_events: dict[int, tuple[ModelEvent, ...]] = {}
        self.markers: dict[str, deque[Marker]] = {}
        #: Bumped whenever a GPU's markers change (the panel redraws them then).
        self.versions: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, pid: int, seq: int) -> bool:
        return (pid, seq) in self._seen

    def ingest(self, snapshot: Snapshot) -> list[EventRecord]:
        """New events of every agent in ``snapshot`` (oldest first)."""
        out: list[EventRecord] = []
        agents = snapshot.agents
        for pid, report in agents.items():
            events = getattr(report, "events", ())
            if not events or self._last_events.get(pid) is events:
                continue
            self._last_events[pid] = events
            for ev in events:
                rec = self._add(snapshot, pid, report, ev)
                if rec is not None:
                    out.append(rec)
        if len(self._last_events) > len(agents) + 64:
            self._last_events = {p: e for p, e in self._last_events.items() if p in agents}
        return out

    def add_event(self, snapshot: Snapshot | None, pid: int, ev: ModelEvent,
                  report: AgentReport | None = None) -> EventRecord | None:
        """An event from an action's result (deduplicated against the reports)."""
        if snapshot is None:
            return None
        if report is None:
            report = snapshot.agents.get(pid)
        return self._add(snapshot, pid, report, ev)

    def markers_for(self, display_id: str) -> list[Marker]:
        return list(self.markers.get(display_id, ()))

    # -- internals ---------------------------------------------------------------------
    def _add(self, snapshot: Snapshot, pid: int, report: AgentReport | None,
             ev: ModelEvent) -> EventRecord | None:
        key = (pid, ev.seq)
        if key in self._seen:
            return None
        self._seen[key] = None
        if len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        model = None
        if report is not None:
            model = next((m for m in report.models if m.id == ev.model), None)
        device = (model.home_device or model.device) if model is not None else None
        did = gpu_of_device(snapshot, report, device, pid)
        # The agent's clock -> the snapshots' clock (the same clock in real use; a fake
        # clock in tests and recordings), never after the snapshot that brought it.
        offset = 0.0
        if report is not None and report.received_at:
            offset = snapshot.timestamp - report.received_at
            if abs(offset) < 2.0:
                offset = 0.0
        when = min(ev.time + offset, snapshot.timestamp)
        size = None
        if model is not None and (model.param_bytes is not None or model.buffer_bytes is not None):
            size = (model.param_bytes or 0) + (model.buffer_bytes or 0)
        text = event_text(ev, size)
        if did is not None:
            used = next((g.memory_used for g in snapshot.gpus if g.display_id == did), None)
            ring = self.markers.get(did)
            if ring is None:
                ring = self.markers[did] = deque(maxlen=self.per_gpu)
            ring.append(Marker(when, used, ev.action, ev.ok, text, pid, ev.seq))
            self.versions[did] = self.versions.get(did, 0) + 1
        return EventRecord(pid, ev, did, when, text)


__all__ = ["EventRecord", "Marker", "ModelEventLog"]
