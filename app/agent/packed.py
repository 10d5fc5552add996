"""Weights torch keeps packed in objects of its own: quantized layers (torch.ao).

Dynamic (qint8, float16) and static quantized layers hold their weights in
``torch.ScriptObject``s, not in ``_parameters``: ``LinearPackedParams._packed_params``,
a quantized conv's ``_packed_params``, ``EmbeddingPackedParams._packed_weight``,
a dynamic RNN's ``PackedParameter.param``, a dynamic cell's
``_packed_weight_ih``.  The agent counts them and never moves them.

A pack never changes once made (new weights make a new one), so it is
measured once and its size kept by the object.  Measuring means unpacking it
(a copy of its weights: ~0.1 s for 16 M of them, on the agent thread), so
only a pack of at most ``MEASURE_MAX`` weights, or one whose layer states no
shape, is measured exactly; a bigger one is counted from its layer's shape
(``in_features`` x ``out_features``, a conv's kernel, an embedding's table) in
its weight dtype, bias left out (4 bytes per output against 1 or 2 per
weight).

Torch's quantized layers never count as models of their own: the agent meets
them through the model that holds them (``placement`` does not announce
them while they build their packs).  Read-only, never raises, never imports
torch.
"""

from __future__ import annotations

import math
import sys
import weakref
from typing import Any, NamedTuple

#: Packages of torch's layers that pack their weights.
QUANTIZED_PACKAGES = ("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized",
                      "torch.ao.nn.sparse.quantized")
DYNAMIC_PACKAGE = "torch.ao.nn.quantized.dynamic"
#: torch's modules that only hold a pack for the layer above them.
HOLDERS = frozenset(("LinearPackedParams", "EmbeddingPackedParams", "PackedParameter"))
#: Torchbind classes of torch's packs (``ScriptObject._type().qualified_name()``).
PACK_CLASSES = ("__torch__.torch.classes.quantized.", "__torch__.torch.classes.rnn.",
                "__torch__.torch.classes.sparse.")
MEASURE_MAX = 1 << 20
#: Bytes per weight of the dtypes whose elements are smaller than a byte.
SUB_BYTE = {"quint4x2": 0.5, "quint2x4": 0.25}


class Pack(NamedTuple):
    """One pack's size: weights and biases together."""

    numel: int
    nbytes: int
    dtype: str | None  # the weights' ("qint8", "float16"), None if unknown
    device: str


UNKNOWN = Pack(0, 0, None, "cpu")

_sizes: dict[int, tuple[Any, Pack]] = {}  # id(pack) -> (weak ref to it, size)
_package_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # class -> package


_script_object: Any = None  # torch._C.ScriptObject, once torch is imported


def _script_object_type() -> Any:
    global _script_object
    if _script_object is None:
        torch = sys.modules.get("torch")
        _script_object = getattr(getattr(torch, "_C", None), "ScriptObject", None)
    return _script_object


def _package(module: Any) -> str:
    """"quantized", "dynamic" or "" for a module's class (cached per class)."""
    cls = type(module)
    try:
        return _package_of[cls]
    except (KeyError, TypeError):
        pass
    name = getattr(cls, "__module__", "") or ""
    kind = ""
    if name.startswith(DYNAMIC_PACKAGE):
        kind = "dynamic"
    elif any(name.startswith(p) for p in QUANTIZED_PACKAGES):
        kind = "quantized"
    try:
        _package_of[cls] = kind
    except TypeError:
        pass
    return kind


def is_quantized_layer(module: Any) -> bool:
    """Is ``module`` one of torch's quantized layers (or their pack holders)?"""
    return _package(module) != ""


def is_holder(module: Any) -> bool:
    """Does ``module`` only hold a pack for the layer above it?"""
    return is_quantized_layer(module) and type(module).__name__ in HOLDERS


def own_packs(module: Any) -> list:
    """The packs ``module`` holds itself (attributes, read from ``__dict__``).
    Only torch's quantized layers hold packs: any other module is answered
    from its class, without reading its attributes."""
    if not is_quantized_layer(module):
        return []
    kind = _script_object or _script_object_type()
    if kind is None:
        return []
    try:
        values = list(dict.values(module.__dict__))  # one step: another thread may set one
    except Exception:
        return []
    return [v for v in values if type(v) is kind and _is_pack(v)]


def _is_pack(obj: Any) -> bool:
    try:
        name = obj._type().qualified_name()
    except Exception:
        return False
    return isinstance(name, str) and name.startswith(PACK_CLASSES)


def kind_of(holder: Any, layer: Any) -> str:
    """"dynamic" or "static": the quantization that made a pack's holder and layer."""
    return "dynamic" if "dynamic" in (_package(holder), _package(layer)) else "static"


def size(pack: Any, holder: Any, layer: Any) -> Pack:
    """The size of ``pack``, held by ``holder`` for ``layer`` (measured once)."""
    key = id(pack)
    entry = _sizes.get(key)
    if entry is not None and entry[0]() is pack:
        return entry[1]
    found = _from_shape(layer, holder)
    if found is None or found.numel <= MEASURE_MAX:
        measured = _from_state(pack)
        found = measured if measured is not None else (found or UNKNOWN)
    try:
        ref = weakref.ref(pack, _Forget(key))
    except TypeError:
        return found
    _sizes[key] = (ref, found)
    return found


class _Forget:
    """A pack's weak reference callback: its size goes with it (not a newer
    pack's that took its id)."""

    __slots__ = ("key",)

    def __init__(self, key: int) -> None:
        self.key = key

    def __call__(self, ref: Any) -> None:
        entry = _sizes.get(self.key)
        if entry is not None and entry[0] is ref:
            _sizes.pop(self.key, None)


def _dtype_name(dtype: Any) -> str | None:
    text = str(dtype)
    return text[len("torch."):] if text.startswith("torch.") else None


def _bytes_per(dtype: str) -> float | None:
    if dtype in SUB_BYTE:
        return SUB_BYTE[dtype]
    torch = sys.modules.get("torch")
    size_ = getattr(getattr(torch, dtype, None), "itemsize", None)
    return float(size_) if isinstance(size_, int) else None


def _int(obj: Any, attr: str) -> int | None:
    value = getattr(obj, "__dict__", {}).get(attr)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _from_shape(layer: Any, holder: Any) -> Pack | None:
    """The weights of a quantized Linear, conv or embedding from its shape."""
    try:
        d = layer.__dict__
        if _int(layer, "in_features") is not None and _int(layer, "out_features") is not None:
            numel = d["in_features"] * d["out_features"]
            dtype = _dtype_name(holder.__dict__.get("dtype"))
        elif _int(layer, "num_embeddings") is not None and _int(layer, "embedding_dim"):
            numel = d["num_embeddings"] * d["embedding_dim"]
            dtype = _dtype_name(holder.__dict__.get("dtype"))
        elif _int(layer, "out_channels") is not None and _int(layer, "in_channels") is not None:
            kernel = d.get("kernel_size")
            groups = _int(layer, "groups") or 1
            if not isinstance(kernel, tuple) or not all(isinstance(k, int) for k in kernel):
                return None
            numel = d["out_channels"] * (d["in_channels"] // groups) * math.prod(kernel)
            dtype = "qint8"
        else:
            return None
        per = _bytes_per(dtype) if dtype is not None else None
        if per is None:
            return None
        return Pack(int(numel), int(numel * per), dtype, "cpu")
    except Exception:
        return None


def _from_state(pack: Any) -> Pack | None:
    """Unpack ``pack`` (its ``__getstate__``, packs inside it too) and add up
    what it holds, memory shared between them once (a dynamic LSTM's biases)."""
    found: list = []
    try:
        _collect(pack, found, 0)
    except Exception:
        return None
    numel = nbytes = 0
    dtype = None
    device = "cpu"
    seen: set = set()
    for t, linear_weight in found:
        key = (int(t.data_ptr()), int(t.numel()), str(t.dtype))
        if key[0] and key in seen:
            continue
        seen.add(key)
        n = int(t.numel())
        if t.is_quantized:
            numel += n
            nbytes += n * int(t.element_size())
            dtype = dtype or _dtype_name(t.dtype)
            device = str(t.device)
        elif t.is_floating_point():
            numel += n
            if linear_weight:  # float weights of a Linear pack: packed as float16
                nbytes += n * 2
                dtype = dtype or "float16"
            else:  # a bias
                nbytes += n * int(t.element_size())
        # integer tensors are a conv's settings, not weights
    return Pack(numel, nbytes, dtype, device)


def _collect(pack: Any, out: list, depth: int) -> None:
    """(tensor, is the weight of a Linear pack) for what ``pack`` holds, in order."""
    if depth > 4:
        return
    linear = _is_linear(pack)
    first = True
    for item in _flatten(pack.__getstate__(), 0):
        if type(item) is _script_object_type():
            if _is_pack(item):
                _collect(item, out, depth + 1)
            continue
        out.append((item, linear and first))
        first = False


def _is_linear(pack: Any) -> bool:
    try:
        return str(pack._type().qualified_name()).endswith("LinearPackedParamsBase")
    except Exception:
        return False


def _flatten(state: Any, depth: int) -> list:
    """The tensors and packs of an unpacked state, in order."""
    if depth > 8:
        return []
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, (list, tuple)):
        return [x for item in state for x in _flatten(item, depth + 1)]
    if type(state) is _script_object_type():
        return [state]
    return []
