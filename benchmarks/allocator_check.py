"""The allocator replay against the real CUDA caching allocator (needs a GPU).

Two checks, each in this process with the default allocator settings:

* a random trace of allocations and frees (sizes from 1 byte to 64 MiB), run
  with real ``torch.empty`` tensors and replayed;
* real steps (the accuracy table's models, inference and AdamW training on
  CUDA) recorded with ``torch.cuda.memory._record_memory_history``: the
  recorded allocations and frees, replayed, against ``max_memory_reserved``.

Prints ``allocated`` and ``reserved`` peaks, real and replayed, and the error.

    python -m benchmarks.allocator_check [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from app.core.estimate.allocator import replay

MIB = 1 << 20


def random_trace(seed: int = 27, n: int = 3000) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    live: list[int] = []
    trace: list[tuple[int, int]] = []
    for key in range(n):
        if live and rng.random() < 0.45:
            trace.append((live.pop(rng.randrange(len(live))), 0))
        trace.append((key, rng.choice((rng.randrange(1, 4096), rng.randrange(1, 2 * MIB),
                                       rng.randrange(1, 64 * MIB)))))
        live.append(key)
    return trace


def fresh(torch: Any) -> None:
    import gc

    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:  # the workspaces stay live across cases otherwise
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def check_random(torch: Any) -> dict[str, Any]:
    trace = random_trace()
    fresh(torch)
    base_reserved = torch.cuda.memory_reserved()
    tensors: dict[int, Any] = {}
    for key, nbytes in trace:
        if nbytes:
            tensors[key] = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        else:
            del tensors[key]
    real = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved() - base_reserved)
    tensors.clear()
    return row("random trace", real, replay(trace))


def recorded_step(torch: Any, name: str, train: bool, root: Path) -> dict[str, Any]:
    from app.core.estimate.fake_step import run_step
    from app.core.estimate.model_source import build
    from app.core.estimate.step_modes import make_optimizer
    from tests.fakes.estimate_accuracy import request
    from tests.fakes.real_peak import TRAIN_STEPS

    req = request(name, "training" if train else "inference", root)
    fresh(torch)
    # the trace only: no stack is gathered (stacks make a snapshot slow to take)
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=10_000_000)
    built = build(req, fake=False, device="cuda")
    model, batch = built.module, built.batch
    optimizer = make_optimizer(model, req.optimizer) if train else None
    for _ in range(TRAIN_STEPS if train else 1):
        run_step(model, batch, req, optimizer)
    torch.cuda.synchronize()
    real = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events: list[tuple[int, int]] = []
    for entry in snapshot["device_traces"][torch.cuda.current_device()]:
        if entry["action"] == "alloc":
            events.append((entry["addr"], entry["size"]))
        elif entry["action"] == "free_completed":
            events.append((entry["addr"], 0))
    del built, model, batch, optimizer
    return row(f"{name} {'training' if train else 'inference'}", real, replay(events))


def row(name: str, real: tuple[int, int], peak: Any) -> dict[str, Any]:
    def err(est: int, true: int) -> float:
        return 100.0 * (est - true) / true if true else 0.0

    return {"case": name, "real_allocated_mib": real[0] / MIB,
            "replay_allocated_mib": peak.allocated_bytes / MIB,
            "real_reserved_mib": real[1] / MIB, "replay_reserved_mib": peak.reserved_bytes / MIB,
            "allocated_error_pct": err(peak.allocated_bytes, real[0]),
            "reserved_error_pct": err(peak.reserved_bytes, real[1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check needs a GPU")
    from tests.fakes.accuracy_models import MODELS

    rows = [check_random(torch)]
    with tempfile.TemporaryDirectory() as tmp:
        rows += [recorded_step(torch, name, train, Path(tmp)) for name in MODELS
                 for train in (False, True)]
    print(f"{'case':<22}{'alloc real':>12}{'replay':>10}{'err %':>8}"
          f"{'reserved real':>15}{'replay':>10}{'err %':>8}")
    for r in rows:
        print(f"{r['case']:<22}{r['real_allocated_mib']:>12.1f}{r['replay_allocated_mib']:>10.1f}"
              f"{r['allocated_error_pct']:>8.2f}{r['real_reserved_mib']:>15.1f}"
              f"{r['replay_reserved_mib']:>10.1f}{r['reserved_error_pct']:>8.2f}")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, stream, indent=2)


if __name__ == "__main__":
    main()
