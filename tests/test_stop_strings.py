"""``polyrl.backend_kit.stopping.StopStrings`` on a real tokenizer (the tiny model's byte-level BPE):
every in-process backend ends a completion where the newest token completes a stop string, and
never before, however many tokens the stop spans or the text leaves out."""

from __future__ import annotations

import pytest

from polyrl.backend_kit.stopping import StopStrings
from polyrl.backend_kit.tokens import completion_decoder


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _first_hit(tok, ids: list[int], stops: list[str]) -> int | None:
    """The number of tokens after which the sampling loop would end the row (None: never)."""
    stop = StopStrings(completion_decoder(tok), stops)
    return next((k for k in range(1, len(ids) + 1) if stop.hit(ids[:k])), None)


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def _ends_at(tok, ids: list[int], at: int | None, stop: str) -> bool:
    """Whether token ``at`` is the one that completes ``stop`` (the text runs to its end)."""
    decode = completion_decoder(tok)
    return at is not None and stop in decode(ids[:at]) and stop not in decode(ids[:at - 1])


def test_a_stop_spanning_special_tokens_the_text_leaves_out_is_found(tok):
    """Special tokens the text leaves out (<|im_end|> sampled under ignore_eos) spell no characters:
    the window of 4 tokens a character did not reach back past them, so the text held "ab" and the
    row sampled on to max_tokens as if no stop had come."""
    ids = _ids(tok, "x a") + [tok.convert_tokens_to_ids("<|im_end|>")] * 20 + _ids(tok, "b c")
    decode = completion_decoder(tok)
    assert decode(ids) == "x ab c"
    assert _first_hit(tok, ids, ["ab"]) == len(_ids(tok, "x a")) + 20 + 1
    assert _first_hit(tok, ids, ["x ab c"]) == len(ids)


def test_a_stop_ending_in_a_character_split_over_byte_tokens_ends_at_its_last_byte(tok):
    text = "The answer is 日本 and 本日"
    ids = _ids(tok, text)
    assert len(_ids(tok, "日")) == len(_ids(tok, "本")) == 3  # one byte token each: a character spans three
    assert _ends_at(tok, ids, _first_hit(tok, ids, ["日本"]), "日本")
    assert completion_decoder(tok)(ids[:_first_hit(tok, ids, ["日本"])]).endswith("日本")  # not at its first byte
    assert _ends_at(tok, ids, _first_hit(tok, ids, ["本日", "s 日本 an"]), "s 日本 an")  # the first completed


def test_long_overlapping_and_unreachable_stops(tok):
    text = "one two three four five six seven eight nine ten eleven twelve"
    ids = _ids(tok, text)
    spanning = text[3:]  # every token but the first's
    assert _first_hit(tok, ids, [spanning]) == len(ids)
    assert _first_hit(tok, ids, [text + " thirteen", "x" * 10_000]) is None  # longer than any completion
    # overlapping: the one completed first ends the row
    assert _ends_at(tok, ids, _first_hit(tok, ids, ["seven eight nine", "six seven"]), "six seven")
