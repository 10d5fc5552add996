"""Alert policy: threshold, hysteresis, minimum interval, per GPU, pause, OOM and retries."""

from __future__ import annotations

import pytest

from app.core.agents.types import AgentReport
from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample, Snapshot
from app.core.policies.alerts import AlertConfig, AlertPolicy

GiB = 1024**3


def gpu(used_gib, index=0, total_gib=10, procs=(), state=DeviceState.OK, uuid=None):
    used = None if used_gib is None else int(used_gib * GiB)
    return GpuSample(index, f"GPU{index}", uuid or f"GPU-{index}", total_gib * GiB, used,
                     None if used is None else total_gib * GiB - used, processes=tuple(procs),
                     state=state)


def snap(t, *gpus, agents=None):
    return Snapshot(1e9 + t, t, "nvml", "550", tuple(gpus), agents=agents or {})


def memory_alerts(policy, t, *gpus, agents=None):
    return [a for a in policy.evaluate(snap(t, *gpus, agents=agents)) if a.kind == "memory"]


def test_one_alert_per_crossing_then_rearm_below_the_rearm_level():
    p = AlertPolicy(AlertConfig(threshold=0.9, rearm=0.85, min_interval_s=0))
    assert memory_alerts(p, 0, gpu(8.0)) == []
    [a] = memory_alerts(p, 1, gpu(9.2))
    assert a.display_id == "0" and a.level == pytest.approx(0.92)
    assert "92 %" in a.title
    # Still above, or dipping to between re-arm and threshold: silent (hysteresis).
    assert memory_alerts(p, 2, gpu(9.5)) == []
    assert memory_alerts(p, 3, gpu(8.7)) == []
    assert memory_alerts(p, 4, gpu(9.3)) == []
    # Below the re-arm level, then above again: a new alert.
    assert memory_alerts(p, 5, gpu(8.0)) == []
    assert len(memory_alerts(p, 6, gpu(9.1))) == 1


def test_minimum_interval_between_alerts_of_one_gpu():
    p = AlertPolicy(AlertConfig(min_interval_s=60))
    assert len(memory_alerts(p, 0, gpu(9.5))) == 1
    memory_alerts(p, 10, gpu(5))
    assert memory_alerts(p, 20, gpu(9.5)) == []  # re-armed, but too soon
    assert len(memory_alerts(p, 61, gpu(9.5))) == 1  # still above and armed: now it is due


def test_gpus_are_independent_and_can_have_their_own_thresholds():
    p = AlertPolicy(AlertConfig(min_interval_s=0), per_gpu={"1": AlertConfig(0.5, 0.4, 0)})
    alerts = memory_alerts(p, 0, gpu(9.5, 0), gpu(6, 1))
    assert sorted(a.display_id for a in alerts) == ["0", "1"]
    assert memory_alerts(p, 1, gpu(9.5, 0), gpu(6, 1)) == []


def test_pause_suppresses_without_disarming():
    p = AlertPolicy(AlertConfig(min_interval_s=0))
    p.pause(until_monotonic=100)
    assert memory_alerts(p, 0, gpu(9.5)) == []
    assert memory_alerts(p, 50, gpu(9.5)) == []
    assert len(memory_alerts(p, 100, gpu(9.5))) == 1  # pause over, still full: told once
    p.pause(200)
    p.resume()
    memory_alerts(p, 101, gpu(1))
    assert len(memory_alerts(p, 102, gpu(9.5))) == 1


def test_unknown_or_lost_gpus_do_not_alert_and_disabled_means_silent():
    p = AlertPolicy(AlertConfig(min_interval_s=0))
    assert memory_alerts(p, 0, gpu(None)) == []
    assert memory_alerts(p, 1, gpu(9.9, state=DeviceState.LOST)) == []
    off = AlertPolicy(AlertConfig(enabled=False))
    assert memory_alerts(off, 0, gpu(9.9)) == []


def test_message_names_the_top_processes_and_what_free_cache_could_release():
    procs = [ProcessSample(10, 6 * GiB, name="python", command="python train.py"),
             ProcessSample(11, 3 * GiB, name="python", command="python -m ipykernel_launcher"),
             ProcessSample(12, GiB // 2, name="Xorg", command="/usr/lib/xorg/Xorg"),
             ProcessSample(13, GiB // 4, name="other")]
    agents = {11: AgentReport.from_json({"pid": 11, "devices": [
        {"index": 0, "allocated": GiB, "reserved": 3 * GiB - GiB // 2}]})}
    p = AlertPolicy(AlertConfig(min_interval_s=0))
    [a] = memory_alerts(p, 0, gpu(9.75, procs=procs), agents=agents)
    assert [t.pid for t in a.top] == [10, 11, 12]
    assert "train.py (10) 6.0 GiB" in a.message and "ipykernel_launcher (11)" in a.message
    assert a.freeable == 3 * GiB - GiB // 2 - GiB
    assert "release about 1.5 GiB" in a.message
    # Without agents nothing is known about caches: no claim in the message.
    [b] = memory_alerts(AlertPolicy(AlertConfig(min_interval_s=0)), 0, gpu(9.75, procs=procs))
    assert b.freeable is None and "Free cache" not in b.message


def report(pid, ooms=0, retries=0):
    return AgentReport.from_json({"pid": pid, "devices": [
        {"index": 0, "allocated": 1, "reserved": 2, "num_ooms": ooms,
         "num_alloc_retries": retries}]})


def test_new_ooms_and_rising_retries_alert_existing_counts_are_a_baseline():
    p = AlertPolicy(AlertConfig(min_interval_s=0))
    procs = [ProcessSample(42, GiB, name="python", command="python train.py")]
    g = gpu(2, procs=procs)
    assert p.evaluate(snap(0, g, agents={42: report(42, ooms=3, retries=5)})) == []
    assert p.evaluate(snap(1, g, agents={42: report(42, ooms=3, retries=5)})) == []
    alerts = p.evaluate(snap(2, g, agents={42: report(42, ooms=4, retries=7)}))
    kinds = {a.kind: a for a in alerts}
    assert set(kinds) == {"oom", "alloc_retries"}
    assert kinds["oom"].pid == 42 and kinds["oom"].count == 4 and kinds["oom"].display_id == "0"
    assert "train.py" in kinds["oom"].title
    assert kinds["alloc_retries"].count == 7


def test_process_alerts_respect_interval_pause_and_switches():
    p = AlertPolicy(AlertConfig(min_interval_s=30))
    p.evaluate(snap(0, agents={7: report(7, ooms=0)}))
    assert [a.kind for a in p.evaluate(snap(1, agents={7: report(7, ooms=1)}))] == ["oom"]
    assert p.evaluate(snap(2, agents={7: report(7, ooms=2)})) == []  # within the interval
    assert [a.kind for a in p.evaluate(snap(40, agents={7: report(7, ooms=3)}))] == ["oom"]
    p.pause(100)
    assert p.evaluate(snap(50, agents={7: report(7, ooms=4)})) == []
    quiet = AlertPolicy(AlertConfig(oom_alerts=False, retry_alerts=False))
    quiet.evaluate(snap(0, agents={7: report(7)}))
    assert quiet.evaluate(snap(1, agents={7: report(7, ooms=1, retries=1)})) == []


def test_config_is_validated():
    with pytest.raises(ValueError):
        AlertConfig(threshold=0.8, rearm=0.85)
    with pytest.raises(ValueError):
        AlertConfig(threshold=1.5)
