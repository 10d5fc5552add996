"""What changed between two encoded snapshots, and putting it back.

A stream sends one whole snapshot, then only the differences: at 8 GPUs
with 64 processes each a snapshot is ~130 KB of JSON, and most of it (names,
commands, uuids, limits) is the same tick after tick.

A patch describes one object or list: ``{"s": {key: value}}`` sets keys,
``{"d": [key, ...]}`` deletes them, ``{"p": {key: patch}}`` patches the
value under a key, and for a list ``"n"`` is its new length (keys are then
indices written as strings).  ``None`` means "no change".
"""

from __future__ import annotations

from typing import Any

from app.core.wire.codec import WireError


def diff(old: Any, new: Any) -> dict[str, Any] | None:
    """The patch turning ``old`` into ``new`` (both objects, or both lists),
    None when they are equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        return _diff_dict(old, new)
    if isinstance(old, list) and isinstance(new, list):
        return _diff_list(old, new)
    raise WireError("a patch is made between two objects or two lists")


def _diff_dict(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    sets: dict[str, Any] = {}
    subs: dict[str, Any] = {}
    for key, value in new.items():
        if key not in old:
            sets[key] = value
            continue
        _one(key, old[key], value, sets, subs)
    gone = [k for k in old if k not in new]
    return _patch(sets, subs, gone=gone)


def _diff_list(old: list[Any], new: list[Any]) -> dict[str, Any] | None:
    sets: dict[str, Any] = {}
    subs: dict[str, Any] = {}
    for i, value in enumerate(new):
        if i >= len(old):
            sets[str(i)] = value
        else:
            _one(str(i), old[i], value, sets, subs)
    return _patch(sets, subs, length=len(new) if len(new) != len(old) else None)


def _one(key: str, before: Any, after: Any, sets: dict[str, Any], subs: dict[str, Any]) -> None:
    if before == after and type(before) is type(after):
        return
    if (isinstance(before, dict) and isinstance(after, dict)) \
            or (isinstance(before, list) and isinstance(after, list)):
        sub = diff(before, after)
        if sub is not None:
            subs[key] = sub
        return
    sets[key] = after


def _patch(sets: dict[str, Any], subs: dict[str, Any], gone: list[str] | None = None,
           length: int | None = None) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    if sets:
        out["s"] = sets
    if subs:
        out["p"] = subs
    if gone:
        out["d"] = gone
    if length is not None:
        out["n"] = length
    return out or None


def apply(base: Any, patch: Any) -> Any:
    """``base`` with ``patch`` applied (a new value; ``base`` is not changed).
    :class:`WireError` when the patch does not fit ``base``."""
    if patch is None:
        return base
    if not isinstance(patch, dict):
        raise WireError("a patch is an object")
    if isinstance(base, dict):
        out = dict(base)
        for key in _list(patch.get("d")):
            out.pop(key, None)
        for key, value in _map(patch.get("s")).items():
            out[key] = value
        for key, sub in _map(patch.get("p")).items():
            if key not in out:
                raise WireError(f"the patch changes {key!r}, which is not there")
            out[key] = apply(out[key], sub)
        return out
    if isinstance(base, list):
        length = patch.get("n", len(base))
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise WireError("a list patch's length is not a count")
        items = list(base[:length]) + [None] * max(0, length - len(base))
        for key, value in _map(patch.get("s")).items():
            items[_index(key, length)] = value
        for key, sub in _map(patch.get("p")).items():
            i = _index(key, length)
            items[i] = apply(items[i], sub)
        return items
    raise WireError("a patch applies to an object or a list")


def _map(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError("a patch's changes are an object")
    return value


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError("a patch's deletions are a list")
    return value


def _index(key: str, length: int) -> int:
    try:
        i = int(key)
    except (TypeError, ValueError):
        raise WireError(f"list index {key!r} is not a number") from None
    if not 0 <= i < length:
        raise WireError(f"list index {i} is outside the list")
    return i
