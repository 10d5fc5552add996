"""What a fresh PyTorch process holds on a GPU besides its caching allocator.

NVML's per-process "used" is ``torch.cuda.memory_reserved`` plus memory the
caching allocator never sees:

* the CUDA context: driver state, the local memory reserved for every thread
  the GPU can run at once (so it grows with the number of SMs), and the
  kernels loaded so far.  PyTorch sets ``CUDA_MODULE_LOADING=LAZY`` (CUDA
  11.7 and later), so a kernel is loaded on its first launch, not all at
  start: ~300 MB where it was over 1 GB before;
* the cuBLAS and cuDNN handles made by the first matmul and convolution,
  with the kernels those load.

Inside ``memory_reserved`` (so in the allocator's figures, not here): the
cuBLAS workspace, which PyTorch 2.x allocates through the caching allocator
(``getNewWorkspace`` in ``aten/src/ATen/cuda/CublasHandlePool.cpp``), one per
handle and stream.  Its default (``CUBLAS_WORKSPACE_CONFIG`` unset) is
``:4096:2:16:8``, 8 MiB + 128 KiB, and 32 MiB on Hopper (sm90); the cuBLASLt
workspace comes from the same allocator, 1 MiB by default
(``CUBLASLT_WORKSPACE_SIZE``), or shares cuBLAS's.  PyTorch issue #95668
shows ``memory_allocated`` at 8519680 bytes after one ``nn.Linear`` on an A10G.
:func:`workspace_bytes` gives these requests; they are not part of
:func:`context_bytes`.

The figures are per GPU generation, matched on the NVML name.  Each is one
named constant with its source so that a measurement on a lent GPU replaces
it in one place.
"""

from __future__ import annotations

import re

MIB = 1 << 20

# The bare context with lazy loading, per generation (NVML per-process used minus
# memory_reserved, before any matmul).
#
# Hopper (H100, H200, GH200): 610 MiB measured on an H200 (driver 580, PyTorch
# 2.11.0+cu130) after torch.zeros(1, device="cuda"): NVML's bytes for the process minus
# memory_reserved (``python -m benchmarks.estimate_gpu``).
HOPPER_CONTEXT_BYTES = 610 * MIB
# Blackwell: no published figure found; taken as Hopper's (as many SMs and more).
BLACKWELL_CONTEXT_BYTES = HOPPER_CONTEXT_BYTES
# Ada: 426 MiB in nvidia-smi after torch.cuda.mem_get_info(0) on an RTX 6000 Ada,
# PyTorch 2.10.0+cu130 (unslothai/unsloth-zoo pull request #1053).
ADA_CONTEXT_BYTES = 426 * MIB
# Ampere: 256 MiB "bare CUDA context" on an RTX 3090, torch 2.7.1+cu128, driver 610.43
# (invoke-ai/InvokeAI issue #9413).  An A100 has 108 SMs to the 3090's 82: ~30 MiB more.
AMPERE_CONTEXT_BYTES = 256 * MIB
# Turing and Volta: "~300MB" with lazy loading, CUDA 11.7+ (ptrblck, pytorch/pytorch issue
# #107667, 2023); 287,047,680 bytes used after a first 6.4 MB tensor (its 20 MiB segment
# included) when lazy loading became PyTorch's default (pytorch/pytorch pull request #86509).
TURING_CONTEXT_BYTES = 300 * MIB
VOLTA_CONTEXT_BYTES = 300 * MIB
# An unknown GPU: "around 400MB if CUDA >= 11.7 is used and lazy module loading enabled"
# (ptrblck, pytorch/pytorch issue #109888); the high end of the figures above.
DEFAULT_CONTEXT_BYTES = 400 * MIB

# The cuBLAS and cuDNN handles and the kernels a first matmul / convolution loads, outside
# the allocator: 74 MiB on the same H200 (66 MiB at the first matmul, 8 more at the first
# convolution).
LIBRARY_HANDLES_BYTES = 74 * MIB

# The workspaces cuBLAS asks of the caching allocator on its first matmul (inside reserved).
CUBLAS_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8"
HOPPER_CUBLAS_WORKSPACE_BYTES = 4096 * 8 * 1024  # 32 MiB on sm90
CUBLASLT_WORKSPACE_BYTES = 1024 * 1024  # CUBLASLT_WORKSPACE_SIZE's default, 1024 KiB

# (generation, pattern on the NVML name, bare context bytes); the first match wins, so the
# names that carry another generation's model number ("RTX 6000 Ada", "RTX A6000",
# "Quadro RTX 6000") come before the plain ones.
GENERATIONS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("blackwell", re.compile(r"blackwell|\bG?B[123]00\b|RTX 50\d0", re.I),
     BLACKWELL_CONTEXT_BYTES),
    ("hopper", re.compile(r"\bG?H(100|200|800|20)\b", re.I), HOPPER_CONTEXT_BYTES),
    ("ada", re.compile(r"\bAda\b|RTX 40\d0|\bL(4|20|40S?)\b", re.I), ADA_CONTEXT_BYTES),
    ("ampere", re.compile(r"\bA(2|10G?|16|30|40|100|800)\b|RTX A\d{4}|RTX 30\d0", re.I),
     AMPERE_CONTEXT_BYTES),
    ("turing", re.compile(r"\bT4\b|RTX 20\d0|GTX 16\d0|Quadro RTX|TITAN RTX", re.I),
     TURING_CONTEXT_BYTES),
    ("volta", re.compile(r"V100|TITAN V\b|GV100", re.I), VOLTA_CONTEXT_BYTES),
)


def generation(gpu_name: str | None) -> str | None:
    """The architecture an NVML name belongs to ("hopper", "ampere", ...), None if unknown."""
    if gpu_name:
        for name, pattern, _ in GENERATIONS:
            if pattern.search(gpu_name):
                return name
    return None


def context_bytes(gpu_name: str | None) -> int:
    """What a fresh PyTorch process holds on this GPU model outside ``memory_reserved``
    after its first matmul and convolution: the CUDA context and the library handles."""
    if gpu_name:
        for _, pattern, bare in GENERATIONS:
            if pattern.search(gpu_name):
                return bare + LIBRARY_HANDLES_BYTES
    return DEFAULT_CONTEXT_BYTES + LIBRARY_HANDLES_BYTES


def workspace_bytes(gpu_name: str | None) -> tuple[int, ...]:
    """The requests cuBLAS makes of the caching allocator on the first matmul (cuBLAS's
    workspace, then cuBLASLt's): part of ``memory_reserved``, to replay with the step."""
    cublas = HOPPER_CUBLAS_WORKSPACE_BYTES if generation(gpu_name) == "hopper" else (
        CUBLAS_WORKSPACE_BYTES)
    return (cublas, CUBLASLT_WORKSPACE_BYTES)


def fresh_process_bytes(gpu_name: str | None) -> int:
    """Everything a new process holds on this GPU model before its step's first tensor:
    :func:`context_bytes` outside the allocator, and the segments its cuBLAS workspaces
    take inside it.  ``needs_bytes`` is the step's reserved bytes plus this."""
    from app.core.estimate.allocator import replay

    workspaces = replay((key, nbytes) for key, nbytes in enumerate(workspace_bytes(gpu_name)))
    return context_bytes(gpu_name) + workspaces.reserved_bytes
