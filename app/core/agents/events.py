"""The one event path: model events and policy decisions, new since the last tick.

Agents report their recent model events (the last 64) with every report, an
action's reply carries its event too, and the pressure policy logs its
decisions.  :class:`EventFeed` (run by the Collector on the sampler thread)
reads all three once per tick and attaches to the tick's ``Snapshot`` only
what is new: each model event once, resolved to the GPU it concerns and the
snapshots' clock (:class:`ModelEventRecord`), and each policy decision once
as made and once as done (:class:`DecisionUpdate`).  Views render what
arrives and keep no cursor of their own.
Qt-free.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.agents.placement import gpu_of_device
from app.core.control.measure import ActionFigures, model_action_text, target_text
from app.core.units import fmt_bytes, fmt_elapsed

if TYPE_CHECKING:
    from app.core.agents.directory import AgentDirectory
    from app.core.agents.types import AgentReport, ModelEvent
    from app.core.monitor.samples import Snapshot
    from app.core.policies.pressure import PolicyDecision, PolicyRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelEventRecord:
    """A model event seen for the first time, as the views show it."""

    pid: int
    event: ModelEvent
    display_id: str | None  # the GPU it concerns, when known
    time: float  # epoch seconds on the snapshots' clock
    text: str  # "Unloaded pipe.unet (1.6 GiB → CPU, 0.4 s, idle)"
    gpu_used: int | None  # bytes: that GPU's used memory in the snapshot that brought it


@dataclass(frozen=True, slots=True)
class Marker:
    """One model event on one GPU's graph."""

    time: float  # epoch seconds on the snapshots' clock
    y: float | None  # bytes: the GPU's used memory when the event was seen
    action: str  # "unload" or "reload"
    ok: bool
    text: str  # "Unloaded pipe.unet (1.6 GiB → CPU, 0.4 s, idle)"
    pid: int
    seq: int


@dataclass(frozen=True, slots=True)
class DecisionUpdate:
    """A pressure-policy decision, as made or with its results."""

    decision: PolicyDecision
    new: bool  # the first time this decision reaches a snapshot (it may arrive done)


def event_text(ev: ModelEvent, size: int | None = None) -> str:
    """"Unloaded pipe.unet (1.6 GiB → CPU, 0.4 s, idle)" — the marker's hover text."""
    if ev.action == "unload":
        head = f"Unloaded {ev.name}" if ev.ok else f"Unload of {ev.name} failed"
        moved = ev.bytes_moved if ev.bytes_moved is not None else size
        inner = [f"{fmt_bytes(moved)} → {target_text(ev.target)}" if moved is not None
                 else f"→ {target_text(ev.target)}"]
    else:
        head = f"Reloaded {ev.name}" if ev.ok else f"Reload of {ev.name} failed"
        inner = [fmt_bytes(ev.bytes_moved)] if ev.bytes_moved is not None else []
    if ev.seconds is not None:
        inner.append(fmt_elapsed(ev.seconds))
    inner.append(ev.reason)
    text = f"{head} ({', '.join(inner)})"
    if not ev.ok and ev.error:
        text += f": {ev.error}"
    return text


def event_line(ev: ModelEvent, figures: ActionFigures | None = None,
               forced: bool = False) -> str:
    """The Activity log's line of an event: a done move's figures in the words the
    detail view uses (``model_action_text``; ``figures``: the controller's record
    of it, NVML included, when it came from one), else :func:`event_text`."""
    if not ev.ok:
        return event_text(ev)
    return model_action_text(ev.action, ev.name, figures or ActionFigures.of_event(ev),
                             ev.target, ev.seconds, forced)


class EventFeed:
    """Attaches what is new since the last tick to each snapshot (one instance per
    Collector; called on one thread).

    Model events come from the snapshot's agent reports and from the
    directory's own stream (``events_since``: replies, and events of an agent
    whose reports stopped right after); each (pid, seq) is attached once.
    Policy decisions come from the runner's log (``decisions_since``); each is
    attached once as made and once as done.
    """

    def __init__(self, directory: AgentDirectory | None = None,
                 policy: PolicyRunner | None = None, remember: int = 20_000) -> None:
        self.directory = directory
        self.policy = policy
        self._remember = remember
        self._seen: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._last_events: dict[int, tuple[ModelEvent, ...]] = {}
        self._events_cursor = 0
        self._decisions_cursor = 0
        self._decided: dict[int, bool] = {}  # decision seq -> done, as last attached

    def seen(self, pid: int, seq: int) -> bool:
        return (pid, seq) in self._seen

    def attach(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with ``model_events`` and ``policy_decisions`` filled in."""
        events = tuple(self._model_events(snapshot))
        decisions = tuple(self._decisions())
        if not events and not decisions:
            return snapshot
        return dataclasses.replace(snapshot, model_events=events, policy_decisions=decisions)

    # -- model events ----------------------------------------------------------------------
    def _model_events(self, snapshot: Snapshot) -> list[ModelEventRecord]:
        out: list[ModelEventRecord] = []
        agents = snapshot.agents
        for pid, report in agents.items():
            events = getattr(report, "events", ())
            if not events or self._last_events.get(pid) is events:
                continue  # the same tuple as last tick: nothing new
            self._last_events[pid] = events
            for ev in events:
                rec = self._record(snapshot, pid, report, ev)
                if rec is not None:
                    out.append(rec)
        if len(self._last_events) > len(agents) + 64:
            self._last_events = {p: e for p, e in self._last_events.items() if p in agents}
        for pid, ev in self._directory_events():
            rec = self._record(snapshot, pid, agents.get(pid), ev)
            if rec is not None:
                out.append(rec)
        return out

    def _directory_events(self) -> list[tuple[int, ModelEvent]]:
        if self.directory is None:
            return []
        try:
            events, self._events_cursor = self.directory.events_since(self._events_cursor)
        except Exception:
            log.exception("reading the agent directory's events failed")
            return []
        return events

    def _record(self, snapshot: Snapshot, pid: int, report: AgentReport | None,
                ev: ModelEvent) -> ModelEventRecord | None:
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
        used = None
        if did is not None:
            used = next((g.memory_used for g in snapshot.gpus if g.display_id == did), None)
        return ModelEventRecord(pid, ev, did, when, event_text(ev, size), used)

    # -- policy decisions ------------------------------------------------------------------
    def _decisions(self) -> list[DecisionUpdate]:
        if self.policy is None:
            return []
        try:
            decisions, self._decisions_cursor = self.policy.decisions_since(
                self._decisions_cursor)
        except Exception:
            log.exception("reading the pressure policy's decisions failed")
            return []
        out = []
        for d in decisions:
            done = bool(d.done)
            before = self._decided.get(d.seq)
            if before == done:
                continue  # the log handed the same state back
            self._decided[d.seq] = done
            out.append(DecisionUpdate(d, new=before is None))
        if len(self._decided) > 1024:
            for seq in sorted(self._decided)[:512]:
                del self._decided[seq]
        return out


class MarkerRing:
    """The newest model events per GPU, for the graphs' markers (bounded)."""

    def __init__(self, per_gpu: int = 200) -> None:
        self.per_gpu = per_gpu
        self.markers: dict[str, deque[Marker]] = {}
        #: Bumped whenever a GPU's markers change (its panel redraws them then).
        self.versions: dict[str, int] = {}

    def add(self, record: ModelEventRecord) -> None:
        did = record.display_id
        if did is None:
            return
        ring = self.markers.get(did)
        if ring is None or ring.maxlen != self.per_gpu:
            ring = self.markers[did] = deque(ring or (), maxlen=self.per_gpu)
        ev = record.event
        ring.append(Marker(record.time, record.gpu_used, ev.action, ev.ok, record.text,
                           record.pid, ev.seq))
        self.versions[did] = self.versions.get(did, 0) + 1


__all__ = ["DecisionUpdate", "EventFeed", "Marker", "MarkerRing", "ModelEventRecord",
           "event_line", "event_text", "target_text"]
