"""The estimate against the real step on an NVIDIA GPU.

For GPT-2 (124M), a Llama of ~200M parameters, ResNet-50, ViT-B/16 and a
diffusers UNet2DConditionModel, as config folders, inference and AdamW
training (float32, as the CPU table): each real step runs in a child process
of its own on the GPU (``model_source.build(fake=False, device="cuda")``,
``fake_step.run_step``, two steps for training), which reports
``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` and what NVML
shows for it at the end; the parent estimates the same request with fake
tensors meanwhile and compares ``peak_bytes``, ``reserved_bytes`` and
``needs_bytes`` (reserved + the GPU's workspaces + ``context.context_bytes``).

Then what a fresh process holds outside the allocator on this GPU (the CUDA
context, after the first matmul and the first convolution: the figure
``context.py`` keeps per generation), and the batch search against a cap
(``torch.cuda.set_per_process_memory_fraction``): the largest batch said to
fit must run, and the next power of two up must do what the estimate says.

    python -m benchmarks.estimate_gpu [--only NAME] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]
MODES = ("inference", "training")
#: The cap of the batch-search check, and the model it runs.
CAP_BYTES = 8 << 30
CAP_MODEL = "gpt2"
#: Real steps run at once: each reads its own figures (the allocator's, NVML's for its pid).
CHILDREN = 4


def _configs() -> dict[str, tuple[Any, dict[str, Any]]]:
    """name -> (config object or diffusers dict, request fields)."""
    from transformers import GPT2Config, LlamaConfig, ResNetConfig, ViTConfig

    unet = dict(_class_name="UNet2DConditionModel", sample_size=64, in_channels=4,
                out_channels=4, layers_per_block=2, block_out_channels=(128, 256, 512),
                cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32,
                down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"))
    return {
        "gpt2": (GPT2Config(architectures=["GPT2LMHeadModel"]), dict(batch=8, seq=512)),
        "llama": (LlamaConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                              num_key_value_heads=4, intermediate_size=2816, vocab_size=32000,
                              max_position_embeddings=2048, architectures=["LlamaForCausalLM"]),
                  dict(batch=8, seq=512)),
        "resnet": (ResNetConfig(architectures=["ResNetForImageClassification"]),
                   dict(batch=32, image=224)),
        "vit": (ViTConfig(architectures=["ViTForImageClassification"]), dict(batch=32, image=224)),
        "unet": (unet, dict(batch=4, image=512)),
    }


def write_folders(root: Path, names: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for name, (config, fields) in _configs().items():
        if name not in names:
            continue
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        if isinstance(config, dict):
            (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        else:
            config.save_pretrained(folder)
        out[name] = (str(folder), fields)
    return out


# -- the child: one real step on the GPU ---------------------------------------------------

def _nvml_own_bytes() -> tuple[int | None, int | None]:
    """(this process's NVML bytes, the device's used bytes) on GPU 0."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        own = None
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid() and p.usedGpuMemory is not None:
                own = int(p.usedGpuMemory)
        return own, used
    except Exception:
        return None, None


def child_step(fields: dict[str, Any], cap_bytes: int | None) -> dict[str, Any]:
    import torch

    from app.core.estimate.fake_step import run_step
    from app.core.estimate.model_source import build
    from app.core.estimate.step_modes import make_optimizer
    from app.core.estimate.types import StepRequest

    request = StepRequest(**fields)
    torch.manual_seed(0)
    torch.zeros(1, device="cuda")
    if cap_bytes is not None:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(cap_bytes / total)
    oom = False
    try:
        built = build(request, fake=False, device="cuda")
        optimizer = make_optimizer(built.module, request.optimizer) if request.train else None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(2 if request.train else 1):
            run_step(built.module, built.batch, request, optimizer)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        oom = True
    own, used = _nvml_own_bytes()
    return {"max_allocated_bytes": torch.cuda.max_memory_allocated(),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(),
            "reserved_end_bytes": torch.cuda.memory_reserved(),
            "nvml_process_bytes": own, "nvml_used_bytes": used, "oom": oom,
            "gpu_name": torch.cuda.get_device_name(0)}


def child_context() -> dict[str, Any]:
    """NVML's bytes for this process minus ``memory_reserved``: after the context, the
    first matmul, the first convolution."""
    import torch

    out: dict[str, Any] = {"gpu_name": torch.cuda.get_device_name(0)}
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    stages = [("context", None),
              ("matmul", lambda: torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")),
              ("conv", lambda: torch.nn.functional.conv2d(
                  torch.ones(1, 3, 32, 32, device="cuda"), torch.ones(8, 3, 3, 3, device="cuda")))]
    for name, work in stages:
        if work is not None:
            work()
            torch.cuda.synchronize()
        own, used = _nvml_own_bytes()
        out[name] = {"nvml_process_bytes": own, "nvml_used_bytes": used,
                     "reserved_bytes": torch.cuda.memory_reserved(),
                     "allocated_bytes": torch.cuda.memory_allocated()}
    del x
    return out


def _spawn(kind: str, payload: Any, timeout_s: float = 300) -> dict[str, Any]:
    _, before = _nvml_own_bytes()
    done = subprocess.run([sys.executable, "-m", "benchmarks.estimate_gpu", "--child", kind,
                           json.dumps(payload)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s, env=dict(os.environ, TRANSFORMERS_VERBOSITY="error"))
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    answer["nvml_used_before_bytes"] = before
    return answer


# -- the parent ----------------------------------------------------------------------------

def _estimate(fields: dict[str, Any]) -> dict[str, Any]:
    from app.core.estimate.fake_step import estimate_step
    from app.core.estimate.types import StepRequest

    start = time.perf_counter()
    est = estimate_step(StepRequest(**fields), scaling=False)
    return {"peak_bytes": est.peak_bytes, "reserved_bytes": est.reserved_bytes,
            "breakdown": est.breakdown, "peak_phase": est.peak_phase, "exact": est.exact,
            "seconds": round(time.perf_counter() - start, 2)}


def _needs(reserved_bytes: int, gpu_name: str | None) -> int:
    from app.core.estimate.fit import needs_bytes

    return needs_bytes(reserved_bytes, gpu_name)


def _pct(estimated: int | None, real: int | None) -> float | None:
    if not estimated or not real:
        return None
    return round(100.0 * (estimated - real) / real, 1)


def accuracy(folders: dict[str, tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    cases = [(name, mode, dict(model=folder, train=mode == "training", **fields))
             for name, (folder, fields) in folders.items() for mode in MODES]
    with ThreadPoolExecutor(max_workers=CHILDREN) as pool:
        reals = pool.map(lambda case: _spawn("step", {"fields": case[2], "cap": None}), cases)
        estimates = [_estimate(case[2]) for case in cases]
        rows = []
        for (name, mode, fields), real, est in zip(cases, reals, estimates, strict=True):
            gpu = real.get("gpu_name")
            nvml = real.get("nvml_process_bytes")
            if nvml is None and real.get("nvml_used_bytes") and real.get("nvml_used_before_bytes"):
                nvml = real["nvml_used_bytes"] - real["nvml_used_before_bytes"]
            needs = _needs(est["reserved_bytes"], gpu)
            rows.append({"model": name, "mode": mode, "batch": fields["batch"], "real": real,
                         "estimate": est, "needs_bytes": needs, "nvml_bytes": nvml,
                         "peak_error_pct": _pct(est["peak_bytes"], real.get("max_allocated_bytes")),
                         "reserved_error_pct": _pct(est["reserved_bytes"],
                                                    real.get("max_reserved_bytes")),
                         "needs_error_pct": _pct(needs, nvml)})
    return rows


def batch_check(folders: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The largest batch said to fit under CAP_BYTES of reserved, run for real, and the
    next power of two up."""
    from app.core.estimate.fake_step import estimate_step
    from app.core.estimate.search import largest_batch
    from app.core.estimate.types import StepRequest

    folder, fields = folders[CAP_MODEL]
    base = StepRequest(model=folder, train=True, **fields)
    cache: dict[int, Any] = {}

    def reestimate(req: StepRequest) -> Any:
        if req.batch not in cache:
            cache[req.batch] = estimate_step(req, scaling=False)
        return cache[req.batch]

    best = largest_batch(base, CAP_BYTES, reestimate, 0)
    out: dict[str, Any] = {"model": CAP_MODEL, "cap_bytes": CAP_BYTES, "largest_batch": best}
    if best is None:
        return out
    up = 1 << best.bit_length()
    predicted_up = reestimate(StepRequest(**{**base.to_json(), "batch": up})).reserved_bytes
    out["runs"] = []
    for batch, predicted in ((best, cache[best].reserved_bytes), (up, predicted_up)):
        real = _spawn("step", {"fields": {**base.to_json(), "batch": batch}, "cap": CAP_BYTES})
        out["runs"].append({"batch": batch, "predicted_reserved_bytes": predicted,
                            "predicted_fits": predicted <= CAP_BYTES, "oom": real.get("oom"),
                            "real_max_reserved_bytes": real.get("max_reserved_bytes"),
                            "error": real.get("error")})
    return out


def print_report(report: dict[str, Any]) -> None:
    def mib(v: int | None) -> str:
        return "n/a" if v is None else f"{v / MIB:.0f}"

    print(f"GPU: {report['gpu_name']}")
    ctx = report["context"]
    for stage in ("context", "matmul", "conv"):
        s = ctx.get(stage, {})
        own = s.get("nvml_process_bytes")
        outside = None if own is None else own - s.get("reserved_bytes", 0)
        print(f"  fresh process after {stage:<8} NVML {mib(own)} MiB, reserved "
              f"{mib(s.get('reserved_bytes'))} MiB, outside the allocator {mib(outside)} MiB")
    print(f"{'model':<8}{'mode':<11}{'batch':>6}{'max alloc':>11}{'est peak':>10}{'err%':>7}"
          f"{'max resv':>10}{'est resv':>10}{'err%':>7}{'NVML':>8}{'needs':>8}{'err%':>7}"
          f"{'est s':>7}")
    for r in report["rows"]:
        real, est = r["real"], r["estimate"]
        if "error" in real:
            print(f"{r['model']:<8}{r['mode']:<11} real run failed: {real['error'][-300:]}")
            continue
        print(f"{r['model']:<8}{r['mode']:<11}{r['batch']:>6}{mib(real['max_allocated_bytes']):>11}"
              f"{mib(est['peak_bytes']):>10}{r['peak_error_pct']!s:>7}"
              f"{mib(real['max_reserved_bytes']):>10}{mib(est['reserved_bytes']):>10}"
              f"{r['reserved_error_pct']!s:>7}{mib(r['nvml_bytes']):>8}{mib(r['needs_bytes']):>8}"
              f"{r['needs_error_pct']!s:>7}{est['seconds']:>7}")
    check = report.get("batch_check") or {}
    print(f"batch search, {check.get('model')} training under a cap of "
          f"{mib(check.get('cap_bytes'))} MiB reserved: largest batch said to fit "
          f"{check.get('largest_batch')}")
    for run in check.get("runs", []):
        print(f"  batch {run['batch']}: predicted {mib(run['predicted_reserved_bytes'])} MiB "
              f"({'fits' if run['predicted_fits'] else 'does not fit'}), real "
              f"{'OOM' if run['oom'] else 'ran'}, max reserved {mib(run['real_max_reserved_bytes'])} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, payload = args.child[0], json.loads(args.child[1])
        answer = child_context() if kind == "context" else \
            child_step(payload["fields"], payload["cap"])
        print(json.dumps(answer))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs an NVIDIA GPU", file=sys.stderr)
        return 1
    names = args.only or list(_configs())
    with tempfile.TemporaryDirectory() as tmp:
        folders = write_folders(Path(tmp), names)
        context = _spawn("context", {})
        report = {"gpu_name": context.get("gpu_name"), "context": context,
                  "rows": accuracy(folders),
                  "batch_check": batch_check(folders) if CAP_MODEL in folders else None}
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
