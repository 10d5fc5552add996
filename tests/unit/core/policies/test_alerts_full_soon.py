""""Full in ~N min" alerts: once per doctor episode, held over a pause, again next episode."""

from __future__ import annotations

from dataclasses import replace

from app.core.diagnosis.types import Diagnosis
from app.core.monitor.samples import GpuSample, Snapshot
from app.core.policies.alerts import AlertConfig, AlertPolicy

GiB = 1024**3


def snap(t: float, *diagnoses: Diagnosis) -> Snapshot:
    gpu = GpuSample(1, "A100", "GPU-1", 80 * GiB, 60 * GiB, 20 * GiB)  # 75 %: no memory alert
    return Snapshot(1e9 + t, t, "nvml", "550", (gpu,), diagnoses=diagnoses)


FULL = Diagnosis("full_soon", "warning", "GPU 1 full in ~7 min at this rate",
                 ("Peak used: 60.0 GiB of 80.0 GiB.", "Growing ~16 MiB/s: full in ~7 min 00 s.",
                  "Growing: serve_embeddings.py (23890) ~16 MiB/s."),
                 gpu="1", pid=23890, figures={"seconds_to_full": 420.0})


def full_soon(alerts):
    return [a for a in alerts if a.kind == "full_soon"]


def test_one_alert_per_episode():
    policy = AlertPolicy()
    (alert,) = full_soon(policy.evaluate(snap(0.0, FULL)))
    assert alert.display_id == "1" and alert.title == FULL.title
    assert alert.seconds_to_full == 420.0 and alert.pid == 23890
    assert "16 MiB/s" in alert.message
    later = replace(FULL, title="GPU 1 full in ~5 min at this rate")
    assert all(not full_soon(policy.evaluate(snap(t, later))) for t in range(1, 50))
    assert not full_soon(policy.evaluate(snap(60.0)))  # the episode is over
    assert len(full_soon(policy.evaluate(snap(70.0, FULL)))) == 1  # a new one


def test_a_pause_holds_the_alert_until_it_ends_and_settings_turn_it_off():
    policy = AlertPolicy()
    policy.pause(until_monotonic=10.0)
    assert not full_soon(policy.evaluate(snap(5.0, FULL)))
    assert len(full_soon(policy.evaluate(snap(11.0, FULL)))) == 1
    off = AlertPolicy(AlertConfig(full_soon_alerts=False))
    assert not full_soon(off.evaluate(snap(0.0, FULL)))
