"""Quantized models (torch.ao dynamic and static): listed with their packed
weights, hooked like any model, and refused an unload that changes nothing."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from app.agent import eligibility, guard, packed, protocol
from app.agent.errors import ActionError
from app.core.agents.unload_reasons import overridable, refuses_any_unload

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::UserWarning")

quantization = torch.ao.quantization


class MLP(nn.Module):
    """A LayerNorm(256) (512 parameters, 2,048 B) and two Linears to quantize."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(256)
        self.a = nn.Linear(256, 32)
        self.b = nn.Linear(32, 8, bias=False)

    def forward(self, x):
        return self.b(torch.relu(self.a(self.norm(x))))


class Convs(nn.Module):
    """Statically quantized through prepare / convert."""

    def __init__(self):
        super().__init__()
        self.quant = quantization.QuantStub()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.dequant = quantization.DeQuantStub()

    def forward(self, x):
        x = torch.relu(self.conv(self.quant(x)))
        return self.dequant(self.fc(x.flatten(1)))


def entries(live, cls):
    return [i for i in live.listed() if i["class"].rsplit(".", 1)[-1] == cls]


def entry_of(live, model):
    listed = live.listed()
    mid = live.tracker.model_id(model)
    return next(i for i in listed if i["id"] == mid)


def linear_figures(model, weight_bytes):
    """(params, bytes) of the model's float parameters and its packed Linears,
    read from torch (``_weight_bias()``); ``weight_bytes`` per packed weight."""
    params = sum(p.numel() for p in model.parameters())
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    for m in model.modules():
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            w, b = m._weight_bias()
            params += w.numel() + (b.numel() if b is not None else 0)
            nbytes += w.numel() * weight_bytes + (b.numel() * 4 if b is not None else 0)
    return params, nbytes


def snapshot(model):
    """Every weight of a quantized model, packed ones unpacked, as exact bytes."""
    out = {n: p.detach().clone() for n, p in model.state_dict().items()
           if isinstance(p, torch.Tensor)}
    return {n: (t.int_repr(), t.q_per_channel_scales() if t.qscheme() in (
        torch.per_channel_affine, torch.per_channel_symmetric) else t.q_scale())
            if t.is_quantized else t for n, t in out.items()}


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, tuple):
            assert torch.equal(x[0], y[0]), k
            assert (torch.equal(x[1], y[1]) if isinstance(x[1], torch.Tensor)
                    else x[1] == y[1]), k
        else:
            assert torch.equal(x, y), k


@pytest.mark.parametrize("dtype, weight_bytes", [(torch.qint8, 1), (torch.float16, 2)])
def test_a_dynamic_quantized_model_is_listed_with_its_packed_weights(live, dtype, weight_bytes):
    torch.manual_seed(0)
    model = quantization.quantize_dynamic(MLP().eval(), {nn.Linear}, dtype=dtype)
    model(torch.randn(2, 256))  # a copy: the agent meets it at its first call
    [info] = entries(live, "MLP")
    params, nbytes = linear_figures(model, weight_bytes)
    assert (info["params"], info["param_bytes"]) == (params, nbytes)
    assert params == 512 + 256 * 32 + 32 + 32 * 8 and nbytes > 2048
    assert info["bytes_by_device"] == {"cpu": {"params": nbytes, "buffers": 0}}
    name = str(dtype).replace("torch.", "")
    assert info["quantized"] == name and info["dtype"] == "mixed"  # float32 LayerNorm too
    assert info["unload_blocker"] == ("quantized packed weights "
                                      "(torch.ao dynamic quantization)")


def test_a_static_quantized_model_is_listed_once_and_carries_its_hook(live):
    torch.manual_seed(0)
    model = Convs().eval()
    model.qconfig = quantization.get_default_qconfig("x86")
    prepared = quantization.prepare(model)
    prepared(torch.randn(8, 3, 8, 8))  # calibration: the observers see real data
    converted = quantization.convert(prepared)
    del model, prepared
    gc.collect()
    # convert built quantized layers into a copy not called yet: none is a model
    assert [i["class"] for i in live.listed()] == []
    converted(torch.randn(1, 3, 8, 8))
    [info] = entries(live, "Convs")
    w, b = converted.conv._weight_bias()
    fw, fb = converted.fc._weight_bias()
    assert info["params"] == w.numel() + b.numel() + fw.numel() + fb.numel()
    assert info["param_bytes"] == w.numel() + fw.numel() + 4 * (b.numel() + fb.numel())
    assert info["dtype"] == info["quantized"] == "qint8"
    assert info["unload_blocker"] == ("quantized packed weights "
                                      "(torch.ao static quantization)")
    g = live.tracker.guard(converted)
    assert guard.slot_of(converted).guard is g and g.last_used is not None
    before = g.last_used
    converted(torch.randn(1, 3, 8, 8))
    assert g.last_used > before


def test_a_dynamic_lstm_counts_every_packed_gate(live):
    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 16, num_layers=2)

        def forward(self, x):
            return self.rnn(x)[0]

    torch.manual_seed(0)
    model = quantization.quantize_dynamic(Tagger().eval(), {nn.LSTM}, dtype=torch.qint8)
    model(torch.randn(3, 1, 8))
    [info] = entries(live, "Tagger")
    wb = model.rnn._weight_bias()
    weights, biases = list(wb["weight"].values()), list(wb["bias"].values())
    assert info["params"] == sum(t.numel() for t in weights + biases)
    assert info["param_bytes"] == sum(w.numel() for w in weights) + 4 * sum(
        b.numel() for b in biases)


@pytest.mark.parametrize("build", ["dynamic", "static"])
def test_an_unload_of_a_quantized_model_is_refused_force_or_not_and_moves_nothing(live, build):
    torch.manual_seed(0)
    if build == "dynamic":
        model = quantization.quantize_dynamic(MLP().eval(), {nn.Linear}, dtype=torch.qint8)
        x = torch.randn(4, 256)
    else:
        model = Convs().eval()
        model.qconfig = quantization.get_default_qconfig("x86")
        quantization.prepare(model, inplace=True)
        model(torch.randn(8, 3, 8, 8))
        quantization.convert(model, inplace=True)
        x = torch.randn(2, 3, 8, 8)
    ref, weights = model(x), snapshot(model)
    info = entry_of(live, model)
    for force in (False, True):
        with pytest.raises(ActionError) as err:
            live.manager.handle_unload({"model": info["id"], "force": force, "to": "disk"})
        assert err.value.code == protocol.REFUSED
        reason = str(err.value)
        assert reason.startswith("holds quantized packed weights (torch.ao %s quantization): "
                                 % build) and eligibility.PACKED_REFUSAL in reason
        assert refuses_any_unload(reason) and not overridable(reason)
    assert live.tracker.guard(model).state == "resident"
    assert all(type(m.__dict__["_parameters"]) is dict for m in model.modules())
    assert torch.equal(model(x), ref)
    same(snapshot(model), weights)


def test_a_pack_is_measured_once_and_a_big_one_only_from_its_shape(live, monkeypatch):
    measured = []
    real = packed._from_state
    monkeypatch.setattr(packed, "_from_state", lambda p: measured.append(p) or real(p))
    torch.manual_seed(0)
    model = quantization.quantize_dynamic(MLP().eval(), {nn.Linear}, dtype=torch.qint8)
    model(torch.randn(2, 256))
    first = entries(live, "MLP")[0]["param_bytes"]
    assert len(measured) == 2
    live.tracker.invalidate(model)
    assert entries(live, "MLP")[0]["param_bytes"] == first and len(measured) == 2

    monkeypatch.setattr(packed, "MEASURE_MAX", 0)  # every Linear is "big" now
    big = quantization.quantize_dynamic(MLP().eval(), {nn.Linear}, dtype=torch.qint8)
    big(torch.randn(2, 256))
    info = entry_of(live, big)
    assert len(measured) == 2  # never unpacked
    assert info["params"] == 512 + 256 * 32 + 32 * 8  # weights only: biases left out
    assert info["param_bytes"] == 2048 + 256 * 32 + 32 * 8


def test_a_model_built_from_quantized_layers_gets_its_hook_as_it_is_built(live):
    nnq = torch.ao.nn.quantized

    class Direct(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = nnq.Quantize(0.05, 64, torch.quint8)
            self.fc = nnq.Linear(4, 4)  # its only weights: a pack
            self.dequant = nnq.DeQuantize()

        def forward(self, x):
            return self.dequant(self.fc(self.quant(x)))

    model = Direct()
    assert guard.slot_of(model) is not None and guard.slot_of(model.fc) is None
    model(torch.ones(1, 4))
    [info] = entries(live, "Direct")
    assert info["params"] == 4 * 4 + 4 and info["quantized"] == "qint8"
    assert info["last_used"] is not None
    assert info["unload_blocker"].startswith("quantized packed weights (torch.ao static")
