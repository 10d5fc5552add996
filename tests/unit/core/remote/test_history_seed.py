"""A host's stored history as its server answers it, turned into what the
window's rings are seeded with: its GPUs under window-wide ids, its times on
this machine's clock, its gaps kept."""

from __future__ import annotations

import math

import numpy as np

from app.core.monitor.history import History
from app.core.remote.history_seed import stored_from_records
from app.core.store.query import GpuSeries, ProcessSeries, StoredHistory
from app.core.store.records import history_records

GiB = 1 << 30
T0 = 1_700_000_000.0


def stored() -> StoredHistory:
    """Two GPUs sampled every second for 10 s, then nothing for 5 min (the
    server was stopped), then 10 s more; one process on GPU 0 all along."""
    t = np.concatenate([T0 + np.arange(10.0), T0 + 310 + np.arange(10.0)])
    n = t.size
    used = np.round(np.linspace(1, 8, n) * GiB)
    util = np.full(n, 40.0)
    util[3] = np.nan  # a sample whose utilisation was unknown
    gpus = {
        "GPU-a": GpuSeries("GPU-a", 0, "NVIDIA A100", t, used, np.full(n, 80.0 * GiB), util),
        "GPU-b": GpuSeries("GPU-b", 1, "NVIDIA A100", t, used / 2, np.full(n, 80.0 * GiB),
                           np.full(n, 5.0)),
    }
    proc = ProcessSeries(4242, T0 - 60, "GPU-a", "python train.py", "alice", t,
                         np.full(n, 3.0 * GiB), name="python")
    return StoredHistory(gpus, [proc])


def test_records_come_back_as_the_stored_history_under_the_hosts_ids():
    original = stored()
    records = history_records(original)
    seed = stored_from_records(records, "gpu1", clock_offset_s=2.5)
    assert set(seed.gpus) == {"GPU-a", "GPU-b"}
    a, b = seed.gpus["GPU-a"], seed.gpus["GPU-b"]
    assert (a.display_id, a.index, a.name) == ("0@gpu1", 0, "NVIDIA A100")
    assert b.display_id == "1@gpu1"
    # this machine's clock: the host's times plus the offset; the gap stays a gap
    assert np.array_equal(a.t, original.gpus["GPU-a"].t + 2.5)
    assert np.diff(a.t).max() == 301.0 and np.count_nonzero(np.diff(a.t) > 1.0) == 1
    assert np.array_equal(a.used, original.gpus["GPU-a"].used)
    assert np.array_equal(b.total, original.gpus["GPU-b"].total)
    assert math.isnan(a.util[3]) and a.util[4] == 40.0  # unknown stays unknown, never 0
    (proc,) = seed.processes
    assert (proc.pid, proc.create_time, proc.gpu_uuid, proc.command, proc.user, proc.name) == \
        (4242, T0 - 60, "GPU-a", "python train.py", "alice", "python")
    assert np.array_equal(proc.t, a.t) and np.all(proc.bytes == 3.0 * GiB)


def test_bad_records_are_skipped_and_unknown_figures_stay_unknown():
    good = {"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_index": 0, "gpu_name": "X",
            "memory_used": GiB, "memory_total": None, "utilization_gpu": True,
            "processes": [{"pid": "7"}, {"pid": 8, "gpu_memory": None, "create_time": "x"}]}
    records = [good, {"timestamp": "soon", "gpu_uuid": "GPU-a"}, {"timestamp": T0 + 1},
               {"timestamp": T0 + 2, "gpu_uuid": "GPU-c", "gpu_index": None}]
    seed = stored_from_records(records, "gpu1")
    a = seed.gpus["GPU-a"]
    assert a.t.tolist() == [T0] and a.used.tolist() == [GiB]
    assert math.isnan(a.total[0]) and math.isnan(a.util[0])
    (proc,) = seed.processes
    assert (proc.pid, proc.create_time) == (8, None) and math.isnan(proc.bytes[0])
    assert seed.gpus["GPU-c"].display_id is None  # no index: it cannot be placed
    assert stored_from_records([], "gpu1").empty


def test_the_window_history_opens_with_the_hosts_samples():
    history = History()
    history.seed(stored_from_records(history_records(stored()), "gpu1"), offset_s=T0 - 1000)
    assert set(history.gpus) == {"0@gpu1", "1@gpu1"}


def test_mig_devices_keep_their_own_ids_when_the_server_names_them():
    def rec(uuid, did):
        return {"timestamp": T0, "gpu_uuid": uuid, "gpu_index": 0, "display_id": did,
                "memory_used": GiB, "memory_total": 10 * GiB}

    seed = stored_from_records([rec("MIG-1", "0/mig1"), rec("MIG-2", "0/mig2")], "gpu1")
    assert {u: s.display_id for u, s in seed.gpus.items()} == {
        "MIG-1": "0/mig1@gpu1", "MIG-2": "0/mig2@gpu1"}
    assert [s.index for s in seed.gpus.values()] == [0, 0]
