"""Attention sized as a GPU runs it: the kernel PyTorch's CUDA dispatcher picks,
and what each keeps for the backward, on fake tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from app.core.estimate.attention import (  # noqa: E402
    GQA_EFFICIENT_FROM,
    _version,
    gpu_attention,
    gpu_kernel,
)
from app.core.estimate.fake_step import estimate_step  # noqa: E402
from app.core.estimate.types import StepRequest  # noqa: E402


def qkv(dtype=torch.float32, heads=8, kv_heads=8, head_dim=64):
    q = torch.empty(2, heads, 128, head_dim, dtype=dtype)
    k = torch.empty(2, kv_heads, 128, head_dim, dtype=dtype)
    return q, k, k.clone()


def test_half_precision_without_a_mask_runs_flash_with_grouped_heads_too():
    assert gpu_kernel(*qkv(torch.bfloat16), None, False) == "flash"
    assert gpu_kernel(*qkv(torch.float16, kv_heads=2), None, True) == "flash"


def test_float32_and_masks_run_the_memory_efficient_kernel():
    q, k, v = qkv()
    assert gpu_kernel(q, k, v, None, False) == "efficient"
    mask = torch.zeros(128, 128, dtype=torch.bool)
    assert gpu_kernel(*qkv(torch.bfloat16), mask, False) == "efficient"


def test_grouped_float32_falls_back_to_math_before_the_version_that_takes_it():
    expected = "efficient" if _version() >= GQA_EFFICIENT_FROM else "math"
    assert gpu_kernel(*qkv(kv_heads=2), None, True) == expected


def test_head_sizes_past_the_fused_kernels_run_math():
    assert gpu_kernel(*qkv(torch.bfloat16, head_dim=512), None, False) == "math"


def test_the_fused_stand_in_keeps_the_output_not_the_scores_and_gives_gradients():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 4, 256, 32, requires_grad=True)
        k = torch.empty(2, 4, 256, 32, requires_grad=True)
        v = torch.empty(2, 4, 256, 32, requires_grad=True)
        with gpu_attention():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
        saved = {t.untyped_storage().nbytes() for t in out.grad_fn.saved_tensors}
        out.sum().backward()
    assert out.shape == (2, 4, 256, 32)
    scores_bytes = 2 * 4 * 256 * 256 * 4
    assert max(saved) < scores_bytes  # no score matrix kept
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_gpt2_with_attention_dropout_is_sized_without_the_score_matrix(tmp_path):
    """GPT-2 trains with attention dropout: the CPU's kernel keeps every layer's scores
    and dropout mask, a GPU's memory-efficient kernel keeps neither."""
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500,
                                     n_positions=512, architectures=["GPT2LMHeadModel"])
    config.save_pretrained(tmp_path)
    request = StepRequest(model=str(tmp_path), batch=4, seq=512, train=True)
    gpu = estimate_step(request, scaling=False)
    cpu = estimate_step(request, scaling=False, kernels="cpu")
    scores_per_layer = 4 * 4 * 512 * 512 * 4
    assert cpu.peak_bytes - gpu.peak_bytes >= 2 * scores_per_layer
    assert any("Attention is sized" in line for line in gpu.limits)
