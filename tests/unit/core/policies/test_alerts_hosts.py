"""Alerts for remote hosts: each names its host, thresholds are per GPU as
here, a disconnected host's last figures raise none, pids are per host."""

from __future__ import annotations

import dataclasses

from app.core.monitor.hosts import CONNECTED, DISCONNECTED, HostView, qualify_gpu
from app.core.monitor.samples import ProcessSample, Snapshot
from app.core.policies.alerts import AlertConfig, AlertPolicy
from tests.unit.core.policies.test_alerts import GiB, gpu, report, snap


def remote(key, t, *gpus, state=CONNECTED, agents=None):
    theirs = Snapshot(1e9 + t, t, "nvml", "550", tuple(qualify_gpu(g, key) for g in gpus),
                      agents=agents or {})
    return HostView(key, f"https://{key}:8443", state, 0.0, None, theirs)


def world(t, local=(), hosts=()):
    return dataclasses.replace(snap(t, *local), hosts=tuple(hosts))


def test_a_remote_gpus_alert_names_its_host():
    p = AlertPolicy(AlertConfig(min_interval_s=0))
    (alert,) = p.evaluate(world(0, [gpu(2)], [remote("gpu1", 0, gpu(9.2))]))
    assert alert.kind == "memory" and alert.host == "gpu1" and alert.display_id == "0@gpu1"
    assert alert.title == "gpu1 · GPU 0 at 92 % of its memory"


def test_a_disconnected_hosts_last_figures_raise_no_alert():
    p = AlertPolicy(AlertConfig(min_interval_s=0))
    stale = remote("gpu1", 0, gpu(9.9), state=DISCONNECTED)
    assert p.evaluate(world(0, [gpu(2)], [stale])) == []
    # Connected again with current figures: told then.
    (alert,) = p.evaluate(world(1, [gpu(2)], [remote("gpu1", 1, gpu(9.9))]))
    assert alert.host == "gpu1"


def test_thresholds_are_per_gpu_and_the_same_index_on_two_hosts_is_two_gpus():
    p = AlertPolicy(AlertConfig(min_interval_s=0),
                    per_gpu={"0@gpu2": AlertConfig(0.5, 0.4, 0)})
    hosts = [remote("gpu1", 0, gpu(6)), remote("gpu2", 0, gpu(6))]
    alerts = p.evaluate(world(0, [gpu(6)], hosts))
    assert [(a.host, a.display_id) for a in alerts] == [("gpu2", "0@gpu2")]
    assert p.rearmed("0@gpu1") and not p.rearmed("0@gpu2") and p.rearmed("0")


def test_an_oom_on_a_remote_host_names_it_and_pids_are_per_host():
    proc = ProcessSample(42, 3 * GiB, name="python", command="python train.py")
    p = AlertPolicy(AlertConfig(min_interval_s=0))

    def tick(t, here, there):
        local = dataclasses.replace(snap(t, gpu(2, procs=[proc]), agents={42: report(42, here)}),
                                    hosts=(remote("gpu1", t, gpu(2, procs=[proc]),
                                                  agents={42: report(42, there)}),))
        return p.evaluate(local)

    assert tick(0, 0, 0) == []  # baselines
    (alert,) = tick(1, 0, 1)  # pid 42 on gpu1, not this machine's pid 42
    assert alert.kind == "oom" and alert.host == "gpu1" and alert.pid == 42
    assert alert.title.startswith("gpu1 · ") and alert.display_id == "0@gpu1"
