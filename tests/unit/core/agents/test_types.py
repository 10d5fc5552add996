"""Parsing agent JSON defensively, and mapping CUDA devices onto NVML GPUs."""

import pytest

from app.core.agents.types import AgentReport, DeviceMemory, ModelInfo, VramBreakdown

GiB = 1024**3


def report(devices, models=()):
    return AgentReport.from_json({"pid": 7, "devices": devices, "models": list(models)})


def test_cuda_visible_devices_renumbering_is_resolved_by_uuid():
    # The process runs with CUDA_VISIBLE_DEVICES=3: its cuda:0 is NVML GPU 3.
    r = report([{"index": 0, "uuid": "1a2b3c4d-0000-1111-2222-333344445555",
                 "allocated": 2 * GiB, "reserved": 3 * GiB}],
               [{"id": "m1", "bytes_by_device": {"cuda:0": {"params": GiB, "buffers": 0}}}])
    nvml_uuid = "GPU-1A2B3C4D-0000-1111-2222-333344445555"
    dev = r.device_for_gpu(3, nvml_uuid)
    assert dev is not None and dev.reserved == 3 * GiB
    assert r.param_bytes_for_gpu(3, nvml_uuid) == GiB
    # NVML GPU 0 is another card: nothing of this process is there.
    assert r.device_for_gpu(0, "GPU-ffffffff-0000-1111-2222-333344445555") is None
    assert r.param_bytes_for_gpu(0, "GPU-ffffffff-0000-1111-2222-333344445555") is None


def test_without_uuids_the_index_is_used():
    r = report([{"index": 1, "allocated": GiB, "reserved": 2 * GiB}])
    assert r.device_for_gpu(1, "GPU-x").reserved == 2 * GiB
    assert r.device_for_gpu(0, "GPU-x") is None


def test_mistyped_fields_become_unknown_not_zero():
    r = AgentReport.from_json({"pid": 7, "torch": 2, "cuda_initialized": "yes",
                               "devices": [{"index": 0, "allocated": "1", "reserved": True},
                                           {"index": -1}, "junk"],
                               "models": [{"id": "m1", "params": 1.5}, {"no": "id"}]})
    assert r.torch is None and r.torch_status == "torch not loaded"
    assert r.cuda_initialized is None
    assert len(r.devices) == 1 and r.devices[0].allocated is None and r.devices[0].reserved is None
    assert r.devices[0].cache is None
    assert [m.id for m in r.models] == ["m1"] and r.models[0].params is None
    assert AgentReport.from_json({"no": "pid"}) is None


def test_breakdown_splits_nvml_figure():
    dev = DeviceMemory(0, allocated=5 * GiB, reserved=7 * GiB)
    b = VramBreakdown.of(8 * GiB, dev, parameters=3 * GiB)
    assert (b.context, b.cache, b.tensors, b.parameters) == (GiB, 2 * GiB, 5 * GiB, 3 * GiB)
    unknown = VramBreakdown.of(None, None, None)
    assert unknown.context is None and unknown.cache is None and unknown.tensors is None
    assert unknown.parameters is None


def test_model_bytes_by_device():
    m = ModelInfo.from_json({"id": "m1", "bytes_by_device": {"cuda:0": {"params": 10, "buffers": 2},
                                                             "cpu": "bad"}})
    assert m.bytes_on("cuda:0") == 12 and m.bytes_on("cpu") == 0


def test_model_entry_new_fields_are_parsed_with_units():
    m = ModelInfo.from_json({"id": "m2", "training": False, "requires_grad": True,
                             "last_used": None, "first_seen": 1000.0, "idle_since": 1000.0,
                             "training_evidence": "optimizer step 40 s ago",
                             "unload_blocker": "shares tensors with m3",
                             "placeholder_bytes": 3 * GiB,
                             "auto_unload_blocker": "shares tensors with m3"})
    assert (m.first_seen, m.idle_since, m.placeholder_bytes) == (1000.0, 1000.0, 3 * GiB)
    assert m.training_evidence == "optimizer step 40 s ago"
    assert m.unload_blocker == "shares tensors with m3" and m.blocker == m.unload_blocker
    assert m.idle_s(1600.0) == 600.0 and m.idle_s(900.0) == 0.0  # never negative


def test_an_older_agents_model_entry_falls_back_to_last_used_and_unknowns():
    old = ModelInfo.from_json({"id": "m1", "last_used": 500.0, "requires_grad": True,
                               "auto_unload_blocker": "requires grad"})
    assert old.idle_since == 500.0 and old.idle_s(800.0) == 300.0
    assert (old.first_seen, old.training_evidence, old.unload_blocker,
            old.placeholder_bytes) == (None, None, None, None)
    assert old.blocker == "requires grad"  # what that agent would refuse, as it says
    never = ModelInfo.from_json({"id": "m1", "last_used": None})
    assert never.idle_since is None and never.idle_s(800.0) is None
    # a newer agent's null idle_since is unknown: it does not fall back to last_used
    blind = ModelInfo.from_json({"id": "m1", "last_used": 500.0, "idle_since": None})
    assert blind.idle_since is None and blind.idle_s(800.0) is None
    # mistyped: unknown, never 0
    bad = ModelInfo.from_json({"id": "m1", "idle_since": "soon", "placeholder_bytes": 1.5,
                               "first_seen": True, "training_evidence": 3})
    assert (bad.idle_since, bad.placeholder_bytes, bad.first_seen,
            bad.training_evidence) == (None, None, None, None)


@pytest.mark.parametrize(("raw", "parsed"), [
    (1_700_000_000.5, 1_700_000_000.5), (1_700_000_000, 1_700_000_000.0)])
def test_reloaded_at_is_epoch_seconds(raw, parsed):
    m = ModelInfo.from_json({"id": "m1", "reloaded_at": raw})
    assert m.reloaded_at == parsed and isinstance(m.reloaded_at, float)


@pytest.mark.parametrize("raw", [None, "soon", True, [1.0], {"t": 1.0}, float("inf"),
                                 float("-inf"), float("nan")])
def test_reloaded_at_never_reloaded_missing_or_mistyped_is_none(raw):
    assert ModelInfo.from_json({"id": "m1", "reloaded_at": raw}).reloaded_at is None
    assert ModelInfo.from_json({"id": "m1"}).reloaded_at is None  # an older agent


@pytest.mark.parametrize(("raw", "parsed"), [
    ("ComfyUI", "ComfyUI"), ("text-generation-webui", "text-generation-webui"),
    (None, None), ("", None), (3, None), (True, None), (["vLLM"], None), ({"n": 1}, None)])
def test_managed_by_names_the_model_server_or_is_none(raw, parsed):
    r = AgentReport.from_json({"pid": 7, "managed_by": raw, "models": [
        {"id": "m1", "unload_blocker": "managed by ComfyUI",
         "auto_unload_blocker": "managed by ComfyUI"}]})
    assert r.managed_by == parsed
    assert r.models[0].blocker == "managed by ComfyUI"


def test_an_older_agents_report_has_no_server():
    assert AgentReport.from_json({"pid": 7}).managed_by is None
    assert AgentReport(7, (), None, None, "torch not loaded", None, None, (), ()).managed_by is None
