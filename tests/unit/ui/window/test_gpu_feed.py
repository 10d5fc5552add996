"""Each panel is told the agents and the busy pids of its own GPU's host (pids
are the host's own), and a host not connected is shown, not acted on."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from app.core.monitor.hosts import DISCONNECTED
from app.ui.window.gpu_feed import feed_agents
from tests.unit.ui.window.host_snapshots import World, gpu


class Panel:
    def __init__(self) -> None:
        self.agent_section = SimpleNamespace(isHidden=lambda: True)
        self.calls: list[tuple] = []

    def update_agents(self, gpu, agents, busy, can_act) -> None:
        self.calls.append((gpu.display_id, dict(agents), busy, can_act))


class Controller:
    available = True

    def __init__(self, busy: dict[str, set[int]]) -> None:
        self.busy = busy

    def busy_pids(self, host: str = "") -> set[int]:
        return self.busy.get(host, set())


def test_a_remote_panel_gets_its_hosts_agents_and_busy_set_not_this_machines():
    world = World()
    remote = gpu(0, "gpu1", pids=(4242,))
    one = world.host("gpu1", remote, agents={4242: "gpu1's agent"})
    snap = dataclasses.replace(world.snap([gpu(0, pids=(4242,))], [one]),
                               agents={4242: "this machine's agent"})
    panel = Panel()
    feed_agents(panel, remote, snap, Controller({"": {4242}, "gpu1": set()}))
    assert panel.calls == [("0@gpu1", {4242: "gpu1's agent"}, False, True)]
    feed_agents(panel, remote, snap, Controller({"gpu1": {4242}}))
    assert panel.calls[-1][2] is True  # busy on its own host


def test_a_disconnected_hosts_panel_offers_no_action():
    world = World()
    remote = gpu(0, "gpu1", pids=(7,))
    down = world.host("gpu1", remote, state=DISCONNECTED, since=world.epoch,
                      agents={7: "agent"})
    panel = Panel()
    feed_agents(panel, remote, world.snap([], [down]), Controller({}))
    assert panel.calls == [("0@gpu1", {7: "agent"}, False, False)]


def test_no_agents_anywhere_leaves_a_hidden_section_alone():
    world = World()
    remote = gpu(0, "gpu1")
    panel = Panel()
    feed_agents(panel, remote, world.snap([], [world.host("gpu1", remote)]), Controller({}))
    assert panel.calls == []
