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
    with torch.no_grad():  # an eval model used for inference (autograd on is training evidence)
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
    with torch.no_grad():
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


def helper_for_a_scripted_class(x: int) -> int:
    return x + 1


def test_jit_script_of_a_class_still_resolves_names_where_it_was_called(live):
    assert getattr(torch.jit.script, "_vram_steward_original", None) is not None

    @torch.jit.script
    class Pair:
        def __init__(self, a: int):
            self.a = helper_for_a_scripted_class(a)

    @torch.jit.script
    def make(a: int) -> int:
        return Pair(a).a

    assert make(1) == 2


def test_importing_torch_distributed_optim_under_the_agent(tmp_path):
    """It scripts TorchScript classes at import (ZeroRedundancyOptimizer users)."""
    import subprocess
    import sys

    from .conftest import agent_env, short_tmpdir

    code = ("import torch, vram_steward_agent, time; assert vram_steward_agent.is_running(); "
            "from torch.distributed.optim import ZeroRedundancyOptimizer; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], env=agent_env(short_tmpdir()),
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def user_pre_hook(module, args):
    return None


def test_a_model_saved_whole_loads_without_the_agents_hook_and_scripts(live, tmp_path):
    import io
    model = Net().eval()
    assert any(isinstance(h, guard._PreHook) for h in model._forward_pre_hooks.values())
    user_hook = model.register_forward_pre_hook(user_pre_hook)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    hooks = list(loaded._forward_pre_hooks.values())
    assert len(hooks) == 1 and not isinstance(hooks[0], guard._PreHook)  # the user's stays
    assert type(loaded._forward_pre_hooks).__name__ == "OrderedDict"
    user_hook.remove()
    assert not any(not isinstance(h, guard._PreHook) for h in model._forward_pre_hooks.values())
    loaded._forward_pre_hooks.clear()  # (TorchScript wants an annotated hook)
    x = torch.ones(2, 5)
    assert torch.equal(torch.jit.script(loaded)(x), model(x))
    assert torch.equal(torch.compile(loaded, backend="eager", fullgraph=True)(x), model(x))


def test_a_model_with_pre_hooks_of_its_own_before_start_gets_no_agent_hook():
    """A handle the user holds must keep removing the user's hook: the agent
    does not replace a hook dict that already has hooks in it."""
    from app.agent import models as models_mod

    model = Net()
    handle = model.register_forward_pre_hook(lambda m, args: None)
    tracker = models_mod.ModelTracker()
    tracker.use_torch(torch)
    tracker.placement.attach_existing(list(model.modules()))
    assert guard.slot_of(model) is None
    handle.remove()
    assert not model._forward_pre_hooks
    tracker.refresh(torch)
    info = [i for i in tracker.models([]) if i["class"].endswith(".Net")]
    assert info  # still listed


def test_a_model_called_while_a_cuda_graph_is_captured_is_never_moved(live):
    model = Net().eval()
    live.refresh()
    checks = live.tracker.placement.checks
    old = checks.capturing
    checks.capturing = lambda: True  # as torch._C._cuda_isCurrentStreamCapturing during capture
    try:
        with torch.no_grad():
            model(torch.ones(1, 5))
    finally:
        checks.capturing = old
    info = next(i for i in live.listed() if i["id"] == live.tracker.model_id(model))
    assert info["unload_blocker"] == "CUDA graph" and info["idle_since"] is None
