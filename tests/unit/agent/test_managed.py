"""Model servers that manage their own models: recognised from ``sys.modules``
names, and every unload of theirs refused (manual, forced, pressure, idle)."""

from __future__ import annotations

import sys
import time
import types

import pytest
import torch

from app.agent import eligibility, introspect, managed, protocol
from app.agent.errors import ActionError, BadParams
from app.agent.server import pacing

from .test_manager import Net, data_ptrs, env, frozen  # noqa: F401 (env: a fixture)

COMFY = "comfy.model_management"
A1111 = ("modules.sd_models", "modules.shared", "modules.processing")


@pytest.mark.parametrize(("names", "server"), [
    ((COMFY, "comfy", "comfy.sd"), "ComfyUI"),
    (("modules_forge", "modules_forge.initialization", *A1111), "Forge"),
    (A1111, "AUTOMATIC1111"),
    (("modules.text_generation", "modules.shared", "modules.models"), "text-generation-webui"),
    (("vllm", "vllm.engine", "vllm.engine.llm_engine"), "vLLM"),
    (("vllm", "vllm.entrypoints", "vllm.entrypoints.openai.api_server"), "vLLM"),
    (("sglang", "sglang.srt", "sglang.srt.server", "vllm", "vllm.engine"), "SGLang"),
])
def test_each_server_is_recognised_from_its_module_names(names, server):
    assert managed.recognise(set(names) | {"os", "torch", "json"}) == server


@pytest.mark.parametrize("names", [
    (), ("os", "torch", "torch.nn"),
    ("comfy", "comfy.utils"),  # a package called comfy, not ComfyUI's model management
    ("modules", "modules.shared"),  # a project's own "modules" package
    ("modules.sd_models",),
    ("modules_forge",),  # Forge part-way through its start: no A1111 modules yet
    ("modules.text_generation",),
    ("vllm", "vllm.transformers_utils"),  # only vLLM's tokenizer helpers
    ("sglang", "sglang.lang"),  # SGLang's frontend language, no runtime
])
def test_other_processes_are_not_servers(names):
    assert managed.recognise(set(names)) is None


@pytest.fixture
def fresh(monkeypatch):
    """Nothing recognised yet; ``add(name)`` imports a fake module into a copy of
    sys.modules, which stands in for it until the test ends: the real one never
    holds a fake (what the test really imports meanwhile goes back into it)."""
    monkeypatch.setattr(managed, "_found", [])
    real = sys.modules
    modules = dict(real)
    fakes: set = set()

    def add(*names):
        monkeypatch.setattr(sys, "modules", modules)
        for name in names:
            fakes.add(name)
            modules[name] = types.ModuleType(name)

    yield add
    for name, module in list(modules.items()):
        if name not in fakes and name not in real:
            real[name] = module


def test_looked_for_lazily_and_kept_once_found(fresh, monkeypatch):
    fresh()
    assert managed.server() is None and managed.blocker() is None
    fresh(COMFY)  # imported after the agent started
    assert managed.server() == "ComfyUI"
    assert managed.blocker() == "managed by ComfyUI"
    monkeypatch.setattr(sys, "modules", {})  # kept: no lookup once found
    assert managed.server() == "ComfyUI"


def test_the_refusal_names_the_server():
    assert managed.refusal("vLLM") == ("managed by vLLM: unloading it behind its back would "
                                       "break its bookkeeping; use its unload")


def test_a_managed_refusal_is_held_back_like_any_refusal():
    assert pacing.held_back({"error": {"code": protocol.MANAGED, "message": "m"}})


# -- the manager ----------------------------------------------------------------------

@pytest.fixture
def comfy(env, fresh):
    """One tracked eval model, called once, in a process that looks like ComfyUI."""
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    fresh(COMFY)
    return types.SimpleNamespace(model=model, id=mid, guard=env.tracker.guard(model))


def expect_managed(call, *args):
    with pytest.raises(ActionError) as err:
        call(*args)
    assert err.value.code == protocol.MANAGED == "managed"
    assert str(err.value) == ("managed by ComfyUI: unloading it behind its back would break "
                              "its bookkeeping; use its unload")


@pytest.mark.parametrize("params", [
    {}, {"force": True}, {"to": "disk"}, {"to": "disk", "force": True},
    {"reason": "pressure"}, {"reason": "pressure", "to": "cpu"},
])
def test_every_requested_unload_is_refused_and_nothing_moves(env, comfy, params):
    ptrs, before = data_ptrs(comfy.model), {k: v.clone() for k, v in
                                            comfy.model.state_dict().items()}
    expect_managed(env.manager.handle_unload, {"model": comfy.id, **params})
    assert comfy.guard.state == "resident" and data_ptrs(comfy.model) == ptrs
    assert all(torch.equal(v, before[k]) for k, v in comfy.model.state_dict().items())
    assert not [e for e in env.manager.recent_events() if e["action"] == "unload"]


def test_bad_params_and_unknown_models_keep_their_own_answers(env, comfy):
    with pytest.raises(BadParams, match="force is for manual unloads only"):
        env.manager.handle_unload({"model": comfy.id, "reason": "pressure", "force": True})
    with pytest.raises(ActionError) as err:
        env.manager.handle_unload({"model": "m999"})
    assert err.value.code == protocol.NOT_FOUND


def test_the_idle_timer_unloads_nothing(env, comfy, monkeypatch):
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)  # as if on a GPU
    env.manager.idle.ttl_s = 0.01  # below set_policy's minimum: a test cannot wait 10 s
    time.sleep(0.02)
    assert env.manager.blocker(comfy.model, comfy.guard) == "managed by ComfyUI"
    assert env.manager.idle.candidates(0.01) == []
    env.manager.tick()
    assert env.manager.idle._thread is None
    expect_managed(env.manager.unload, comfy.model, comfy.guard, None, False, "idle", 0.0)
    env.manager.idle._unload([comfy.id])  # a pick made before the server was seen
    assert comfy.guard.state == "resident"


def test_the_report_names_the_server_and_every_models_blocker(env, comfy):
    watch = introspect.CudaWatch(lambda name, data: None)
    report = introspect.build_report("0", env.tracker, watch, {"models": True}, env.manager)
    assert report["managed_by"] == "ComfyUI"
    [info] = report["models"]
    assert info["unload_blocker"] == info["auto_unload_blocker"] == "managed by ComfyUI"
    assert info["training_evidence"] is None and info["idle_since"] is not None


def test_no_server_no_field_value(env, fresh):
    watch = introspect.CudaWatch(lambda name, data: None)
    report = introspect.build_report("0", None, watch, {"models": False}, env.manager)
    assert report["managed_by"] is None


def test_reload_is_untouched(env, tmp_path, monkeypatch, fresh):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(1, 16)
    out = model(x)
    # unloaded before the server was recognised (its modules came later): it comes back
    env.manager.handle_unload({"model": mid, "to": "disk"})
    fresh(COMFY)
    assert env.tracker.guard(model).state == "offloaded"
    assert env.manager.handle_reload({"model": mid})["state"] == "resident"
    assert torch.equal(model(x), out)
    # resident: a reload is refused as anywhere (nothing to reload), an unload as managed
    with pytest.raises(ActionError) as refused:
        env.manager.handle_reload({"model": mid})
    assert refused.value.code == protocol.REFUSED
    assert str(refused.value) == "not offloaded (it is resident)"
    expect_managed(env.manager.handle_unload, {"model": mid, "to": "disk"})
