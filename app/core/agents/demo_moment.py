"""The demo at one moment: what every one-shot ``--demo`` command shows.

The window (and ``serve --demo``) runs the scripted demo from its start in real
time.  A one-shot command cannot wait for the story to happen, so it shows the
demo at :data:`MOMENT_S`, replayed from the start at once through the parts the
window's sampler runs (the collector, the simulated agents of
``default_agents_for``, the pressure policy and the doctor), one tick every
:data:`STEP_S` (the window's default period) on the demo's own clock.  Why that
moment: by then the whole story has happened and everyone in it still runs:

* ~32 s: GPU 0's training saw-tooth crosses 90 % and the policy unloads the
  idle notebook's text encoder and UNet (its VAE stays: 85 % is reached
  without it), so the Doctor's idle-model advice names the VAE alone;
* 4 min 30 s: the leaking embedding server makes GPU 1 "full soon";
* 9 min 15 s: it asks for 1.5 GiB the card no longer has (the OOM and its
  post-mortem) while eval.py's eighth run holds 7.2 GiB beside it;
* 9 min 16 s, the moment: the server has not crashed yet (3 s after its OOM),
  so the pids in the post-mortem are those ``status`` and ``agents`` list.

So ``status``, ``agents``, ``models``, ``doctor`` and the actions show the same
figures, pids, model states and findings, and the window shows them too
9 min 16 s after it opened.  The demo's clock then stands still: an action is
answered at that same moment, and the demo's wall clock puts the moment at
now.  A scaled demo (``--demo=GxP``) has no agents and no story: its moment is
its start, where its P processes per GPU all run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.core.agents.directory import AgentDirectory
from app.core.diagnosis.doctor import Doctor
from app.core.monitor.collector import Collector, default_agents_for
from app.core.monitor.demo_source import DemoSource, demo_source
from app.core.monitor.samples import Snapshot
from app.core.policies.pressure import PolicyRunner

#: Seconds into the scripted demo that one-shot commands show (9 min 16 s).
MOMENT_S = 556.0
#: Seconds between two ticks of the replay: the window's default sampling period.
STEP_S = 0.25


@dataclass(frozen=True)
class DemoMoment:
    """The demo at its moment: its source and agents (standing at that moment,
    for actions), the snapshot the window shows then, and its doctor."""

    source: DemoSource
    agents: AgentDirectory
    snapshot: Snapshot
    doctor: Doctor
    at_s: float  # seconds into the demo
    started: float  # the demo's wall clock (epoch seconds) at its start


def moment_s(size: tuple[int, int] | None) -> float:
    """The moment a one-shot command shows: :data:`MOMENT_S` of the scripted
    demo, the start of a scaled one (``size``: GPUs, processes per GPU)."""
    return MOMENT_S if size is None else 0.0


def demo_moment(seed: int = 7, size: tuple[int, int] | None = None) -> DemoMoment:
    """The demo replayed from its start to its moment, tick by tick, as the
    window runs it (the policy's unloads done within their tick)."""
    at_s = moment_s(size)
    now = [0.0]
    started = time.time() - at_s  # the moment is now on the demo's wall clock
    source = demo_source(size, seed, clock=lambda: now[0], started_at=started)
    agents = default_agents_for(source)
    doctor = Doctor(demo=True)
    collector = Collector(source, agents=agents,
                          pressure_policy=PolicyRunner(agents, synchronous=True),
                          doctor=doctor, wall_clock=source.now, monotonic_clock=source.clock)
    collector.open()
    snapshot = collector.collect()
    for i in range(1, round(at_s / STEP_S) + 1):
        now[0] = i * STEP_S
        snapshot = collector.collect()
    if collector.policy is not None:
        collector.policy.close()
    return DemoMoment(source, agents, snapshot, doctor, at_s, started)
