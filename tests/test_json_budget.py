"""``polyrl.json_budget``: a reply's JSON values counted on its bytes, before parsing bounds its memory."""

from __future__ import annotations

import json

import pytest

from polyrl.json_budget import json_values, over_budget
from polyrl.remote_replies import BadReply, json_body, reply_value_budget


def _values(value) -> int:
    """The values of a parsed JSON document, keys included."""
    if isinstance(value, dict):
        return 1 + sum(1 + _values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


SAMPLES = [
    {"choices": [{"text": 'a "quoted" {brace}, [bracket]: \\ and \\" too', "token_ids": [1, 2, 3]}]},
    ['\\', '\\\\"', '"', "[[[{{{,,,:::"],  # escaped backslashes before a closing quote, structure in text
    {"a": [], "b": {}, "c": [[], [{}]], "d": None, "e": True, "f": -1.5e-3},
    [{} for _ in range(50)],
    "a string alone",
    7,
]


@pytest.mark.parametrize("value", SAMPLES, ids=range(len(SAMPLES)))
def test_the_count_bounds_the_values_parsed_and_ignores_structure_inside_strings(value):
    for text in (json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, indent=2)):
        count = json_values(text.encode())
        assert _values(value) <= count <= 3 * _values(value) + 1, (text, count)  # no more: nothing in strings


def test_a_reply_of_many_tiny_objects_is_refused_before_parsing_and_an_honest_one_passes():
    """64 MiB of ``{},`` parsed into 1.5 GB: the bound is what the request can need, not the bytes."""
    budget = reply_value_budget(2, 8, list(range(100)))
    tiny = b'{"choices": [], "pad": [' + b"{}," * budget + b"{}]}"
    with pytest.raises(BadReply, match=rf"the reply holds about \d+ JSON values, more than the {budget} that "
                                       "n = 2 of max_tokens = 8 can hold"):
        json_body(tiny, budget, "n = 2 of max_tokens = 8")
    # an honest chat reply (vLLM's shape: the prompt's ids at the top, long tokens' bytes) fits
    entry = {"token": "=" * 40, "logprob": -0.25, "bytes": [61] * 40, "top_logprobs": []}
    choice = {"index": 0, "message": {"role": "assistant", "content": "=" * 320}, "finish_reason": "length",
              "token_ids": [300] * 8, "logprobs": {"content": [entry] * 8}}
    honest = json.dumps({"id": "chatcmpl-1", "model": "m", "choices": [choice, {**choice, "index": 1}],
                         "prompt_token_ids": list(range(100)), "usage": {"prompt_tokens": 100}}).encode()
    assert over_budget(honest, budget) is None
    assert len(json_body(honest, budget)["choices"]) == 2
    # a prompt the server tokenizes: its JSON's bytes bound its token count
    assert reply_value_budget(1, 8, [{"role": "user", "content": "x" * 1000}]) > 2 * 1000
