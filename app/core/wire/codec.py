"""JSON for the app's frozen dataclasses, driven by their type hints.

One encoder and one decoder for every typed result the app carries (a
snapshot and all it holds, an action's result, an OOM report), so no type
has a hand-written twin that can drift from it.  Encoding writes each
field under its own name; decoding reads the hints back and checks every
value against them: input from another machine is untrusted, so a wrong
type is a :class:`WireError` naming where, never a crash or a silent 0.

Floats that JSON cannot hold (inf, nan) travel as the strings ``"inf"``,
``"-inf"`` and ``"nan"``.  Keys the decoder does not know are ignored (a
newer peer's additions); a missing key takes the field's default, and a
missing field without one is an error.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class WireError(ValueError):
    """Input that does not match the type it should carry; says where."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, str, int, float, bool, None)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value.value if isinstance(value, enum.Enum) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return {name: encode(item) for name, item in zip(value._fields, value, strict=True)}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    raise WireError(f"cannot encode a {type(value).__name__}")


class Decoder:
    """Reads data back into ``cls`` by its hints.  ``overrides`` give the
    real type of fields declared ``Any`` (to keep a module free of an
    import), as ``{(cls, field): type}``; ``names`` resolve hints written as
    strings under ``TYPE_CHECKING``."""

    def __init__(self, overrides: Mapping[tuple[type, str], Any] | None = None,
                 names: Mapping[str, Any] | None = None) -> None:
        self._overrides = dict(overrides or {})
        self._names = dict(names or {})
        self._hints: dict[type, dict[str, Any]] = {}

    def decode(self, tp: Any, data: Any, where: str = "$") -> Any:
        if tp is Any:
            return data
        if tp is type(None) or tp is None:
            if data is not None:
                raise WireError(f"{where}: expected null")
            return None
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            return self._union(typing.get_args(tp), data, where)
        if origin is tuple:
            return self._tuple(typing.get_args(tp), data, where)
        if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, int]):
            key_tp, value_tp = typing.get_args(tp) or (str, Any)
            if not isinstance(data, dict):
                raise WireError(f"{where}: expected an object")
            return {self._key(key_tp, k, where): self.decode(value_tp, v, f"{where}.{k}")
                    for k, v in data.items()}
        if origin is list:
            (item_tp,) = typing.get_args(tp) or (Any,)
            if not isinstance(data, list):
                raise WireError(f"{where}: expected a list")
            return [self.decode(item_tp, v, f"{where}[{i}]") for i, v in enumerate(data)]
        if isinstance(tp, type):
            return self._plain(tp, data, where)
        raise WireError(f"{where}: no decoder for {tp!r}")

    # -- pieces -----------------------------------------------------------------
    def _plain(self, tp: type, data: Any, where: str) -> Any:
        if tp is bool:
            if not isinstance(data, bool):
                raise WireError(f"{where}: expected true or false")
            return data
        if tp is int:
            if isinstance(data, bool) or not isinstance(data, int):
                raise WireError(f"{where}: expected an integer")
            return data
        if tp is float:
            if isinstance(data, str) and data in _NON_FINITE:
                return _NON_FINITE[data]
            if isinstance(data, bool) or not isinstance(data, (int, float)):
                raise WireError(f"{where}: expected a number")
            return float(data)
        if tp is str:
            if not isinstance(data, str):
                raise WireError(f"{where}: expected a string")
            return data
        if issubclass(tp, enum.Enum):
            try:
                return tp(data)
            except ValueError:
                raise WireError(f"{where}: {data!r} is not a {tp.__name__}") from None
        if dataclasses.is_dataclass(tp) or hasattr(tp, "_fields"):
            return self._record(tp, data, where)
        raise WireError(f"{where}: no decoder for {tp.__name__}")

    def _record(self, cls: type, data: Any, where: str) -> Any:
        if not isinstance(data, dict):
            raise WireError(f"{where}: expected an object ({cls.__name__})")
        hints = self.hints(cls)
        defaults = _defaults(cls)
        values = {}
        for name, hint in hints.items():
            if name in data:
                values[name] = self.decode(hint, data[name], f"{where}.{name}")
            elif name not in defaults:
                raise WireError(f"{where}: {cls.__name__} lacks {name!r}")
        return cls(**values)

    def _union(self, arms: tuple[Any, ...], data: Any, where: str) -> Any:
        if data is None:
            if type(None) in arms:
                return None
            raise WireError(f"{where}: null is not allowed here")
        concrete = [a for a in arms if a is not type(None)]
        # Pick the arm the JSON type names: bool before int, int before float.
        order = {bool: 0, int: 1, float: 2, str: 3}
        for arm in sorted(concrete, key=lambda a: order.get(a, 4)):
            if _fits(arm, data):
                return self.decode(arm, data, where)
        raise WireError(f"{where}: {type(data).__name__} fits none of "
                        + ", ".join(getattr(a, "__name__", str(a)) for a in concrete))

    def _tuple(self, args: tuple[Any, ...], data: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(data, list):
            raise WireError(f"{where}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(self.decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
        if len(args) != len(data):
            raise WireError(f"{where}: expected {len(args)} items, got {len(data)}")
        return tuple(self.decode(a, v, f"{where}[{i}]")
                     for i, (a, v) in enumerate(zip(args, data, strict=True)))

    def _key(self, tp: Any, key: str, where: str) -> Any:
        if tp is int:
            try:
                return int(key)
            except ValueError:
                raise WireError(f"{where}: key {key!r} is not an integer") from None
        return key

    def hints(self, cls: type) -> dict[str, Any]:
        """The type each field of ``cls`` is read as (its hint, or the override)."""
        hints = self._hints.get(cls)
        if hints is None:
            module = __import__(cls.__module__, fromlist=["_"])
            space = {**vars(module), **self._names}
            raw = typing.get_type_hints(cls, globalns=space)
            names = ([f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls)
                     else list(cls._fields))  # type: ignore[attr-defined]
            hints = {n: self._overrides.get((cls, n), raw[n]) for n in names}
            self._hints[cls] = hints
        return hints


def _fits(arm: Any, data: Any) -> bool:
    """Whether JSON value ``data`` can be read as ``arm``."""
    if arm is bool:
        return isinstance(data, bool)
    if arm is int:
        return isinstance(data, int) and not isinstance(data, bool)
    if arm is float:
        return (isinstance(data, (int, float)) and not isinstance(data, bool)) \
            or (isinstance(data, str) and data in _NON_FINITE)
    if arm is str or (isinstance(arm, type) and issubclass(arm, enum.Enum)):
        return isinstance(data, str) or isinstance(data, int) and not isinstance(data, bool)
    origin = typing.get_origin(arm)
    if origin in (tuple, list):
        return isinstance(data, list)
    return isinstance(data, dict)


def _defaults(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING}
    return set(getattr(cls, "_field_defaults", {}))
