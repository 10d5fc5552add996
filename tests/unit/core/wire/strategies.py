"""Hypothesis strategies for any type the wire format carries, derived from
the same hints the decoder reads (so a new field is covered without a change here)."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from app.core.wire.snapshot import LOCAL_ONLY, field_types

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=3),
    max_leaves=6)


def of(tp: Any) -> st.SearchStrategy[Any]:
    """Values of ``tp``: finite or infinite floats (never NaN: NaN != NaN)."""
    if tp is Any:
        return JSON
    if tp is type(None) or tp is None:
        return st.none()
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[of(a) for a in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(of(args[0]), max_size=2).map(tuple)
        return st.tuples(*[of(a) for a in args])
    if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, int]):
        key, value = args or (str, Any)
        return st.dictionaries(of(key), of(value), max_size=2)
    if origin is list:
        return st.lists(of(args[0] if args else Any), max_size=2)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(-(2**62), 2**62)
    if tp is float:
        return st.floats(allow_nan=False)
    if tp is str:
        return st.text(max_size=8)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or hasattr(tp, "_fields")):
        hints = field_types(tp)  # the window's local-only fields keep their defaults
        return st.builds(tp, **{name: st.deferred(lambda h=h: of(h))
                                for name, h in hints.items() if (tp, name) not in LOCAL_ONLY})
    raise TypeError(f"no strategy for {tp!r}")
