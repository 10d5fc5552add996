"""What a model is, read from the module alone: its tree, sizes and names.

Read-only and cheap enough for 1 Hz: tensor metadata only (device, dtype,
numel, element size), never the data.  Dict values are read with
``dict.values(d)``: while a model is offloaded its parameter dicts reload it
on access (``storage.OffloadedDict``) and the agent must never trigger that.

A model's weights are its parameters and the packs of its quantized layers
(``packed``): a model holding only packs (a static-quantized one) is a model.
"""

from __future__ import annotations

import gc
import types
import weakref
from collections import OrderedDict
from typing import Any

from . import packed as _packed

DYNAMO_STAMP = "_dynamo_static_input_type"  # set by dynamo on every parameter it traced


def children(module: Any) -> tuple:
    """Direct submodules (``_modules`` values; None entries included)."""
    try:
        mods = module.__dict__.get("_modules")
        return tuple(dict.values(mods)) if mods else ()
    except Exception:
        return ()


#: Weight dict types an unload can watch (storage adds its OffloadedDict).
WATCHABLE_DICTS: set = {dict, OrderedDict}


def odd_dict(module: Any) -> str | None:
    """Why a module's non-empty weight dict cannot be watched, or None."""
    for attr in ("_parameters", "_buffers"):
        d = module.__dict__.get(attr)
        if d and type(d) not in WATCHABLE_DICTS:
            return "a %s dict of type %s, which the agent cannot watch" % (
                attr, type(d).__name__)
    return None


def values(module: Any, attr: str) -> tuple:
    """The values of a module's ``_parameters`` / ``_buffers`` without triggering a reload."""
    try:
        d = module.__dict__.get(attr)
        return tuple(dict.values(d)) if d else ()
    except Exception:
        return ()


def subtree(root: Any) -> list:
    """``root`` and every module below it, each once."""
    out, seen, stack = [], {id(root)}, [root]
    while stack:
        m = stack.pop()
        out.append(m)
        for c in children(m):
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                stack.append(c)
    return out


def own_params(module: Any) -> bool:
    return any(p is not None for p in values(module, "_parameters"))


def own_weights(module: Any) -> bool:
    """Parameters, or packs of a quantized layer, held by ``module`` itself."""
    return own_params(module) or bool(_packed.own_packs(module))


def has_weights(root: Any) -> bool:
    return any(own_weights(m) for m in subtree(root))


def _with_parents(root: Any) -> list:
    """(module, its parent) for ``root``'s subtree, each module once."""
    out, seen, stack = [], {id(root)}, [(root, None)]
    while stack:
        m, parent = stack.pop()
        out.append((m, parent))
        for c in children(m):
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                stack.append((c, m))
    return out


def _packs(module: Any, parent: Any) -> list:
    """(pack, its size, "dynamic" / "static") for the packs ``module`` holds."""
    packs = _packed.own_packs(module)
    if not packs:
        return packs
    layer = parent if parent is not None and _packed.is_holder(module) else module
    return [(p, _packed.size(p, module, layer), _packed.kind_of(module, layer)) for p in packs]


#: The start of the blocker a model with packed weights carries.
PACKED = "quantized packed weights"


def packed_label(kinds: set) -> str:
    """"quantized packed weights (torch.ao dynamic quantization)", or static, or both."""
    how = "torch.ao %s quantization" % next(iter(kinds)) if len(kinds) == 1 else \
        "torch.ao quantization"
    return "%s (%s)" % (PACKED, how)


def tensors(module: Any, grads: bool = False) -> list:
    """Every parameter and buffer of the subtree once (and their gradients)."""
    seen: set = set()
    out: list = []
    for m in subtree(module):
        for attr in ("_parameters", "_buffers"):
            for t in values(m, attr):
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                out.append(t)
                if grads and attr == "_parameters":
                    g = grad_of(t)
                    if g is not None and id(g) not in seen:
                        seen.add(id(g))
                        out.append(g)
    return out


def grad_of(t: Any) -> Any:
    """``t.grad`` for a leaf tensor; None otherwise (reading ``.grad`` of a
    non-leaf would warn in the host)."""
    try:
        return t.grad if t.is_leaf else None
    except Exception:
        return None


def _memory_key(t: Any) -> Any:
    """Equal for tensors that are the same memory (tied weights made with ``.data``)."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:
        ptr = 0
    if not ptr:
        return id(t)
    return (str(t.device), ptr, int(t.storage_offset()), tuple(t.size()), tuple(t.stride()),
            t.dtype)


def model_figures(root: Any) -> dict[str, Any]:
    """Sizes of ``root``'s subtree from tensor metadata, shared memory once.

    Meta tensors are placeholders for weights held elsewhere (an offload hook
    keeps them): they count in ``placeholder_bytes``, never on a device.
    Packs of quantized layers count as parameters (``quantized``: their
    weights' dtypes) and make the model unmovable.  Also notes what else makes
    the weights unmovable and whether dynamo traced them.
    """
    params = param_bytes = buffer_bytes = placeholder_bytes = 0
    by_device: dict[str, dict[str, int]] = {}
    dtypes: set = set()
    packed: set = set()
    kinds: set = set()
    requires_grad = has_grad = traced = False
    unmovable: str | None = None
    seen: set = set()
    ids: set = set()
    for m, parent in _with_parents(root):
        if unmovable is None:
            unmovable = odd_dict(m)
        for obj, pack, how in _packs(m, parent):
            if id(obj) in ids:
                continue
            ids.add(id(obj))
            kinds.add(how)
            params += pack.numel
            param_bytes += pack.nbytes
            by_device.setdefault(pack.device, {"params": 0, "buffers": 0})["params"] += pack.nbytes
            if pack.dtype is not None:
                packed.add(pack.dtype)
        for kind, attr in (("params", "_parameters"), ("buffers", "_buffers")):
            for t in values(m, attr):
                if t is None or id(t) in ids:
                    continue
                ids.add(id(t))
                if type(t).__name__.startswith("Uninitialized"):  # LazyLinear before its call
                    unmovable = unmovable or "uninitialized (lazy) parameters"
                    continue
                key = _memory_key(t)
                if key in seen:
                    continue
                seen.add(key)
                n = int(t.numel())
                size = n * int(t.element_size())
                dev = str(t.device)
                if kind == "params":
                    params += n
                    dtypes.add(str(t.dtype).replace("torch.", ""))
                    if t.requires_grad:
                        requires_grad = True
                    if not has_grad and grad_of(t) is not None:
                        has_grad = True
                    if not traced and DYNAMO_STAMP in getattr(t, "__dict__", ()):
                        traced = True
                if dev == "meta":
                    placeholder_bytes += size
                    continue
                if unmovable is None:
                    unmovable = why_unmovable(t)
                slot = by_device.setdefault(dev, {"params": 0, "buffers": 0})
                slot[kind] += size
                if kind == "params":
                    param_bytes += size
                else:
                    buffer_bytes += size
    devices = sorted(by_device)
    dtypes |= packed
    if kinds:
        unmovable = packed_label(kinds)
    return {
        "params": params, "param_bytes": param_bytes, "buffer_bytes": buffer_bytes,
        "placeholder_bytes": placeholder_bytes, "bytes_by_device": by_device,
        "device": devices[0] if len(devices) == 1 else ("mixed" if devices else None),
        "dtype": dtypes.pop() if len(dtypes) == 1 else ("mixed" if dtypes else None),
        "requires_grad": requires_grad, "has_grad": has_grad, "dynamo_traced": traced,
        "unmovable": unmovable, "tensor_ids": ids,
        "quantized": ", ".join(sorted(packed)) if packed else None,
    }


def why_unmovable(t: Any) -> str | None:
    """Why the manager could not move this tensor, None if it can."""
    try:
        if type(t).__name__.startswith("Uninitialized"):
            return "uninitialized (lazy) parameters"
        cls = type(t)
        if cls.__module__.startswith("torch._subclasses"):
            # A fake or functional tensor (torch.export, torch.compile tracing, swapped in
            # for the weights while they run): reading ``.data`` would run an op in their
            # mode from this thread, in the middle of the user's trace.
            return "tensor subclasses (%s)" % cls.__name__
        if str(t.layout) != "torch.strided" or getattr(t, "is_quantized", False):
            return "sparse or quantized tensors"
        data = t.data
        if type(data).__name__ != "Tensor" or type(data).__module__ != "torch":
            return "tensor subclasses (%s)" % type(data).__name__
        if t.device.type not in ("cpu", "cuda"):
            return "tensors on %s" % t.device
    except Exception as exc:
        return "unreadable tensors (%r)" % (exc,)
    return None


def qualified_class(obj: Any) -> str:
    cls = type(obj)
    return "%s.%s" % (getattr(cls, "__module__", "?"), getattr(cls, "__qualname__", cls.__name__))


def _config_name(cfg: Any) -> str | None:
    if cfg is None:
        return None
    for attr in ("name_or_path", "_name_or_path"):
        try:
            value = cfg.get(attr) if isinstance(cfg, dict) else getattr(cfg, attr, None)
        except Exception:
            value = None
        if isinstance(value, str) and value:
            return value
    return None


def friendly_name(module: Any) -> str:
    try:
        cfg = module.__dict__.get("config")
        name = _config_name(cfg)
        if name:
            return name
        if cfg is not None:
            arch = getattr(cfg, "architectures", None)
            if isinstance(arch, (list, tuple)) and arch and isinstance(arch[0], str):
                return arch[0]
            mtype = getattr(cfg, "model_type", None)
            if isinstance(mtype, str) and mtype:
                return mtype
    except Exception:
        pass
    return type(module).__name__


def _instance_dict(obj: Any) -> dict | None:
    try:
        d = object.__getattribute__(obj, "__dict__")
        return d if isinstance(d, dict) else None
    except Exception:
        return None


def find_groups(roots: list, ids: Any) -> dict[str, str]:
    """{model id: group label} for objects (pipelines) holding >= 2 roots."""
    skip = (list, tuple, set, frozenset, types.FrameType, weakref.ref)
    root_ids = {id(r): r for r in roots}
    owners: list = []
    # Up to three bounded passes: roots <- instance dict / components dict <-
    # owner (or its instance dict <- owner).  Only when the roots changed,
    # rate-limited by the caller.
    targets: list = list(roots)
    exclude: set = {id(root_ids)}
    for _level in range(3):
        dicts: list = []
        for ref in gc.get_referrers(*targets):
            if id(ref) in exclude:
                continue
            if isinstance(ref, dict):
                if len(dicts) < 256:
                    dicts.append(ref)
            elif not isinstance(ref, skip):
                owners.append(ref)
        if not dicts:
            break
        exclude.update(id(d) for d in dicts)
        targets = dicts
    del targets
    groups: dict[str, str] = {}
    seen_owner: set = set()
    for owner in owners:
        if id(owner) in seen_owner or id(owner) in root_ids:
            continue
        seen_owner.add(id(owner))
        d = _instance_dict(owner)
        if d is None:
            continue
        cls_name = type(owner).__name__
        components = d.get("components")
        if not (cls_name.endswith("Pipeline") or isinstance(components, dict)):
            continue
        values = list(d.values())
        if isinstance(components, dict) and len(components) <= 1000:
            values += list(components.values())
        members: list = []
        for v in values:
            if id(v) in root_ids and not any(v is x for x in members):
                members.append(v)
        if len(members) < 2:
            continue
        cfg = d.get("_internal_dict")
        if cfg is None:
            cfg = d.get("config")
        name = _config_name(cfg)
        label = "%s (%s)" % (cls_name, name) if name else cls_name
        for m in members:
            model_id = ids.get(m)
            if model_id and model_id not in groups:
                groups[model_id] = label
    return groups
