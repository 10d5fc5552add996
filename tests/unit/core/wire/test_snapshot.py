"""The wire format: a snapshot read back is the snapshot written, whatever it holds."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings

from app.core.monitor.samples import GpuSample, ProcessSample, Snapshot
from app.core.wire.codec import WireError
from app.core.wire.snapshot import (
    WIRE_VERSION,
    WireVersionError,
    decode_snapshot,
    encode_snapshot,
)
from tests.unit.core.wire.strategies import of

MiB = 1024**2


def through_json(data: object) -> object:
    return json.loads(json.dumps(data, allow_nan=False))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])
@given(of(Snapshot))
def test_decode_of_encode_is_the_snapshot(snapshot):
    assert decode_snapshot(through_json(encode_snapshot(snapshot))) == snapshot


def test_a_demo_snapshot_with_agents_diagnoses_and_decisions_round_trips():
    from app.core.agents.demo import DemoAgents
    from app.core.monitor.collector import Collector
    from app.core.monitor.demo_source import demo_source

    source = demo_source(None, 7)
    source.open(elapsed=400.0)
    collector = Collector(source, agents=DemoAgents(source))
    collector.open()
    snapshots = [collector.collect() for _ in range(10)]
    collector.close()
    last = snapshots[-1]
    assert last.agents and last.diagnoses  # the demo's story: agents and findings
    for s in snapshots:
        assert decode_snapshot(through_json(encode_snapshot(s))) == s


def test_status_contract_keys_are_kept():
    g = GpuSample(0, "GPU", "GPU-1", 24_000 * MiB, 10_000 * MiB + 3, None,
                  processes=(ProcessSample(7, 9_000 * MiB),))
    data = encode_snapshot(Snapshot(1.5, 2.0, "nvml", "580.1", (g,)))
    assert data["wire"] == WIRE_VERSION
    assert {"source", "driver_version", "timestamp", "error", "gpus"} <= set(data)
    assert data["gpus"][0]["unattributed_memory"] == 1_000 * MiB + 3
    assert data["gpus"][0]["memory_free"] is None  # unknown stays null, never 0


def test_non_finite_floats_travel_as_strings():
    g = GpuSample(0, "GPU", None, None, None, None, temperature=math.inf)
    data = through_json(encode_snapshot(Snapshot(0.0, 0.0, "nvml", None, (g,))))
    assert data["gpus"][0]["temperature"] == "inf"
    assert decode_snapshot(data).gpus[0].temperature == math.inf


@pytest.mark.parametrize("theirs", [None, 0, 2, "1"])
def test_another_version_is_a_clear_error(theirs):
    data = encode_snapshot(Snapshot(0.0, 0.0, "nvml", None, ()))
    data["wire"] = theirs
    with pytest.raises(WireVersionError, match="wire version") as info:
        decode_snapshot(data, "https://gpu-box:9847")
    assert "https://gpu-box:9847" in str(info.value)
    if theirs == 2:
        assert "upgrade VRAM Steward here" in str(info.value)


@pytest.mark.parametrize("change, where", [
    (lambda d: d["gpus"][0].update(memory_used="lots"), "$.gpus[0].memory_used"),
    (lambda d: d["gpus"][0]["processes"][0].update(pid=True), "$.gpus[0].processes[0].pid"),
    (lambda d: d["gpus"][0].update(state="melted"), "$.gpus[0].state"),
    (lambda d: d["gpus"][0].pop("name"), "$.gpus[0]"),
    (lambda d: d.update(agents={"x": {}}), "$.agents"),
    (lambda d: d.update(gpus={}), "$.gpus"),
])
def test_bad_input_names_where(change, where):
    g = GpuSample(0, "GPU", "GPU-1", 1, 1, 0, processes=(ProcessSample(7, 1),))
    data = through_json(encode_snapshot(Snapshot(0.0, 0.0, "nvml", None, (g,))))
    change(data)
    with pytest.raises(WireError) as info:
        decode_snapshot(data)
    assert where in str(info.value)


def test_keys_a_newer_server_adds_are_ignored():
    data = encode_snapshot(Snapshot(0.0, 0.0, "nvml", None, ()))
    data["something_new"] = {"a": 1}
    assert decode_snapshot(data) == Snapshot(0.0, 0.0, "nvml", None, ())


def test_the_windows_view_of_other_hosts_never_travels():
    from app.core.monitor.hosts import CONNECTED, HostView, qualify_gpu

    remote = qualify_gpu(GpuSample(0, "GPU", "GPU-2", 24_000 * MiB, 1 * MiB, None), "gpu1")
    view = HostView("gpu1", "ssh://gpu1", CONNECTED,
                    snapshot=Snapshot(1.0, 1.0, "nvml", None, (remote,)))
    local = GpuSample(0, "GPU", "GPU-1", 24_000 * MiB, 10 * MiB, None, host="")
    data = through_json(encode_snapshot(Snapshot(1.5, 2.0, "nvml", "580.1", (local,),
                                                 hosts=(view,))))
    assert "hosts" not in data and "host" not in data["gpus"][0]
    assert decode_snapshot(data) == Snapshot(1.5, 2.0, "nvml", "580.1", (local,))
    assert "host" not in encode_snapshot(Snapshot(1.0, 1.0, "x", None, (remote,)))["gpus"][0]


def test_a_peer_cannot_say_which_hosts_a_window_watches():
    data = encode_snapshot(Snapshot(1.0, 1.0, "nvml", None,
                                    (GpuSample(0, "GPU", "GPU-1", 10 * MiB, 1 * MiB, None),)))
    data["hosts"] = [{"key": "evil", "url": "ssh://x", "state": "connected"}]
    data["gpus"][0]["host"] = "other"
    snapshot = decode_snapshot(through_json(data))
    assert snapshot.hosts == () and snapshot.gpus[0].host == ""
