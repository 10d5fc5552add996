"""A stream's patches: applied to the previous snapshot they give the next one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.wire.codec import WireError
from app.core.wire.delta import apply, diff

LEAF = st.none() | st.booleans() | st.integers() | st.text(max_size=4) \
    | st.floats(allow_nan=False)
TREE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=4), max_leaves=20)
OBJECTS = st.dictionaries(st.text(max_size=3), TREE, max_size=5)


@settings(max_examples=300, deadline=None)
@given(OBJECTS, OBJECTS)
def test_apply_of_diff_gives_the_new_value(old, new):
    patch = diff(old, new)
    assert apply(old, patch) == new
    assert (patch is None) == (old == new and all(
        type(old[k]) is type(new[k]) for k in old))


@given(OBJECTS)
def test_no_change_is_no_patch(value):
    assert diff(value, value) is None


def test_a_number_that_becomes_an_integer_is_sent():
    assert apply({"a": 1.0}, diff({"a": 1.0}, {"a": 1})) == {"a": 1}
    assert type(apply({"a": 1.0}, diff({"a": 1.0}, {"a": 1}))["a"]) is int


def test_a_grown_process_list_sends_only_the_new_row_and_changed_fields():
    old = {"gpus": [{"processes": [{"pid": 1, "gpu_memory": 5, "name": "python"}]}]}
    new = {"gpus": [{"processes": [{"pid": 1, "gpu_memory": 6, "name": "python"},
                                   {"pid": 2, "gpu_memory": 1, "name": "x"}]}]}
    patch = diff(old, new)
    rows = patch["p"]["gpus"]["p"]["0"]["p"]["processes"]
    assert rows["n"] == 2
    assert rows["s"] == {"1": {"pid": 2, "gpu_memory": 1, "name": "x"}}
    assert rows["p"] == {"0": {"s": {"gpu_memory": 6}}}
    assert apply(old, patch) == new


def test_apply_leaves_the_base_alone():
    base = {"a": {"b": [1, 2]}}
    apply(base, diff(base, {"a": {"b": [1]}}))
    assert base == {"a": {"b": [1, 2]}}


@pytest.mark.parametrize("base, patch", [
    ({"a": 1}, "nope"),
    ({"a": 1}, {"p": {"missing": {"s": {}}}}),
    ([1, 2], {"s": {"5": 1}}),
    ([1, 2], {"s": {"x": 1}}),
    ([1, 2], {"n": -1}),
    ([1, 2], {"n": True}),
    (3, {"s": {}}),
    ({"a": 1}, {"s": [1]}),
    ({"a": 1}, {"d": "a"}),
])
def test_a_patch_that_does_not_fit_is_a_wire_error(base, patch):
    with pytest.raises(WireError):
        apply(base, patch)
