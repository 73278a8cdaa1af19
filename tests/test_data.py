"""Datasets: the built-in arithmetic task, JSONL loading, validation, and the resumable sampler."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyrl.data import (
    Dataset,
    PromptSampler,
    check_prompt_lengths,
    from_rows,
    load_dataset,
    load_jsonl,
    split_dataset,
)
from polyrl.errors import ConfigError
from polyrl.tasks import arithmetic


def _questions(ds: Dataset) -> set[str]:
    return {row["question"] for row in ds}


def test_arithmetic_rows_and_determinism():
    a = load_dataset(task="arithmetic", options={"count": 50, "seed": 3})
    b = load_dataset(task="arithmetic", options={"count": 50, "seed": 3})
    assert a.rows == b.rows
    assert a.rows != load_dataset(task="arithmetic", options={"count": 50, "seed": 4}).rows
    row = a[0]
    assert row["prompt"] == [{"role": "user", "content": f"{row['question']} Answer with the number only."}]
    assert isinstance(row["answer"], str)
    for r in a:
        x, op, y = r["question"].removeprefix("What is ").removesuffix("?").split()
        assert str(eval(f"{x}{op}{y}")) == r["answer"]  # noqa: S307 - our own generated text
        assert 10 <= int(x) <= 99 and 10 <= int(y) <= 99


def test_arithmetic_options():
    rows = arithmetic({"count": 30, "ops": "-", "digits": 1, "chat": False}, "train", "question_text")
    assert all(isinstance(r["question_text"], str) and " - " in r["question"] for r in rows)
    assert all(int(r["answer"]) >= 0 for r in rows)


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_train_and_eval_are_disjoint(seed):
    opts = {"count": 400, "digits": 1, "seed": seed}
    train = load_dataset(task="arithmetic", options=opts)
    held = load_dataset(task="arithmetic", options={**opts, "count": 100}, split="eval")
    assert _questions(train).isdisjoint(_questions(held))
    assert len(held) == 100
    # the held-out problems do not depend on the seed that drew them
    other = load_dataset(task="arithmetic", options={**opts, "seed": seed + 100, "count": 400})
    assert _questions(other).isdisjoint(_questions(held))


@pytest.mark.parametrize(("options", "field"), [
    ({"count": 0}, "data.options.count"),
    ({"ops": "/"}, "data.options.ops"),
    ({"digits": 12}, "data.options.digits"),
    ({"eval_fraction": 1.0}, "data.options.eval_fraction"),
    ({"cuont": 3}, "data.options.cuont"),
])
def test_arithmetic_bad_options(options, field):
    with pytest.raises(ConfigError) as info:
        load_dataset(task="arithmetic", options=options)
    assert info.value.field == field


def test_unknown_task():
    with pytest.raises(ConfigError, match="arithmetic") as info:
        load_dataset(task="gsm9k")
    assert info.value.field == "data.task"


def test_jsonl_loading(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"prompt": "2+2?", "answer": "4"}, {"prompt": [{"role": "user", "content": "hi"}], "answer": "x"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    ds = load_jsonl(path)
    assert ds.rows == rows and ds.columns == ["prompt", "answer"]
    assert load_dataset(path=str(path)).rows == rows


@pytest.mark.parametrize(("content", "field", "match"), [
    ('{"prompt": "a"}\n{oops\n', "data.path", r":2 is not valid JSON"),
    ('["a"]\n', "data.path", r":1 is a JSON list"),
    ("\n", "data.path", "has no rows"),
    ('{"question": "a", "answer": "b"}\n', "data.prompt_column", r"no column 'prompt' \(its columns: answer, question\)"),
    ('{"prompt": 3}\n', "data", "string or a list"),
    ('{"prompt": [{"role": "user"}]}\n', "data", "string or a list"),
    ('{"prompt": "  "}\n', "data", "empty"),
])
def test_bad_jsonl(tmp_path, content, field, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError, match=match) as info:
        load_jsonl(path)
    assert info.value.field == field


def test_bad_sources():
    with pytest.raises(ConfigError, match="not found"):
        load_jsonl("/no/such/file.jsonl")
    with pytest.raises(ConfigError, match="exactly one"):
        load_dataset()
    with pytest.raises(ConfigError, match="exactly one"):
        load_dataset(task="arithmetic", path="x.jsonl")
    with pytest.raises(ConfigError, match="no rows"):
        from_rows([])
    with pytest.raises(ConfigError, match="not an object"):
        from_rows(["just a string"])


def test_prompt_column_option_and_rows():
    ds = load_dataset(rows=[{"q": "hello", "answer": "1"}], prompt_column="q")
    assert ds.prompts() == ["hello"]


def test_file_eval_split_is_held_out():
    rows = [{"prompt": f"p{i}"} for i in range(20)]
    train = load_dataset(rows=rows, options={"eval_count": 5, "seed": 1})
    held = load_dataset(rows=rows, options={"eval_count": 5, "seed": 1, "count": 3}, split="eval")
    assert len(train) == 15 and len(held) == 3
    assert set(train.prompts()).isdisjoint(held.prompts())
    with pytest.raises(ConfigError) as info:
        load_dataset(rows=rows, options={"count": 3}, split="eval")
    assert info.value.field == "data.options.eval_count"
    t, e = split_dataset(from_rows(rows), 4, seed=2)
    assert len(t) == 16 and len(e) == 4 and set(t.prompts()).isdisjoint(e.prompts())


def test_sampler_epochs_are_shuffled_permutations():
    ds = from_rows([{"prompt": f"p{i}"} for i in range(10)])
    sampler = PromptSampler(ds, batch_size=5, seed=0)
    first = sampler.next_batch() + sampler.next_batch()
    second = sampler.next_batch() + sampler.next_batch()
    assert sorted(r["prompt"] for r in first) == sorted(ds.prompts())
    assert sorted(r["prompt"] for r in second) == sorted(ds.prompts())
    assert [r["prompt"] for r in first] != [r["prompt"] for r in second]
    assert sampler.epoch == 2 and sampler.position == 0
    again = PromptSampler(ds, batch_size=5, seed=0)
    assert again.next_batch() + again.next_batch() == first


@pytest.mark.parametrize(("batch", "stop_after"), [(3, 0), (3, 4), (7, 3), (25, 2)])
def test_sampler_resume_is_exact(batch, stop_after):
    ds = from_rows([{"prompt": f"p{i}"} for i in range(10)])
    reference = PromptSampler(ds, batch, seed=5)
    expected = [reference.next_batch() for _ in range(stop_after + 6)]
    first = PromptSampler(ds, batch, seed=5)
    for _ in range(stop_after):
        first.next_batch()
    state = json.loads(json.dumps(first.state()))  # survives a JSON checkpoint
    resumed = PromptSampler(ds, batch, seed=5)
    resumed.load_state(state)
    assert [resumed.next_batch() for _ in range(6)] == expected[stop_after:]


def test_ending_an_epoch_starts_the_next_one_and_resumes_there():
    """transformers' should_epoch_stop: the rest of the epoch is left, the state (epoch, position)
    says so; a batch that already ran into the next epoch stays there."""
    ds = from_rows([{"prompt": f"p{i}"} for i in range(5)])
    reference = PromptSampler(ds, 4, seed=3)
    reference.load_state({**reference.state(), "epoch": 1})
    epoch_1 = reference.next_batch()  # epoch 1's first 4 rows
    sampler = PromptSampler(ds, 2, seed=3)
    sampler.next_batch()
    sampler.end_epoch(0)
    assert (sampler.epoch, sampler.position) == (1, 0)
    resumed = PromptSampler(ds, 2, seed=3)
    resumed.load_state(json.loads(json.dumps(sampler.state())))
    assert resumed.next_batch() + resumed.next_batch() == epoch_1
    resumed.next_batch()  # the epoch's last row and epoch 2's first
    resumed.end_epoch(1)  # left already: nothing skipped
    assert (resumed.epoch, resumed.position) == (2, 1)


def test_sampler_refuses_a_different_dataset_or_seed():
    ds = from_rows([{"prompt": f"p{i}"} for i in range(10)])
    state = PromptSampler(ds, 3, seed=0).state()
    other = from_rows([{"prompt": f"q{i}"} for i in range(10)])
    with pytest.raises(ConfigError, match="dataset differs"):
        PromptSampler(other, 3, seed=0).load_state(state)
    with pytest.raises(ConfigError) as info:
        PromptSampler(ds, 3, seed=1).load_state(state)
    assert info.value.field == "train.seed"
    with pytest.raises(ConfigError):
        PromptSampler(ds, 0)


# --- chat roles, encodings, option errors --------------------------------------------------------


@pytest.mark.parametrize(("role", "hint"), [("wizard", "use one of"), ("usr", "did you mean 'user'"),
                                            ("User", "did you mean 'user'"), ("Assistant", "did you mean 'assistant'")])
def test_unknown_chat_roles_are_refused_naming_the_line(tmp_path, role, hint):
    path = tmp_path / "roles.jsonl"
    good = json.dumps({"prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"},
                                  {"role": "user", "content": "go"}]})
    bad = json.dumps({"prompt": [{"role": "system", "content": "s"}, {"role": role, "content": "hi"}]})
    path.write_text(f"{good}\n\n{good}\n{bad}\n")
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    text = str(info.value)
    assert info.value.field == "data" and f"{path} line 4 (row 2)" in text and repr(role) in text, text
    assert hint in info.value.fix, info.value.fix


def test_known_chat_roles_pass():
    rows = [{"prompt": [{"role": r, "content": "x"}, {"role": "user", "content": "y"}]}
            for r in ("system", "user", "assistant", "tool", "developer", "ipython")]
    assert len(from_rows(rows)) == 6


@pytest.mark.parametrize("name", ["bom.jsonl", "bom.json"])
def test_a_utf8_bom_is_read_transparently(tmp_path, name):
    path = tmp_path / name
    rows = [{"prompt": "hi", "answer": "1"}, {"prompt": "yo", "answer": "2"}]
    text = json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in rows)
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_dataset(path=str(path)).rows == rows


def test_a_bom_after_the_first_line_is_still_an_error(tmp_path):
    path = tmp_path / "mid.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n\xef\xbb\xbf{"prompt": "b"}\n')
    with pytest.raises(ConfigError, match=r"mid.jsonl:2 is not valid JSON"):
        load_dataset(path=str(path))


def test_a_non_text_prompt_is_shown_with_its_type(tmp_path):
    path = tmp_path / "int.jsonl"
    path.write_text('{"prompt": 0}\n')
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path))
    assert "got 0 (int)" in str(info.value) and "'0'" not in str(info.value), str(info.value)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"task": "arithmetic", "options": {"count": 0}}, "data.options.count"),
    ({"task": "arithmetic", "options": {"digits": 0}}, "data.options.digits"),
    ({"task": "arithmetic", "options": {"seed": -1}}, "data.options.seed"),
    ({"rows": [{"prompt": "a"}, {"prompt": "b"}], "options": {"count": -1}}, "data.options.count"),
    ({"rows": [{"prompt": "a"}, {"prompt": "b"}], "options": {"seed": "x"}}, "data.options.seed"),
])
def test_integer_option_errors_say_how_to_fix_them(kwargs, field):
    with pytest.raises(ConfigError) as info:
        load_dataset(**kwargs)
    assert info.value.field == field and info.value.fix, str(info.value)


# --- prompt lengths, checked once at startup ----------------------------------------------------


def _words(prompt) -> int:
    """A stand-in tokenizer: one token per word (chat: per word of every message, plus 2 per turn)."""
    if isinstance(prompt, str):
        return len(prompt.split())
    return sum(len(m["content"].split()) + 2 for m in prompt)


def _huge_mid(tmp_path) -> Path:
    path = tmp_path / "huge_mid.jsonl"
    lines = [json.dumps({"prompt": f"short {i}", "answer": str(i)}) for i in range(10)]
    lines.insert(5, json.dumps({"prompt": "word " * 500, "answer": "x"}))  # line 6, row 5
    lines.insert(2, "")  # a blank line: the long row is now on line 7, still row 5
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_overlong_prompt_is_named_by_file_line_and_row(tmp_path):
    path = _huge_mid(tmp_path)
    ds = load_dataset(path=str(path))
    with pytest.raises(ConfigError) as info:
        check_prompt_lengths(ds, _words, 64)
    text = str(info.value)
    assert info.value.field == "model.max_length"
    assert f"{path} line 7 (row 5)" in text and "500 tokens" in text and "max_length = 64" in text, text
    assert "raise model.max_length" in info.value.fix and "data.drop_overlong" in info.value.fix
    assert check_prompt_lengths(ds, _words, 501) == (ds, 0)  # 500 < 501 fits


def test_overlong_rows_are_counted_and_can_be_dropped(tmp_path):
    ds = from_rows([{"prompt": "a " * n} for n in (3, 80, 5, 90, 2)], name="mine")
    with pytest.raises(ConfigError, match=r"row 1 of mine: .*80 tokens.*2 of 5 prompts") as info:
        check_prompt_lengths(ds, _words, 10)
    assert info.value.field == "model.max_length"
    kept, dropped = check_prompt_lengths(ds, _words, 10, drop=True)
    assert dropped == 2 and [len(p.split()) for p in kept.prompts()] == [3, 5, 2]
    with pytest.raises(ConfigError, match="every prompt"):
        check_prompt_lengths(ds, _words, 2, drop=True)


def test_held_out_rows_keep_their_place_in_the_file(tmp_path):
    path = _huge_mid(tmp_path)
    train = load_dataset(path=str(path), options={"eval_count": 4, "seed": 3})
    held = load_dataset(path=str(path), options={"eval_count": 4, "seed": 3}, split="eval")
    which = train if any(len(p.split()) > 100 for p in train.prompts()) else held
    with pytest.raises(ConfigError, match=rf"{path} line 7 \(row 5\)"):
        check_prompt_lengths(which, _words, 64)


def test_the_chat_the_model_sees_is_measured():
    """A system prompt counts: the rendered chat is what generation encodes."""
    ds = from_rows([{"prompt": "one two three"}], system_prompt="a b c d e f g h")
    with pytest.raises(ConfigError, match="15 tokens"):  # (8 + 2) + (3 + 2)
        check_prompt_lengths(ds, _words, 15)


@pytest.mark.parametrize(("message", "says", "fix"), [
    ({"role": "user", "content": [{"type": "text", "text": "Count to 1:"}]}, "message 0's content is a list of parts",
     'join the text of its {"type": "text", "text": ...} parts'),
    ({"role": "user"}, 'message 0 has no string "content"', "chat messages"),
    ({"content": "hi"}, 'message 0 has no string "role"', "chat messages"),
])
def test_a_malformed_chat_message_is_named_with_what_is_wrong_with_it(message, says, fix):
    """A list of messages used to get "must hold ... a list of {role, content} messages", which it
    is: the error now says which message is wrong and how (typed content parts: join their text)."""
    with pytest.raises(ConfigError) as info:
        Dataset([{"prompt": [message]}])
    assert says in str(info.value) and fix in info.value.fix, info.value


def test_a_parquet_of_multimodal_messages_gets_the_same_fix(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from polyrl.data import load_dataset

    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]]}), path)
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    assert "content is a list of parts (multimodal messages), not a string" in str(info.value)
    assert 'join the text of its {"type": "text", "text": ...} parts' in info.value.fix


@pytest.mark.parametrize(("prompts", "words"), [
    (["ok", "\u00a0\u3000"], "the prompt in column 'prompt' is empty"),
    (["ok", "\u200b"], "the prompt in column 'prompt' is empty: it holds only invisible characters (U+200B ZERO "
                       "WIDTH SPACE)"),
    (["ok", " \u2060\ufeff\u200d\n"], "is empty: it holds only invisible characters (U+2060 WORD JOINER, U+FEFF "
                                      "ZERO WIDTH NO-BREAK SPACE, U+200D ZERO WIDTH JOINER)"),
    (["ok", "\u3164\ufe0f"], "is empty: it holds only invisible characters (U+3164 HANGUL FILLER, U+FE0F "
                              "VARIATION SELECTOR-16)"),
], ids=["unicode spaces", "zero-width space", "format characters", "other default-ignorables"])
@pytest.mark.parametrize("store", ["jsonl", "parquet"])
def test_a_prompt_of_blank_text_is_refused_from_either_store(tmp_path, prompts, words, store):
    """A Parquet prompt of no-break spaces passed (its check knew ASCII whitespace only) where the
    JSON rows' check refused it: it asks the model nothing. (A chat prompt of blank messages stays:
    with an environment its reset writes the prompt.)"""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"rows.{store}"
    if store == "jsonl":
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    else:
        pq.write_table(pa.table({"prompt": prompts}), path)
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(path), cache_dir=str(tmp_path / "cache"))
    where = "row 1 of rows.parquet" if store == "parquet" else "rows.jsonl line 2 (row 1)"  # the second row
    assert info.value.field == "data" and words in str(info.value) and where in str(info.value), info.value


@pytest.mark.parametrize("prompts", [["ok", None, ""], [[{"role": "user", "content": "ok"}], None]],
                         ids=["text", "chat"])
def test_a_null_parquet_prompt_is_named_null_not_empty(tmp_path, prompts):
    """A Parquet prompt that is null (pandas' None/NaN) was refused as "is empty", sending users
    looking for an empty string (a chat one, as having no messages): it is said to be null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": prompts}), tmp_path / "rows.parquet")
    with pytest.raises(ConfigError) as info:
        load_dataset(path=str(tmp_path / "rows.parquet"), cache_dir=str(tmp_path / "cache"))
    assert str(info.value).startswith("data: row 1 of rows.parquet: the prompt in column 'prompt' is null "
                                      "(missing), not an empty value"), info.value
    assert "df.dropna(subset=['prompt'])" in info.value.fix, info.value.fix


@pytest.mark.parametrize("store", ["rows", "parquet"])
def test_invisible_characters_beside_text_are_kept(tmp_path, store):
    """Only a prompt of invisible characters alone is refused: a zero-width space or a joiner
    inside text (an emoji sequence, a word break) is text as written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompts = ["a\u200bb", "\u200bWhat is 2 + 2?", "\U0001f469\u200d\U0001f4bb"]
    if store == "rows":
        loaded = load_dataset(rows=[{"prompt": p} for p in prompts])
    else:
        pq.write_table(pa.table({"prompt": prompts}), tmp_path / "rows.parquet")
        loaded = load_dataset(path=str(tmp_path / "rows.parquet"), cache_dir=str(tmp_path / "cache"))
    assert [row["prompt"] for row in loaded] == prompts


# --- JSON values as 🤗 datasets (so TRL) types them ----------------------------------------------


def _as_datasets_reads(tmp_path, *paths) -> list[dict]:
    """The rows TRL's user gets: ``datasets.load_dataset("json", data_files=...)``."""
    import datasets

    return list(datasets.load_dataset("json", data_files=[str(p) for p in paths], split="train",
                                      cache_dir=str(tmp_path / "hf")))


MIXED = [{"prompt": "a", "answer": 5, "meta": {"x": 1}, "tags": [1, 2], "id": 1},
         {"prompt": [{"role": "user", "content": "b"}], "answer": 5.5, "meta": {"y": "q"}, "tags": [2.5], "id": 2,
          "extra": True},
         {"prompt": "c", "answer": 7, "id": 3}]


@pytest.mark.parametrize("name", ["mixed.jsonl", "mixed.json"])
def test_json_rows_reach_rewards_typed_as_datasets_gives_them_to_trl(tmp_path, name):
    """A column holding 5 and 5.5 gave a reward int 5 here and 5.0 under TRL (which loads JSON with
    🤗 datasets), so ``str(answer) == "5.0"`` scored the row differently; a key some lines lack was
    missing here and None there. Rows now carry exactly datasets' values and types."""
    path = tmp_path / name
    path.write_text(json.dumps(MIXED) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in MIXED))
    ours = load_dataset(path=str(path)).rows
    assert repr(ours) == repr(_as_datasets_reads(tmp_path, path))  # repr: 5.0 and 5 differ, key order counts
    assert str(ours[0]["answer"]) == "5.0" and ours[0]["id"] == 1 and isinstance(ours[0]["id"], int)
    assert ours[2]["extra"] is None and ours[2]["meta"] is None and ours[1]["meta"] == {"y": "q"}
    assert ours[1]["prompt"] == MIXED[1]["prompt"]  # text and chat prompts in one column, as written
    if name.endswith(".jsonl"):
        assert repr(load_jsonl(path).rows) == repr(ours)


def test_json_files_of_one_source_are_typed_together_as_datasets_does(tmp_path):
    """datasets types every file of ``data_files`` by the first one: b.jsonl's 5 is 5.0 after a.jsonl's 5.5."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"prompt": "a", "answer": 5.5}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"prompt": "b", "answer": 5}) + "\n")
    ours = load_dataset(path=str(tmp_path / "*.jsonl")).rows
    assert repr(ours) == repr([{"prompt": "a", "answer": 5.5}, {"prompt": "b", "answer": 5.0}])
    assert repr(ours) == repr(_as_datasets_reads(tmp_path, tmp_path / "a.jsonl", tmp_path / "b.jsonl"))


def test_a_json_file_datasets_cannot_read_keeps_its_values_and_says_so(tmp_path):
    """A number past a double's range (Python reads inf, pyarrow refuses the file): TRL could not
    load it, so there is no datasets typing to match; the values stay as JSON wrote them, with a warning."""
    from structlog.testing import capture_logs

    path = tmp_path / "huge.jsonl"
    path.write_text('{"prompt": "a", "answer": 1e400}\n{"prompt": "b", "answer": 2.5}\n')
    with capture_logs() as logs:
        rows = load_dataset(path=str(path)).rows
    assert repr(rows) == repr([{"prompt": "a", "answer": float("inf")}, {"prompt": "b", "answer": 2.5}])
    (warning,) = [e for e in logs if "datasets cannot read" in e["event"]]
    assert warning["log_level"] == "warning" and warning["files"] == [str(path)] and warning["reason"]


def test_a_line_without_the_prompt_is_named_though_datasets_gives_it_none(tmp_path):
    path = tmp_path / "gap.jsonl"
    path.write_text('{"prompt": "a", "answer": "1"}\n{"question": "b", "answer": "2"}\n')
    with pytest.raises(ConfigError, match=r"gap.jsonl line 2 \(row 1\) has no column 'prompt' \(its columns: "
                                          r"answer, question\)") as info:
        load_dataset(path=str(path))
    assert info.value.field == "data.prompt_column"
