"""The model manager (unload / reload / policies), in this process, CPU torch.

CUDA is faked where a test needs the "cpu" target or the GPU-only TTL:
``manager.is_cuda`` is monkeypatched to call CPU tensors CUDA ones and the
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

from app.agent import manager as mgr_mod
from app.agent import models, protocol
from app.agent.server import ActionError


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


@pytest.fixture
def env():
    """A tracker + manager over the given models (no agent thread)."""
    tracker = models.ModelTracker()
    tracker.hooks = True  # models are added explicitly: no gc scan for others' leftovers
    emitted: list = []
    manager = mgr_mod.Manager(tracker, lambda name, data: emitted.append((name, data)))

    def track(*mods):
        for m in mods:
            tracker.add(m)
        tracker.refresh(torch)
        return [tracker.model_id(m) for m in mods]

    yield types.SimpleNamespace(tracker=tracker, manager=manager, track=track, emitted=emitted)
    tracker.remove_hooks()


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

        monkeypatch.setattr(mgr_mod, "is_cuda", lambda d: getattr(d, "type", None) == "cpu")
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
        monkeypatch.setattr(mgr_mod, "_host_empty_cache", lambda t: host.append(1))
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

def test_hooks_count_in_flight_and_record_last_used(env):
    model = frozen(Net())
    env.track(model)
    g = env.tracker.guard(model)
    assert len(model._forward_pre_hooks) == 1 and len(model._forward_hooks) == 1
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(dict(g.counts))
            return x
    model.enc.append(Probe())
    model(torch.randn(2, 16))
    assert seen == [{threading.get_ident(): 1}] and g.counts == {}
    assert g.last_used is not None
    with pytest.raises(RuntimeError):  # a raising forward still ends its count (always_call)
        model(torch.randn(2, 5))
    assert g.counts == {}


def test_reentrant_forward_counts_fine(env):
    class Recursive(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x, depth=2):
            return self.l(x) if depth == 0 else self(x, depth - 1)

    model = frozen(Recursive())
    env.track(model)
    g = env.tracker.guard(model)
    model(torch.ones(1, 4))
    assert g.counts == {}


def test_disk_unload_and_forward_reload_bit_identical(env, _cache_dir):
    model = frozen(Net())
    model.dec.weight = nn.Parameter(torch.randn(32, 8).t(), requires_grad=False)  # strided
    [mid] = env.track(model)
    x = torch.randn(4, 16)
    ref = model(x)
    saved = state_copy(model)
    params = list(model.parameters())
    ev = env.manager.handle_unload({"model": mid, "to": "disk"})
    assert ev["state"] == "offloaded" and ev["target"] == "disk" and ev["ok"]
    assert ev["bytes_moved"] >= sum(p.numel() * p.element_size() for p in params)
    g = env.tracker.guard(model)
    assert g.state == "offloaded"
    # One file per storage, named after the process and the model.
    names = sorted(os.listdir(_cache_dir))
    storages = {p.untyped_storage().data_ptr() for p in params} | {
        b.untyped_storage().data_ptr() for b in model.buffers()}
    assert len(names) == len(storages)
    assert all(n.startswith("%d-%s-" % (os.getpid(), mid)) and n.endswith(".bin") for n in names)
    for n in names:
        assert os.stat(os.path.join(_cache_dir, n)).st_mode & 0o777 == 0o600
    assert os.stat(_cache_dir).st_mode & 0o777 == 0o700
    for p in model.parameters():  # views of the file's mapping, on the CPU
        assert p.device.type == "cpu"
    assert [p.shape for p in model.parameters()] == [p.shape for p in params]
    out = model(x)  # transparent reload
    assert torch.equal(out, ref)
    assert all(a is b for a, b in zip(model.parameters(), params))
    assert_same_state(model, saved)
    assert g.state == "resident"
    assert os.listdir(_cache_dir) == []  # unlinked (the mapping keeps the inode)
    last = env.manager.recent_events()[-1]
    assert (last["action"], last["reason"], last["state"], last["ok"]) == (
        "reload", "forward", "resident", True)
    assert [e["seq"] for e in env.manager.recent_events()] == [1, 2]
    assert [n for n, _ in env.emitted] == ["model_state", "model_state"]


def test_weights_read_while_on_disk_are_the_true_values(env, tmp_path):
    # state_dict / torch.save of an offloaded model must never save placeholders.
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(4, 16)
    model(x)
    saved = state_copy(model)
    env.manager.handle_unload({"model": mid, "to": "disk"})
    assert env.tracker.guard(model).state == "offloaded"
    assert_same_state(model, saved)  # reading does not need a reload
    torch.save(model.state_dict(), tmp_path / "ckpt.pt")
    loaded = torch.load(tmp_path / "ckpt.pt")
    assert all(torch.equal(loaded[k], v) for k, v in saved.items())
    # A write made while offloaded is kept by the reload.
    with torch.no_grad():
        model.dec.bias.add_(1.0)
    expected = saved["dec.bias"] + 1.0
    env.manager.handle_reload({"model": mid})
    assert env.tracker.guard(model).state == "resident"
    assert torch.equal(model.dec.bias, expected)


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
    from app.agent.server import BadParams
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
    monkeypatch.setattr(mgr_mod, "on_gpu", lambda m, g: True)
    model = Net().train()
    [mid] = env.track(model)
    model(torch.randn(2, 16))
    g = env.tracker.guard(model)
    time.sleep(0.02)
    assert env.manager.idle_candidates(0.01) == []
    assert env.manager.blocker(model, g) == "training mode"
    for params in ({"model": mid, "reason": "pressure"}, {"model": mid}):
        with pytest.raises(ActionError) as err:
            env.manager.handle_unload(params)
        assert err.value.code == protocol.REFUSED and "training mode" in str(err.value)
    assert g.state == "resident"
    model.eval()  # eval but parameters still require grad
    assert env.manager.blocker(model, g) == "requires grad"
    with pytest.raises(ActionError, match="require grad"):
        env.manager.handle_unload({"model": mid, "reason": "pressure"})
    ev = env.manager.handle_unload({"model": mid, "force": True})
    assert ev["ok"] and g.state == "offloaded"


def test_pinned_refused_only_for_automatic_reasons(env, monkeypatch):
    monkeypatch.setattr(mgr_mod, "on_gpu", lambda m, g: True)
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
    with pytest.raises(ActionError, match="forward is running") as err:
        env.manager.handle_unload({"model": mid, "to": "disk"})
    assert err.value.code == protocol.REFUSED and time.monotonic() - t0 >= 0.25
    release.set()
    t.join()
    assert env.tracker.guard(model).state == "resident"
    assert env.manager.handle_unload({"model": mid, "to": "disk"})["ok"]


def test_stale_in_flight_count_is_cleared(env):
    """A KeyboardInterrupt skips the always-called hook: the count is stale."""
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    g = env.tracker.guard(model)
    g.counts[threading.get_ident()] = 1  # as if interrupted
    assert env.manager.handle_unload({"model": mid, "to": "disk"})["ok"]


def test_compiled_model_refused(env):
    model = frozen(Net())
    model.compile(backend="eager")
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    with pytest.raises(ActionError) as err:
        env.manager.handle_unload({"model": mid, "to": "disk", "force": True})
    assert err.value.code == protocol.REFUSED
    assert str(err.value) == mgr_mod.COMPILE_MESSAGE
    assert env.manager.blocker(model, env.tracker.guard(model)) == "torch.compile"


def test_torch_compile_wrapper_refused(env):
    inner = frozen(Net())
    opt = torch.compile(inner, backend="eager")
    ids = env.track(inner, opt)
    roots = env.tracker.roots()
    assert opt in roots and inner not in roots  # the OptimizedModule is the root
    opt(torch.randn(1, 16))
    with pytest.raises(ActionError, match="torch.compile"):
        env.manager.handle_unload({"model": ids[1], "to": "disk", "force": True})
    assert mgr_mod.compiled(inner, deep=True)  # bounded referrer search finds the wrapper
    assert not mgr_mod.compiled(frozen(Net()), deep=True)


def test_submodule_only_model_needs_force_then_submodule_call_reloads(env):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model.enc(x)  # used only through a submodule: the root hooks never fire
    g = env.tracker.guard(model)
    assert g.last_used is None
    assert env.manager.blocker(model, g, automatic_gpu=False) == "never used"
    with pytest.raises(ActionError, match="never seen in a forward"):
        env.manager.handle_unload({"model": mid, "to": "disk"})
    assert env.manager.handle_unload({"model": mid, "to": "disk", "force": True})["ok"]
    assert torch.equal(model.enc(x), ref)  # the temporary submodule hook reloaded it
    assert g.state == "resident"
    assert env.manager.recent_events()[-1]["reason"] == "forward"
    env.manager.tick()  # drops the temporary submodule hooks
    assert all(len(m._forward_pre_hooks) == 0 for m in model.modules() if m is not model)


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
    real, calls = mgr_mod.copy_bytes, []

    def failing(dst, src, nb):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected copy failure")
        real(dst, src, nb)

    monkeypatch.setattr(mgr_mod, "copy_bytes", failing)
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
    assert all(len(m._forward_pre_hooks) == 0 for m in model.modules() if m is not model)


def test_failure_in_swap_phase_rolls_back(env, monkeypatch):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    ptrs = data_ptrs(model)
    real, n = mgr_mod._view_on, []

    def failing(*args):
        n.append(1)
        if len(n) == 4:
            raise MemoryError("injected swap failure")
        return real(*args)

    monkeypatch.setattr(mgr_mod, "_view_on", failing)
    with pytest.raises(ActionError, match="injected swap failure"):
        env.manager.handle_unload({"model": mid, "to": "disk"})
    assert data_ptrs(model) == ptrs and torch.equal(model(x), ref)


def test_failed_reload_raises_clear_runtime_error_and_stays_offloaded(env, monkeypatch,
                                                                      fake_cuda):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    env.manager.handle_unload({"model": mid, "to": "cpu"})
    real = mgr_mod.copy_bytes
    monkeypatch.setattr(mgr_mod, "copy_bytes",
                        lambda d, s, nb: (_ for _ in ()).throw(RuntimeError("CUDA OOM (fake)")))
    with pytest.raises(RuntimeError, match="reloading model .* failed .*CUDA OOM"):
        model(x)
    assert env.tracker.guard(model).state == "offloaded"
    monkeypatch.setattr(mgr_mod, "copy_bytes", real)
    assert torch.equal(model(x), ref)


# -- the CUDA path against fakes ---------------------------------------------------

def test_cuda_path_pinned_copy_sync_empty_cache_per_device(env, fake_cuda):
    model = frozen(Net())
    [mid] = env.track(model)
    x = torch.randn(2, 16)
    ref = model(x)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers())
    ev = env.manager.handle_unload({"model": mid})  # default target for a "CUDA" model: cpu
    assert ev["target"] == "cpu" and ev["bytes_moved"] == nbytes
    names = fake_cuda.names()
    assert names.count("pinned") == len(list(model.parameters())) + len(list(model.buffers()))
    first_pin, last_pin = names.index("pinned"), len(names) - 1 - names[::-1].index("pinned")
    assert "synchronize" in names[:first_pin]  # pending kernels done before reading weights
    assert "synchronize" in names[last_pin:]  # copies done before the swap
    assert ("empty_cache", 0) in fake_cuda.calls  # with device 0 selected in this thread
    assert ev["bytes_released"] == 90 << 20  # reserved 100 MiB -> 10 MiB
    fake_cuda.calls.clear()
    assert torch.equal(model(x), ref)
    assert "synchronize" in fake_cuda.names() and fake_cuda.host_empty == [1]
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
    [mid] = env.track(model)
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
    monkeypatch.setattr(mgr_mod, "on_gpu", lambda m, g: True)  # CI has no GPU
    idle, pinned, busy, cpu_only = (frozen(Net()) for _ in range(4))
    ids = env.track(idle, pinned, busy, cpu_only)
    x = torch.randn(1, 16)
    for m in (idle, pinned, busy):
        m(x)
    env.manager.handle_pin({"model": ids[1], "pinned": True})
    env.manager.handle_set_policy({"idle_unload_s": 0.3})
    time.sleep(0.35)
    busy(x)  # used again: not idle
    env.manager.tick()
    env.manager._idle_thread.join(30)
    g = env.tracker.guard
    assert [g(m).state for m in (idle, pinned, busy, cpu_only)] == [
        "offloaded", "resident", "resident", "resident"]
    ev = [e for e in env.manager.recent_events() if e["action"] == "unload"]
    assert [(e["model"], e["reason"]) for e in ev] == [(ids[0], "idle")]


def test_ttl_leaves_cpu_models_alone(env):
    model = frozen(Net())
    env.track(model)
    model(torch.randn(1, 16))
    g = env.tracker.guard(model)
    assert env.manager.blocker(model, g) == "not on a GPU"
    env.manager.handle_set_policy({"idle_unload_s": 0.01})
    time.sleep(0.02)
    assert env.manager.idle_candidates(0.01) == []


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
    real = mgr_mod.copy_bytes

    def slow(dst, src, nb):
        time.sleep(0.02)
        real(dst, src, nb)

    monkeypatch.setattr(mgr_mod, "copy_bytes", slow)
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


def test_1000_unload_reload_cycles_racing_two_forward_threads(env, fake_cuda):
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
            if done % 2:
                env.manager.handle_reload({"model": mid})  # else a forward reloads it
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
    lin = frozen(nn.Linear(3, 3))
    env.track(lin)
    assert len(lin._forward_pre_hooks) == 1 and len(lin._forward_hooks) == 1
    scripted = torch.jit.script(lin)
    assert torch.equal(scripted(torch.ones(1, 3)), lin(torch.ones(1, 3)))
    assert len(lin._forward_pre_hooks) == 1 and len(lin._forward_hooks) == 1
    g = env.tracker.guard(lin)
    assert g.counts == {} and g.last_used is not None


def test_compile_fullgraph_with_both_hooks(env):
    model = frozen(Net())
    env.track(model)
    out = torch.compile(model, fullgraph=True, backend="eager")(torch.ones(1, 16))
    assert out.shape == (1, 8)
    assert env.tracker.guard(model).counts == {}


def test_model_deleted_while_offloaded_removes_file(env, _cache_dir):
    model = frozen(Net())
    [mid] = env.track(model)
    model(torch.randn(1, 16))
    env.manager.handle_unload({"model": mid, "to": "disk"})
    assert len(os.listdir(_cache_dir)) >= 1
    del model
    gc.collect()
    assert os.listdir(_cache_dir) == []
