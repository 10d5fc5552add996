"""The doctor through the real collector on the demo's scenario and its own clock."""

from __future__ import annotations

import pytest

from app.core.agents.demo import DemoAgents
from app.core.diagnosis.doctor import Doctor
from app.core.diagnosis.report_store import ReportStore
from app.core.monitor.collector import Collector
from app.core.monitor.demo_source import DemoSource, MiB


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def run():
    """The demo's first 15 minutes, one tick a second; what each tick said."""
    clock = Clock()
    source = DemoSource(seed=7, clock=clock)
    doctor = Doctor(demo=True)
    collector = Collector(source, agents=DemoAgents(source), doctor=doctor,
                          wall_clock=source.now, monotonic_clock=clock)
    collector.open()
    started = source.now()
    first_seen: dict[str, float] = {}
    reports = []
    last = None
    for i in range(901):
        clock.now = float(i)
        last = collector.collect()
        for d in last.diagnoses:
            first_seen.setdefault(d.kind, float(i))
        reports.extend((float(i), r) for r in last.oom_reports)
    collector.close()
    return doctor, first_seen, reports, last, started


def test_the_leak_is_flagged_and_full_soon_fires_before_the_oom(run):
    doctor, first_seen, reports, last, started = run
    assert first_seen["leak"] < first_seen["full_soon"] < first_seen["oom"]
    assert first_seen["full_soon"] < 330  # within ~5 min
    assert len(reports) == 1  # one OOM in the first 15 minutes, reported once
    tick, report = reports[0]
    assert report.time - started == pytest.approx(555.0, abs=1.0)
    assert doctor.firings[0].fired_at - started < report.time - started
    assert doctor.firings[0].cleared_at is not None  # the crash ended that episode
    leaks = [d for d in last.diagnoses if d.kind == "leak"]
    assert leaks and "serve_embeddings.py" in leaks[0].command
    assert leaks[0].figures["rate_bytes_per_s"] == pytest.approx(16 * MiB * 0.97, rel=0.1)


def test_the_post_mortem_tells_a_coherent_story(run):
    _, _, reports, _, _ = run
    report = reports[0][1]
    assert report.verdict == "live_tensors" and report.demo
    assert report.request > report.capture["free"]
    own = next(h for h in report.holders if h.is_oom_process)
    assert own.has_agent and own.allocated > 8 * 1024 * MiB
    others = " ".join(h.command for h in report.holders if not h.is_oom_process)
    assert "vllm.entrypoints" in others and "eval.py" in others
    assert report.fixes[0].action == "fix_leak"
    assert any("grew steadily" in line for line in report.explanation)
    # The training job steps its optimizer with flat live tensors: no step leak.
    assert not [d for d in run[3].diagnoses if d.kind == "step_leak"]


def test_oom_reports_are_saved_once_and_not_redone_by_a_later_run(tmp_path):
    clock = Clock()
    store = ReportStore(str(tmp_path))
    source = DemoSource(seed=7, clock=clock)
    collector = Collector(source, agents=DemoAgents(source), pressure_policy=False,
                          doctor=Doctor(store=store), wall_clock=source.now,
                          monotonic_clock=clock)
    collector.open()
    snaps = []
    for i in range(540, 561):
        clock.now = float(i)
        snaps.append(collector.collect())
    collector.close()
    assert sum(len(s.oom_reports) for s in snaps) == 1
    (saved,) = store.list()
    assert saved == next(r for s in snaps for r in s.oom_reports)
    # The app restarted while the process still reports its capture: not redone.
    again = Doctor(store=store)
    assert all(again.observe(s).oom_reports == () for s in snaps)
    assert len(store.list()) == 1


def test_snapshots_keep_their_fields_and_the_doctor_can_be_off():
    source = DemoSource(seed=7, clock=Clock())
    plain = Collector(source, doctor=False)
    assert plain.doctor is None
    snap = plain.collect()
    assert snap.diagnoses == () and snap.oom_reports == ()
    assert Collector(DemoSource(seed=7)).doctor.demo


def test_every_finding_uses_the_contracts_kinds_severities_and_actions(run):
    from app.core.diagnosis.types import FIX_ACTIONS, KINDS, SEVERITIES

    doctor, _, reports, last, _ = run
    for d in last.diagnoses:
        assert d.kind in KINDS and d.severity in SEVERITIES
        assert all(f.action in FIX_ACTIONS for f in d.fixes)
    assert all(f.action in FIX_ACTIONS for _, r in reports for f in r.fixes)
