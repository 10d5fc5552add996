"""The ``estimate --json`` answer read back into the estimate's own types.

Qt-free.  The child prints one JSON object: ``peak_bytes``, ``reserved_bytes``,
``needs_bytes``, ``breakdown``, ``estimate`` (``Estimate.to_json``), ``gpus``
(``GpuFit.to_json`` each) and ``max_batch``.  Anything else is a
:class:`ValueError` naming what was wrong, shown as the dialog's error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core.estimate.types import KINDS, ContextRow, FitFix, GpuFit


@dataclass(frozen=True, slots=True)
class FitResult:
    """What the dialog shows of one estimate."""

    peak_bytes: int
    reserved_bytes: int
    needs_bytes: int | None  # the target GPU's (None: no GPU answered)
    breakdown: dict[str, int]
    model_name: str
    method: str
    params: int | None
    exact: bool
    limits: tuple[str, ...]
    scales_with_batch: tuple[str, ...]
    peak_phase: str | None
    contexts: tuple[ContextRow, ...]
    gpus: tuple[GpuFit, ...]
    max_batch: int | None
    max_batch_asked: bool = False  # with ``--max-batch`` (None then: no batch fits)
    seconds: float | None = None
    note: str = ""  # why the GPUs' figures are missing (the command's own words)

    def gpu(self, display_id: str | None) -> GpuFit | None:
        """The fit on ``display_id`` (its host's own id matches too), else the first."""
        for fit in self.gpus:
            if display_id is not None and fit.gpu == display_id:
                return fit
        local = None if display_id is None else display_id.partition("@")[0]
        for fit in self.gpus:
            if local is not None and fit.gpu == local:
                return fit
        return self.gpus[0] if self.gpus else None


def parse_result(text: str) -> FitResult:
    """The child's stdout as a :class:`FitResult`; ValueError says what is missing."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the estimate's answer is not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError("the estimate's answer is not a JSON object")
    raw = data.get("estimate")
    est: dict[str, Any] = raw if isinstance(raw, dict) else {}
    breakdown = _dict(data.get("breakdown", est.get("breakdown")), "breakdown")
    gpus = tuple(_gpu(g) for g in _list(data.get("gpus"), "gpus"))
    needs = data.get("needs_bytes")
    return FitResult(
        peak_bytes=_int(data.get("peak_bytes"), "peak_bytes"),
        reserved_bytes=_int(data.get("reserved_bytes"), "reserved_bytes"),
        needs_bytes=_int(needs, "needs_bytes") if needs is not None else None,
        breakdown={k: _int(breakdown.get(k, 0), f"breakdown.{k}") for k in KINDS},
        model_name=str(est.get("model_name") or ""),
        method=str(est.get("method") or ""),
        params=_opt_int(est.get("params")),
        exact=bool(est.get("exact", True)),
        limits=tuple(str(s) for s in _list(est.get("limits"), "limits")),
        scales_with_batch=tuple(str(s) for s in _list(est.get("scales_with_batch"),
                                                       "scales_with_batch")),
        peak_phase=est.get("peak_phase") if isinstance(est.get("peak_phase"), str) else None,
        contexts=tuple(_context(c) for c in _list(est.get("contexts"), "contexts")),
        gpus=gpus,
        max_batch=_opt_int(data.get("max_batch")),
        max_batch_asked="max_batch" in data,
        seconds=float(est["seconds"]) if isinstance(est.get("seconds"), int | float) else None,
        note=str(data["error"]) if isinstance(data.get("error"), str) else "",
    )


def _gpu(d: Any) -> GpuFit:
    d = _dict(d, "gpus[]")
    fixes = tuple(_fix(f) for f in _list(d.get("fixes"), "fixes"))
    fits = d.get("fits")
    return GpuFit(gpu=str(d.get("gpu", "")), gpu_name=_opt_str(d.get("gpu_name")),
                  total_bytes=_opt_int(d.get("total_bytes")),
                  free_bytes=_opt_int(d.get("free_bytes")),
                  context_bytes=_int(d.get("context_bytes", 0), "context_bytes"),
                  needs_bytes=_int(d.get("needs_bytes"), "needs_bytes"),
                  fits=fits if isinstance(fits, bool) else None,
                  margin_bytes=_opt_int(d.get("margin_bytes")), fixes=fixes)


def _fix(d: Any) -> FitFix:
    d = _dict(d, "fixes[]")
    value = d.get("value")
    return FitFix(action=str(d.get("action", "")), text=str(d.get("text", "")),
                  gain_bytes=_opt_int(d.get("gain_bytes")), fits_after=bool(d.get("fits_after")),
                  pid=_opt_int(d.get("pid")), model=_opt_str(d.get("model")),
                  value=value if isinstance(value, int | str) else None)


def _context(d: Any) -> ContextRow:
    d = _dict(d, "contexts[]")
    return ContextRow(*(_int(d.get(k), f"contexts.{k}") for k in (
        "context", "weights_bytes", "kv_cache_bytes", "peak_bytes", "reserved_bytes")))


def _int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"the estimate's answer has no number for {name}")
    return int(v)


def _opt_int(v: Any) -> int | None:
    return None if isinstance(v, bool) or not isinstance(v, int | float) else int(v)


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _dict(v: Any, name: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ValueError(f"the estimate's answer has no {name}")
    return v


def _list(v: Any, name: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"the estimate's answer: {name} is not a list")
    return v


__all__ = ["FitResult", "parse_result"]
