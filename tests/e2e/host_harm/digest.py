"""Deterministic, JSON-able digests of what a pattern computed.

Two runs of one pattern (without and with the agent) are compared through
these digests, so a digest must capture everything the user could observe
about a value (for tensors: dtype, shape, device, autograd flags, inference
flag and the exact bytes) and nothing that legitimately differs between two
processes (memory addresses, temp paths, timings).

Stdlib only at import time: torch and numpy are looked up in ``sys.modules``,
so digesting never imports anything into the host.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import sys
from typing import Any

MAX_DEPTH = 12

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_TMP_PATH = re.compile(r"/tmp/[^\s'\",:)\]]+")
_TIMING = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|us|µs|sec|secs|seconds)\b")

_roots: list[str] = []


def add_path_root(path: str) -> None:
    """Paths under ``path`` differ between the two runs: write them as ``<work>``."""
    _roots.append(path)


def normalise(text: str) -> str:
    """``text`` with memory addresses, per-run paths and timings made constant."""
    for root in _roots:
        text = text.replace(root, "<work>")
    text = _TMP_PATH.sub("<tmp>", text)
    text = _ADDRESS.sub("0x?", text)
    return _TIMING.sub("<time>", text)


def exception_digest(exc: BaseException) -> dict[str, str]:
    cls = type(exc)
    return {"type": f"{cls.__module__}.{cls.__qualname__}", "message": normalise(str(exc))}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensor(torch: Any, t: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dtype": str(t.dtype), "shape": list(t.shape), "device": str(t.device),
        "requires_grad": bool(t.requires_grad), "is_inference": bool(t.is_inference()),
        "is_leaf": bool(t.is_leaf),
        "grad_fn": type(t.grad_fn).__name__ if t.grad_fn is not None else None,
    }
    if isinstance(t, torch.nn.Parameter):
        out["parameter"] = True
    if t.device.type == "meta":
        out["sha256"] = None
        return out
    try:
        raw = t.detach().cpu()
        if raw.layout != torch.strided:
            raw = raw.to_dense()
        out["sha256"] = _sha256(raw.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    except Exception as exc:  # quantized, exotic subclasses: say so, deterministically
        out["sha256"] = "undigestable: " + type(exc).__name__
    return out


def _ndarray(a: Any) -> dict[str, Any]:
    data = a.tobytes() if a.dtype != object else repr(a.tolist()).encode()
    return {"dtype": str(a.dtype), "shape": list(a.shape), "sha256": _sha256(data)}


def digest(value: Any, depth: int = 0) -> Any:
    """The digest of ``value``; nested containers recursively, else the type name."""
    if depth > MAX_DEPTH:
        return {"type": type(value).__name__, "truncated": True}
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if value is None or isinstance(value, (bool, int, str)):
        return normalise(value) if isinstance(value, str) else value
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, complex):
        return {"complex": repr(value)}
    if isinstance(value, bytes):
        return {"bytes": _sha256(value)}
    if torch is not None:
        if isinstance(value, torch.Tensor):
            return {"tensor": _tensor(torch, value)}
        if isinstance(value, (torch.dtype, torch.device, torch.Size)):
            return {type(value).__name__: str(value)}
    if np is not None:
        if isinstance(value, np.ndarray):
            return {"ndarray": _ndarray(value)}
        if isinstance(value, np.generic):
            return {"numpy_scalar": [str(value.dtype), repr(value.item())]}
    if isinstance(value, dict):  # also HF ModelOutput (an OrderedDict subclass)
        items = [[digest(k, depth + 1), digest(v, depth + 1)] for k, v in value.items()]
        return {"dict": items, "type": type(value).__name__}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [digest(v, depth + 1) for v in value], "type": type(value).__name__}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [[f.name, digest(getattr(value, f.name, None), depth + 1)]
                  for f in dataclasses.fields(value)]
        return {"dataclass": fields, "type": type(value).__name__}
    return {"type": type(value).__name__}
