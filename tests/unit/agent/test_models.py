from __future__ import annotations

import gc
import json
import os
import shutil
import time
import types

import pytest
import torch
from torch import nn

from app.agent import figures, models, runtime

from .conftest import Client, short_tmpdir


class PreExisting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)


@pytest.fixture(scope="module")
def agent():
    pre = PreExisting()  # created before start(): found by the one-time scan
    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.05)
    with open(os.path.join(rt, "agents", "%d.json" % os.getpid())) as f:
        entry = json.load(f)
    client = Client(entry["address"])
    yield types.SimpleNamespace(client=client, pre=pre)
    client.close()
    runtime.stop()
    shutil.rmtree(rt, ignore_errors=True)


def report(agent):
    return agent.client.call("report")["result"]


def by_class(rep, cls):
    return [m for m in rep["models"] if m["class"].endswith("." + cls)]


def test_preexisting_model_found_by_scan(agent):
    rep = report(agent)
    [m] = by_class(rep, "PreExisting")
    assert m["params"] == 3 * 4 + 4 and m["param_bytes"] == 16 * 4
    assert rep["discovery"]["method"] == "hooks+scan"
    assert rep["discovery"]["scan_seconds"] is not None
    assert m["id"].startswith("m")
    assert report(agent)["models"][0]["id"] == rep["models"][0]["id"]  # stable ids


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(2, 5)
        self.tied = nn.Linear(4, 4)
        self.tied.weight = self.inner.a.weight  # shared: counted once


def test_nested_model_is_one_root_and_shared_params_counted_once(agent):
    model = Outer()
    rep = report(agent)
    assert by_class(rep, "Inner") == [] and by_class(rep, "Sequential") == [] or \
        all(m["class"] != "torch.nn.modules.container.Sequential" or m["params"] != 6
            for m in rep["models"])
    [m] = by_class(rep, "Outer")
    unique = {id(p): p for p in model.parameters()}
    assert m["params"] == sum(p.numel() for p in unique.values())
    assert m["param_bytes"] == 4 * m["params"]
    assert m["buffer_bytes"] == sum(b.numel() * b.element_size() for b in model.buffers())
    assert m["bytes_by_device"] == {"cpu": {"params": m["param_bytes"], "buffers": m["buffer_bytes"]}}
    assert m["device"] == "cpu" and m["dtype"] == "float32" and m["requires_grad"] is True
    del model


def test_plain_sequential_created_after_start(agent):
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    seq.marker_for_test = True
    rep = report(agent)
    ids = [m["id"] for m in rep["models"] if m["class"] == "torch.nn.modules.container.Sequential"
           and m["params"] == 9]
    assert len(ids) == 1
    del seq


def test_hf_like_name_and_training_flag_and_last_used(agent):
    class FakeConfig:
        _name_or_path = "org/tiny-model"
        model_type = "tiny"

    class FakeHFModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = FakeConfig()
            self.proj = nn.Linear(2, 2)

        def forward(self, x):
            return self.proj(x)

    model = FakeHFModel()
    [m] = by_class(report(agent), "FakeHFModel")
    assert m["name"] == "org/tiny-model" and m["training"] is True and m["last_used"] is None
    model.eval()
    t0 = time.time()
    model(torch.ones(1, 2))
    [m] = by_class(report(agent), "FakeHFModel")
    assert m["training"] is False and m["last_used"] is not None and m["last_used"] >= t0 - 1
    model.config._name_or_path = ""
    model.config.architectures = ["TinyForCausalLM"]
    assert figures.friendly_name(model) == "TinyForCausalLM"
    # the hook pickles to a harmless no-op: torch.save(model) keeps working
    import io
    import pickle
    buf = io.BytesIO()
    torch.save(model.proj, buf)
    hook = next(iter(model._forward_pre_hooks.values()))
    assert pickle.loads(pickle.dumps(hook))(model, ()) is None


def test_dtype_and_device_mixed(agent):
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2).half()
            self.b = nn.Linear(2, 2, device="meta")
            self.c = nn.Linear(2, 2)
            for p in self.c.parameters():
                p.requires_grad_(False)
            self.a.requires_grad_(False)
            self.b.requires_grad_(False)

    _mixed = Mixed()  # kept alive: the report lists live models only
    [m] = by_class(report(agent), "Mixed")
    assert m["dtype"] == "mixed" and m["requires_grad"] is False
    # Meta tensors are placeholders for weights held elsewhere: never a device.
    assert m["device"] == "cpu" and "meta" not in m["bytes_by_device"]
    assert m["placeholder_bytes"] == 6 * 4
    assert m["bytes_by_device"]["cpu"]["params"] == 6 * 2 + 6 * 4
    assert m["param_bytes"] == 6 * 2 + 6 * 4
    assert m["unload_blocker"] == "meta placeholders"


def test_pipeline_grouping(agent, monkeypatch):
    monkeypatch.setattr(models, "GROUP_MIN_INTERVAL_S", 0.0)

    class UNetish(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(2, 2)

    class VAEish(UNetish):
        pass

    class FakeDiffusionPipeline:
        def __init__(self):
            self.unet = UNetish()
            self.vae = VAEish()
            self.config = {"_name_or_path": "fake/sd-tiny"}

    pipe = FakeDiffusionPipeline()
    rep = report(agent)
    [u] = by_class(rep, "UNetish")
    [v] = by_class(rep, "VAEish")
    assert u["group"] == v["group"] == "FakeDiffusionPipeline (fake/sd-tiny)"
    assert all(m["group"] is None for m in rep["models"] if m["id"] not in (u["id"], v["id"]))
    del pipe


def test_find_groups_with_components_dict():
    a, b, c = nn.Linear(1, 1), nn.Linear(1, 1), nn.Linear(1, 1)

    class Holder:
        def __init__(self):
            self.components = {"x": a, "y": b}

    h = Holder()
    ids = {a: "m1", b: "m2", c: "m3"}
    assert figures.find_groups([a, b, c], ids) == {"m1": "Holder", "m2": "Holder"}
    del h


def test_models_false_skips_models(agent):
    rep = agent.client.call("report", {"models": False})["result"]
    assert rep["models"] == []


def test_deleted_model_disappears(agent):
    class Ephemeral(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(1, 1)

    e = Ephemeral()
    assert len(by_class(report(agent), "Ephemeral")) == 1
    del e
    gc.collect()
    assert by_class(report(agent), "Ephemeral") == []  # no strong refs held by the agent


def test_model_created_after_start_found_via_import_hook(training_child):
    c = Client(training_child["entry"]["address"])
    rep = c.call("report")["result"]
    c.close()
    assert rep["discovery"]["method"] == "hooks" and rep["discovery"]["scan_seconds"] is None
    assert [m["class"] for m in rep["models"]] == ["__main__.Shared"]


def test_compiled_fullgraph_with_last_used_hook(agent):
    class Comp(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(2, 2)

        def forward(self, x):
            return self.l(x)

    model = Comp()
    report(agent)  # installs the last_used hook on the new root
    assert len(model._forward_pre_hooks) == 1
    out = torch.compile(model, fullgraph=True, backend="eager")(torch.ones(1, 2))
    assert out.shape == (1, 2)


def test_jit_script_works_on_a_model_with_the_last_used_hook(agent):
    class Scriptable(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 3)

        def forward(self, x):
            return self.l(x)

    model = Scriptable()
    report(agent)  # installs the last_used hook on the new root
    assert len(model._forward_pre_hooks) == 1
    x = torch.ones(1, 3)
    scripted = torch.jit.script(model)  # TorchScript would reject a Python hook
    assert torch.equal(scripted(x), model(x))
    # The hook is back on the eager model and still records forwards.
    assert len(model._forward_pre_hooks) == 1
    before = time.time()
    model(x)
    entry = next(m for m in report(agent)["models"] if m["class"].endswith("Scriptable"))
    assert entry["last_used"] is not None and entry["last_used"] >= before - 1
    # Errors from TorchScript itself still reach the caller unchanged.
    with pytest.raises(Exception):
        torch.jit.script(lambda: undefined_name)  # noqa: F821


# -- one model, one entry, as the user knows it ------------------------------------

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def entries(live, cls="MLP"):
    return [i for i in live.listed() if i["class"].endswith("." + cls)]


def test_export_lists_the_model_once_and_marks_it(live):
    model = MLP().eval()
    x = torch.randn(2, 4)
    ep = torch.export.export(model, (x,))
    runnable = ep.module()
    assert torch.equal(runnable(x), model(x))
    listed = live.listed()
    assert [i["class"].rsplit(".", 1)[-1] for i in listed] == ["MLP"], listed
    assert listed[0]["unload_blocker"] == "torch.export"
    del ep, runnable
    gc.collect()
    assert [i["id"] for i in entries(live)] == [listed[0]["id"]]


def test_compile_wrapper_is_never_listed_and_its_death_changes_nothing(live):
    model = MLP().eval()
    compiled = torch.compile(model, backend="eager")
    compiled(torch.randn(1, 4))
    [info] = live.listed()
    assert info["class"].endswith(".MLP") and info["unload_blocker"] == "torch.compile"
    del compiled
    gc.collect()
    assert [i["id"] for i in live.listed()] == [info["id"]]


def test_fx_graph_module_is_hidden_and_marks_its_source(live):
    model = MLP().eval()
    gm = torch.fx.symbolic_trace(model)
    assert torch.equal(gm(torch.ones(1, 4)), model(torch.ones(1, 4)))
    listed = live.listed()
    assert [i["class"].rsplit(".", 1)[-1] for i in listed] == ["MLP"]
    assert listed[0]["unload_blocker"] == "torch.fx"


def test_a_freed_user_wrapper_gives_the_model_back_within_a_tick(agent):
    class Holder(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    inner = MLP().eval()
    inner(torch.ones(1, 4))
    [before] = by_class(report(agent), "MLP")
    holder = Holder(inner)
    time.sleep(0.2)
    assert by_class(report(agent), "MLP") == [] and len(by_class(report(agent), "Holder")) == 1
    del holder
    gc.collect()
    time.sleep(0.15)  # the agent's own tick (50 ms) relists it; no report needed
    rep = agent.client.call("report", {"models": True})["result"]
    [after] = by_class(rep, "MLP")
    assert after["id"] == before["id"]


def test_memory_shared_through_data_is_counted_once(live):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = nn.Parameter(self.emb.weight.data)  # same memory, two objects

    _model = Tied()  # kept alive: the report lists live models only
    [info] = entries(live, "Tied")
    assert info["param_bytes"] == 10 * 4 * 4 and info["params"] == 40


def test_a_module_held_by_two_models_blocks_both(live):
    shared = nn.Linear(3, 3)

    class A(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = shared
            self.own = nn.Linear(3, 3)

    a, b = A().eval(), A().eval()
    infos = entries(live, "A")
    assert len(infos) == 2
    ids = {i["id"] for i in infos}
    for i in infos:
        other = (ids - {i["id"]}).pop()
        assert i["unload_blocker"] == "shares tensors with %s" % other
    del a, b
