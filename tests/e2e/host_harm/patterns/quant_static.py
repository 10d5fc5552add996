"""Static quantization: ``prepare``, a calibration with real observers (the
x86 qconfig), ``convert``; the quantized model then used beside the float one.

``prepare`` and ``convert`` each copy the model.  The float model and the
prepared copy are unloaded between steps (preparing and converting read
their weights, so they come back first); the converted model, whose weights
torch keeps packed, is listed and refused any unload.  Outputs, observer
statistics and the packed weights are recorded exactly.
"""

import torch
import zoo
from torch import nn

quantization = torch.ao.quantization


class QuantNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = quantization.QuantStub()
        self.conv = nn.Conv2d(3, 8, 3)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(8 * 6 * 6, 10)
        self.dequant = quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv(self.quant(x)))
        return self.dequant(self.fc(x.flatten(1)))


def packed_weights(model: nn.Module) -> dict:
    out = {}
    for name in ("conv", "fc"):
        w, b = getattr(model, name)._weight_bias()
        out[name] = [w.int_repr(), w.dequantize(), b]
    return out


def run(ctx) -> None:
    zoo.seed_all(0)
    model = QuantNet().eval()
    x = zoo.inputs(2, 3, 8, 8)
    calibration = zoo.inputs(16, 3, 8, 8, seed=3)
    ctx.step("loaded")
    with torch.no_grad():
        ctx.record("float", model(x))

    model.qconfig = quantization.get_default_qconfig("x86")
    ctx.step("float idle", unload=["QuantNet"], expect="unloaded")
    prepared = quantization.prepare(model)
    with torch.no_grad():
        ctx.record("calibration", prepared(calibration))
    ctx.record("observers", dict(prepared.named_buffers()))
    ctx.step("calibrated", unload=["QuantNet"], expect="unloaded")  # the prepared copy

    converted = quantization.convert(prepared)
    with torch.no_grad():
        ctx.record("quantized", converted(x))
        ctx.record("quantized, other input", converted(x * 2 - 1))
    ctx.record("packed weights", packed_weights(converted))
    ctx.step("quantized idle", unload=["QuantNet"], expect="refused")
    ctx.step("quantized idle, forced", unload=["QuantNet"], expect="refused", force=True)
    with torch.no_grad():
        ctx.record("quantized after the pauses", converted(x))
    ctx.record("packed weights after the pauses", packed_weights(converted))

    with torch.no_grad():
        ctx.record("float again", model(x))
    ctx.step("float idle again", unload=["QuantNet"], reload=True, expect="unloaded")
    with torch.no_grad():
        ctx.record("float at the end", model(x))
        ctx.record("quantized at the end", converted(x))
    ctx.record("float parameters", dict(model.named_parameters()))
