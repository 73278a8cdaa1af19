"""``polyrl serve``'s request checks as plain functions (no server): values a hostile or careless
client sends that used to pass them and came back as garbage, a silently ignored field or a 500."""

from __future__ import annotations

import pytest

from polyrl.serve import Faults
from polyrl.serving import requests as req
from polyrl.serving.api_error import ApiError
from polyrl.serving.limits import Limits


def _refused(body: dict, param: str) -> str:
    with pytest.raises(ApiError) as caught:
        req.sampling(body, Limits(), 16)
    assert caught.value.status == 400 and caught.value.param == param, caught.value.message
    return caught.value.message


def test_a_repetition_penalty_too_small_to_sample_with_is_a_400_not_token_0_each_time():
    """1e-320 is 0 in float32: a seen token's logit / 0 is inf, every probability NaN, and the torch
    sampler answered 200 with token 0 (``<|endoftext|>``) at each step, as a tiny temperature did."""
    for tiny in (1e-320, 1e-300, 1e-6):
        assert "too small to sample with" in _refused({"repetition_penalty": tiny}, "repetition_penalty")
    assert req.sampling({"repetition_penalty": 1e-5}, Limits(), 16).repetition_penalty == 1e-5  # the edge
    assert req.sampling({"repetition_penalty": 1.3}, Limits(), 16).repetition_penalty == 1.3


def test_a_stop_string_with_a_lone_surrogate_is_a_400_not_a_stop_that_never_matches():
    """Decoded text never holds a lone surrogate (JSON's "\\ud800"), so such a stop string was
    accepted and matched nothing: the completion ran to max_tokens as if no stop were given."""
    for stop in ("\ud800", ["fine", "x\udfffy"]):
        assert "stop holds a lone surrogate" in _refused({"stop": stop}, "stop")
    assert req.sampling({"stop": ["é", "\n\n"]}, Limits(), 16).stop == ("é", "\n\n")


@pytest.mark.parametrize(("update", "field"), [
    ({"delay_s": "2"}, "delay_s"),
    ({"delay_s": float("nan")}, "delay_s"),
    ({"delay_s": -1}, "delay_s"),
    ({"die_after": "x"}, "die_after"),
    ({"fail_503_first": 1.5}, "fail_503_first"),
    ({"delay_first": True}, "delay_first"),
    ({"garbage": "yes"}, "garbage"),
    ({"delay_s": 0.5, "die_after": -3}, "die_after"),  # all or nothing: delay_s is not set either
])
def test_a_fault_of_the_wrong_type_is_a_400_and_changes_nothing(update, field):
    """``POST /polyrl/faults {"delay_s": "2"}`` was stored as given: every later generation request
    was a 500 (``'>' not supported between 'str' and 'int'``) until someone set it again."""
    faults = Faults()
    with pytest.raises(ApiError) as caught:
        faults.update(update)
    assert caught.value.status == 400 and caught.value.param == field, caught.value.message
    assert f"fault {field} must be" in caught.value.message
    assert faults == Faults()
    faults.update({"delay_s": 1, "die_after": 3, "garbage": True, "fail_503_first": 0, "delay_first": 2})
    assert faults == Faults(delay_s=1.0, delay_first=2, garbage=True, fail_503_first=0, die_after=3)
    faults.update({"die_after": None})
    assert faults.die_after is None
