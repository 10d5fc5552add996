"""A fresh process's context by GPU model: NVML names matched to their
generation, the figure that generation has, and the default for names no
pattern knows."""

from __future__ import annotations

import pytest

from app.core.estimate import context
from app.core.estimate.allocator import replay
from app.core.estimate.context import context_bytes, generation, workspace_bytes

NAMES = {
    "NVIDIA H100 80GB HBM3": "hopper",
    "NVIDIA H100 PCIe": "hopper",
    "NVIDIA H200": "hopper",
    "NVIDIA GH200 480GB": "hopper",
    "NVIDIA B200": "blackwell",
    "NVIDIA GeForce RTX 5090": "blackwell",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "blackwell",
    "NVIDIA GeForce RTX 4090": "ada",
    "NVIDIA RTX 6000 Ada Generation": "ada",
    "NVIDIA L40S": "ada",
    "NVIDIA L4": "ada",
    "NVIDIA A100-SXM4-80GB": "ampere",
    "NVIDIA A100-SXM4-80GB MIG 3g.40gb": "ampere",
    "NVIDIA A10G": "ampere",
    "NVIDIA RTX A6000": "ampere",
    "NVIDIA GeForce RTX 3090": "ampere",
    "Tesla T4": "turing",
    "Quadro RTX 6000": "turing",
    "NVIDIA GeForce RTX 2080 Ti": "turing",
    "Tesla V100-SXM2-32GB": "volta",
    "NVIDIA TITAN V": "volta",
}


@pytest.mark.parametrize("name", list(NAMES))
def test_a_gpu_name_is_matched_to_its_generation(name):
    assert generation(name) == NAMES[name]


@pytest.mark.parametrize("name", list(NAMES))
def test_the_context_is_the_generations_figure_plus_the_library_handles(name):
    bare = getattr(context, f"{NAMES[name].upper()}_CONTEXT_BYTES")
    assert context_bytes(name) == bare + context.LIBRARY_HANDLES_BYTES


@pytest.mark.parametrize("name", [None, "", "NVIDIA Fake GPU", "AMD Instinct MI300X"])
def test_an_unknown_gpu_gets_the_default(name):
    assert generation(name) is None
    assert context_bytes(name) == context.DEFAULT_CONTEXT_BYTES + context.LIBRARY_HANDLES_BYTES


def test_every_figure_is_a_few_hundred_mib():
    for name in list(NAMES) + [None]:
        assert 200 * context.MIB <= context_bytes(name) <= 1024 * context.MIB


def test_hopper_has_the_larger_cublas_workspace_and_both_land_in_reserved():
    hopper = workspace_bytes("NVIDIA H200")
    ampere = workspace_bytes("NVIDIA A100-SXM4-80GB")
    assert hopper[0] == 32 * context.MIB and ampere[0] == 8 * context.MIB + 128 * 1024
    assert workspace_bytes(None) == ampere
    # Replayed, cuBLAS's workspace takes a large segment and cuBLASLt's a small one.
    events = list(enumerate(ampere))
    assert replay(events).reserved_bytes == 20 * context.MIB + 2 * context.MIB
    assert replay(list(enumerate(hopper))).reserved_bytes == 32 * context.MIB + 2 * context.MIB
