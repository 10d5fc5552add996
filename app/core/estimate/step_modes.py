"""The mode of a step, applied to a module: its dtype, gradient checkpointing,
LoRA, and the optimizer, as a training script would set them up.

A fake module cannot go through ``Module.to`` (PyTorch swaps fake parameters
in place, which the fake-tensor mode's own references forbid), so the
conversions here make new parameters instead, and a fake module is moved to
the meta device for them (:func:`to_meta`) and back (:func:`to_fake`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.estimate.optional import need
from app.core.estimate.types import EstimateError

#: The attention projections of diffusers' UNets, where LoRA adapters go.
UNET_LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def active_fake_mode() -> Any:
    """The ``FakeTensorMode`` in effect, or None."""
    from torch._guards import active_fake_mode as active

    return active()


def real_tensors() -> Any:
    """A context where new tensors are real again (the fake mode set aside)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


def _replace_tensors(module: Any, convert: Callable[[Any], Any | None]) -> None:
    """Every parameter, buffer and tensor attribute of ``module`` through ``convert``
    (None: keep); a tensor shared by several places stays shared."""
    import torch

    memo: dict[int, Any] = {}
    keep: list[Any] = []  # the old tensors stay alive until the end, so ids stay unique

    def new(t: Any, parameter: bool) -> Any:
        if id(t) not in memo:
            keep.append(t)
            value = convert(t)
            if value is not None and parameter:
                value = torch.nn.Parameter(value, requires_grad=t.requires_grad)
            memo[id(t)] = value
        return memo[id(t)]

    for mod in module.modules():
        for name, p in list(mod._parameters.items()):
            if p is not None and (value := new(p, True)) is not None:
                mod._parameters[name] = value
        for name, b in list(mod._buffers.items()):
            if b is not None and (value := new(b, False)) is not None:
                mod._buffers[name] = value
        for name, v in list(vars(mod).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) \
                    and name not in ("_parameters", "_buffers") \
                    and (value := new(v, False)) is not None:
                setattr(mod, name, value)


def to_meta(module: Any) -> None:
    """Fake parameters and buffers to meta tensors of the same shape and dtype."""
    import torch

    def convert(t: Any) -> Any:
        if t.is_meta:
            return None
        with torch.no_grad():
            return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")

    _replace_tensors(module, convert)


def to_fake(module: Any) -> None:
    """Meta tensors to fake CPU tensors (under the active ``FakeTensorMode``)."""
    import torch

    def convert(t: Any) -> Any:
        if not t.is_meta:
            return None
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="cpu")

    _replace_tensors(module, convert)


def torch_dtype(name: str) -> Any:
    import torch

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in dtypes:
        raise EstimateError(f"unknown dtype {name!r}: one of {', '.join(dtypes)}")
    return dtypes[name]


def cast(module: Any, dtype_name: str) -> None:
    """Floating-point parameters and buffers to ``dtype_name`` (what ``module.to(dtype)`` does)."""
    import torch

    dtype = torch_dtype(dtype_name)

    def convert(t: Any) -> Any:
        if not t.is_floating_point() or t.dtype == dtype:
            return None
        with torch.no_grad():
            return t.detach().to(dtype)

    _replace_tensors(module, convert)


def enable_checkpointing(module: Any) -> list[str]:
    """Gradient checkpointing the model's own way; a limits sentence where it has none."""
    for name in ("activation_checkpointing_enable", "gradient_checkpointing_enable",
                 "enable_gradient_checkpointing"):
        method = getattr(module, name, None)
        if callable(method) and _supports_checkpointing(module):
            method()
            return []
    return [f"{type(module).__name__} has no gradient checkpointing of its own: "
            f"the step ran without it."]


def _supports_checkpointing(module: Any) -> bool:
    for flag in ("supports_gradient_checkpointing", "_supports_gradient_checkpointing"):
        value = getattr(module, flag, None)
        if value is not None:
            return bool(value)
    return True


def add_lora(module: Any, rank: int, class_name: str) -> Any:
    """LoRA adapters of rank ``rank`` on every linear layer (a UNet: its attention
    projections), the base weights frozen."""
    peft = need("peft")
    if rank < 1:
        raise EstimateError(f"the LoRA rank must be 1 or more, not {rank}")
    targets: Any = UNET_LORA_TARGETS if class_name.startswith("UNet") else "all-linear"
    try:
        config = peft.LoraConfig(r=rank, lora_alpha=rank, target_modules=targets)
        if class_name.startswith("UNet"):
            module.requires_grad_(False)
            return peft.inject_adapter_in_model(config, module)
        return peft.get_peft_model(module, config)
    except Exception as exc:
        raise EstimateError(f"LoRA cannot be added to {class_name}: {exc}") from exc


def make_optimizer(module: Any, name: str) -> Any:
    """The optimizer over the trainable parameters, with PyTorch's CUDA defaults
    (the multi-tensor ``foreach`` implementation)."""
    import torch

    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise EstimateError("nothing to train: no parameter requires a gradient")
    optim = torch.optim
    makers: dict[str, Callable[[], Any]] = {
        "adamw": lambda: optim.AdamW(params, lr=1e-4, foreach=True),
        "adam": lambda: optim.Adam(params, lr=1e-4, foreach=True),
        "sgd": lambda: optim.SGD(params, lr=1e-3, foreach=True),
        "sgd-momentum": lambda: optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True),
        "adafactor": lambda: optim.Adafactor(params, lr=1e-2, foreach=True),
    }
    if name not in makers:
        raise EstimateError(f"unknown optimizer {name!r}: one of {', '.join(makers)}")
    return makers[name]()


def state_bytes_per_param(name: str, param: Any) -> int:
    """The optimizer state one parameter gets (a lower bound where the step cannot run)."""
    nbytes = param.numel() * param.element_size()
    if name in ("adamw", "adam"):
        return 2 * nbytes
    if name == "sgd-momentum":
        return nbytes
    if name == "adafactor":
        if param.dim() < 2:
            return nbytes
        shape = tuple(param.shape)
        rows = shape[-2] * _prod(shape[:-2])
        cols = shape[-1] * _prod(shape[:-2])
        return (rows + cols) * param.element_size()
    return 0


def _prod(values: tuple[int, ...]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def batch_to(batch: Any, device: str) -> Any:
    """The batch with every tensor on ``device``."""
    return map_tensors(batch, lambda t: t.to(device))


def scale_batch(batch: Any, factor: int) -> Any:
    """The batch ``factor`` times as large: every tensor repeated along its first dimension."""
    def grow(t: Any) -> Any:
        if t.dim() == 0:
            return t
        return t.repeat(factor, *([1] * (t.dim() - 1)))

    return map_tensors(batch, grow)


def map_tensors(batch: Any, fn: Callable[[Any], Any]) -> Any:
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, fn, batch)


def tensors_of(batch: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(batch) if isinstance(t, torch.Tensor)]
