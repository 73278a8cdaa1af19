"""The startup prompt-length check counts a block of prompts in one tokenizer call, and says
exactly what counting one row at a time said: the same lengths, the same row named in an error.

Why: one tokenizer call per row was most of the check's time at 100k rows
(``polyrl.backend_kit.prompt_batch``); a batch that changed one count, or an error that named the
block instead of its row, would be a silent misreading of the user's data.
"""

from __future__ import annotations

import functools

import pytest
from family_chat import family

from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.prompt_batch import encode_prompts
from polyrl.backend_kit.tokens import given_a_start, text_prompt_ids
from polyrl.data import check_prompt_lengths, from_rows
from polyrl.errors import ConfigError

PROMPTS = [
    "", " ", "What is 2 + 3?", "spelled <|im_end|>\n<|im_start|>assistant\n inside", "naïve 日本語 🙂 " * 40,
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}],
    [{"role": "user", "content": "a <|im_end|> in my text"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "x"}],
]


def _one(tok, prompt):
    """What every backend's ``encode_prompt`` gives a dataset prompt."""
    if isinstance(prompt, str):
        return text_prompt_ids(tok, prompt)
    return given_a_start(tok, encode_chat_literal(tok, prompt, None, True))


def test_a_batch_gives_every_prompt_the_ids_one_call_each_gives(smollm2_tokenizer):
    one = functools.partial(_one, smollm2_tokenizer)
    assert encode_prompts(smollm2_tokenizer, PROMPTS, one, "smol") == [one(p) for p in PROMPTS]


def test_the_torch_engine_encodes_a_batch_as_it_encodes_each_prompt(tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    reg = get_registry()
    if not reg.status("torch").available:
        pytest.skip(f"torch backend not usable: {reg.status('torch').reason}")
    raw = Engine(reg, "torch", EngineConfig(model=tiny_model_dir, role="generate")).raw
    assert raw.encode_prompts(PROMPTS) == [raw.encode_prompt(p) for p in PROMPTS]


def _counters(tok):
    """(per-row count, batch count) on ``tok``, and the rows the per-row one was asked for."""
    asked: list[int] = []

    def count(prompt):
        asked.append(1)
        return len(_one(tok, prompt))

    def count_many(prompts):
        return [len(ids) for ids in encode_prompts(tok, prompts, functools.partial(_one, tok), "smol")]
    return count, count_many, asked


def _rows(n: int, at: dict[int, object]):
    return [{"prompt": at.get(i, [{"role": "user", "content": f"question {i}"}]), "answer": str(i)} for i in range(n)]


def _error(call) -> tuple[str, str | None, str | None]:
    with pytest.raises(ConfigError) as info:
        call()
    return info.value.message, info.value.field, info.value.fix


def test_an_overlong_row_past_the_first_block_is_named_as_before(smollm2_tokenizer):
    ds = from_rows(_rows(2500, {2100: "word " * 300, 2300: "word " * 400}), name="mine")
    count, count_many, asked = _counters(smollm2_tokenizer)
    batched = _error(lambda: check_prompt_lengths(ds, count, 256, count_many=count_many))
    assert not asked  # every count came from the batch
    assert batched == _error(lambda: check_prompt_lengths(ds, count, 256))
    assert batched[0].startswith("row 2100 of mine: the prompt has 301 tokens") and "2 of 2500 prompts" in batched[0]
    kept, dropped = check_prompt_lengths(ds, count, 256, drop=True, count_many=count_many)
    assert dropped == 2 and [r["answer"] for r in kept] == [str(i) for i in range(2500) if i not in (2100, 2300)]


def test_a_row_the_template_refuses_is_named_as_before(smollm2_tokenizer):
    """Gemma's template raises on roles that do not alternate: the batch of that row's block fails,
    and the row-by-row count names the row, as it always did."""
    tok = family(smollm2_tokenizer, "gemma3")[0]
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    ds = from_rows(_rows(2500, {1500: bad}), name="mine")
    count, count_many, _ = _counters(tok)
    batched = _error(lambda: check_prompt_lengths(ds, count, 4096, count_many=count_many))
    assert batched == _error(lambda: check_prompt_lengths(ds, count, 4096))
    assert batched[0].startswith("row 1500 of mine: the model's chat template refused the prompt"), batched[0]
