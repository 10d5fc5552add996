"""A reload started inside any caller's context brings the weights back
exactly as they were: ordinary tensors, same device, dtype, requires_grad,
values and Parameter identity, nothing recorded into the caller's trace."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from .test_manager import attach


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 3)
        self.register_buffer("shift", torch.arange(3, dtype=torch.float32))

    def forward(self, x):
        return self.b(torch.relu(self.a(x))) + self.shift


def describe(model):
    out = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        out[name] = (type(t).__name__, type(t.data).__name__, t.device.type, t.dtype,
                     t.requires_grad, t.is_inference(), t.is_leaf, t.grad_fn,
                     t.detach().clone())
    return out


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        *meta_a, va = a[k]
        *meta_b, vb = b[k]
        assert meta_a == meta_b, k
        assert torch.equal(va, vb), k


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from app.agent import manager, models
    tracker = models.ModelTracker()
    tracker.hooks = True
    mgr = manager.Manager(tracker)
    torch.manual_seed(0)
    model = Net().eval()  # requires_grad stays True, as from_pretrained leaves it
    [mid] = attach(tracker, model)
    params = [id(p) for p in model.parameters()]
    yield model, mid, mgr, params
    tracker.release()
    mgr.retired.drop(everything=True)  # no timer of this test may reach the next


def unload(mgr, mid):
    # force: these tests call the model with autograd on, which is training
    # evidence; what they check is the reload
    ev = mgr.handle_unload({"model": mid, "to": "disk", "force": True})
    assert ev["ok"] and ev["state"] == "offloaded"


def inference():
    return torch.inference_mode()


CONTEXTS = {
    "inference_mode": inference,
    "no_grad": torch.no_grad,
    "enable_grad": torch.enable_grad,
    "autocast_bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "default_device_meta": lambda: torch.device("meta"),
    "default_dtype": lambda: _default_dtype(torch.float64),
    "deterministic": lambda: _deterministic(),
}


@contextlib.contextmanager
def _default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


@contextlib.contextmanager
def _deterministic():
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_forward_reload_in_context_restores_ordinary_tensors(setup, context):
    model, mid, mgr, params = setup
    x = torch.randn(4, 6)
    before = describe(model)
    unload(mgr, mid)
    with CONTEXTS[context]():
        if context == "default_device_meta":
            model.a.weight  # a read of the weights reloads it too
        else:
            model(x)
    assert mgr.tracker.guard(model).state == "resident"
    same(describe(model), before)
    assert [id(p) for p in model.parameters()] == params
    # and training works afterwards (no inference tensors were saved)
    model.train()
    loss = model(x).sum()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_reload_inside_torch_func_grad_and_vmap(setup):
    model, mid, mgr, params = setup
    x = torch.randn(4, 6)
    before = describe(model)
    detached = {k: v.detach() for k, v in model.named_parameters()}
    expected = torch.func.grad(lambda p: torch.func.functional_call(model, p, (x,)).sum())(
        detached)
    unload(mgr, mid)
    grads = torch.func.grad(lambda p: torch.func.functional_call(model, p, (x,)).sum())(detached)
    assert all(torch.equal(grads[k], expected[k]) for k in expected)
    same(describe(model), before)
    unload(mgr, mid)
    out = torch.vmap(model)(x.unsqueeze(1))
    assert out.shape == (4, 1, 3)
    same(describe(model), before)


def test_reload_while_jit_trace_records_is_not_in_the_trace(setup):
    model, mid, mgr, params = setup
    x = torch.randn(4, 6)
    ref = model(x)
    unload(mgr, mid)
    traced = torch.jit.trace(model, (x,), check_trace=False)
    assert torch.equal(traced(x), ref)
    kinds = {n.kind() for n in traced.inlined_graph.nodes()}
    assert not kinds & {"aten::set_", "aten::copy_", "aten::empty"}, kinds
    # its weights are the model's own: the model is never moved again
    info = next(i for i in mgr.tracker.models([], mgr.annotate) if i["id"] == mid)
    assert info["unload_blocker"] == "TorchScript"
