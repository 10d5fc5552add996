"""The real peak of one step on the CPU, measured from PyTorch's profiler.

``torch.profiler`` with ``profile_memory=True`` records every allocation and
free of PyTorch's CPU allocator as a ``[memory]`` event with its signed byte
count.  Summed in time order from before the model is built, they give the
bytes of live storages at every moment: weights, gradients, optimizer state,
activations and temporaries.  The model, batch, optimizer and step are the
estimate's own (``model_source.build`` with real tensors, ``make_optimizer``,
``fake_step.run_step``).  The peak is taken over the step (two for training:
the second has the optimizer's state), marked with ``record_function``.

Each measurement runs in a child process so that none inherits another's
state:

    python -m tests.fakes.real_peak THREADS '[StepRequest as JSON, ...]'

prints one JSON line per measurement: ``{"model", "mode", "peak_bytes",
"start_bytes", "events"}`` (``start_bytes``: live when the step begins).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARK = "vram_steward.measured_step"
TRAIN_STEPS = 2


def peak_after_mark(events: Iterable[tuple[int, int]], mark_ns: int) -> tuple[int, int]:
    """``(bytes live when the mark starts, peak from then on)`` of ``(time_ns, delta)`` events."""
    live = 0
    start: int | None = None
    peak = 0
    for time_ns, delta in sorted(events):
        if start is None and time_ns >= mark_ns:
            start = peak = live
        live += delta
        if start is not None and live > peak:
            peak = live
    if start is None:
        start = peak = live
    return start, peak


def measure(request: Any) -> dict[str, Any]:
    """Build ``request``'s model and batch under the profiler, as the estimate builds them
    (``model_source.build``, real tensors), and run its step(s) with the estimate's own
    ``run_step`` and optimizer."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from app.core.estimate.fake_step import run_step
    from app.core.estimate.model_source import build
    from app.core.estimate.step_modes import make_optimizer

    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 record_shapes=False) as prof:
        built = build(request, fake=False)
        optimizer = make_optimizer(built.module, request.optimizer) if request.train else None
        with record_function(MARK):
            for _ in range(TRAIN_STEPS if request.train else 1):
                run_step(built.module, built.batch, request, optimizer)
    results = prof.profiler.kineto_results.events()
    mark_ns = min(e.start_ns() for e in results if e.name() == MARK)
    memory = [(e.start_ns(), e.nbytes()) for e in results if e.name() == "[memory]"]
    start, peak = peak_after_mark(memory, mark_ns)
    return {"model": request.model, "mode": request.mode, "peak_bytes": peak,
            "start_bytes": start, "events": len(memory)}


def spawn(requests: Sequence[Any], threads: int = 1) -> subprocess.Popen[str]:
    """Start a child measuring ``requests`` (``StepRequest``) in turn, on ``threads``
    intra-op threads; read its answers with :func:`collect`."""
    payload = json.dumps([r.to_json() for r in requests])
    return subprocess.Popen([sys.executable, "-m", "tests.fakes.real_peak", str(threads), payload],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def collect(child: subprocess.Popen[str], timeout_s: float = 600) -> list[dict[str, Any]]:
    out, err = child.communicate(timeout=timeout_s)
    if child.returncode != 0:
        raise RuntimeError(f"real measurement failed ({child.returncode}):\n{err[-4000:]}")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main(argv: Sequence[str]) -> None:
    import torch

    from app.core.estimate.types import StepRequest

    torch.set_num_threads(int(argv[0]))
    for fields in json.loads(argv[1]):
        print(json.dumps(measure(StepRequest(**fields))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
