"""What a model is and what it was last called with, for sizing its run again.

``config``: a Hugging Face model's ``config`` (a ``PretrainedConfig``, read
with ``to_dict()``; ``architectures`` filled in with the model's class where
it is empty, as ``save_pretrained`` writes it) or a diffusers model's
``config`` (a FrozenDict, with ``_class_name``), as JSON-safe data: strings,
numbers, booleans, None, lists and objects of them; other values are left
out, and a config whose JSON is over ``MAX_CONFIG_BYTES`` is not sent.  Read
once per model, on the agent thread, from the module's own ``__dict__`` and
its class (never through ``nn.Module.__getattr__``, which could reach an
offloaded model's weights); anything that fails gives None.

``input_shape``: the shape of the first tensor of the model's last top-level
call, which its forward pre-hook keeps (``guard``) as torch's own ``Size``;
turned into ints here, off the user's thread.
"""

from __future__ import annotations

import json
import math
import weakref
from typing import Any

MAX_CONFIG_BYTES = 64 * 1024
#: The configs of one report together (its frame is at most 1 MiB): past
#: this, the later models' configs are not sent.
MAX_REPORT_CONFIG_BYTES = 256 * 1024
MAX_DEPTH = 16
MAX_DIMS = 16


class _Skip(Exception):
    """A value JSON cannot carry faithfully: its key is left out."""


def _safe(value: Any, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise _Skip
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Skip
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_safe(v, depth + 1) for v in value]  # one bad item: the whole list goes
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                continue
            try:
                out[str(key)] = _safe(item, depth + 1)
            except _Skip:
                continue
        return out
    raise _Skip


def _raw_config(module: Any) -> dict | None:
    cfg = module.__dict__.get("config")
    if cfg is None:
        # diffusers (ConfigMixin) keeps it in ``_internal_dict``; a ``config`` property of
        # another class would be user code, never run from here.
        cfg = module.__dict__.get("_internal_dict")
    if cfg is None:
        return None
    to_dict = getattr(cfg, "to_dict", None)
    if callable(to_dict):  # transformers' PretrainedConfig
        raw = to_dict()
        if not isinstance(raw, dict):
            return None
        raw = dict(raw)
        # A classifier's label names (1000 for ImageNet) are most of its config and size
        # nothing: their count is kept.
        labels = raw.pop("id2label", None)
        raw.pop("label2id", None)
        if isinstance(labels, dict) and "num_labels" not in raw:
            raw["num_labels"] = len(labels)
        if not raw.get("architectures"):
            raw["architectures"] = [type(module).__name__]
        return raw
    if isinstance(cfg, dict):  # diffusers' FrozenDict
        raw = dict(cfg)
        raw.setdefault("_class_name", type(module).__name__)
        return raw
    return None


def config_of(module: Any) -> tuple[dict | None, int]:
    """``module``'s config as JSON-safe data and the size of its JSON, or
    (None, 0): none, unreadable, too big."""
    try:
        raw = _raw_config(module)
        if raw is None:
            return None, 0
        out = _safe(raw)
        size = len(json.dumps(out, separators=(",", ":")))
        if not out or size > MAX_CONFIG_BYTES:
            return None, 0
        return out, size
    except Exception:
        return None, 0


class ConfigCache:
    """Each model's config, read once (agent thread); ``start_report`` opens
    one report's budget of ``MAX_REPORT_CONFIG_BYTES``."""

    def __init__(self) -> None:
        self._cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._left = MAX_REPORT_CONFIG_BYTES

    def start_report(self) -> None:
        self._left = MAX_REPORT_CONFIG_BYTES

    def get(self, module: Any) -> dict | None:
        try:
            found = self._cache.get(module)
            if found is None:
                found = config_of(module)
                if found[0] is not None:  # a failed read is tried again next report
                    self._cache[module] = found
            config, size = found
            if config is None or size > self._left:
                return None
            self._left -= size
            return config
        except Exception:
            return None


def shape_list(shape: Any) -> list[int] | None:
    """A kept ``Size`` as a list of ints, or None."""
    try:
        if shape is None or len(shape) > MAX_DIMS:
            return None
        if not all(type(d) is int for d in shape):  # a symbolic size (torch.export) is
            return None                              # never made concrete from here
        dims = list(shape)
        return dims if all(d >= 0 for d in dims) else None
    except Exception:
        return None
