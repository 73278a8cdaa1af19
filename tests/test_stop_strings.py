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


class _CountingDecoder:
    """A stand-in tokenizer's decode: token 0 is a special token the text leaves out, any other
    one letter; counts the calls and the tokens decoded (the work a real tokenizer does)."""

    def __init__(self) -> None:
        self.calls = 0
        self.tokens = 0

    def __call__(self, ids: list[int]) -> str:
        self.calls += 1
        self.tokens += len(ids)
        return "".join(chr(ord("a") + (t - 1) % 26) for t in ids if t != 0)


def test_a_long_run_of_tokens_the_text_leaves_out_costs_little_decoding():
    """A row sampling special tokens that spell nothing (<|im_end|> under ignore_eos) widened its
    window over the whole run on every token, decoding the row each time: 4096 such tokens made
    51k decode calls over 20.5M tokens. The work now grows with the row, and a stop spanning the
    run is still found at the token that completes it."""
    decode = _CountingDecoder()
    stop = StopStrings(decode, ["ab"])
    text, run = [3] * 200 + [1], 4096  # "c" * 200 + "a", then the run, then "b"
    ids: list[int] = []
    for token in [*text, *[0] * run, 2]:
        ids.append(token)
        if stop.hit(ids):
            break
    assert len(ids) == len(text) + run + 1  # ended at the "b" completing "ab", not before
    steps = len(ids)
    assert decode.calls <= 3 * steps
    assert decode.tokens <= 3 * steps * stop.window
