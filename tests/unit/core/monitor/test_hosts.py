"""Remote hosts on the local snapshot: window-wide GPU ids, the host a pid
belongs to, and which GPUs' figures are current."""

from __future__ import annotations

from app.core.monitor.hosts import (
    CONNECTED,
    DISCONNECTED,
    LOCAL,
    HostView,
    each_host,
    every_gpu,
    host_view,
    live_gpus,
    qualified_id,
    qualify_gpu,
    snapshot_of,
    split_id,
)
from app.core.monitor.samples import GpuSample, Snapshot

GiB = 1 << 30


def gpu(index, host="", mig=None):
    sample = GpuSample(index, "GPU", f"GPU-{host or 'here'}-{index}", 24 * GiB, GiB, None,
                       mig_index=mig)
    return qualify_gpu(sample, host) if host else sample


def snap(*gpus, hosts=(), t=1.0):
    return Snapshot(1_700_000_000.0 + t, t, "nvml", "550", tuple(gpus), hosts=tuple(hosts))


def test_a_remote_gpu_id_names_its_host_and_splits_back():
    assert qualified_id("0", "gpu1") == "0@gpu1"
    assert qualified_id("0/mig1", "gpu1") == "0/mig1@gpu1"
    assert qualified_id("3", LOCAL) == "3"
    assert split_id("0@gpu1") == ("gpu1", "0")
    assert split_id("0/mig1@gpu1:8443") == ("gpu1:8443", "0/mig1")
    assert split_id("2") == (LOCAL, "2")
    remote = qualify_gpu(GpuSample(1, "GPU", "GPU-x", GiB, 0, GiB), "gpu1")
    assert (remote.display_id, remote.host, remote.index) == ("1@gpu1", "gpu1", 1)


def test_a_pid_is_looked_up_in_its_own_hosts_snapshot():
    there = snap(gpu(0, "gpu1"))
    view = HostView("gpu1", "ssh://gpu1", CONNECTED, snapshot=there)
    here = snap(gpu(0), hosts=[view, HostView("gpu2", "ssh://gpu2", DISCONNECTED)])
    assert snapshot_of(here, LOCAL) is here
    assert snapshot_of(here, "gpu1") is there
    assert snapshot_of(here, "gpu2") is None  # no snapshot yet
    assert snapshot_of(here, "gpu3") is None  # not watched
    assert snapshot_of(None, "gpu1") is None
    assert host_view(here, "gpu1") is view and host_view(here, LOCAL) is None
    assert host_view(None, "gpu1") is None


def test_a_disconnected_hosts_last_gpus_are_shown_but_not_live():
    up = HostView("gpu1", "ssh://gpu1", CONNECTED, snapshot=snap(gpu(0, "gpu1")))
    down = HostView("gpu2", "https://gpu2:8443", DISCONNECTED, since=5.0, reason="gone",
                    snapshot=snap(gpu(0, "gpu2"), gpu(1, "gpu2")))
    never = HostView("gpu3", "ssh://gpu3", DISCONNECTED, reason="refused")
    here = snap(gpu(0), hosts=[up, down, never])
    assert [g.display_id for g in every_gpu(here)] == ["0", "0@gpu1", "0@gpu2", "1@gpu2"]
    assert [(h, g.display_id) for h, g in live_gpus(here)] == [(LOCAL, "0"), ("gpu1", "0@gpu1")]
    assert [(v.key if v else None, s) for v, s in each_host(here)] == [
        (None, here), ("gpu1", up.snapshot), ("gpu2", down.snapshot)]
    assert every_gpu(None) == [] and live_gpus(None) == [] and each_host(None) == []
    assert up.connected and not down.connected and down.label == "gpu2"
