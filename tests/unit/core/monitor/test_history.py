"""History: bounded fine/coarse rings of device and per-process VRAM."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.monitor.history import GpuHistory, History, HistoryConfig
from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot

MiB = 1024**2
GiB = 1024**3

# Small and fast: 60 fine slots, 60 coarse buckets of 5 s.
SMALL = HistoryConfig(period_s=1.0, fine_span_s=60.0, coarse_step_s=5.0, coarse_span_s=300.0,
                      max_process_rows=4)


def proc(pid: int, mem: int | None, create: float | None = None, name: str | None = "python"
         ) -> ProcessSample:
    return ProcessSample(pid=pid, gpu_memory=mem, name=name,
                         create_time=float(pid) if create is None else create)


def gpu(used: int | None = 1 * GiB, procs=(), util: float | None = 50.0, display_id: str = "0",
        total: int | None = 24 * GiB) -> GpuSample:
    return GpuSample(index=0, name="GPU", uuid="GPU-x", memory_total=total, memory_used=used,
                     memory_free=None, utilization_gpu=util, processes=tuple(procs),
                     display_id=display_id)


def snap(t: float, *gpus: GpuSample) -> Snapshot:
    return Snapshot(timestamp=1.7e9 + t, monotonic=t, source="test", driver_version=None,
                    gpus=tuple(gpus))


def key(p: ProcessSample):
    return p.key


def feed(history: History, ticks, start: float = 0.0, period: float = 1.0):
    """Add one snapshot per item of ``ticks`` (each a GpuSample), one period apart."""
    t = start
    for g in ticks:
        history.add(snap(t, g))
        t += period
    return t - period  # time of the last tick


# -- fine ring ----------------------------------------------------------------

def test_empty_history_gives_empty_views():
    h = History(SMALL)
    v = h.view("0", 60)
    assert v.t.size == 0 and v.used.size == 0 and v.util.size == 0 and v.processes == {}
    h.add(snap(0.0))  # a snapshot without GPUs (error tick) adds nothing
    assert h.view("0", 60).t.size == 0
    assert h.label("0", (5, None)) == "pid 5"


def test_fine_ring_keeps_at_most_fine_slots_and_view_covers_exactly_the_span():
    h = History(SMALL)
    assert SMALL.fine_slots == 60
    last = feed(h, (gpu(used=i * MiB) for i in range(200)))
    v = h.view("0", 60)
    assert v.t.size == SMALL.fine_slots
    np.testing.assert_array_equal(v.t, np.arange(-59.0, 1.0))
    np.testing.assert_array_equal(v.used, np.arange(140, 200) * MiB)  # the newest 60, in order
    assert last == 199

    v30 = h.view("0", 30)
    np.testing.assert_array_equal(v30.t, np.arange(-30.0, 1.0))
    np.testing.assert_array_equal(v30.used, np.arange(169, 200) * MiB)
    assert np.all(v30.util == 50.0)


def test_partially_filled_ring_returns_only_what_was_written():
    h = History(SMALL)
    feed(h, (gpu(used=i * MiB) for i in range(5)))
    v = h.view("0", 60)
    np.testing.assert_array_equal(v.t, [-4.0, -3.0, -2.0, -1.0, 0.0])
    np.testing.assert_array_equal(v.used, np.arange(5) * MiB)


def test_unknown_device_figures_are_nan_not_zero():
    h = History(SMALL)
    feed(h, [gpu(used=None, util=None), gpu(used=2 * GiB, util=10.0)])
    v = h.view("0", 60)
    assert math.isnan(v.used[0]) and math.isnan(v.util[0])
    assert v.used[1] == 2 * GiB and v.util[1] == 10.0


def test_gpus_are_kept_apart_by_display_id():
    h = History(SMALL)
    h.add(snap(0.0, gpu(used=1 * GiB, display_id="0"), gpu(used=7 * GiB, display_id="0/mig1")))
    assert h.view("0", 60).used.tolist() == [1 * GiB]
    assert h.view("0/mig1", 60).used.tolist() == [7 * GiB]
    assert h.view("1", 60).t.size == 0


# -- processes ----------------------------------------------------------------

def test_process_series_and_labels():
    h = History(SMALL)
    a = proc(100, 1 * GiB, name="python")
    feed(h, [gpu(procs=[a]), gpu(procs=[a._replace(gpu_memory=2 * GiB)])])
    v = h.view("0", 60)
    assert v.processes[a.key].tolist() == [1 * GiB, 2 * GiB]
    assert h.label("0", a.key) == "python (100)"
    nameless = proc(200, 1 * GiB, name=None)
    h.add(snap(2.0, gpu(procs=[nameless])))
    assert h.label("0", nameless.key) == "pid 200"


def test_none_process_memory_is_nan_not_zero():
    h = History(SMALL)
    a = proc(100, 1 * GiB)
    feed(h, [gpu(procs=[a]), gpu(procs=[a._replace(gpu_memory=None)]), gpu(procs=[a])])
    series = h.view("0", 60).processes[a.key]
    assert series[0] == 1 * GiB and math.isnan(series[1]) and series[2] == 1 * GiB
    # A process whose figure was never known has nothing to draw, and never 0.
    b = proc(200, None)
    h.add(snap(3.0, gpu(procs=[b])))
    assert b.key not in h.view("0", 60).processes


def test_process_that_exits_keeps_its_series_with_nan_after_exit():
    h = History(SMALL)
    a, b = proc(100, 1 * GiB), proc(200, 3 * GiB)
    feed(h, [gpu(procs=[a, b])] * 3 + [gpu(procs=[b])] * 4)
    v = h.view("0", 60)
    sa = v.processes[a.key]
    assert sa[:3].tolist() == [1 * GiB] * 3
    assert np.isnan(sa[3:]).all()
    assert v.processes[b.key].tolist() == [3 * GiB] * 7
    # Still there in the coarse view later on (it is the peak of its bucket).
    feed(h, [gpu(procs=[b])] * 20, start=7.0)
    coarse = h.view("0", 200)
    assert a.key in coarse.processes
    assert np.nanmax(coarse.processes[a.key]) == 1 * GiB


def test_peaks_are_each_process_highest_value_in_span_without_a_view():
    h = History(SMALL)
    a, b, c = proc(100, 1 * GiB), proc(200, 3 * GiB), proc(300, None)
    feed(h, [gpu(procs=[a, b, c]), gpu(procs=[a._replace(gpu_memory=5 * GiB), b, c]),
             gpu(procs=[b, c])] + [gpu(procs=[b])] * 10)
    peaks = h.peaks("0", 60, [a.key, b.key, c.key, (999, 1.0)])
    assert peaks[a.key] == 5 * GiB and peaks[b.key] == 3 * GiB
    assert math.isnan(peaks[c.key])  # never known: NaN, never 0
    assert (999, 1.0) not in peaks  # no history at all
    # Only the span counts: a's values are older than the last 5 s.
    assert math.isnan(h.peaks("0", 5, [a.key])[a.key])
    assert h.peaks("7", 60, [a.key]) == {}


def test_recycled_row_does_not_show_the_previous_owners_values():
    cfg = HistoryConfig(period_s=1.0, fine_span_s=60.0, coarse_step_s=5.0, coarse_span_s=10.0,
                        max_process_rows=1)
    h = History(cfg)
    old = proc(100, 5 * GiB)
    feed(h, [gpu(procs=[old])] * 5)
    feed(h, [gpu(procs=[])] * 20, start=5.0)  # old is gone past the coarse span: row freed
    new = proc(300, 1 * GiB)
    h.add(snap(25.0, gpu(procs=[new])))
    for span in (60, 3600):
        v = h.view("0", span)
        assert old.key not in v.processes
        if span == 60:
            series = v.processes[new.key]
            assert series[-1] == 1 * GiB
            assert np.isnan(series[:-1]).all()  # not the 5 GiB the row held before


def test_evicted_row_reused_by_newcomer_is_masked_in_fine_and_coarse():
    cfg = HistoryConfig(period_s=1.0, fine_span_s=60.0, coarse_step_s=5.0, coarse_span_s=300.0,
                        max_process_rows=2)
    h = History(cfg)
    a, b, c = proc(1, 7 * GiB), proc(2, 1 * GiB), proc(3, 2 * GiB)
    feed(h, [gpu(procs=[a, b])] * 12)  # two full coarse buckets
    feed(h, [gpu(procs=[b])] * 3, start=12.0)  # a exits at t=12
    feed(h, [gpu(procs=[b, c])] * 12, start=15.0)  # c needs a row: a's is the only free one
    v = h.view("0", 60)
    assert a.key not in v.processes
    sc = v.processes[c.key]
    assert np.isnan(sc[:15]).all() and (sc[15:] == 2 * GiB).all()
    coarse = h.view("0", 300)
    cc = coarse.processes[c.key]
    assert np.nanmax(cc) == 2 * GiB  # never a's 7 GiB
    assert np.isnan(cc[:2]).all()


def test_row_limit_evicts_the_longest_gone_process_and_never_a_live_one():
    h = History(SMALL)  # 4 rows
    p = [proc(i, (i + 1) * GiB) for i in range(8)]
    h.add(snap(0.0, gpu(procs=p[0:4])))
    h.add(snap(1.0, gpu(procs=[p[0], p[2], p[3]])))  # p1 gone at t=1
    h.add(snap(2.0, gpu(procs=[p[2], p[3]])))  # p0 gone at t=2
    h.add(snap(3.0, gpu(procs=[p[2], p[3], p[4]])))  # p4 takes p1's row (longest gone)
    v = h.view("0", 60)
    assert set(v.processes) == {p[0].key, p[2].key, p[3].key, p[4].key}
    h.add(snap(4.0, gpu(procs=[p[2], p[3], p[4], p[5]])))  # p5 evicts p0
    v = h.view("0", 60)
    assert set(v.processes) == {p[2].key, p[3].key, p[4].key, p[5].key}
    # All four rows hold live processes: a fifth live one gets no history
    # rather than pushing a live one out.
    h.add(snap(5.0, gpu(procs=[p[2], p[3], p[4], p[5], p[6]])))
    v = h.view("0", 60)
    assert set(v.processes) == {p[2].key, p[3].key, p[4].key, p[5].key}
    for q in (p[2], p[3], p[4], p[5]):
        assert v.processes[q.key][-1] == q.gpu_memory


def test_newcomer_listed_before_live_processes_does_not_evict_them():
    # The driver's order is arbitrary: a new pid may come first in the list.
    h = History(SMALL)  # 4 rows
    p = [proc(i, (i + 1) * GiB) for i in range(6)]
    h.add(snap(0.0, gpu(procs=p[0:4])))
    h.add(snap(1.0, gpu(procs=[p[4], p[0], p[1], p[2]])))  # p3 gone, p4 new and listed first
    v = h.view("0", 60)
    for q in (p[0], p[1], p[2], p[4]):
        assert v.processes[q.key][-1] == q.gpu_memory, q
    assert p[3].key not in v.processes  # the only process gone: its row went to p4
    # Five live processes, four rows: every live one that had a row keeps it.
    h.add(snap(2.0, gpu(procs=[p[5], p[0], p[1], p[2], p[4]])))
    v = h.view("0", 60)
    for q in (p[0], p[1], p[2], p[4]):
        assert v.processes[q.key][-1] == q.gpu_memory, q


def test_same_pid_with_a_new_create_time_is_a_new_series():
    h = History(SMALL)
    first = proc(100, 4 * GiB, create=10.0)
    second = proc(100, 1 * GiB, create=20.0)
    feed(h, [gpu(procs=[first])] * 3 + [gpu(procs=[second])] * 2)
    v = h.view("0", 60)
    assert v.processes[first.key].tolist()[:3] == [4 * GiB] * 3
    assert np.isnan(v.processes[second.key][:3]).all()
    assert v.processes[second.key][3:].tolist() == [1 * GiB] * 2


def test_eviction_copes_with_unknown_and_known_create_times_of_one_pid():
    # Keys (7, None) and (7, 5.0), gone at the same time: choosing which to
    # evict must not compare None with a float.
    cfg = HistoryConfig(period_s=1.0, fine_span_s=60.0, coarse_step_s=5.0, coarse_span_s=300.0,
                        max_process_rows=2)
    h = History(cfg)
    unknown = ProcessSample(pid=7, gpu_memory=1 * GiB, create_time=None)
    known = proc(7, 2 * GiB, create=5.0)
    h.add(snap(0.0, gpu(procs=[unknown, known])))
    h.add(snap(1.0, gpu(procs=[])))
    newcomer = proc(8, 3 * GiB)
    h.add(snap(2.0, gpu(procs=[newcomer])))
    v = h.view("0", 60)
    assert v.processes[newcomer.key][-1] == 3 * GiB
    assert len({unknown.key, known.key} & set(v.processes)) == 1  # one of them made room


# -- coarse ring --------------------------------------------------------------

def test_coarse_buckets_hold_the_peak_of_each_bucket():
    h = History(SMALL)
    a = proc(1, 0)
    # A spike in the middle of each 5 s bucket: 9 GiB at t = 2, 7, 12, ...
    ticks = []
    for i in range(100):
        spike = i % 5 == 2
        ticks.append(gpu(used=(9 if spike else 1) * GiB, util=90.0 if spike else 10.0,
                         procs=[a._replace(gpu_memory=(8 if spike else 2) * GiB)]))
    feed(h, ticks)
    v = h.view("0", 250)  # wider than the fine span: coarse
    assert v.t.size >= 15
    assert np.all(v.used == 9 * GiB)
    assert np.all(v.util == 90.0)
    assert np.all(v.processes[a.key] == 8 * GiB)
    # The fine view still shows the troughs.
    fine = h.view("0", 60)
    assert fine.used.min() == 1 * GiB


def test_long_spans_use_the_fine_ring_until_it_wraps():
    h = History(SMALL)
    feed(h, [gpu(used=(i + 1) * GiB) for i in range(12)])
    v = h.view("0", 300)  # longer than the fine span, but the fine ring holds it all
    assert len(v.t) == 12 and v.used[-1] == 12 * GiB


def test_coarse_peak_ignores_unknown_values():
    h = History(SMALL)
    ticks = [gpu(used=None if i % 2 else 3 * GiB) for i in range(90)]  # fine ring wraps
    feed(h, ticks)
    v = h.view("0", 300)
    assert np.all(v.used == 3 * GiB)
    h2 = History(SMALL)
    feed(h2, [gpu(used=None, util=None)] * 30)
    v2 = h2.view("0", 300)
    assert v2.t.size > 0 and np.isnan(v2.used).all() and np.isnan(v2.util).all()


def test_views_at_24_hours_come_from_the_coarse_ring():
    cfg = HistoryConfig(period_s=1.0, fine_span_s=60.0, coarse_step_s=5.0, coarse_span_s=86400.0,
                        max_process_rows=2)
    h = History(cfg)
    feed(h, (gpu(used=(i % 50) * MiB) for i in range(600)))
    day = h.view("0", 86400.0)
    steps = np.diff(day.t)
    assert np.allclose(steps, 5.0)  # one point per coarse bucket
    assert day.t[0] < -60 - 1  # reaches back past the fine span
    assert day.t[-1] == 0.0
    assert np.all(np.diff(day.t) > 0)
    hour = h.view("0", 60.0)
    assert np.allclose(np.diff(hour.t), 1.0)
    assert hour.t.size == 60


def test_coarse_ring_is_bounded_too():
    h = History(SMALL)
    feed(h, (gpu(used=i * MiB) for i in range(2000)))
    v = h.view("0", 10_000)
    assert v.t.size == SMALL.coarse_slots
    assert v.t[0] >= -SMALL.coarse_span_s


# -- memory bound -------------------------------------------------------------

def _numpy_nbytes(hist: GpuHistory) -> int:
    total = 0
    seen = set()
    for ring in (hist.fine, hist.coarse):
        for value in vars(ring).values() if hasattr(ring, "__dict__") else ():
            if isinstance(value, np.ndarray) and id(value) not in seen:
                seen.add(id(value))
                total += value.nbytes
    return total


@pytest.mark.parametrize("cfg", [
    SMALL,
    HistoryConfig(period_s=0.5, fine_span_s=120.0, coarse_step_s=5.0, coarse_span_s=600.0,
                  max_process_rows=10),
    HistoryConfig(period_s=1.0, fine_span_s=30.0, coarse_step_s=2.0, coarse_span_s=100.0,
                  max_process_rows=3),
])
def test_bound_bytes_covers_a_history_filled_to_capacity(cfg):
    h = History(cfg)
    n_ticks = int(cfg.coarse_span_s / cfg.period_s) + cfg.fine_slots + 10
    live = []
    for i, pid in enumerate(range(1, n_ticks + 1)):
        # Churn: a new process every tick, at most 2 * max rows alive.
        live = (live + [proc(pid, pid * MiB)])[-2 * cfg.max_process_rows:]
        h.add(snap(i * cfg.period_s, gpu(procs=live)))
    hist = h.gpus["0"]
    assert hist.fine.rows.shape[0] == cfg.max_process_rows
    nbytes = _numpy_nbytes(hist)
    assert nbytes > 0
    assert cfg.bound_bytes_per_gpu() >= nbytes
    assert h.bound_bytes() == cfg.bound_bytes_per_gpu()


def test_default_bound_is_about_16_mib_per_gpu():
    bound = HistoryConfig().bound_bytes_per_gpu()
    assert 15 * MiB < bound < 18 * MiB


# -- property -----------------------------------------------------------------

PROPERTY_CFG = HistoryConfig(period_s=1.0, fine_span_s=20.0, coarse_step_s=3.0, coarse_span_s=60.0,
                             max_process_rows=3)

memory = st.one_of(st.none(), st.integers(min_value=0, max_value=80 * GiB))
# Ten candidate processes: pids 0-4 in two generations (create time 0 or 1),
# so pid reuse happens; a tick holds at most one generation of a pid, in any
# order, with at most max_process_rows processes.
tick_strategy = st.tuples(
    st.lists(st.tuples(st.integers(min_value=0, max_value=9), memory),
             unique_by=lambda item: item[0] % 5, max_size=3),
    st.one_of(st.none(), st.integers(min_value=0, max_value=80 * GiB)),
    st.floats(min_value=0.5, max_value=4.0),
)


@settings(max_examples=300, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(tick_strategy, min_size=1, max_size=60))
def test_property_latest_values_match_the_last_snapshot(ticks):
    h = History(PROPERTY_CFG)
    now = 0.0
    last = None
    seen: list[dict] = []  # per tick: {key: gpu_memory}
    for present, used, gap in ticks:
        now += gap
        procs = [ProcessSample(pid=i % 5, gpu_memory=mem, create_time=float(i // 5))
                 for i, mem in present]
        last = gpu(used=used, procs=procs)
        seen.append({p.key: p.gpu_memory for p in procs})
        h.add(snap(now, last))
    for span in (1.0, 5.0, 20.0, 60.0, 3600.0):
        v = h.view("0", span)
        fine = span <= PROPERTY_CFG.fine_span_s
        if fine:
            assert v.t.size >= 1
        elif v.t.size == 0:
            continue  # no coarse bucket closed yet
        assert np.all(np.diff(v.t) > 0)
        assert np.all(v.t <= 0) and v.t[-1] == 0.0
        assert v.t[0] >= -span - 1e-9
        assert v.used.shape == v.t.shape == v.util.shape
        for series in v.processes.values():
            assert series.shape == v.t.shape
        if not fine:
            continue  # coarse points are bucket peaks, not the last figure
        if last.memory_used is None:
            assert math.isnan(v.used[-1])
        else:
            assert v.used[-1] == last.memory_used
        for p in last.processes:
            if p.gpu_memory is None:
                assert p.key not in v.processes or math.isnan(v.processes[p.key][-1])
            else:
                assert p.key in v.processes
                assert v.processes[p.key][-1] == np.float32(p.gpu_memory)
            # A process present without a break keeps every value of its
            # current run (a live process's row is never taken away).
            if p.key in v.processes:
                series = v.processes[p.key]
                for back in range(1, min(len(series), len(seen)) + 1):
                    tick = seen[-back]
                    if p.key not in tick:
                        break
                    expected = np.nan if tick[p.key] is None else np.float32(tick[p.key])
                    np.testing.assert_equal(series[-back], expected)
        present_keys = {p.key for p in last.processes}
        for k, series in v.processes.items():
            if k not in present_keys:
                assert math.isnan(series[-1])


def test_each_hosts_snapshots_are_kept_once_under_their_own_ids():
    from app.core.monitor.hosts import CONNECTED, HostView, qualify_gpu
    from app.core.store.query import GpuSeries, StoredHistory

    MiB = 1 << 20

    def gpu(used_mib: int, host: str = "") -> GpuSample:
        g = GpuSample(0, "GPU", f"GPU-{host or 'here'}", 1000 * MiB, used_mib * MiB, None)
        return qualify_gpu(g, host) if host else g

    def remote(t: float, used: int, fresh: bool, seed=None) -> HostView:
        snap = Snapshot(t, t, "nvml", None, (gpu(used, "gpu1"),))
        return HostView("gpu1", "ssh://gpu1", CONNECTED, snapshot=snap, fresh=fresh, seed=seed)

    now = time.time()
    stored = StoredHistory({"GPU-gpu1": GpuSeries(
        "GPU-gpu1", 0, "GPU", np.array([now - 30.0, now - 20.0]), np.array([1.0, 2.0]) * MiB,
        np.array([1000.0, 1000.0]) * MiB, np.array([5.0, 5.0]), display_id="0@gpu1")})
    history = History(HistoryConfig(period_s=1.0))
    mono = time.monotonic()
    history.add(Snapshot(now, mono, "nvml", None, (gpu(100),),
                         hosts=(remote(mono, 300, True, seed=stored),)))
    history.add(Snapshot(now + 1, mono + 1, "nvml", None, (gpu(110),),
                         hosts=(remote(mono, 300, False),)))  # the same arrival: not again
    history.add(Snapshot(now + 2, mono + 2, "nvml", None, (gpu(120),),
                         hosts=(remote(mono + 2, 320, True),)))
    here, there = history.view("0", 60.0), history.view("0@gpu1", 60.0)
    assert [v / MiB for v in here.used] == [100, 110, 120]
    assert [v / MiB for v in there.used] == [1, 2, 300, 320]  # seeded, then each arrival once
    history.add(Snapshot(now + 3, mono + 3, "nvml", None, (gpu(130),)))  # gpu1 removed
    assert set(history.gpus) == {"0"}


def test_what_a_host_kept_while_unreachable_is_appended_after_the_rings():
    from app.core.store.query import GpuSeries, ProcessSeries, StoredHistory

    MiB = 1 << 20
    history = History(HistoryConfig(period_s=1.0))
    gpu = GpuSample(0, "GPU", "GPU-1", 1000 * MiB, 100 * MiB, None, display_id="0@gpu1",
                    processes=(ProcessSample(7, 60 * MiB, create_time=5.0),))
    history.gpus["0@gpu1"] = hist = GpuHistory(history.config)
    hist.add(gpu, 100.0)  # the last sample before the connection was lost
    kept = np.array([99.0, 101.0, 102.0])  # epoch seconds, offset 0: one is old
    stored = StoredHistory(
        {"GPU-1": GpuSeries("GPU-1", 0, "GPU", kept, np.array([1.0, 200.0, 300.0]) * MiB,
                            np.full(3, 1000.0 * MiB), np.array([1.0, 2.0, np.nan]),
                            display_id="0@gpu1")},
        [ProcessSeries(7, 5.0, "GPU-1", "python train.py", "ana", kept[1:],
                       np.array([150.0, np.nan]) * MiB, name="train.py")])
    history.seed(stored, offset_s=0.0)
    view = history.view("0@gpu1", 60.0)
    assert list(view.t) == [-2.0, -1.0, 0.0]  # 100, 101, 102 (99 is older: not put back)
    assert [v / MiB for v in view.used] == [100, 200, 300]
    procs = view.processes[(7, 5.0)]
    assert procs[1] == 150 * MiB and np.isnan(procs[2])  # unknown stays unknown, never 0
