"""What the user's code sees of an offloaded model, and what an unload may
never lose: the weights' dicts, concurrent changes, storages as they were."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest
import torch
from torch import nn

from app.agent import storage
from app.agent.errors import ActionError

from .test_manager import attach
from .test_unload_edges import fork_and_check


@pytest.fixture
def env(tmp_path, monkeypatch):
    from app.agent import manager, models
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tracker = models.ModelTracker()
    tracker.hooks = True
    mgr = manager.Manager(tracker)
    yield tracker, mgr
    tracker.release()
    mgr.retired.drop(everything=True)  # no timer of this test may reach the next


def frozen_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    model.requires_grad_(False)
    return model


def test_a_dicts_changes_while_offloaded_land_in_the_modules_own_dict(env):
    tracker, mgr = env
    model = frozen_mlp()
    [mid] = attach(tracker, model)
    own = model[0].__dict__["_parameters"]
    mgr.handle_unload({"model": mid, "to": "disk"})
    removed = model[0]._parameters.pop("bias")  # brings it back, then pops
    assert removed is not None and "bias" not in dict(model[0].named_parameters())
    assert model[0].__dict__["_parameters"] is own  # the same dict object throughout
    mgr.handle_unload({"model": mid, "to": "disk"})
    extra = torch.ones(3)
    model[0]._buffers.setdefault("extra", extra)  # an empty dict: never swapped
    model[2]._parameters.setdefault("weight", None)  # brings it back, changes nothing
    assert model[0].extra is extra and model[2].weight is not None
    mgr.handle_unload({"model": mid, "to": "disk"})
    model[2].register_parameter("gain", nn.Parameter(torch.ones(4), requires_grad=False))
    assert "gain" in dict(model[2].named_parameters())


def test_a_conversion_on_another_thread_during_the_copy_waits_and_is_kept(env, monkeypatch):
    tracker, mgr = env
    model = frozen_mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    real, started = storage.devices.copy_bytes, threading.Event()
    converted: list = []

    def copy_then_race(dst, src, nb):
        if not started.is_set():
            started.set()
            t = threading.Thread(target=lambda: converted.append(model.double()))
            t.start()
            time.sleep(0.2)  # the conversion starts while the bytes are being copied
            assert not converted  # ...and waits for the unload
            converted.append(t)
        real(dst, src, nb)

    monkeypatch.setattr(storage.devices, "copy_bytes", copy_then_race)
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"]
    monkeypatch.setattr(storage.devices, "copy_bytes", real)
    converted[0].join(10)
    assert all(p.dtype == torch.float64 for p in model.parameters())
    with torch.no_grad():
        assert torch.equal(model(x.double()), frozen_mlp().double()(x.double()))
        assert torch.equal(model.float()(x), ref)


def test_a_tensor_replaced_through_a_held_reference_during_the_copy_refuses(env, monkeypatch):
    tracker, mgr = env
    model = frozen_mlp()
    [mid] = attach(tracker, model)
    weight = model[0].weight  # held outside the model
    replacement = torch.full_like(weight, 3.0)
    real = storage.devices.copy_bytes

    def copy_then_replace(dst, src, nb):
        weight.data = replacement
        real(dst, src, nb)

    monkeypatch.setattr(storage.devices, "copy_bytes", copy_then_replace)
    with pytest.raises(ActionError, match="replaced while it was being copied") as err:
        mgr.handle_unload({"model": mid, "to": "disk"})
    assert err.value.code == "refused"
    assert tracker.guard(model).state == "resident"
    assert model[0].weight is weight and torch.equal(weight, replacement)
    assert type(model[0].__dict__["_parameters"]) is dict


def test_after_a_disk_reload_nothing_is_memory_mapped_or_shared(env):
    tracker, mgr = env
    model = frozen_mlp()
    [mid] = attach(tracker, model)
    mgr.handle_unload({"model": mid, "to": "disk"})
    mgr.handle_reload({"model": mid})
    assert not any(p.is_shared() for p in model.parameters())
    model.share_memory()  # now it can be shared, as without the agent
    assert all(p.is_shared() for p in model.parameters())


def test_torch_save_and_safetensors_see_the_same_storages_after_a_reload(env, tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tracker, mgr = env

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 8)
            self.out = nn.Linear(8, 50, bias=False)
            self.out.weight = self.emb.weight

    torch.manual_seed(0)
    model = Tied().eval()
    [mid] = attach(tracker, model)

    def saved_size():
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        return len(buf.getvalue())

    before = saved_size()
    mgr.handle_unload({"model": mid, "to": "disk", "force": True})
    mgr.handle_reload({"model": mid})
    assert saved_size() == before
    safetensors_torch.save_model(model, str(tmp_path / "m.safetensors"))  # tied: still covering
    assert os.path.getsize(tmp_path / "m.safetensors") > 0


def test_a_storage_shared_with_much_else_comes_back_as_the_covered_bytes(env):
    tracker, mgr = env
    big = torch.zeros(1 << 20, dtype=torch.float32)  # 4 MiB, mostly not the model's
    model = nn.Linear(4, 4, bias=False).eval()
    model.weight = nn.Parameter(big[1001:1017].view(4, 4), requires_grad=False)
    with torch.no_grad():
        model.weight.copy_(torch.arange(16.0).view(4, 4))
    residue = model.weight.data_ptr() % storage.ALIGN
    [mid] = attach(tracker, model)
    mgr.handle_unload({"model": mid, "to": "disk"})
    mgr.handle_reload({"model": mid})
    assert model.weight.untyped_storage().nbytes() < 1 << 16  # not 4 MiB
    assert model.weight.data_ptr() % storage.ALIGN == residue
    assert torch.equal(model.weight, torch.arange(16.0).view(4, 4))


def test_a_fork_during_an_unload_leaves_the_child_a_working_model(env, monkeypatch):
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    tracker, mgr = env
    model = frozen_mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    in_copy, forked = threading.Event(), threading.Event()
    real = storage.devices.copy_bytes

    def slow_copy(dst, src, nb):
        in_copy.set()
        forked.wait(10)
        real(dst, src, nb)

    monkeypatch.setattr(storage.devices, "copy_bytes", slow_copy)
    t = threading.Thread(target=lambda: mgr.handle_unload({"model": mid, "to": "disk"}))
    t.start()
    in_copy.wait(10)
    assert tracker.guard(model).state == "unloading"
    code = fork_and_check(model, x, ref)  # the unloading thread does not exist in the child
    forked.set()
    t.join(10)
    assert code == 0
    assert tracker.guard(model).state == "offloaded"  # the parent's unload went through
