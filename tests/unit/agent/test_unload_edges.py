"""Unloads meeting what real programs do around them: methods other than
forward, parts run on worker threads, references held outside the model, a
fork at any moment, dicts of other types, shared memory, an agent restart."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

from app.agent import guard, models, sharing, storage
from app.agent import manager as mgr_mod
from app.agent.errors import ActionError

from .conftest import offload_mappings
from .test_manager import Net, attach, frozen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.fixture
def env(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    tracker = models.ModelTracker()
    tracker.hooks = True
    emitted: list = []
    mgr = mgr_mod.Manager(tracker, lambda name, data: emitted.append((name, data)))
    yield tracker, mgr, str(cache / "vram-steward" / "offload"), emitted
    tracker.release()
    mgr.retired.drop(everything=True)  # no timer of this test may reach the next


def mlp(width: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return frozen(nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4)))


def test_an_unload_waits_for_a_method_of_the_model_not_only_its_forward(env, monkeypatch):
    """``pipe.vae.decode`` / ``clip.encode_text``: code of the model that is
    not a Module call reads its weights all the same."""
    tracker, mgr, _, _ = env
    monkeypatch.setattr(mgr_mod, "FORWARD_WAIT_S", 0.3)
    inside, release = threading.Event(), threading.Event()

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 4)

        def forward(self, x):
            return self.proj(x)

        def encode_text(self, x):
            w = self.proj.weight  # read directly, no Module call
            inside.set()
            release.wait(10)
            return x @ w.t()

    torch.manual_seed(0)
    model = frozen(Encoder())
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    ref = x @ model.proj.weight.t()
    out: list = []
    t = threading.Thread(target=lambda: out.append(model.encode_text(x)))
    t.start()
    assert inside.wait(10)
    with pytest.raises(ActionError, match="running"):
        mgr.handle_unload({"model": mid, "to": "disk"})
    assert tracker.guard(model).state == "resident"
    release.set()
    t.join(10)
    assert torch.equal(out[0], ref)
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"]


def test_parts_run_on_worker_threads_by_a_forward_never_stall_an_unload(env):
    """A forward that runs its parts on a thread pool: the parts' calls must
    not wait for the unload, which waits for the forward they serve."""
    tracker, mgr, _, _ = env
    pool = ThreadPoolExecutor(2)
    started, release = threading.Event(), threading.Event()

    class Fanout(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 4)
            self.b = nn.Linear(8, 4)

        def forward(self, x):
            started.set()
            release.wait(10)  # the unload begins to drain here
            fa, fb = pool.submit(self.a, x), pool.submit(self.b, x)
            return fa.result(10) + fb.result(10)

    torch.manual_seed(0)
    model = frozen(Fanout())
    [mid] = attach(tracker, model)
    x = torch.randn(3, 8)
    with torch.no_grad():
        ref = model.a(x) + model.b(x)
    out: list = []
    t = threading.Thread(target=lambda: out.append(model(x)))
    release.clear()
    t.start()
    assert started.wait(10)
    result: list = []
    u = threading.Thread(target=lambda: result.append(
        mgr.handle_unload({"model": mid, "to": "disk"})))
    u.start()
    deadline = time.monotonic() + 5
    while tracker.guard(model).state != "unloading" and time.monotonic() < deadline:
        time.sleep(0.005)
    release.set()
    t.join(10)
    u.join(10)
    assert not t.is_alive() and not u.is_alive()
    assert torch.equal(out[0], ref)
    assert result and result[0]["ok"]
    assert torch.equal(model(x), ref)  # and it comes back
    pool.shutdown()


CHILD_HELD_REFERENCE = textwrap.dedent("""
    import os, sys, threading, torch
    from torch import nn
    sys.path.insert(0, os.environ["ROOT"])
    from app.agent import churn, manager, models
    from tests.unit.agent.test_manager import attach
    churn.SHARE = 1.0  # the moves themselves, not their budget
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2048, 2048), nn.Linear(2048, 8)).eval().requires_grad_(False)
    tracker = models.ModelTracker()
    tracker.hooks = True
    mgr = manager.Manager(tracker)
    [mid] = attach(tracker, model)
    w = model[0].weight  # held outside the model, read outside any call of it
    want = w.sum().item()
    stop = threading.Event()
    bad = []
    def reader():
        while not stop.is_set():
            s = w.sum().item()
            if s != want:
                bad.append(s)
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for r in readers:
        r.start()
    for i in range(int(os.environ["CYCLES"])):
        mgr.handle_unload({"model": mid, "to": "disk"})
        mgr.handle_reload({"model": mid})
        mgr.tick()  # drops the copies retired a cycle ago
    stop.set()
    for r in readers:
        r.join()
    print("bad", len(bad))
    sys.exit(1 if bad else 0)
""")


def test_reads_through_a_held_reference_during_unloads_never_crash_or_differ(tmp_path):
    """The old storages outlive the swap by a grace, so an op another thread
    began on a weight it holds never reads freed memory.  A child process: a
    crash is a failure, not a lost test run.  Large blocks are given to the
    child's malloc as their own mappings, so a read of a freed storage faults
    (without the grace this child segfaults)."""
    env = dict(os.environ, ROOT=ROOT, CYCLES="20", XDG_CACHE_HOME=str(tmp_path),
               MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run([sys.executable, "-c", CHILD_HELD_REFERENCE], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "bad 0" in proc.stdout


def test_unload_keeps_the_old_storages_for_the_grace_then_the_tick_drops_reloads(env):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    old = model[0].weight.untyped_storage()
    mgr.handle_unload({"model": mid, "to": "disk"})
    mgr.handle_reload({"model": mid})
    assert len(mgr.retired.pending) == 1  # the offloaded copies, for a thread still reading them
    time.sleep(mgr_mod.RETIRE_S + 0.01)
    mgr.tick()
    assert mgr.retired.pending == []
    assert old.data_ptr() != model[0].weight.untyped_storage().data_ptr()


def fork_and_check(model, x, ref) -> int:
    """Fork; the child calls the model and exits 0 when it gives ``ref``.
    The child's exit code (a hang or a crash counts as a failure)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            import signal
            signal.alarm(10)  # a hang in the child is a failure, not a stuck run
            with torch.no_grad():
                code = 0 if torch.equal(model(x), ref) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 100 + os.WTERMSIG(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_fork_while_an_unload_drains_leaves_the_child_a_resident_model(env, monkeypatch):
    tracker, mgr, _, _ = env
    monkeypatch.setattr(mgr_mod, "FORWARD_WAIT_S", 3.0)
    model = mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    busy, release = threading.Event(), threading.Event()

    class Hold(nn.Module):
        def forward(self, t):
            if threading.current_thread() is not threading.main_thread():
                busy.set()
                release.wait(10)
            return t

    model.append(Hold())
    t = threading.Thread(target=model, args=(x,))
    t.start()
    busy.wait(10)
    u = threading.Thread(target=lambda: mgr.handle_unload({"model": mid, "to": "disk"}))
    u.start()
    deadline = time.monotonic() + 5
    while tracker.guard(model).state != "unloading" and time.monotonic() < deadline:
        time.sleep(0.005)
    assert tracker.guard(model).state == "unloading"
    assert fork_and_check(model, x, ref) == 0
    release.set()
    t.join(10)
    u.join(10)
    assert tracker.guard(model).state == "offloaded"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_fork_while_a_reload_copies_leaves_the_child_a_model_that_reloads(env, monkeypatch):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    mgr.handle_unload({"model": mid, "to": "disk"})
    in_copy, forked = threading.Event(), threading.Event()
    real = storage.copies.copy_back

    def slow_copy_back(*args, **kwargs):
        in_copy.set()
        forked.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(storage.copies, "copy_back", slow_copy_back)
    r = threading.Thread(target=lambda: mgr.handle_reload({"model": mid}))
    r.start()
    assert in_copy.wait(10)
    assert tracker.guard(model).state == "reloading"
    monkeypatch.setattr(storage.copies, "copy_back", real)  # the child's own reload copies at once
    code = fork_and_check(model, x, ref)
    forked.set()
    r.join(10)
    assert code == 0
    assert tracker.guard(model).state == "resident"
    with torch.no_grad():
        assert torch.equal(model(x), ref)


def test_an_offloaded_dict_held_across_a_reload_answers_from_the_modules_dict(env):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    mgr.handle_unload({"model": mid, "to": "disk"})
    held = model[0]._parameters  # the offloaded dict; names need no reload
    assert "weight" in held and len(held) == 2 and list(held.keys()) == ["weight", "bias"]
    assert tracker.guard(model).state == "offloaded"
    mgr.handle_reload({"model": mid})
    model[0].register_parameter("gain", nn.Parameter(torch.ones(16), requires_grad=False))
    del model[0].bias
    assert "gain" in held and "bias" not in held and len(held) == 2
    assert sorted(held.keys()) == ["gain", "weight"]


def test_ordered_dict_weights_unload_and_a_dict_of_another_type_is_refused(env):
    tracker, mgr, _, _ = env
    model = mlp()
    model[0]._parameters = OrderedDict(model[0]._parameters)  # as modules from old pickles
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    mgr.handle_unload({"model": mid, "to": "disk"})
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert type(model[0].__dict__["_parameters"]) is OrderedDict

    class Watched(dict):
        pass

    other = mlp()
    other[2].register_buffer("scale", torch.ones(4))
    other[2]._buffers = Watched(other[2]._buffers)
    [oid] = attach(tracker, other)
    assert "_buffers dict of type Watched" in mgr.blocker(other, tracker.guard(other))
    with pytest.raises(ActionError, match="_buffers dict of type Watched") as err:
        mgr.handle_unload({"model": oid, "to": "disk"})
    assert err.value.code == "refused"
    assert tracker.guard(other).state == "resident"
    assert type(other[2].__dict__["_buffers"]) is Watched


def test_a_deleted_offloaded_model_frees_its_files_without_a_gc_pass(env):
    tracker, mgr, cache, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    mgr.handle_unload({"model": mid, "to": "disk"})
    assert offload_mappings(cache) and os.listdir(cache) == []
    gc.disable()  # reference counting alone must free it: no cycle through the agent
    try:
        del model
        assert offload_mappings(cache) == []
    finally:
        gc.enable()


@pytest.mark.parametrize("offset", [1, 3, 37])
def test_a_view_at_an_odd_byte_offset_comes_back_at_the_same_residue(env, offset):
    """A compact reload of part of a big storage keeps the address modulo 64
    (kernels and ``view(dtype)`` care)."""
    tracker, mgr, _, _ = env
    big = torch.zeros(1 << 20, dtype=torch.uint8)
    model = mlp()
    model.register_buffer("codes", big[offset:offset + 100])
    model.codes.copy_(torch.arange(100, dtype=torch.uint8))
    residue = model.codes.data_ptr() % storage.ALIGN
    [mid] = attach(tracker, model)
    mgr.handle_unload({"model": mid, "to": "disk"})
    mgr.handle_reload({"model": mid})
    assert model.codes.data_ptr() % storage.ALIGN == residue
    assert model.codes.untyped_storage().nbytes() < 1 << 16
    assert torch.equal(model.codes, torch.arange(100, dtype=torch.uint8))


def test_a_restarted_agents_manager_reloads_and_reports_the_adopted_model(env):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    mgr.handle_unload({"model": mid, "to": "disk"})
    tracker.release()  # the agent stops; the model stays offloaded
    fresh = models.ModelTracker()
    fresh.hooks = True
    emitted: list = []
    fresh_mgr = mgr_mod.Manager(fresh, lambda name, data: emitted.append((name, data)))
    try:
        [fid] = attach(fresh, model)
        with torch.no_grad():
            assert torch.equal(model(x), ref)
        events = fresh_mgr.recent_events()
        assert [e["action"] for e in events] == ["reload"] and events[0]["ok"]
        assert events[0]["model"] == fid
        assert mgr.recent_events()[-1]["action"] == "unload"  # the old one heard nothing
    finally:
        fresh.release()


def test_a_shape_change_through_data_during_the_copy_refuses(env, monkeypatch):
    """Same storage, another view of it: still a change the unload must not lose."""
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    weight = model[0].weight
    real = storage.devices.copy_bytes

    def copy_then_reshape(dst, src, nb):
        if weight.shape == (16, 8):
            weight.data = weight.data.view(8, 16)
        real(dst, src, nb)

    monkeypatch.setattr(storage.devices, "copy_bytes", copy_then_reshape)
    with pytest.raises(ActionError, match="replaced while it was being copied"):
        mgr.handle_unload({"model": mid, "to": "disk"})
    assert tracker.guard(model).state == "resident"
    assert model[0].weight.shape == (8, 16)


def test_a_model_in_shared_memory_is_refused_and_its_worker_still_shares_it(env):
    """After ``model.share_memory()`` (Hogwild, torch.multiprocessing workers)
    the parent and its workers train one storage: an unload and reload would
    leave the parent on a new one, cut off from them.  Refused, nothing moves."""
    tracker, mgr, cache, _ = env
    model = mlp().share_memory()
    [mid] = attach(tracker, model)
    g = tracker.guard(model)
    ptrs = [p.data_ptr() for p in model.parameters()]
    for to in ("disk", None):
        with pytest.raises(ActionError, match="shared with other processes") as refused:
            mgr.handle_unload({"model": mid, "to": to})
        assert refused.value.code == "refused"
    assert g.state == "resident" and [p.data_ptr() for p in model.parameters()] == ptrs
    assert offload_mappings(cache) == []
    deadline = time.monotonic() + sharing.MAPS_TTL_S + 1.0  # the report says so too
    while mgr.blocker(model, g) != sharing.BLOCKER and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mgr.blocker(model, g) == sharing.BLOCKER
    before = model[0].weight.detach().clone()
    pid = os.fork()
    if pid == 0:  # the worker: an in-place step on the shared weights
        try:
            with torch.no_grad():
                model[0].weight.add_(1.0)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert torch.equal(model[0].weight, before + 1.0)  # the worker's update reached us


def test_a_weight_sent_through_torch_multiprocessing_is_refused(env):
    """torch.multiprocessing keeps a weak reference to every storage it sends
    or receives (CUDA IPC handles too): such a model is refused."""
    from torch.multiprocessing import reductions

    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    key = ("test-handle", id(model))
    reductions.shared_cache[key] = reductions.StorageWeakRef(model[2].bias.untyped_storage())
    try:
        with pytest.raises(ActionError, match="shared with other processes"):
            mgr.handle_unload({"model": mid, "to": "disk"})
    finally:
        dict.pop(reductions.shared_cache, key, None)
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"]


def test_weights_in_a_private_file_mapping_are_not_shared(env, tmp_path):
    """A model loaded from a memory-mapped safetensors file views a private
    mapping: only this process sees it, so it moves like any other."""
    tracker, mgr, _, _ = env
    model = mlp()
    path = tmp_path / "weights.bin"
    n = model[0].weight.numel()
    path.write_bytes(model[0].weight.detach().numpy().tobytes())
    mapped = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=4 * n)
    model[0].weight.data = torch.empty(0).set_(mapped, 0, model[0].weight.shape)
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"]
    with torch.no_grad():
        assert torch.equal(model(x), ref)


def test_the_hooks_of_composite_parts_are_marked_as_parts(env):
    """Only a part's call goes on while an unload drains (see the worker-thread test)."""
    tracker, _, _, _ = env
    model = frozen(Net())
    attach(tracker, model)
    assert guard.slot_of(model).part is False
    assert guard.slot_of(model.enc).part is True
    assert guard.slot_of(model.enc[0]) is None  # leaves: no hook of their own


def test_a_lazy_model_before_its_first_call_is_listed_and_refused_not_broken(env):
    tracker, mgr, _, _ = env
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU()).eval()
    [mid] = attach(tracker, model)
    errors: list = []
    [info] = [i for i in tracker.models(errors) if i["id"] == mid]
    assert errors == [] and info["params"] == 0  # it holds no memory yet
    with pytest.raises(ActionError, match="uninitialized") as err:
        mgr.handle_unload({"model": mid, "to": "disk", "force": True})
    assert err.value.code == "refused"
    with torch.no_grad():
        out = model(torch.ones(2, 3))  # materializes as without the agent
    assert out.shape == (2, 4) and model[0].weight.shape == (4, 3)
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"]
    with torch.no_grad():
        assert torch.equal(model(torch.ones(2, 3)), out)


def test_an_id_reused_after_weights_were_replaced_is_not_taken_for_sharing(env):
    """``from_pretrained`` builds parameters, then replaces them with the
    loaded ones; a tensor of the next model built may take a freed one's id
    while a cached figure still lists it (seen with a diffusers pipeline: its
    text encoder "shared tensors" with its VAE)."""
    tracker, mgr, _, _ = env
    first, second = mlp(), mlp(width=8)
    [fid, sid] = attach(tracker, first, second)
    tracker.figures(first)  # cached, as a tick leaves it
    when, fig, name, cls = tracker._cache[first]
    reused = {id(second[0].weight)}  # the id a freed tensor of ``first`` had
    tracker._cache[first] = (when, dict(fig, tensor_ids=fig["tensor_ids"] | reused), name, cls)
    assert tracker.shared_with(second) is None
    assert mgr.handle_unload({"model": sid, "to": "disk"})["ok"]
    third = mlp()
    third[0].weight = second[0].weight  # really shared: still refused
    [tid] = attach(tracker, third)
    assert tracker.shared_with(third) == sid


def test_a_failure_between_the_drain_and_the_copy_leaves_it_resident_not_stuck(env, monkeypatch):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    from app.agent import eligibility
    real, calls = eligibility.unload_blocker, []

    def fails_after_the_drain(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the check after the drain
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    monkeypatch.setattr(eligibility, "unload_blocker", fails_after_the_drain)
    with pytest.raises(RuntimeError, match="injected"):
        mgr.handle_unload({"model": mid, "to": "disk"})
    assert tracker.guard(model).state == "resident"
    assert type(model[0].__dict__["_parameters"]) is dict
    done: list = []
    t = threading.Thread(target=lambda: done.append(model(x)))
    t.start()
    t.join(5)
    assert done and torch.equal(done[0], ref)  # a call does not hang


def test_replaced_storages_go_without_a_tick_and_never_keep_the_model(env):
    tracker, mgr, _, _ = env
    assert mgr.ticking is False  # no agent thread here: a timer drops them
    model = mlp()
    [mid] = attach(tracker, model)
    mgr.handle_unload({"model": mid, "to": "disk"})
    mgr.handle_reload({"model": mid})
    assert len(mgr.retired.pending) == 1
    weight = weakref.ref(model[0].weight)
    del model
    assert weight() is None  # the retired list holds old data, not the parameters
    deadline = time.monotonic() + 5
    while mgr.retired.pending and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mgr.retired.pending == []


def test_a_part_kept_after_its_offloaded_model_is_gone_still_comes_back(env):
    tracker, mgr, _, events = env
    model = mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model[0](x)
    mgr.handle_unload({"model": mid, "to": "disk"})
    part = model[0]
    del model
    gc.collect()
    with torch.no_grad():
        assert torch.equal(part(x), ref)
    assert type(part.__dict__["_parameters"]) is dict  # home again
    assert [e["action"] for e in mgr.recent_events()] == ["unload", "reload"]


def test_an_interrupt_after_the_weights_are_home_leaves_the_model_resident(env, monkeypatch):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    x = torch.randn(2, 8)
    with torch.no_grad():
        ref = model(x)
    mgr.handle_unload({"model": mid, "to": "disk"})
    real = mgr._event

    def interrupted(g, module, action, *args):
        if action == "reload":
            raise KeyboardInterrupt  # Ctrl-C while the reload records its event
        return real(g, module, action, *args)

    monkeypatch.setattr(mgr, "_event", interrupted)
    with pytest.raises(KeyboardInterrupt):
        mgr.handle_reload({"model": mid})
    monkeypatch.setattr(mgr, "_event", real)
    assert tracker.guard(model).state == "resident"
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"]


def test_looking_for_the_model_on_other_threads_pins_none_of_their_locals(env):
    """Reading a frame's locals on 3.11/3.12 keeps them until it returns;
    the drain reads only torch's call frames."""
    tracker, _, _, _ = env
    model = mlp()
    attach(tracker, model)
    g = tracker.guard(model)
    holding, dropped, finish = threading.Event(), threading.Event(), threading.Event()
    gone: list = []

    class App:
        def run(self):
            big = torch.ones(1 << 16)
            ref = weakref.ref(big)
            holding.set()
            dropped.wait(10)
            del big
            gone.append(ref() is None)
            finish.wait(10)

    t = threading.Thread(target=App().run)
    t.start()
    holding.wait(10)
    assert g.running_threads() == []  # looks at the thread's stack
    dropped.set()
    deadline = time.monotonic() + 5
    while not gone and time.monotonic() < deadline:
        time.sleep(0.01)
    finish.set()
    t.join(10)
    assert gone == [True]


def test_a_refusal_names_the_thread_and_method_that_run_the_model(env, monkeypatch):
    tracker, mgr, _, _ = env
    monkeypatch.setattr(mgr_mod, "FORWARD_WAIT_S", 0.2)
    inside, release = threading.Event(), threading.Event()

    class Served(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(2, 2)

        def forward(self, x):
            return self.l(x)

        @torch.no_grad()
        def serve_forever(self):
            inside.set()
            release.wait(10)  # waiting for requests between calls

    model = frozen(Served())
    [mid] = attach(tracker, model)
    t = threading.Thread(target=model.serve_forever, name="server")
    t.start()
    inside.wait(10)
    with pytest.raises(ActionError, match=r"thread 'server' in Served.serve_forever"):
        mgr.handle_unload({"model": mid, "to": "disk"})
    release.set()
    t.join(10)


def test_a_name_deleted_while_offloaded_is_gone_from_both_dicts(env):
    tracker, mgr, _, _ = env
    model = mlp()
    [mid] = attach(tracker, model)
    own = model[0].__dict__["_buffers"]
    mgr.handle_unload({"model": mid, "to": "disk"})
    own["extra"] = torch.ones(2)  # through a reference to the module's own dict
    assert "extra" in model[0]._buffers
    del model[0].extra
    assert "extra" not in own and "extra" not in model[0]._buffers


def _net_with_output(tracker) -> tuple:
    """A tracked eval ``Net``, its id, an input and its output."""
    model = frozen(Net())
    [mid] = attach(tracker, model)
    x = torch.randn(2, 16)
    with torch.no_grad():
        return model, mid, x, model(x)


def test_a_disk_write_failing_halfway_rolls_back_and_leaves_nothing(env, monkeypatch):
    """The disk filled after the room was checked (or a quota, or an I/O
    error): the third write fails.  The model stays resident and exact; no
    file, mapping or descriptor of the unload is left."""
    tracker, mgr, cache, _ = env
    model, mid, x, ref = _net_with_output(tracker)
    ptrs = [p.data_ptr() for p in model.parameters()]
    real, calls = os.pwrite, []

    def full_on_third(fd, data, offset):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(fd, data, offset)

    fds_before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "pwrite", full_on_third)
    with pytest.raises(ActionError, match="rolled back.*No space left on device") as failed:
        mgr.handle_unload({"model": mid, "to": "disk"})
    assert failed.value.code == "failed" and len(calls) == 3
    monkeypatch.setattr(os, "pwrite", real)
    g = tracker.guard(model)
    assert g.state == "resident" and [p.data_ptr() for p in model.parameters()] == ptrs
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert os.listdir(cache) == [] and offload_mappings(cache) == []
    assert set(os.listdir("/proc/self/fd")) <= fds_before | {str(fd) for fd in range(3)}


def test_on_a_network_filesystem_a_write_it_refuses_later_rolls_the_unload_back(env,
                                                                              monkeypatch):
    """NFS takes every write into the page cache and says "over quota" only on
    writeback: the files are synced before the weights are swapped, so that
    answer rolls the unload back instead of a reload finding what was never
    stored.  On a filesystem that reserved the blocks nothing is synced."""
    tracker, mgr, cache, _ = env
    model, mid, x, ref = _net_with_output(tracker)
    synced: list = []

    def over_quota(fd):
        synced.append(fd)
        raise OSError(122, "Disk quota exceeded")

    monkeypatch.setattr(os, "fdatasync", over_quota)
    monkeypatch.setattr(storage.files, "filesystem_type", lambda path: "nfs4")
    with pytest.raises(ActionError, match="rolled back.*Disk quota exceeded"):
        mgr.handle_unload({"model": mid, "to": "disk"})
    assert synced and tracker.guard(model).state == "resident"
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert offload_mappings(cache) == []
    synced.clear()
    monkeypatch.setattr(storage.files, "filesystem_type", lambda path: "ext4")
    assert mgr.handle_unload({"model": mid, "to": "disk"})["ok"] and synced == []
    with torch.no_grad():
        assert torch.equal(model(x), ref)
