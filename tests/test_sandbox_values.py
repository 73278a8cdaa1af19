"""The typed values that cross from a sample to the harness: exact round trips, nothing else."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyrl.sandbox.values import MAX_DEPTH, MAX_SAME_HASH, ProtocolError, decode, encode

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
           | st.binary(max_size=20) | st.complex_numbers(allow_nan=False))
hashables = st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.binary(max_size=10)
data = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                    | st.dictionaries(hashables, inner, max_size=4) | st.frozensets(hashables, max_size=4)
                    | st.sets(hashables, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(data)
def test_round_trip_is_exact(value):
    back = decode(encode(value))
    assert back == value
    assert type(back) is type(value)


def test_nan_and_infinities_survive():
    assert math.isnan(decode(encode(float("nan"))))
    assert decode(encode(float("-inf"))) == float("-inf")


def test_subclasses_and_objects_are_not_data():
    class Int(int):
        pass

    class Str(str):
        pass

    for value in (Int(3), Str("x"), object(), [1, Int(2)], {"k": Str("v")}, (1, object()), len):
        assert encode(value) is None


def test_too_deep_is_not_data():
    nested: list = []
    for _ in range(MAX_DEPTH + 2):
        nested = [nested]
    assert encode(nested) is None


def test_ints_past_the_decimal_digit_limit_cross_exactly():
    """More digits than ``str(int)`` may print (4300) crossed as no value: a right ``2 ** 100000``
    or ``factorial(5000)`` failed every check. They cross in hex, which has no such limit."""
    for value in (10 ** 5000, -(3 ** 20000), [1, 2 ** 70000], {2 ** 70000: -(2 ** 70001)}):
        back = decode(encode(value))
        assert back == value and type(back) is type(value)
    assert encode(10 ** 4000) == ["i", str(10 ** 4000)]  # below it: decimal, as before


@pytest.mark.parametrize("bad", [None, [], ["?"], ["i", 3], ["i", "1e9"], ["b", 1], ["f", "1" * 50], ["s", 5],
                                 ["S", [["l", []]]], ["d", [["s", "k"]]], "n", ["n", 1], ["y", "zz"],
                                 ["h", "zz"], ["h", 5], ["h", "-"], ["h", " ff"]])
def test_malformed_messages_are_refused(bad):
    with pytest.raises(ProtocolError):
        decode(bad)


def test_values_built_to_share_a_hash_are_refused():
    """More than MAX_SAME_HASH distinct values of one container with one hash: a protocol error
    (as a set, dict keys or values, or a list a test might turn into a set); equal values are one."""
    p = 2**61 - 1
    colliding = [i * p for i in range(MAX_SAME_HASH + 1)]
    for value in (set(colliding), dict.fromkeys(colliding), dict(enumerate(colliding)),
                  colliding, tuple(colliding)):
        with pytest.raises(ProtocolError, match="collide"):
            decode(encode(value))
    fine = [0] * 1000 + colliding[:MAX_SAME_HASH] + [-1, -2, float("nan"), float("nan")]
    back = decode(encode(fine))
    assert back[:-2] == fine[:-2] and len(back) == len(fine)
