"""The demo's moment: one story that every one-shot demo command shows, and
that the window, run from the demo's start on the same clock, shows then too."""

from __future__ import annotations

import time

import pytest

from app.core.agents.demo_moment import MOMENT_S, STEP_S, demo_moment, moment_s
from app.core.monitor.collector import Collector, default_agents_for
from app.core.monitor.demo_source import demo_source, scaled_scenario


@pytest.fixture(scope="module")
def moment():
    return demo_moment()


def window_at(at_s: float):
    """The window's sampler, as it builds its collector (``Collector(source,
    agents=default_agents_for(source))``: the policy on its own worker, the
    default doctor), ticking at its default period on a clock run fast: the
    snapshots' clocks are the demo's, as the real ones are in real time."""
    now = [0.0]
    source = demo_source(None, 7, clock=lambda: now[0])
    collector = Collector(source, agents=default_agents_for(source), wall_clock=source.now,
                          monotonic_clock=source.clock)
    collector.open()
    snapshot = collector.collect()
    for i in range(1, round(at_s / STEP_S) + 1):
        now[0] = i * STEP_S
        snapshot = collector.collect()
        assert collector.policy is not None and collector.policy.wait_idle(10.0)
    collector.close()
    return snapshot


def processes(snapshot):
    return {p.pid: (g.index, p.gpu_memory, p.command) for g in snapshot.gpus
            for p in g.processes}


def model_states(snapshot):
    return {(pid, m.id): (m.name, m.state, m.device) for pid, r in snapshot.agents.items()
            for m in r.models}


def findings(snapshot):
    return sorted((d.kind, d.gpu, d.pid, d.title, d.evidence, tuple(f.text for f in d.fixes))
                  for d in snapshot.diagnoses)


def test_the_window_shows_at_that_moment_what_the_commands_show(moment):
    window = window_at(MOMENT_S)
    assert processes(window) == processes(moment.snapshot)
    assert [g.memory_used for g in window.gpus] == [g.memory_used for g in moment.snapshot.gpus]
    assert model_states(window) == model_states(moment.snapshot)
    assert findings(window) == findings(moment.snapshot)


def test_two_replays_agree_and_the_moment_is_now_on_the_demos_clock(moment):
    again = demo_moment()
    assert processes(again.snapshot) == processes(moment.snapshot)
    assert model_states(again.snapshot) == model_states(moment.snapshot)
    assert findings(again.snapshot) == findings(moment.snapshot)
    assert moment.at_s == MOMENT_S == moment_s(None)
    assert moment.snapshot.timestamp == pytest.approx(moment.started + MOMENT_S)
    assert abs(moment.snapshot.timestamp - time.time()) < 60


def test_the_story_holds_together_at_the_moment(moment):
    snap = moment.snapshot
    running = processes(snap)
    states = model_states(snap)
    offloaded = {key for key, (_, state, _) in states.items() if state == "offloaded"}
    assert offloaded, "the policy has unloaded idle models by then"
    # the Doctor never advises unloading a model that is not resident
    advised = {(f.pid, f.model) for d in snap.diagnoses for f in d.fixes
               if f.action == "unload_model"}
    assert advised and all(states[key][1] == "resident" for key in advised)
    assert not advised & offloaded
    # every process a finding or the OOM post-mortem names is running at the moment
    named = {d.pid for d in snap.diagnoses if d.pid is not None}
    named |= {h.pid for r in moment.doctor.reports for h in r.holders}
    assert named and named <= set(running)
    assert {r.pid for r in moment.doctor.reports} <= set(snap.agents)
    # every agent's process is one of the GPU's processes, on its device
    for pid, report in snap.agents.items():
        assert pid in running
        assert [d.index for d in report.devices] == [running[pid][0]]


def test_the_policys_unloads_are_what_is_offloaded(moment):
    """The models offloaded at the moment are those the policy's decisions unloaded."""
    policy_unloads = set()
    for report in moment.snapshot.agents.values():
        for event in report.events:
            if event.action == "unload" and event.reason == "pressure" and event.ok:
                policy_unloads.add((report.pid, event.model))
    offloaded = {key for key, (_, state, _) in model_states(moment.snapshot).items()
                 if state == "offloaded"}
    assert offloaded == policy_unloads


def test_one_pid_per_process_and_one_process_per_pid():
    """Over the demo's first 20 minutes (restarts, eval.py's runs): a process
    keeps its pid for its life, a new one gets its own, and no two share one."""
    now = [0.0]
    source = demo_source(None, 7, clock=lambda: now[0])
    source.open()
    pid_of: dict[tuple[str, float], set[int]] = {}
    process_of: dict[int, set[tuple[str, float]]] = {}
    for t in range(0, 1200):
        now[0] = float(t)
        for gpu in source.read():
            for p in gpu.processes:
                life = (p.command, p.create_time)
                pid_of.setdefault(life, set()).add(p.pid)
                process_of.setdefault(p.pid, set()).add(life)
    assert len(pid_of) > 6  # restarts happened
    assert all(len(pids) == 1 for pids in pid_of.values())
    assert all(len(lives) == 1 for lives in process_of.values())


@pytest.mark.parametrize("size", [(2, 8), (3, 17), (8, 64)])
def test_a_scaled_demo_shows_all_its_processes_at_its_start(size):
    gpus, per_gpu = size
    assert moment_s(size) == 0.0
    snapshot = demo_moment(size=size).snapshot
    assert [len(g.processes) for g in snapshot.gpus] == [per_gpu] * gpus
    assert len({p.pid for g in snapshot.gpus for p in g.processes}) == gpus * per_gpu
    # and so does the window at its start, and the scenario itself
    _, procs = scaled_scenario(*size)
    assert all(p.start_s == 0.0 for p in procs)
    window = demo_source(size, 7, clock=lambda: 0.0)
    window.open()
    assert [len(g.processes) for g in window.read()] == [per_gpu] * gpus
