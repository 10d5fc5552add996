"""Attention sized as a GPU runs it, on fake CPU tensors.

``scaled_dot_product_attention`` picks a different kernel on a GPU than on the
CPU, and the kernels differ in what they keep for the backward: the fused
ones (flash, memory-efficient, cuDNN) keep the output and one float32
log-sum-exp per query row, the math fallback keeps the whole
``batch × heads × queries × keys`` score matrix (and, with dropout, its mask).
On a real step that difference is gigabytes: GPT-2 (dropout 0.1) trained at
8 × 512 tokens in float32 peaks at 9.1 GiB on an H200, where the CPU's math
path would hold 12.4 GiB.

:func:`gpu_attention` holds around the fake step.  It chooses the kernel as
PyTorch's CUDA dispatcher does on an sm80+ GPU (``select_sdp_backend`` in
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``):

* flash (and cuDNN, which keeps the same): float16 / bfloat16, no attention
  mask, head size up to 256; takes dropout and grouped-query attention;
* memory-efficient: float32 too, masks and dropout; grouped-query attention
  (``enable_gqa`` with fewer KV heads) only from PyTorch 2.14 — with 2.11 an
  H200 ran a float32 Llama with GQA on the math kernel, as its peak shows;
* math otherwise: the real op under ``SDPBackend.MATH``.

A fused kernel is stood in for by :class:`_FusedAttention`, which allocates
what the kernel allocates (output and log-sum-exp forward; the three
gradients and the row sums backward) and computes nothing: fake tensors hold
no values.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The PyTorch version whose memory-efficient kernel takes grouped-query attention.
GQA_EFFICIENT_FROM = (2, 14)
#: The largest head size the fused kernels take.
FUSED_HEAD_DIM_MAX = 256


def _version() -> tuple[int, int]:
    import torch

    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def gpu_kernel(q: Any, k: Any, v: Any, attn_mask: Any, enable_gqa: bool) -> str:
    """"flash", "efficient" or "math": the kernel a CUDA GPU picks for these inputs."""
    import torch

    grouped = enable_gqa and k.dim() >= 3 and k.shape[-3] != q.shape[-3]
    if q.shape[-1] > FUSED_HEAD_DIM_MAX or k.shape[-1] != q.shape[-1]:
        return "math"
    if q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None:
        return "flash"
    if grouped and _version() < GQA_EFFICIENT_FROM:
        return "math"
    return "efficient"


def _fused_function() -> Any:
    import torch

    class _FusedAttention(torch.autograd.Function):
        """The memory of a fused attention kernel: output and log-sum-exp kept."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, bias: Any) -> Any:
            out = q.new_empty((*q.shape[:-1], v.shape[-1]))
            lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse, bias)
            return out

        @staticmethod
        def backward(ctx: Any, *_grad_out: Any) -> tuple[Any, Any, Any, Any]:
            q, k, v, _out, lse, bias = ctx.saved_tensors
            row_sums = torch.empty_like(lse)  # the kernel's dot(grad_out, out) per row
            grad_q = torch.empty_like(q)
            if k.shape[-3] != q.shape[-3]:  # grouped: per query head, then summed per group
                groups = q.shape[-3] // k.shape[-3]
                wide_k = k.new_empty((*k.shape[:-3], q.shape[-3], *k.shape[-2:]))
                wide_v = v.new_empty((*v.shape[:-3], q.shape[-3], *v.shape[-2:]))
                grad_k = wide_k.unflatten(-3, (k.shape[-3], groups)).sum(-3)
                grad_v = wide_v.unflatten(-3, (v.shape[-3], groups)).sum(-3)
                del wide_k, wide_v
            else:
                grad_k, grad_v = torch.empty_like(k), torch.empty_like(v)
            # A learned bias (T5's relative positions) gets its gradient, as the
            # memory-efficient kernel gives it one.
            grad_bias = torch.empty_like(bias) if ctx.needs_input_grad[3] else None
            del row_sums
            return grad_q, grad_k, grad_v, grad_bias

    return _FusedAttention


_PATCH_LOCK = threading.Lock()


@contextmanager
def gpu_attention() -> Iterator[None]:
    """Inside, ``torch.nn.functional.scaled_dot_product_attention`` is sized as a GPU's
    kernels run it.  The function itself is replaced for the while (one estimate at a
    time, under a lock), so that a checkpointed block's recomputation in the backward
    takes the same path as its forward."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    functional = torch.nn.functional
    sdpa = functional.scaled_dot_product_attention
    fused = _fused_function()

    def as_on_a_gpu(q: Any, k: Any, v: Any, attn_mask: Any = None, *args: Any,
                    **kwargs: Any) -> Any:
        kernel = gpu_kernel(q, k, v, attn_mask, bool(kwargs.get("enable_gqa", False)))
        if kernel == "math":
            with sdpa_kernel([SDPBackend.MATH]):
                return sdpa(q, k, v, attn_mask, *args, **kwargs)
        bias = attn_mask if attn_mask is not None and attn_mask.is_floating_point() else None
        return fused.apply(q, k, v, bias if bias is not None else q.new_empty(0))

    with _PATCH_LOCK:
        functional.scaled_dot_product_attention = as_on_a_gpu  # type: ignore[assignment]
        try:
            yield
        finally:
            functional.scaled_dot_product_attention = sdpa


#: What the estimate says about attention.
ATTENTION_LIMIT = ("Attention is sized as PyTorch's CUDA kernels run it on an Ampere or newer "
                   "GPU (flash or memory-efficient: the output kept, not the score matrix; "
                   "the math kernel where those do not apply); an older GPU, or one with "
                   "those kernels turned off, keeps the whole score matrix.")
