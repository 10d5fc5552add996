"""The model manager (unload / reload / policies), in this process, CPU torch.

CUDA is faked where a test needs the "cpu" target or the GPU-only TTL:
``storage.devices.is_cuda`` is monkeypatched to call CPU tensors CUDA ones and the
``torch.cuda`` calls the manager makes (synchronize, device, empty_cache,
memory_stats) are recorded fakes.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import os
import pickle
import sys
import threading
import time
import types

import pytest
import torch
from torch import nn

from app.agent import churn, eligibility, guard, models, protocol, retirement, storage
from app.agent import manager as mgr_mod
from app.agent.errors import ActionError, BadParams

from .conftest import offload_mappings


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield str(tmp_path / "cache" / "vram-steward" / "offload")


class Net(nn.Module):
    def __init__(self, width: int = 32):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(16, width), nn.LayerNorm(width), nn.GELU())
        self.dec = nn.Linear(width, 8)
        self.register_buffer("scale", torch.full((8,), 0.5, dtype=torch.float64))
        self.half_part = nn.Linear(8, 8).to(torch.bfloat16)

    def forward(self, x):
        y = self.dec(self.enc(x)) * self.scale.float()
        return y + self.half_part(y.to(torch.bfloat16)).float()


def frozen(model: nn.Module) -> nn.Module:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def attach(tracker, *mods):
    """What start() does for models built before it: hooks on this thread, then a refresh."""
    tracker.use_torch(torch)
    tracker.placement.attach_existing([m for mod in mods for m in mod.modules()])
    tracker.refresh(torch)
    return [tracker.model_id(m) for m in mods]


@pytest.fixture
def env():
    """A tracker + manager over the given models (no agent thread)."""
    tracker = models.ModelTracker()
    tracker.hooks = True  # models are added explicitly: no gc scan for others' leftovers
    emitted: list = []
    manager = mgr_mod.Manager(tracker, lambda name, data: emitted.append((name, data)))

    def track(*mods):
        return attach(tracker, *mods)

    yield types.SimpleNamespace(tracker=tracker, manager=manager, track=track, emitted=emitted)
    tracker.release()
    manager.retired.drop(everything=True)  # no timer of this test may reach the next


def hook_ids(model):
    return {name: (tuple(map(id, m._forward_pre_hooks.values())),
                   tuple(map(id, m._forward_hooks.values())))
            for name, m in model.named_modules()}


class FakeCuda:
    """Records the torch.cuda calls the manager makes; CPU tensors count as cuda:0."""

    def __init__(self, monkeypatch):
        self.calls: list = []
        self.current = None
        self.reserved = 100 << 20
        local = threading.local()
        fake = self

        @contextlib.contextmanager
        def device(i):
            prev = getattr(local, "dev", None)
            local.dev = i
            fake.calls.append(("device", i))
            try:
                yield
            finally:
                local.dev = prev

        def empty_cache():
            fake.calls.append(("empty_cache", getattr(local, "dev", None)))
            fake.reserved = 10 << 20

        monkeypatch.setattr(storage.devices, "is_cuda", lambda d: getattr(d, "type", None) == "cpu")
        monkeypatch.setattr(torch.cuda, "synchronize",
                            lambda i=None: fake.calls.append(("synchronize", i)))
        monkeypatch.setattr(torch.cuda, "device", device)
        monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
        monkeypatch.setattr(torch.cuda, "memory_stats",
                            lambda i=None: {"reserved_bytes.all.current": fake.reserved})
        real_empty = torch.empty

        def empty(*args, **kwargs):
            if kwargs.pop("pin_memory", False):
                fake.calls.append(("pinned", args[0] if args else None))
            return real_empty(*args, **kwargs)

        monkeypatch.setattr(torch, "empty", empty)
        host = []
        monkeypatch.setattr(storage.devices, "host_empty_cache", lambda t: host.append(1))
        self.host_empty = host

    def names(self):
        return [c[0] for c in self.calls]


@pytest.fixture
def fake_cuda(monkeypatch):
    return FakeCuda(monkeypatch)


def data_ptrs(model):
    return [p.data_ptr() for p in model.parameters()] + [b.data_ptr() for b in model.buffers()]


def state_copy(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_state(model, saved):
    now = model.state_dict()
    assert set(now) == set(saved)
    for k, v in saved.items():
        assert now[k].dtype == v.dtype and now[k].shape == v.shape
        assert torch.equal(now[k], v), k


# -- basics ----------------------------------------------------------------------

def test_a_running_forward_is_read_from_the_stacks_and_the_hook_records_the_time(env):
    model = frozen(Net())
    env.track(model)
    g = env.tracker.guard(model)
    assert len(model._forward_pre_hooks) == 1 and not model._forward_hooks
    # its composite direct part carries a hook too; plain layers and anything
    # deeper do not
    assert [n for n, m in model.named_modules() if m._forward_pre_hooks] == ["", "enc"]
    inside, release = threading.Event(), threading.Event()

    class Probe(nn.Module):
        def forward(self, x):
            if threading.current_thread() is not threading.main_thread():
                inside.set()
                release.wait(10)
            return x

    model.enc.append(Probe())
    t = threading.Thread(target=model, args=(torch.randn(2, 16),))
    t.start()
    inside.wait(10)
    assert g.running_threads() == [t.ident]  # found three levels down the stack
    release.set()
    t.join(10)
    assert g.running_threads() == [] and g.last_used is not None
    with pytest.raises(RuntimeError):  # a raising forward leaves nothing behind
        model(torch.randn(2, 5))
    assert g.running_threads() == []
    # a deeper submodule called directly counts as a running forward too
    inside.clear()
    release.clear()
    t = threading.Thread(target=model.enc[3], args=(torch.randn(2, 32),))
    t.start()
    inside.wait(10)
    assert g.running_threads() == [t.ident]
    release.set()
    t.join(10)


def test_reentrant_forward_is_never_kept_waiting_by_an_unload(env, monkeypatch):
    started, go_on = threading.Event(), threading.Event()

    class Recursive(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x, depth=2):
            if depth == 2:
                started.set()
                go_on.wait(10)  # an unload starts meanwhile and waits for this call
            return self.l(x) if depth == 0 else self(x, depth - 1)

    model = frozen(Recursive())
    [mid] = env.track(model)
    out = []
    t = threading.Thread(target=lambda: out.append(model(torch.ones(1, 4))))
    t.start()
    started.wait(10)
    results = []
    u = threading.Thread(target=lambda: results.append(
        env.manager.handle_unload({"model": mid, "to": "disk"})))
    u.start()
    time.sleep(0.1)
    assert env.tracker.guard(model).state == "unloading"
    go_on.set()  # the call re-enters the model while the unload waits: it goes on
    t.join(10)
    u.join(10)
    assert out and results and results[0]["ok"]


def test_disk_unload_and_forward_reload_bit_identical(env, _cache_dir):
    model = frozen(Net())
    model.dec.weight = nn.Parameter(torch.randn(32, 8).t(), requires_grad=False)  # strided
    [mid] = env.track(model)
    x = torch.randn(4, 16)
    ref = model(x)
    saved = state_copy(model)
    params = list(model.parameters())
    storages = {p.untyped_storage().data_ptr() for p in params} | {
        b.untyped_storage().data_ptr() for b in model.buffers()}
    ev = env.manager.handle_unload({"model": mid, "to": "disk"})
    assert ev["state"] == "offloaded" and ev["target"] == "disk" and ev["ok"]
    assert ev["bytes_moved"] >= sum(p.numel() * p.element_size() for p in params)
    g = env.tracker.guard(model)
    assert g.state == "offloaded"
    # One file per storage, mapped; none has a name: nothing outlives the process.
    assert os.listdir(_cache_dir) == []
    assert len(set(offload_mappings(_cache_dir))) == len(storages)
    assert os.stat(_cache_dir).st_mode & 0o777 == 0o700
    for p in params:  # views of the file's mapping, on the CPU
        assert p.device.type == "cpu"
    assert g.state == "offloaded"  # (reading through held references is no reload)
    out = model(x)  # transparent reload
    assert torch.equal(out, ref)
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert_same_state(model, saved)
    assert g.state == "resident"
    assert os.listdir(_cache_dir) == []
    last = env.manager.recent_events()[-1]
    assert (last["action"], last["reason"], last["state"], last["ok"]) == (
        "reload", "forward", "resident", True)
    assert [e["seq"] for e in env.manager.recent_events()] == [1, 2]
    assert [n for n, _ in env.emitted] == ["model_state", "model_state"]


def test_reading_the_weights_of_an_offloaded_model_brings_it_back_first(env, tmp_path):
    # state_dict / torch.save never see the offloaded copies: a read is a use.
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(4, 16)
    model(x)
    saved = state_copy(model)
    env.manager.handle_unload({"model": mid, "to": "disk"})
    g = env.tracker.guard(model)
    assert g.state == "offloaded"
    assert type(model.enc[0].__dict__["_parameters"]) is storage.OffloadedDict
    assert_same_state(model, saved)  # state_dict reloads first
    assert g.state == "resident" and type(model.enc[0].__dict__["_parameters"]) is dict
    assert env.manager.recent_events()[-1]["reason"] == "access"
    torch.save(model.state_dict(), tmp_path / "ckpt.pt")
    loaded = torch.load(tmp_path / "ckpt.pt")
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())


def test_a_write_through_a_held_reference_while_offloaded_is_kept(env):
    model = frozen(Net())
    [mid] = env.track(model)
    bias = model.dec.bias  # a reference held outside the model
    saved = state_copy(model)
    env.manager.handle_unload({"model": mid, "to": "disk"})
    with torch.no_grad():
        bias.add_(1.0)  # writes into the offloaded copy
    env.manager.handle_reload({"model": mid})
    assert torch.equal(model.dec.bias, saved["dec.bias"] + 1.0)
    # and a tensor replaced meanwhile keeps the user's value
    env.manager.handle_unload({"model": mid, "to": "disk"})
    replacement = torch.full_like(saved["dec.bias"], 7.0)
    bias.data = replacement
    env.manager.handle_reload({"model": mid})
    assert model.dec.bias is bias and torch.equal(bias, replacement)


def test_second_disk_unload_of_memory_mapped_model(env, _cache_dir):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(3, 16)
    ref = model(x)
    for _ in range(3):
        env.manager.handle_unload({"model": mid, "to": "disk"})
        assert torch.equal(model(x), ref)
    assert os.listdir(_cache_dir) == []


def test_cpu_target_for_a_cpu_model_is_refused(env):
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    with pytest.raises(ActionError) as err:
        env.manager.handle_unload({"model": mid, "to": "cpu"})
    assert err.value.code == protocol.REFUSED and "already on the CPU" in str(err.value)


def test_bad_params_and_not_found(env):
    model = frozen(Net())
    [mid] = env.track(model)
    with pytest.raises(ActionError) as err:
        env.manager.handle_unload({"model": "m999"})
    assert err.value.code == protocol.NOT_FOUND
    for params in ({"model": mid, "to": "gpu"}, {"model": mid, "force": 1},
                   {"model": mid, "reason": "idle"}, {}):
        with pytest.raises(BadParams):
            env.manager.handle_unload(params)
    with pytest.raises(BadParams):
        env.manager.handle_set_policy({"idle_unload_s": -1})
    with pytest.raises(BadParams):
        env.manager.handle_set_policy({"idle_unload_s": True})


# -- refusals ------------------------------------------------------------------------

def test_training_mode_never_auto_unloaded_and_manual_needs_force(env, monkeypatch):
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)
    model = Net().train()
    [mid] = env.track(model)
    model(torch.randn(2, 16))
    g = env.tracker.guard(model)
    time.sleep(0.02)
    assert env.manager.idle.candidates(0.01) == []
    assert env.manager.blocker(model, g) == "train mode"
    for params in ({"model": mid, "reason": "pressure"}, {"model": mid}):
        with pytest.raises(ActionError) as err:
            env.manager.handle_unload(params)
        assert err.value.code == protocol.REFUSED and "train mode" in str(err.value)
    assert g.state == "resident"
    ev = env.manager.handle_unload({"model": mid, "force": True})
    assert ev["ok"] and g.state == "offloaded"


def test_eval_model_whose_parameters_require_grad_is_eligible(env, monkeypatch):
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)
    model = Net().eval()  # like every from_pretrained model: requires_grad stays True
    assert all(p.requires_grad for p in model.parameters())
    [mid] = env.track(model)
    with torch.no_grad():
        model(torch.randn(2, 16))
    g = env.tracker.guard(model)
    assert env.manager.blocker(model, g) is None
    time.sleep(0.02)
    assert env.manager.idle.candidates(0.01) == [mid]
    assert env.manager.handle_unload({"model": mid, "reason": "pressure"})["ok"]


def test_pinned_refused_only_for_automatic_reasons(env, monkeypatch):
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    assert env.manager.handle_pin({"model": mid, "pinned": True}) == {"model": mid, "pinned": True}
    with pytest.raises(ActionError, match="pinned"):
        env.manager.handle_unload({"model": mid, "reason": "pressure"})
    assert env.manager.handle_unload({"model": mid})["ok"]  # manual: allowed


def test_forward_running_refused_after_wait(env, monkeypatch):
    monkeypatch.setattr(mgr_mod, "FORWARD_WAIT_S", 0.3)
    started, release = threading.Event(), threading.Event()

    class Slow(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(2, 2)

        def forward(self, x):
            started.set()
            release.wait(10)
            return self.l(x)

    model = frozen(Slow())
    [mid] = env.track(model)
    t = threading.Thread(target=model, args=(torch.ones(1, 2),))
    t.start()
    started.wait(5)
    t0 = time.monotonic()
    with pytest.raises(ActionError, match=r"it is running: thread '\S+' in Slow.forward") as err:
        env.manager.handle_unload({"model": mid, "to": "disk"})
    assert err.value.code == protocol.REFUSED and time.monotonic() - t0 >= 0.25
    release.set()
    t.join()
    assert env.tracker.guard(model).state == "resident"
    assert env.manager.handle_unload({"model": mid, "to": "disk"})["ok"]


def test_compiled_model_refused(env):
    model = frozen(Net())
    model.compile(backend="eager")
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    with pytest.raises(ActionError) as err:
        env.manager.handle_unload({"model": mid, "to": "disk", "force": True})
    assert err.value.code == protocol.REFUSED
    assert str(err.value) == eligibility.REFUSALS["torch.compile"]
    assert env.manager.blocker(model, env.tracker.guard(model)) == "torch.compile"


def test_torch_compile_wrapper_is_not_the_model_and_the_model_is_refused(env):
    inner = frozen(Net())
    opt = torch.compile(inner, backend="eager")
    env.track(opt)
    roots = env.tracker.user_roots()
    assert inner in roots and opt not in roots  # the model the user built is the model
    [info] = env.tracker.models([], env.manager.annotate)
    assert info["class"].endswith(".Net") and info["unload_blocker"] == "torch.compile"
    with pytest.raises(ActionError, match="torch.compile"):
        env.manager.handle_unload({"model": env.tracker.model_id(inner), "to": "disk",
                                   "force": True})


def test_model_used_only_through_a_part_counts_as_used_and_reloads_on_any_call(env):
    model = frozen(Net())
    [mid] = env.track(model)
    g = env.tracker.guard(model)
    assert g.last_used is None and g.idle_since == g.first_seen  # idle since first seen
    x = torch.randn(2, 16)
    t0 = time.time()
    ref = model.enc(x)  # a direct part: counts as use of the model
    assert g.last_used is not None and g.last_used >= t0
    assert env.manager.handle_unload({"model": mid, "to": "disk"})["ok"]
    assert torch.equal(model.enc(x), ref)  # the part's hook reloaded it
    assert g.state == "resident" and env.manager.recent_events()[-1]["reason"] == "forward"
    env.manager.handle_unload({"model": mid, "to": "disk"})
    ref0 = model.enc[0].weight.clone()  # a deeper module: its weights' dict reloads it
    assert g.state == "resident" and env.manager.recent_events()[-1]["reason"] == "access"
    env.manager.handle_unload({"model": mid, "to": "disk"})
    assert torch.equal(model.enc[0](x), x @ ref0.t() + model.enc[0].bias)


def test_shared_tensors_between_roots_refused(env):
    a, b = frozen(nn.Linear(4, 4)), frozen(nn.Linear(4, 4))
    b.weight = a.weight
    ids = env.track(a, b)
    a(torch.ones(1, 4))
    with pytest.raises(ActionError, match="shares tensors"):
        env.manager.handle_unload({"model": ids[0], "to": "disk"})


# -- failures -----------------------------------------------------------------------

@pytest.mark.parametrize("target", ["disk", "cpu"])
def test_failure_in_copy_phase_rolls_back(env, monkeypatch, _cache_dir, target, request):
    if target == "cpu":
        request.getfixturevalue("fake_cuda")
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    saved, ptrs = state_copy(model), data_ptrs(model)
    real, calls = storage.devices.copy_bytes, []

    def failing(dst, src, nb):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected copy failure")
        real(dst, src, nb)

    before = hook_ids(model)
    monkeypatch.setattr(storage.devices, "copy_bytes", failing)
    with pytest.raises(ActionError) as err:
        env.manager.handle_unload({"model": mid, "to": target})
    assert err.value.code == protocol.FAILED and "injected" in str(err.value)
    g = env.tracker.guard(model)
    assert g.state == "resident" and g.offload is None
    assert data_ptrs(model) == ptrs
    assert_same_state(model, saved)
    assert torch.equal(model(x), ref)
    assert not os.path.isdir(_cache_dir) or os.listdir(_cache_dir) == []
    ev = env.manager.recent_events()[-1]
    assert ev["ok"] is False and "injected" in ev["error"] and ev["state"] == "resident"
    assert hook_ids(model) == before  # the agent never adds or removes hooks
    assert all(type(m.__dict__["_parameters"]) is dict for m in model.modules())


def test_failure_in_swap_phase_rolls_back(env, monkeypatch):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    ptrs = data_ptrs(model)
    real, n = storage.copies.view_on, []

    def failing(*args):
        n.append(1)
        if len(n) == 4:
            raise MemoryError("injected swap failure")
        return real(*args)

    monkeypatch.setattr(storage.copies, "view_on", failing)
    with pytest.raises(ActionError, match="injected swap failure"):
        env.manager.handle_unload({"model": mid, "to": "disk"})
    assert data_ptrs(model) == ptrs and torch.equal(model(x), ref)
    assert all(type(m.__dict__["_parameters"]) is dict for m in model.modules())


def test_failed_reload_raises_clear_runtime_error_and_stays_offloaded(env, monkeypatch,
                                                                      fake_cuda):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    env.manager.handle_unload({"model": mid, "to": "cpu"})
    real = storage.devices.copy_bytes
    monkeypatch.setattr(storage.devices, "copy_bytes",
                        lambda d, s, nb: (_ for _ in ()).throw(RuntimeError("CUDA OOM (fake)")))
    with pytest.raises(RuntimeError, match="reloading model .* failed .*CUDA OOM"):
        model(x)
    assert env.tracker.guard(model).state == "offloaded"
    with pytest.raises(RuntimeError, match="reloading model .* failed .*CUDA OOM"):
        model.state_dict()  # a read of the weights fails the same clear way
    monkeypatch.setattr(storage.devices, "copy_bytes", real)
    assert torch.equal(model(x), ref)


# -- the CUDA path against fakes ---------------------------------------------------

def test_cuda_path_pinned_copy_sync_empty_cache_per_device(env, fake_cuda):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers())
    count = len(list(model.parameters())) + len(list(model.buffers()))
    ev = env.manager.handle_unload({"model": mid})  # default target for a "CUDA" model: cpu
    assert ev["target"] == "cpu" and ev["bytes_moved"] == nbytes
    names = fake_cuda.names()
    assert names.count("pinned") == count
    # The page-locked buffers are made while the model's calls still run; the
    # move syncs pending kernels before it reads the weights, and its copies
    # before the swap.
    first_sync = names.index("synchronize")
    assert names[:first_sync].count("pinned") == count
    assert "synchronize" in names[first_sync + 1:]
    assert ev["copy_seconds"] is not None and 0 <= ev["copy_seconds"] <= ev["seconds"]
    assert ("empty_cache", 0) in fake_cuda.calls  # with device 0 selected in this thread
    assert ev["bytes_released"] == 90 << 20  # reserved 100 MiB -> 10 MiB
    fake_cuda.calls.clear()
    assert torch.equal(model(x), ref)
    assert "synchronize" in fake_cuda.names()
    deadline = time.monotonic() + 5  # the pinned copies go after the grace, then the cache
    while not fake_cuda.host_empty and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake_cuda.host_empty == [1]
    rev = env.manager.recent_events()[-1]
    assert rev["action"] == "reload" and rev["bytes_moved"] == nbytes


def test_cuda_path_pin_failure_falls_back_to_pageable(env, fake_cuda, monkeypatch):
    real = torch.empty

    def no_pin(*a, **k):
        if k.get("pin_memory"):
            raise RuntimeError("cudaHostAlloc failed")
        return real(*a, **k)

    monkeypatch.setattr(torch, "empty", no_pin)
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    assert env.manager.handle_unload({"model": mid})["ok"]
    assert torch.equal(model(x), ref)


def test_cuda_model_to_disk(env, fake_cuda):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    ev = env.manager.handle_unload({"model": mid, "to": "disk"})
    assert ev["target"] == "disk" and ("empty_cache", 0) in fake_cuda.calls
    assert torch.equal(model(x), ref)


# -- optimizer ----------------------------------------------------------------------

@pytest.mark.parametrize("target", ["disk", "cpu"])
def test_optimizer_keeps_stepping_after_forced_unload(env, target, request):
    if target == "cpu":
        request.getfixturevalue("fake_cuda")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    [mid] = env.track(model.eval())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ids = [id(p) for p in model.parameters()]
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    losses = []

    def step():
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    for _ in range(5):
        step()
    grads = [p.grad.clone() for p in model.parameters()]
    ev = env.manager.handle_unload({"model": mid, "to": target, "force": True})
    assert ev["ok"]
    env.manager.handle_reload({"model": mid})
    assert [torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads)] == [True] * 4
    for _ in range(5):
        step()
    assert [id(p) for p in model.parameters()] == ids
    assert [id(p) for p in opt.param_groups[0]["params"]] == ids
    assert all(b < a for a, b in zip(losses, losses[1:])), losses


# -- policies ------------------------------------------------------------------------

def test_ttl_unloads_only_idle_and_never_pinned(env, monkeypatch):
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)  # CI has no GPU
    idle, pinned, busy, never_called = (frozen(Net()) for _ in range(4))
    ids = env.track(idle, pinned, busy, never_called)
    x = torch.randn(1, 16)
    for m in (idle, pinned, busy):
        m(x)
    env.manager.handle_pin({"model": ids[1], "pinned": True})
    env.manager.idle.ttl_s = 0.3  # below set_policy's 10 s minimum: a test cannot wait 10 s
    time.sleep(0.35)
    busy(x)  # used again: not idle
    env.manager.tick()
    env.manager.idle._thread.join(30)
    g = env.tracker.guard
    # never called: idle since the agent first saw it
    assert [g(m).state for m in (idle, pinned, busy, never_called)] == [
        "offloaded", "resident", "resident", "offloaded"]
    ev = [e for e in env.manager.recent_events() if e["action"] == "unload"]
    assert sorted((e["model"], e["reason"]) for e in ev) == sorted(
        [(ids[0], "idle"), (ids[3], "idle")])


def test_ttl_leaves_cpu_models_alone(env):
    model = frozen(Net())
    env.track(model)
    model(torch.randn(1, 16))
    g = env.tracker.guard(model)
    assert env.manager.blocker(model, g) == "not on a GPU"
    env.manager.idle.ttl_s = 0.01  # below set_policy's minimum, as above
    time.sleep(0.02)
    assert env.manager.idle.candidates(0.01) == []


def test_idle_env_variable(monkeypatch):
    monkeypatch.setenv("VRAM_STEWARD_IDLE_UNLOAD", "120")
    assert mgr_mod.Manager(models.ModelTracker()).policy() == {"idle_unload_s": 120.0}


def test_report_fields(env, monkeypatch):
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    infos = env.tracker.models([], env.manager.annotate)
    assert len(infos) == 1, [(i["id"], i["class"]) for i in infos]
    [info] = infos
    assert (info["state"], info["offloaded_to"], info["pinned"], info["home_device"],
            info["auto_unload_blocker"]) == ("resident", None, False, "cpu", "not on a GPU")
    assert (info["unload_blocker"], info["training_evidence"]) == (None, None)
    assert info["idle_since"] == info["last_used"] and info["first_seen"] <= info["last_used"]
    assert info["placeholder_bytes"] == 0
    env.manager.handle_unload({"model": mid, "to": "disk"})
    [info] = env.tracker.models([], env.manager.annotate)
    assert (info["state"], info["offloaded_to"], info["home_device"], info["device"]) == (
        "offloaded", "disk", "cpu", "disk")
    assert list(info["bytes_by_device"]) == ["disk"]


# -- races ---------------------------------------------------------------------------

def test_concurrent_callers_wait_for_one_reload(env, fake_cuda, monkeypatch):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    env.manager.handle_unload({"model": mid, "to": "cpu"})
    real = storage.devices.copy_bytes

    def slow(dst, src, nb):
        time.sleep(0.02)
        real(dst, src, nb)

    monkeypatch.setattr(storage.devices, "copy_bytes", slow)
    barrier = threading.Barrier(8)
    results, errors = [], []

    def call():
        try:
            barrier.wait()
            results.append(torch.equal(model(x), ref))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and results == [True] * 8
    reloads = [e for e in env.manager.recent_events() if e["action"] == "reload"]
    assert len(reloads) == 1 and reloads[0]["reason"] == "forward"


def test_1000_unload_reload_cycles_racing_two_forward_threads(env, fake_cuda, monkeypatch):
    monkeypatch.setattr(churn, "SHARE", 1.0)  # the moves themselves, not their budget
    # The retire grace guards weights read outside any call of the model;
    # these threads only call it, and 1000 graces would take 250 s.
    monkeypatch.setattr(retirement, "RETIRE_S", 0.002)
    # Spinning forward threads hold the GIL for whole switch intervals (5 ms):
    # a shorter interval lets the unloading thread run more often.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        _cycles(env)
    finally:
        sys.setswitchinterval(old_interval)


def _cycles(env):
    torch.manual_seed(1)
    model = frozen(Net(width=16))
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    stop = threading.Event()
    stats = {"calls": 0, "mismatches": 0, "errors": []}
    lock = threading.Lock()

    def forwards():
        while not stop.is_set():
            try:
                ok = torch.equal(model(x), ref)
            except Exception as exc:
                with lock:
                    stats["errors"].append(repr(exc))
                continue
            with lock:
                stats["calls"] += 1
                stats["mismatches"] += not ok

    threads = [threading.Thread(target=forwards) for _ in range(2)]
    for t in threads:
        t.start()
    done = refused = 0
    deadline = time.monotonic() + 240
    try:
        while done < 1000 and time.monotonic() < deadline:
            target = "disk" if done % 3 == 0 else "cpu"
            try:
                env.manager.handle_unload({"model": mid, "to": target})
                done += 1
            except ActionError as exc:
                assert exc.code == protocol.REFUSED, exc
                refused += 1
            if done % 2:  # else a forward reloads it
                try:
                    env.manager.handle_reload({"model": mid})
                except ActionError as exc:  # a forward brought it back first
                    assert (exc.code, str(exc)) == (protocol.REFUSED,
                                                    protocol.not_offloaded("resident")), exc
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert done == 1000
    assert stats["errors"] == [] and stats["mismatches"] == 0 and stats["calls"] > 0
    assert torch.equal(model(x), ref)
    seqs = [e["seq"] for e in env.manager.recent_events()]
    assert len(seqs) == 64 and seqs == sorted(seqs)
    assert all(e["ok"] for e in env.manager.recent_events())


# -- transformers, pickling, jit ----------------------------------------------------

def test_bert_from_config_unloads_and_reloads_bit_identical(env):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128)
    model = frozen(transformers.BertModel(cfg))
    [mid] = env.track(model)
    ids = torch.randint(0, 512, (2, 12))
    ref = model(input_ids=ids).last_hidden_state
    saved = state_copy(model)
    ev = env.manager.handle_unload({"model": mid, "to": "disk"})
    assert ev["ok"]
    out = model(input_ids=ids).last_hidden_state
    assert torch.equal(out, ref)
    assert_same_state(model, saved)
    assert model.embeddings.word_embeddings.weight.data_ptr() != 0


def test_deepcopy_pickle_and_jit_with_both_hooks(env):
    model = frozen(Net())
    env.track(model)
    x = torch.randn(1, 16)
    clone = copy.deepcopy(model)
    assert torch.equal(clone(x), model(x))
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(x), model(x))
    pickle.loads(pickle.dumps(model))
    assert hook_ids(clone).keys() == hook_ids(model).keys()
    assert all(not isinstance(h, guard._PreHook) or h.slot.guard is None
               for m in clone.modules() for h in m._forward_pre_hooks.values())
    lin = frozen(nn.Linear(3, 3))
    env.track(lin)
    assert len(lin._forward_pre_hooks) == 1 and not lin._forward_hooks


def test_compile_fullgraph_with_both_hooks(env):
    model = frozen(Net())
    env.track(model)
    out = torch.compile(model, fullgraph=True, backend="eager")(torch.ones(1, 16))
    assert out.shape == (1, 8)
    assert env.tracker.guard(model).running_threads() == []


def test_model_deleted_while_offloaded_removes_file(env, _cache_dir):
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    env.manager.handle_unload({"model": mid, "to": "disk"})
    assert offload_mappings(_cache_dir)
    del model
    gc.collect()
    assert offload_mappings(_cache_dir) == [] and os.listdir(_cache_dir) == []


@pytest.mark.parametrize("target", ["disk", "cpu"])
def test_weights_come_back_in_the_same_storage_geometry(env, target, request):
    """Loaded as slices of a memory-mapped file (safetensors), weights sit at
    odd addresses, and CPU kernels give other bits for other alignments;
    torch.save writes whole storages and safetensors checks that tied weights
    cover theirs."""
    if target == "cpu":
        request.getfixturevalue("fake_cuda")
    raw = torch.empty(1 << 16, dtype=torch.uint8)
    model = frozen(nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8)))
    offset = 60
    for p in model.parameters():
        n = p.numel() * p.element_size()
        p.data = raw[offset:offset + n].view(torch.float32).view(p.shape).copy_(p.data)
        offset += n + 36
    def geometry():
        return [(p.data_ptr() % storage.ALIGN, p.storage_offset(), p.untyped_storage().nbytes(),
                 p.untyped_storage().data_ptr() == model[0].weight.untyped_storage().data_ptr())
                for p in model.parameters()]

    before = geometry()
    [mid] = env.track(model)
    x = torch.randn(5, 64)
    ref = model(x)
    for _ in range(2):
        env.manager.handle_unload({"model": mid, "to": target})
        assert torch.equal(model(x), ref)
        # same alignment, same offsets in a storage of the same size, still one storage
        assert geometry() == before


def test_a_thread_inside_the_model_reaching_for_it_during_a_drain_goes_on(env):
    """The compile-start callback or torch.jit.script may bring a model back
    from inside its own forward: that thread must not wait for the unload
    that is waiting for it, and the unload must still wait for the forward."""
    model = frozen(Net())
    [mid] = env.track(model)
    g = env.tracker.guard(model)
    inside, reached, release = threading.Event(), threading.Event(), threading.Event()

    class Probe(nn.Module):
        def forward(self, t):
            if threading.current_thread() is not threading.main_thread():
                inside.set()
                while g.state != "unloading":
                    time.sleep(0.01)
                g.make_resident("compile")  # returns at once: the weights are home
                reached.set()
                release.wait(10)
            return t

    model.enc.append(Probe())
    t = threading.Thread(target=model, args=(torch.randn(2, 16),))
    t.start()
    inside.wait(10)
    results = []
    u = threading.Thread(target=lambda: results.append(
        env.manager.handle_unload({"model": mid, "to": "disk"})))
    u.start()
    assert reached.wait(5)
    time.sleep(0.2)
    assert not results and g.state == "unloading"  # still waiting for the forward
    release.set()
    t.join(10)
    u.join(10)
    assert results and results[0]["ok"]


def test_an_autograd_forward_is_evidence_until_the_window_ends(env, monkeypatch):
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)
    model = Net().eval()  # parameters require grad
    [mid] = env.track(model)
    out = model(torch.randn(2, 16))  # its graph could still be backwarded
    g = env.tracker.guard(model)
    assert env.manager.blocker(model, g).startswith("forward with autograd")
    with pytest.raises(ActionError, match="forward with autograd"):
        env.manager.handle_unload({"model": mid, "reason": "pressure"})
    monkeypatch.setattr(eligibility, "TRAINING_WINDOW_S", 0.0)
    time.sleep(0.01)
    assert env.manager.blocker(model, g) is None
    del out


def test_refreshes_from_two_threads_never_give_two_models_one_id(env):
    mods = [frozen(nn.Linear(2, 2)) for _ in range(40)]
    tracker = env.tracker
    tracker.use_torch(torch)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for m in mods:
            tracker.add(m)
        threads = [threading.Thread(target=tracker.refresh, args=(torch,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        sys.setswitchinterval(old)
    ids = [tracker.model_id(m) for m in mods]
    assert None not in ids and len(set(ids)) == len(ids)


def test_a_restarted_agent_keeps_an_offloaded_models_guard(env):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    env.manager.handle_unload({"model": mid, "to": "disk"})
    env.tracker.release()  # the agent stops: the offloaded model keeps its guard
    fresh = models.ModelTracker()
    fresh.hooks = True
    attach(fresh, model)
    assert fresh.guard(model) is env.tracker.guard(model)
    assert fresh.guard(model).state == "offloaded"
    assert torch.equal(model(x), ref)
