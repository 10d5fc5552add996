"""The codec on its own: every kind of hint, and refusals that say where."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest

from app.core.wire.codec import Decoder, WireError, encode


class Colour(str, enum.Enum):
    RED = "red"


class Row(NamedTuple):
    pid: int
    share: float | None = None


@dataclass(frozen=True)
class Record:
    name: str
    rows: tuple[Row, ...]
    by_pid: dict[int, str]
    pair: tuple[int, str]
    colour: Colour
    figures: dict[str, float | int | None] = field(default_factory=dict)
    extra: Any = None
    flag: bool | None = None


def test_round_trip_of_every_kind_of_hint():
    value = Record("a", (Row(1, 0.5), Row(2)), {7: "x"}, (3, "y"), Colour.RED,
                   {"f": 1.5, "i": 2, "n": None}, {"nested": [1, "two"]}, False)
    data = encode(value)
    assert data["by_pid"] == {"7": "x"}
    assert data["rows"][0] == {"pid": 1, "share": 0.5}
    back = Decoder().decode(Record, data)
    assert back == value
    assert type(back.figures["i"]) is int and type(back.figures["f"]) is float


def test_integers_read_as_floats_and_booleans_never_as_numbers():
    assert Decoder().decode(float, 3) == 3.0
    with pytest.raises(WireError, match="expected a number"):
        Decoder().decode(float, True)
    with pytest.raises(WireError, match="expected an integer"):
        Decoder().decode(int, 1.0)


def test_nan_and_infinities():
    assert encode(math.nan) == "nan" and encode(-math.inf) == "-inf"
    assert math.isnan(Decoder().decode(float, "nan"))
    with pytest.raises(WireError):
        Decoder().decode(float, "lots")


def test_a_missing_field_without_default_is_named():
    with pytest.raises(WireError, match=r"\$: Record lacks 'pair'"):
        Decoder().decode(Record, {"name": "a", "rows": [], "by_pid": {}, "colour": "red"})


def test_a_missing_field_with_a_default_takes_it():
    back = Decoder().decode(Row, {"pid": 3})
    assert back == Row(3)


def test_overrides_give_any_fields_their_type():
    decoder = Decoder(overrides={(Record, "extra"): tuple[Row, ...]})
    data = encode(Record("a", (), {}, (1, "b"), Colour.RED, extra=(Row(9),)))
    assert decoder.decode(Record, data).extra == (Row(9),)
    with pytest.raises(WireError, match=r"\$.extra\[0\].pid"):
        decoder.decode(Record, {**data, "extra": [{"pid": "nine"}]})


def test_something_unencodable_is_refused():
    with pytest.raises(WireError, match="cannot encode a set"):
        encode({1, 2})
