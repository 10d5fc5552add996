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
from collections.abc import Callable, Mapping
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


Reader = Callable[[Any, str], Any]


def _null(data: Any, where: str) -> None:
    if data is not None:
        raise WireError(f"{where}: expected null")
    return None


def _bool(data: Any, where: str) -> bool:
    if not isinstance(data, bool):
        raise WireError(f"{where}: expected true or false")
    return data


def _int(data: Any, where: str) -> int:
    if isinstance(data, bool) or not isinstance(data, int):
        raise WireError(f"{where}: expected an integer")
    return data


def _float(data: Any, where: str) -> float:
    if isinstance(data, str) and data in _NON_FINITE:
        return _NON_FINITE[data]
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise WireError(f"{where}: expected a number")
    return float(data)


def _str(data: Any, where: str) -> str:
    if not isinstance(data, str):
        raise WireError(f"{where}: expected a string")
    return data


_SIMPLE: dict[type, Reader] = {bool: _bool, int: _int, float: _float, str: _str}


def _key(tp: Any, key: str, where: str) -> Any:
    if tp is int:
        try:
            return int(key)
        except ValueError:
            raise WireError(f"{where}: key {key!r} is not an integer") from None
    return key


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
        self._readers: dict[Any, Reader] = {}

    def decode(self, tp: Any, data: Any, where: str = "$") -> Any:
        return self._reader(tp)(data, where)

    # -- readers: one function per type, made once (a snapshot a tick from each
    # remote host is decoded on the hot path) ------------------------------------
    def _reader(self, tp: Any) -> Reader:
        reader = self._readers.get(tp)
        if reader is None:
            reader = self._readers[tp] = self._make(tp)
        return reader

    def _make(self, tp: Any) -> Reader:
        if tp is Any:
            return lambda data, where: data
        if tp is type(None) or tp is None:
            return _null
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            return self._union(typing.get_args(tp))
        if origin is tuple:
            return self._tuple(typing.get_args(tp))
        if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, int]):
            key_tp, value_tp = typing.get_args(tp) or (str, Any)
            return self._dict(key_tp, value_tp)
        if origin is list:
            (item_tp,) = typing.get_args(tp) or (Any,)
            return self._list(item_tp)
        if isinstance(tp, type):
            return self._plain(tp)
        raise WireError(f"no decoder for {tp!r}")

    def _plain(self, tp: type) -> Reader:
        simple = _SIMPLE.get(tp)
        if simple is not None:
            return simple
        if issubclass(tp, enum.Enum):
            def read_enum(data: Any, where: str) -> Any:
                try:
                    return tp(data)
                except ValueError:
                    raise WireError(f"{where}: {data!r} is not a {tp.__name__}") from None
            return read_enum
        if dataclasses.is_dataclass(tp) or hasattr(tp, "_fields"):
            return self._record(tp)

        def unknown(data: Any, where: str) -> Any:
            raise WireError(f"{where}: no decoder for {tp.__name__}")
        return unknown

    def _record(self, cls: type) -> Reader:
        fields: list[tuple[str, Reader, bool]] = []
        defaults = _defaults(cls)

        def read_record(data: Any, where: str) -> Any:
            if not isinstance(data, dict):
                raise WireError(f"{where}: expected an object ({cls.__name__})")
            if not fields:  # made on first use: a record may hold itself
                fields.extend((n, self._reader(h), n in defaults)
                              for n, h in self.hints(cls).items())
            values = {}
            for name, read, has_default in fields:
                if name in data:
                    values[name] = read(data[name], f"{where}.{name}")
                elif not has_default:
                    raise WireError(f"{where}: {cls.__name__} lacks {name!r}")
            return cls(**values)
        return read_record

    def _union(self, arms: tuple[Any, ...]) -> Reader:
        nullable = type(None) in arms
        concrete = [a for a in arms if a is not type(None)]
        # Try the arm the JSON type names first: bool before int, int before float.
        order = {bool: 0, int: 1, float: 2, str: 3}
        ranked = sorted(concrete, key=lambda a: order.get(a, 4))
        names = ", ".join(getattr(a, "__name__", str(a)) for a in concrete)
        readers: list[tuple[Any, Reader]] = []

        def read_union(data: Any, where: str) -> Any:
            if data is None:
                if nullable:
                    return None
                raise WireError(f"{where}: null is not allowed here")
            if not readers:
                readers.extend((arm, self._reader(arm)) for arm in ranked)
            for arm, read in readers:
                if _fits(arm, data):
                    return read(data, where)
            raise WireError(f"{where}: {type(data).__name__} fits none of {names}")
        return read_union

    def _tuple(self, args: tuple[Any, ...]) -> Reader:
        if len(args) == 2 and args[1] is Ellipsis:
            item_tp = args[0]

            def read_items(data: Any, where: str) -> tuple[Any, ...]:
                if not isinstance(data, list):
                    raise WireError(f"{where}: expected a list")
                read = self._reader(item_tp)
                return tuple(read(v, f"{where}[{i}]") for i, v in enumerate(data))
            return read_items

        def read_fixed(data: Any, where: str) -> tuple[Any, ...]:
            if not isinstance(data, list):
                raise WireError(f"{where}: expected a list")
            if len(args) != len(data):
                raise WireError(f"{where}: expected {len(args)} items, got {len(data)}")
            return tuple(self._reader(a)(v, f"{where}[{i}]")
                         for i, (a, v) in enumerate(zip(args, data, strict=True)))
        return read_fixed

    def _dict(self, key_tp: Any, value_tp: Any) -> Reader:
        def read_dict(data: Any, where: str) -> dict[Any, Any]:
            if not isinstance(data, dict):
                raise WireError(f"{where}: expected an object")
            read = self._reader(value_tp)
            return {_key(key_tp, k, where): read(v, f"{where}.{k}") for k, v in data.items()}
        return read_dict

    def _list(self, item_tp: Any) -> Reader:
        def read_list(data: Any, where: str) -> list[Any]:
            if not isinstance(data, list):
                raise WireError(f"{where}: expected a list")
            read = self._reader(item_tp)
            return [read(v, f"{where}[{i}]") for i, v in enumerate(data)]
        return read_list

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
