"""Eligibility from evidence of training, never from ``requires_grad``."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from app.agent import eligibility


@pytest.fixture(autouse=True)
def _gpu(monkeypatch, tmp_path):
    # The idle timer and the pressure policy act on GPU models; CI has no GPU.
    monkeypatch.setattr(eligibility, "on_gpu", lambda m, g: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def tiny_gpt2(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "gpt2")
    return transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2")


def entry(live, model):
    listed = live.listed()
    mid = live.tracker.model_id(model)
    return next(i for i in listed if i["id"] == mid)


def test_from_pretrained_model_in_eval_unloads_without_force_and_comes_back(live, tmp_path):
    model = tiny_gpt2(tmp_path)
    assert not model.training and all(p.requires_grad for p in model.parameters())
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=4, do_sample=False)
    info = entry(live, model)
    assert info["requires_grad"] is True
    assert (info["training_evidence"], info["unload_blocker"], info["auto_unload_blocker"]) == (
        None, None, None)
    ev = live.manager.handle_unload({"model": info["id"]})
    assert ev["ok"] and ev["state"] == "offloaded"
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert torch.equal(out, ref)
    assert all(not p.is_inference() and p.requires_grad for p in model.parameters())
    # and it trains afterwards
    model.train()
    loss = model(ids, labels=ids).loss
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()


def test_the_idle_timer_and_the_pressure_policy_pick_it(live, tmp_path):
    model = tiny_gpt2(tmp_path)
    with torch.no_grad():
        model(torch.tensor([[1, 2]]))
    mid = entry(live, model)["id"]
    time.sleep(0.05)
    assert live.manager.idle.candidates(0.04) == [mid]
    assert live.manager.handle_unload({"model": mid, "reason": "pressure"})["ok"]


def test_a_model_never_called_is_idle_since_first_seen(live):
    model = nn.Linear(3, 3).eval()
    info = entry(live, model)
    assert info["last_used"] is None and info["idle_since"] == info["first_seen"]
    time.sleep(0.05)
    assert live.manager.idle.candidates(0.04) == [info["id"]]


def test_train_mode_is_training_and_force_overrides_it_for_manual_unloads_only(live):
    model = nn.Linear(3, 3)  # train mode by default
    info = entry(live, model)
    assert info["training_evidence"] == "train mode"
    assert info["auto_unload_blocker"] == "train mode"
    with pytest.raises(Exception, match="train mode.*force"):
        live.manager.handle_unload({"model": info["id"]})
    with pytest.raises(Exception, match="train mode"):
        live.manager.handle_unload({"model": info["id"], "reason": "pressure"})
    assert live.manager.handle_unload({"model": info["id"], "force": True})["ok"]


def test_gradients_optimizer_steps_and_backward_are_evidence(live, monkeypatch):
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4)).sum().backward()
    model.eval()  # an eval() between steps does not hide the evidence
    assert entry(live, model)["training_evidence"] == "gradients present"
    opt.step()
    opt.zero_grad(set_to_none=True)
    live.tracker.invalidate(model)
    evidence = entry(live, model)["training_evidence"]
    assert evidence.startswith("optimizer step ") and evidence.endswith(" s ago")
    # a backward seen by the agent's tick counts for the window too
    monkeypatch.setattr(eligibility, "TRAINING_WINDOW_S", 0.2)
    time.sleep(0.25)
    live.tracker.invalidate(model)
    assert entry(live, model)["training_evidence"] is None
    model(torch.ones(2, 4)).sum().backward()
    live.manager.tick()
    model.zero_grad(set_to_none=True)
    live.tracker.invalidate(model)
    assert entry(live, model)["training_evidence"].startswith("backward ")
    time.sleep(0.25)
    assert entry(live, model)["training_evidence"] is None


def test_an_optimizer_of_another_model_is_no_evidence(live):
    trained, served = nn.Linear(2, 2), nn.Linear(2, 2).eval()
    opt = torch.optim.Adam(trained.parameters())
    trained(torch.ones(1, 2)).sum().backward()
    opt.step()
    assert entry(live, served)["training_evidence"] is None


def test_requires_grad_false_or_true_makes_no_difference(live):
    a, b = nn.Linear(3, 3).eval(), nn.Linear(3, 3).eval()
    b.requires_grad_(False)
    ia, ib = entry(live, a), entry(live, b)
    assert (ia["requires_grad"], ib["requires_grad"]) == (True, False)
    assert ia["auto_unload_blocker"] is None and ib["auto_unload_blocker"] is None


def test_a_fake_weight_is_refused_without_running_an_op_in_its_mode():
    """``torch.export`` swaps fake tensors in for the weights while it traces.  The agent,
    asked about them from its own thread, must not read ``.data``: that runs ``detach``
    in the export's fake mode from a second thread and breaks the user's trace."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from app.agent.figures import why_unmovable

    mode = FakeTensorMode()
    weight = mode.from_tensor(torch.ones(4, 4))
    ran = []

    class Watch(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ran.append(func)
            return func(*args, **(kwargs or {}))

    with Watch():
        why = why_unmovable(weight)
    assert why == "tensor subclasses (FakeTensor)"
    assert ran == []
    assert why_unmovable(nn.Parameter(torch.ones(2))) is None
