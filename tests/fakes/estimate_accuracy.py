"""The estimate next to the real step on the CPU, for the accuracy table's
models: shared by ``benchmarks.estimate_accuracy`` and its test."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.fakes.accuracy_models import BATCH, MODELS, write
from tests.fakes.real_peak import collect, spawn

MODES = ("inference", "training")


def request(name: str, mode: str, root: Path, batch: int = BATCH) -> Any:
    """The request for ``name``'s config folder under ``root`` (written if missing)."""
    from app.core.estimate.types import StepRequest

    _, seq, image = MODELS[name]
    return StepRequest(model=str(write(name, root)), batch=batch, seq=seq, image=image,
                       train=mode == "training", optimizer="adamw")


def estimate(req: Any, scaling: bool = True) -> dict[str, Any]:
    """``estimate_step``'s figures; ``scaling=False`` skips the doubled batch that tells
    which kinds grow with it (the peak is the same)."""
    from app.core.estimate.fake_step import estimate_step

    start = time.perf_counter()
    est = estimate_step(req, scaling=scaling, kernels="cpu")  # the real step runs here
    return {"peak_bytes": est.peak_bytes, "reserved_bytes": est.reserved_bytes,
            "seconds": time.perf_counter() - start, "exact": est.exact,
            "breakdown": dict(est.breakdown)}


def row(name: str, mode: str, real: dict[str, Any], est: dict[str, Any]) -> dict[str, Any]:
    error = 100.0 * (est["peak_bytes"] - real["peak_bytes"]) / real["peak_bytes"]
    return {"model": name, "mode": mode, "real_peak_bytes": real["peak_bytes"],
            "estimated_peak_bytes": est["peak_bytes"], "error_pct": error,
            "estimated_reserved_bytes": est["reserved_bytes"],
            "estimate_seconds": est["seconds"], "exact": est["exact"],
            "breakdown": est["breakdown"]}


def measure_real(requests: dict[tuple[str, str], Any], per_child: bool) -> dict[Any, Any]:
    """The real peaks, one child at a time: a child per measurement, or one for all."""
    pairs = list(requests)
    groups = [[pair] for pair in pairs] if per_child else [pairs]
    out = {}
    for group in groups:
        answers = collect(spawn([requests[pair] for pair in group]))
        out.update(zip(group, answers, strict=True))
    return out


def accuracy(names: list[str], root: Path, *, batch: int = BATCH, per_child: bool = True,
             scaling: bool = True) -> list[dict[str, Any]]:
    """Every (model, mode) of config folders under ``root``: the real peak, measured by
    children on a thread while the estimates are made here, and the estimate."""
    pairs = [(name, mode) for name in names for mode in MODES]
    requests = {pair: request(*pair, root, batch) for pair in pairs}
    with ThreadPoolExecutor(max_workers=1) as pool:
        real_rows = pool.submit(measure_real, requests, per_child)
        estimates = {pair: estimate(requests[pair], scaling) for pair in pairs}
        reals = real_rows.result()
    return [row(name, mode, reals[(name, mode)], estimates[(name, mode)])
            for name, mode in pairs]
