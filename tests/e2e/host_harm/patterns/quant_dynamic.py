"""Dynamic quantization (``quantize_dynamic``, qint8 and float16) of a model
that stays in use beside its float original.

``quantize_dynamic`` copies the model and packs the copy's Linear weights in
torch's own objects: the agent lists the copies with those weights and
refuses to unload them, force or not, while the float original is unloaded
between uses, once right before a copy is made of it (the copying reads its
weights, so it comes back first).  Outputs and the packed weights are
recorded exactly before and after every pause.
"""

import torch
import zoo
from torch import nn

DTYPES = (("qint8", torch.qint8), ("float16", torch.float16))


def packed_weights(model: nn.Module) -> dict:
    """Each packed Linear's weight and bias, unpacked (integers and scale for qint8)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.ao.nn.quantized.dynamic.Linear):
            w, b = m._weight_bias()
            weight = [w.int_repr(), w.dequantize()] if w.is_quantized else w
            out[name] = [weight, b]
    return out


def use(ctx, tag: str, model: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        ctx.record(f"{tag}: output", model(x))
        ctx.record(f"{tag}: other input", model(x * 2 - 1))


def run(ctx) -> None:
    model = zoo.mlp()
    x = zoo.inputs(4, 16)
    ctx.step("loaded")
    use(ctx, "float", model, x)

    copies = {}
    for name, dtype in DTYPES:
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=dtype)
        copies[name] = quantized
        use(ctx, f"{name}", quantized, x)  # used last: the MLP the steps below name
        ctx.record(f"{name}: packed weights", packed_weights(quantized))
        ctx.step(f"{name} idle", unload=["MLP"], expect="refused")
        ctx.step(f"{name} idle, forced", unload=["MLP"], expect="refused", force=True)
        use(ctx, f"{name} after the pauses", quantized, x)
        ctx.record(f"{name}: packed weights after the pauses", packed_weights(quantized))

        use(ctx, f"float beside {name}", model, x)  # the float original, used last now
        # left offloaded after the qint8 copy: the float16 copy reads it back
        ctx.step(f"float beside {name} idle", unload=["MLP"], reload=name == "float16",
                 expect="unloaded")
        use(ctx, f"float beside {name} after the pause", model, x)

    for name, quantized in copies.items():
        use(ctx, f"{name} at the end", quantized, x)
    ctx.record("float parameters", dict(model.named_parameters()))
