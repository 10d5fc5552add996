"""Where the per-model hooks sit, and that only the user's thread moves them."""

from __future__ import annotations

import copy
import gc
import threading
import time

import pytest
import torch
from torch import nn

from app.agent import guard, placement


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.norm(self.lin(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.encoder = Block()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        x = self.encoder(self.embed(x))
        for b in self.blocks:
            x = b(x)
        return self.head(x)

    def encode(self, x):  # a method that uses a part, not forward
        return self.encoder(x)


PARTS = ["", "blocks", "encoder"]


def hooked(model):
    return sorted(n for n, m in model.named_modules() if guard.slot_of(m) is not None)


def test_a_built_model_carries_hooks_on_its_root_and_composite_parts_only(live):
    model = Net()
    assert hooked(model) == PARTS  # not the plain layers, nothing deeper
    assert len(model._forward_pre_hooks) == 1 and not model._forward_hooks
    for name in ("embed", "head", "blocks.0", "blocks.0.lin", "encoder.norm"):
        m = model.get_submodule(name)
        assert not m._forward_pre_hooks and not m._forward_hooks, name
    seq = nn.Sequential(Block(), Block())  # a container's items are never parts
    assert hooked(seq) == [""]


def test_use_through_a_method_counts_for_the_model(live):
    model = Net().eval()
    live.refresh()
    g = live.tracker.guard(model)
    assert g.last_used is None and g.idle_since == g.first_seen
    t0 = time.time()
    model.encode(torch.ones(1, 4))  # calls the part ``embed``, never Net.forward
    assert g.last_used is not None and g.last_used >= t0
    assert g.running_threads() == []


def test_a_forward_in_the_same_breath_as_building_is_seen(live):
    t0 = time.time()
    model = Net()
    model(torch.ones(1, 4))  # before the agent ever refreshed: a notebook cell
    [info] = [i for i in live.listed() if i["class"].endswith(".Net")]
    assert info["last_used"] is not None and info["last_used"] >= t0


def test_a_used_model_wrapped_later_keeps_its_hooks_and_is_listed_again_when_freed(live):
    inner = Net().eval()
    inner(torch.ones(1, 4))
    live.refresh()
    inner_id = live.tracker.model_id(inner)
    w = Wrap(inner)
    ids = [i["id"] for i in live.listed()]
    assert inner_id not in ids and live.tracker.model_id(w) in ids
    assert guard.slot_of(inner) is not None  # dormant, not removed
    assert guard.slot_of(inner).guard is live.tracker.guard(w)  # a part of the wrapper now
    del w
    gc.collect()
    assert inner_id in [i["id"] for i in live.listed()]  # listed again, same id
    g = live.tracker.guard(inner)
    t0 = time.time()
    inner(torch.ones(1, 4))
    assert guard.slot_of(inner).guard is g and g.last_used >= t0


def test_torch_machinery_never_adopts_and_marks_what_it_wraps(live):
    model = Net().eval()
    compiled = torch.compile(model, backend="eager")
    assert guard.slot_of(compiled) is None and hooked(model) == PARTS
    assert placement.internal_kind(compiled) == "torch.compile"
    assert live.tracker.placement.marks.get(model) == "torch.compile"
    [info] = [i for i in live.listed() if i["class"].endswith(".Net")]
    assert info["unload_blocker"] == "torch.compile" and info["idle_since"] is None


def test_a_deep_copy_gets_inert_hooks_and_becomes_a_model_of_its_own(live):
    model = Net().eval()
    model(torch.ones(1, 4))
    live.refresh()
    clone = copy.deepcopy(model)
    assert hooked(clone) == hooked(model)
    assert all(guard.slot_of(m).guard is None for m in clone.modules() if guard.slot_of(m))
    clone(torch.ones(1, 4))  # its first call announces it
    live.refresh()
    g_clone, g_model = live.tracker.guard(clone), live.tracker.guard(model)
    assert g_clone is not None and g_clone is not g_model
    assert guard.slot_of(clone).guard is g_clone and g_clone.last_used is not None


def test_models_built_before_start_get_hooks_on_the_starting_thread():
    from app.agent import runtime

    from .conftest import short_tmpdir

    before = Net()
    assert guard.slot_of(before) is None
    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.05)
    try:
        # placed synchronously by start(), not later by the agent thread
        assert hooked(before) == PARTS
    finally:
        runtime.stop()


class RecordingDict(dict):
    """A hook dict that records which thread changes it."""

    def __init__(self, items, log):
        super().__init__(items)
        self.log = log

    def __setitem__(self, key, value):
        self.log.append(threading.get_ident())
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.log.append(threading.get_ident())
        super().__delitem__(key)

    def pop(self, *args):
        self.log.append(threading.get_ident())
        return super().pop(*args)


def test_the_agent_thread_never_changes_a_hook_dict(monkeypatch):
    """Reports at 4 Hz and more, unloads, reloads, a wrapper made and freed,
    a compile: every change to any hook dict happens on this thread."""
    from app.agent import churn, runtime

    monkeypatch.setattr(churn, "SHARE", 1.0)  # five unloads in a row: no move budget here

    from .conftest import Client, short_tmpdir, wait_entry

    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.01)
    log: list = []
    try:
        model = Net().eval()
        for m in model.modules():
            for attr in ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_always_called",
                         "_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs"):
                m.__dict__[attr] = RecordingDict(m.__dict__[attr], log)
        import os
        client = Client(wait_entry(rt, os.getpid())["address"])
        x = torch.ones(2, 4)
        with torch.no_grad():
            ref = model(x)
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                assert "result" in client.call("report")
                time.sleep(0.01)

        mid = next(m["id"] for m in client.call("report")["result"]["models"]
                   if m["class"].endswith(".Net") and m["training"] is False)
        poller = threading.Thread(target=poll)
        poller.start()
        try:
            other = Client(wait_entry(rt, os.getpid())["address"])
            for _ in range(5):
                reply = other.call("unload", {"model": mid})
                assert reply.get("result", {}).get("ok"), reply
                with torch.no_grad():
                    assert torch.equal(model(x), ref)
            wrapper = nn.Sequential(model)
            time.sleep(0.05)
            del wrapper
            gc.collect()
            time.sleep(0.05)
            assert torch.equal(torch.compile(model, backend="eager")(x), ref)
            other.close()
        finally:
            stop.set()
            poller.join(10)
            client.close()
    finally:
        runtime.stop()
    me = threading.get_ident()
    assert [t for t in log if t != me] == []


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiling_while_the_agent_ticks_fast_never_fails(fullgraph):
    """The first call of a compiled model traces its hook dicts: the agent
    thread, ticking every 2 ms, must never change them meanwhile."""
    from app.agent import runtime

    from .conftest import short_tmpdir

    compiles = []

    def backend(gm, example_inputs):
        compiles.append(gm)
        return gm

    rt = short_tmpdir()
    assert runtime.start(runtime_dir=rt, tick_interval=0.002)
    try:
        for _ in range(12):  # more instances than dynamo's recompile limit (8)
            model = Net().eval()
            out = torch.compile(model, backend=backend, fullgraph=fullgraph)(torch.ones(1, 4))
            assert out.shape == (1, 2)
            time.sleep(0.005)
    finally:
        runtime.stop()
    # As without an agent: instances of one class share one compiled graph
    # (hooks registered with always_call=True would make dynamo recompile each).
    assert len(compiles) == 1


class Wrap(nn.Module):
    """A wrapper: no weights of its own, one child (peft's LoraModel, DDP)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_a_model_wrapped_twice_keeps_its_hook_and_is_a_model_again_when_unwrapped(live, cache):
    model = Net().eval()
    outer = Wrap(Wrap(model))  # PeftModel -> LoraModel -> the model
    assert hooked(outer) == ["", "inner", "inner.inner"]  # the model's own parts: not
    live.refresh()
    assert guard.slot_of(model).guard is live.tracker.guard(outer)  # a part of the wrapper
    del outer
    gc.collect()
    live.refresh()  # the agent's next tick: a model of its own again
    x = torch.ones(2, 4)
    with torch.no_grad():
        ref = model(x)
    [info] = [i for i in live.listed() if i["class"].endswith(".Net")]
    assert info["unload_blocker"] is None and info["last_used"] is not None
    assert live.manager.handle_unload({"model": info["id"]})["ok"]
    with torch.no_grad():
        assert torch.equal(model(x), ref)
    assert live.tracker.guard(model).state == "resident"


def test_a_wrapper_inside_a_model_leaves_no_hook_deeper_than_its_parts(live):
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = Wrap(nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 4)))
            self.norm = nn.LayerNorm(4)

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Layer() for _ in range(3))
            self.tail = Layer()
            self.head = Wrap(Layer())

    # the parts, and what a part wraps (head.inner); never a part's own parts
    assert hooked(Deep()) == ["", "head", "head.inner", "layers", "tail"]


def test_the_model_peft_merge_and_unload_returns_unloads_and_comes_back_bit_identical(
        live, cache):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    base = transformers.GPT2LMHeadModel(cfg)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                      target_modules=["c_attn"]))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):
        model(ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    merged = model.merge_and_unload()
    assert merged is base
    del model, opt
    gc.collect()
    merged.eval()
    with torch.no_grad():
        ref = merged(ids).logits
    weights = {n: p.detach().clone() for n, p in merged.named_parameters()}
    [info] = [i for i in live.listed() if i["class"].endswith(".GPT2LMHeadModel")]
    assert (info["unload_blocker"], info["training_evidence"]) == (None, None)
    event = live.manager.handle_unload({"model": info["id"]})
    assert event["ok"] and event["state"] == "offloaded"
    with torch.no_grad():
        assert torch.equal(merged(ids).logits, ref)
    for name, p in merged.named_parameters():
        assert torch.equal(p, weights[name]), name
    assert live.tracker.guard(merged).state == "resident"


class OwnPreHook(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_forward_pre_hook(lambda module, args: None)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("why", [placement.MODEL_GONE, placement.OWN_PRE_HOOKS,
                                 placement.HOOKS_OFF])
def test_a_model_without_hooks_is_refused_with_its_one_reason(live, why):
    from app.agent import eligibility, protocol
    from app.agent.errors import ActionError

    if why == placement.MODEL_GONE:
        seq = nn.Sequential(Net(), Net())  # a container's items keep no hooks
        model = seq[0]
        del seq
        gc.collect()
    elif why == placement.OWN_PRE_HOOKS:
        model = OwnPreHook()
    else:
        live.tracker.placement.enabled = False
        model = Net()
    model.eval()
    listed = live.listed()
    info = next(i for i in listed if i["id"] == live.tracker.model_id(model))
    label = "no agent hooks (%s)" % why
    assert info["unload_blocker"] == label
    assert info["idle_since"] is None  # its calls are not seen
    with pytest.raises(ActionError) as err:
        live.manager.handle_unload({"model": info["id"], "force": True})
    assert err.value.code == protocol.REFUSED
    assert str(err.value) == eligibility.REFUSALS[label]
