"""``module:function`` models through the fake step, and the honest lower
bound where fake tensors cannot follow a model's code."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from app.core.estimate.fake_step import estimate_step  # noqa: E402
from app.core.estimate.types import EstimateError, StepRequest  # noqa: E402
from tests.unit.core.estimate.fixtures import step_models  # noqa: E402

FIXTURES = "tests.unit.core.estimate.fixtures.step_models"


def _param_bytes(fn_name: str) -> int:
    module, _batch = getattr(step_models, fn_name)()
    return sum(p.numel() * p.element_size() for p in module.parameters())


@pytest.mark.parametrize("train", [False, True])
def test_a_function_model_is_stepped(train):
    est = estimate_step(StepRequest(f"{FIXTURES}:mlp", batch=8, train=train))
    weights = _param_bytes("mlp")
    assert est.exact and est.model_name == "Sequential"
    assert est.breakdown["weights"] == weights
    assert est.peak_bytes == sum(est.breakdown.values())
    assert "activations" in est.scales_with_batch or "temporaries" in est.scales_with_batch
    if train:
        assert est.breakdown["optimizer"] >= 2 * weights
        assert est.peak_phase == "optimizer step"  # a small MLP: the state outweighs the rest
        assert est.breakdown["gradients"] == weights
    else:
        assert est.breakdown["gradients"] == 0 and est.peak_phase == "forward"


def test_a_function_without_a_batch_argument_keeps_its_batch():
    est = estimate_step(StepRequest(f"{FIXTURES}:mlp_fixed", batch=8))
    assert any("takes no batch argument" in s for s in est.limits)
    assert est.scales_with_batch  # doubling its own batch is still measured


def test_a_module_returning_its_loss_trains_on_it():
    est = estimate_step(StepRequest(f"{FIXTURES}:scalar_loss", batch=4, train=True),
                        scaling=False)
    assert est.exact and est.breakdown["gradients"] == _param_bytes("scalar_loss")


@pytest.mark.parametrize("fn_name, op", [
    ("data_dependent", "aten.nonzero"),
    ("item_sized", ".item()"),
])
@pytest.mark.parametrize("train", [False, True])
def test_data_dependent_code_gives_a_lower_bound_naming_the_op(fn_name, op, train):
    est = estimate_step(StepRequest(f"{FIXTURES}:{fn_name}", batch=4, train=train))
    weights = _param_bytes(fn_name)
    assert est.exact is False and est.peak_phase is None and est.scales_with_batch == ()
    assert any(op in s for s in est.limits), est.limits
    assert any("lower bound" in s for s in est.limits)
    assert est.breakdown["weights"] == weights
    assert est.breakdown["activations"] == est.breakdown["temporaries"] == 0
    if train:  # AdamW: a gradient and two moments per parameter
        assert est.breakdown["gradients"] == weights
        assert est.breakdown["optimizer"] == 2 * weights
    assert est.peak_bytes == sum(est.breakdown.values()) <= est.reserved_bytes


@pytest.mark.parametrize("kw, says", [
    (dict(batch=0), "batch must be 1 or more"),
    (dict(dtype="float64"), "unknown dtype"),
    (dict(train=True, optimizer="lion"), "unknown optimizer"),
    (dict(seq=0), "--seq must be 1 or more"),
])
def test_bad_requests_say_why(kw, says):
    with pytest.raises(EstimateError) as err:
        estimate_step(StepRequest(f"{FIXTURES}:mlp", **kw))
    assert says in str(err.value)


def test_a_frozen_model_has_nothing_to_train(monkeypatch, tmp_path):
    (tmp_path / "frozen_models.py").write_text(
        "import torch\n"
        "def frozen(batch):\n"
        "    m = torch.nn.Linear(4, 4).requires_grad_(False)\n"
        "    return m, torch.randn(batch, 4)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(EstimateError) as err:
        estimate_step(StepRequest("frozen_models:frozen", train=True))
    assert "no parameter requires a gradient" in str(err.value)
