"""torch.compile, torch.jit.script and optimizers, with an agent in the process."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from app.agent import guard


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 7)
        self.b = nn.Linear(7, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


@pytest.fixture(autouse=True)
def _cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def offloaded(live, model):
    live.refresh()
    mid = live.tracker.model_id(model)
    ev = live.manager.handle_unload({"model": mid, "to": "disk"})
    assert ev["ok"] and live.tracker.guard(model).state == "offloaded"
    return mid


@pytest.mark.parametrize("how", ["torch.compile", "fullgraph", "module.compile", "closure"])
def test_compiling_an_offloaded_model_brings_it_back_then_refuses_to_move_it(live, how):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(3, 5)
    ref = model(x)
    mid = offloaded(live, model)
    if how == "torch.compile":
        fn = torch.compile(model, backend="eager")
    elif how == "fullgraph":
        fn = torch.compile(model, backend="eager", fullgraph=True)
    elif how == "module.compile":
        model.compile(backend="eager")
        fn = model
    else:
        fn = torch.compile(lambda t: model(t) * 2, backend="eager")
        ref = ref * 2
    assert torch.equal(fn(x), ref)
    assert live.tracker.guard(model).state == "resident"
    with pytest.raises(Exception, match="torch.compile"):
        live.manager.handle_unload({"model": mid, "to": "disk", "force": True})
    assert torch.equal(fn(x), ref)


def test_jit_script_lifts_the_same_hooks_and_puts_them_back(live):
    model = Net().eval()
    x = torch.randn(2, 5)
    live.refresh()
    before = {n: (list(m._forward_pre_hooks.values()), list(m._forward_hooks.values()))
              for n, m in model.named_modules()}
    scripted = torch.jit.script(model)  # TorchScript rejects Python hooks: lifted meanwhile
    assert torch.equal(scripted(x), model(x))
    after = {n: (list(m._forward_pre_hooks.values()), list(m._forward_hooks.values()))
             for n, m in model.named_modules()}
    assert after == before  # the very same hook objects
    info = next(i for i in live.listed() if i["id"] == live.tracker.model_id(model))
    assert info["unload_blocker"] == "TorchScript"
    with pytest.raises(Exception):  # TorchScript's own errors still reach the caller
        torch.jit.script(lambda: undefined_name)  # noqa: F821


def test_jit_script_of_an_offloaded_model_scripts_its_real_weights(live):
    model = Net().eval()
    x = torch.randn(2, 5)
    ref = model(x)
    offloaded(live, model)
    scripted = torch.jit.script(model)
    assert live.tracker.guard(model).state == "resident"
    assert torch.equal(scripted(x), ref)


def test_the_optimizer_step_hook_is_registered_once_and_costs_no_behaviour(live):
    from torch.optim import optimizer as optim_module
    ours = [h for h in optim_module._global_optimizer_post_hooks.values()
            if getattr(h, "__name__", "") == "step_hook"]
    assert len(ours) == 1
    model = nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.detach().clone()
    opt.step()
    assert not torch.equal(model.weight, before)
    assert opt in live.manager.steps._stepped


def test_a_slot_pickles_to_nothing_and_loads_without_an_agent(live):
    import pickle
    model = Net()
    hooks = list(model._forward_pre_hooks.values())
    assert any(isinstance(h, guard._PreHook) for h in hooks)
    restored = pickle.loads(pickle.dumps(model))
    assert all(not isinstance(h, guard._PreHook) for h in restored._forward_pre_hooks.values())
    assert torch.equal(restored(torch.ones(1, 5)), model(torch.ones(1, 5)))
