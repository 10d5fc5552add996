"""The server's sampler thread: ticks, readers that wait, OOMs counted, a clean stop."""

from __future__ import annotations

import dataclasses

from app.core.diagnosis.types import OomReport
from app.core.serve.engine import ServeEngine


def test_each_tick_replaces_the_state_whole(demo_engine):
    first = demo_engine.state()
    later = demo_engine.wait_newer(first.seq, 5.0)
    assert later.seq > first.seq and later.snapshot.monotonic > first.snapshot.monotonic
    assert demo_engine.last_tick_s > 0


def test_wait_newer_gives_up_after_its_timeout(demo_engine):
    demo_engine.stop()
    state = demo_engine.state()
    assert demo_engine.wait_newer(state.seq, 0.2).seq == state.seq


def test_ooms_are_counted_per_gpu_since_start(demo_engine):
    state = demo_engine.state()
    report = OomReport("1-2-3", 0.0, 2, None, "0", "GPU-x", None, None, None, None,
                       "unknown", (), (), (), {})
    snap = dataclasses.replace(state.snapshot, oom_reports=(report, report))
    demo_engine._publish(snap)
    demo_engine._publish(dataclasses.replace(snap, oom_reports=(
        dataclasses.replace(report, gpu=None, gpu_uuid=None),)))
    counts = demo_engine.state().oom_total
    assert counts[("0", "GPU-x")] == 2 and counts[("", "")] == 1


def test_notices_are_told_once(monkeypatch):
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.demo_source import demo_source

    told = []
    source = demo_source(None, 7)
    agents = DemoAgents(source)
    monkeypatch.setattr(agents, "notices", lambda: ["/tmp/x is a symlink"])
    engine = ServeEngine(source, agents, period_s=0.02, on_notice=told.append)
    engine.start()
    engine.wait_newer(3, 5.0)
    engine.stop()
    assert told == ["/tmp/x is a symlink"]


class _Gpus:
    """A source named as NVML's (no driver needed: nothing is read here)."""

    name = "nvml"
    wants_host_details = False


def test_a_server_for_every_user_unloads_nobodys_models_unless_told(monkeypatch):
    from app.core.monitor.source import GpuSource
    from app.core.serve.setup import build_engine

    class Source(_Gpus, GpuSource):
        def open(self):
            pass

        def read(self):
            return ()

    monkeypatch.setattr("os.getuid", lambda: 0)
    def hub(engine):  # the agents behind the model servers' routing
        return getattr(engine.agents, "agents", engine.agents)

    root = build_engine(Source(), history=False)
    # Off by default for the root service, yet there to be turned on (set_policy).
    assert hub(root).all_users and not root.collector.policy.config.enabled
    assert build_engine(Source(), history=False, auto_unload=True).collector.policy.config.enabled
    monkeypatch.setattr("os.getuid", lambda: 1000)
    user = build_engine(Source(), history=False)
    assert not hub(user).all_users and user.collector.policy is not None
