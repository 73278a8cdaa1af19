"""Datasets: the built-in arithmetic task, JSONL loading, validation, and the resumable sampler."""

from __future__ import annotations

import json

import pytest

from polyrl.data import Dataset, PromptSampler, from_rows, load_dataset, load_jsonl, split_dataset
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
