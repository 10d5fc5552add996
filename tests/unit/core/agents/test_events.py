"""The one event path: what the Collector attaches to each snapshot."""

from __future__ import annotations

import dataclasses
import threading

from app.core.agents.demo import DemoAgents
from app.core.agents.events import EventFeed, MarkerRing, event_text
from app.core.agents.types import ModelEvent
from app.core.monitor.collector import Collector
from app.core.monitor.demo_source import DemoSource
from app.core.policies.pressure import UNLOAD, PolicyRunner
from tests.unit.core.policies.test_pressure import (
    NOW,
    Directory,
    gpu,
    model,
    report,
    snap,
    watched,
)


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def demo_collector(elapsed: float = 20.0) -> tuple[Collector, DemoAgents, Clock]:
    clock = Clock()
    source = DemoSource(clock=clock)
    agents = DemoAgents(source)
    collector = Collector(source, agents=agents, pressure_policy=False)
    collector.open()
    clock.now += elapsed
    return collector, agents, clock


def ev(seq: int, **kw) -> ModelEvent:
    fields = dict(seq=seq, time=NOW - 5, model="a", name="name-a", action="unload",
                  state="offloaded", target="cpu", bytes_moved=2 ** 30, seconds=0.4,
                  reason="idle")
    fields.update(kw)
    return ModelEvent(**fields)


def test_a_manual_unload_arrives_once_with_the_next_snapshot_on_its_gpu():
    collector, agents, clock = demo_collector()
    try:
        first = collector.collect()
        assert first.model_events == ()
        nb = next(r for r in first.agents.values() if "ipykernel" in " ".join(r.argv))
        unet = next(m for m in nb.models if m.name == "pipe.unet")
        assert agents.unload(nb.pid, unet.id, to="cpu").ok
        clock.now += 0.25
        second = collector.collect()
        [rec] = second.model_events
        assert rec.pid == nb.pid and rec.event.action == "unload" and rec.event.ok
        assert rec.text == event_text(rec.event, unet.param_bytes + unet.buffer_bytes)
        # On the GPU the process runs on, with that GPU's used memory for the marker.
        on = [g for g in second.gpus if any(p.pid == nb.pid for p in g.processes)]
        assert rec.display_id == on[0].display_id
        assert rec.gpu_used == on[0].memory_used
        assert rec.time <= second.timestamp
        # The agent's report keeps repeating it; the directory's log has it too: once.
        clock.now += 0.25
        assert collector.collect().model_events == ()
    finally:
        collector.close()


def test_report_events_and_the_directory_stream_are_attached_once_each():
    class Stream(Directory):
        def __init__(self) -> None:
            super().__init__()
            self.stream = []

        def events_since(self, cursor=0):
            return self.stream[cursor:], len(self.stream)

    directory = Stream()
    feed = EventFeed(directory)
    r = dataclasses.replace(report(20, model("a")), events=(ev(1), ev(2, action="reload")))
    out = feed.attach(snap(gpu(), r))
    assert [x.event.seq for x in out.model_events] == [1, 2]
    assert out.model_events[0].display_id == "0"
    # A new report object with the same events, and the stream naming one of them.
    directory.stream.append((20, ev(2, action="reload")))
    again = feed.attach(snap(gpu(), dataclasses.replace(r, events=tuple(r.events))))
    assert again.model_events == ()
    # An event only the stream has (its agent's reports ended) still arrives.
    directory.stream.append((20, ev(3)))
    [late] = feed.attach(snap(gpu(), r)).model_events
    assert late.event.seq == 3 and feed.seen(20, 3)


def test_an_event_time_is_moved_onto_the_snapshots_clock():
    feed = EventFeed()
    r = dataclasses.replace(report(20, model("a")), events=(ev(1, time=NOW + 3),),
                            received_at=NOW - 100.0)  # a recording: its clock is 100 s behind
    [rec] = feed.attach(snap(gpu(), r)).model_events
    assert rec.time == NOW  # never after the snapshot that brought it
    r2 = dataclasses.replace(r, events=(ev(2, time=NOW - 150.0),))
    [rec2] = feed.attach(snap(gpu(), r2)).model_events
    assert rec2.time == NOW - 50.0


def test_a_policy_decision_arrives_as_made_then_as_done():
    gate = threading.Event()
    directory = Directory(gate=gate)
    r = report(20, model("a", gib=10.0))
    runner = watched(PolicyRunner(directory), r)
    feed = EventFeed(directory, runner)
    full = snap(gpu(fraction=0.95), r)
    try:
        runner.observe(full)
        [made] = feed.attach(full).policy_decisions
        assert made.new and made.decision.kind == UNLOAD and not made.decision.done
        assert feed.attach(full).policy_decisions == ()  # not news again
        gate.set()
        assert runner.wait_idle(3)
        [done] = feed.attach(full).policy_decisions
        assert not done.new and done.decision.done and done.decision.seq == made.decision.seq
        assert feed.attach(full).policy_decisions == ()
    finally:
        gate.set()
        runner.close()


def test_a_decision_done_within_one_tick_arrives_once_and_new():
    directory = Directory()
    r = report(20, model("a", gib=10.0))
    runner = watched(PolicyRunner(directory, synchronous=True), r)
    feed = EventFeed(directory, runner)
    full = snap(gpu(fraction=0.95), r)
    runner.observe(full)
    [update] = feed.attach(full).policy_decisions
    assert update.new and update.decision.done and directory.calls


def test_what_happens_while_the_source_is_down_arrives_at_once_and_only_once():
    collector, agents, clock = demo_collector()
    try:
        r = report(20, model("a", gib=10.0))
        runner = watched(PolicyRunner(agents, synchronous=True), r)
        collector.events.policy = runner
        full = snap(gpu(fraction=0.95), r)
        runner.observe(full)  # no agent 20 in the demo: the unload fails, and says so
        # Agents answer without NVML: what they and the policy did reaches the views
        # with the error snapshot itself, and is not handed out again after it.
        error = collector._error_snapshot("driver gone", 0.0)
        assert error.gpus == ()
        [update] = error.policy_decisions
        assert update.new and update.decision.done and not update.decision.results[0].ok
        clock.now += 0.25
        assert collector.collect().policy_decisions == ()
    finally:
        collector.close()


def test_markers_are_kept_per_gpu_and_bounded():
    ring = MarkerRing(per_gpu=3)
    feed = EventFeed()
    for seq in range(1, 6):
        r = dataclasses.replace(report(20, model("a")), events=(ev(seq, time=NOW + seq),))
        for rec in feed.attach(snap(gpu(), r)).model_events:
            ring.add(rec)
    assert [m.seq for m in ring.markers["0"]] == [3, 4, 5]
    assert ring.versions["0"] == 5
    assert ring.markers["0"][-1].text.startswith("Unloaded name-a (1.0 GiB → CPU")
