"""An answer column null in every row, where a built-in reward reads it (``polyrl.null_answers``).

``polyrl launch --dry-run`` passed such a file (a Parquet column of type null, JSON lines each with
``"answer": null``) and the run scored nothing with ``numeric_match``, step after step."""

from __future__ import annotations

import json

import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError


def _jsonl(path, answers):
    path.write_text("".join(json.dumps({"prompt": f"{i} + 1 =", "answer": a}) + "\n" for i, a in enumerate(answers)))
    return str(path)


def _parquet(path, answers, kind=None):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    column = pa.nulls(len(answers)) if kind == "null" else pa.array(answers)
    pq.write_table(pa.table({"prompt": [f"{i} + 1 =" for i in range(len(answers))], "answer": column}), path)
    return str(path)


@pytest.mark.parametrize(("make", "answers", "expected"), [
    (_jsonl, [None] * 6, True),
    (_jsonl, [None] * 5 + ["6"], False),  # a mixed set: the rows without one stay unscored, as before
    (lambda p, a: _parquet(p, a, "null"), [None] * 6, True),
    (_parquet, ["1", None, "3", None, "5", None], False),
])
def test_null_everywhere_reads_the_column_as_stored(tmp_path, make, answers, expected):
    suffix = ".jsonl" if make is _jsonl else ".parquet"
    data = load_dataset(path=make(tmp_path / f"rows{suffix}", answers))
    assert data.null_everywhere("answer") is expected
    assert data.null_everywhere("missing") is False


def test_null_everywhere_counts_only_the_selected_rows(tmp_path):
    data = load_dataset(path=_parquet(tmp_path / "rows.parquet", [None, None, None, "4", "5", "6"]))
    assert data.select([0, 2]).null_everywhere("answer") and not data.select([0, 3]).null_everywhere("answer")


@pytest.mark.parametrize("where", ["train", "eval"])
def test_a_wholly_null_answer_column_is_refused_before_any_model_loads(tmp_path, tiny_model_dir, where):
    pytest.importorskip("polyrl_torch")
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    nulls = _parquet(tmp_path / "nulls.parquet", [None] * 6, "null")
    good = _jsonl(tmp_path / "good.jsonl", [str(i + 1) for i in range(6)])
    data = {"path": nulls} if where == "train" else {"path": good, "eval_path": nulls}
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir}, "rewards": [{"name": "numeric_match"}], "backends": {"train": "torch"},
        "data": data, "eval": {"count": 4 if where == "eval" else 0},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError) as err:
        Trainer(config, check_only=True)
    assert err.value.field == "rewards[0].options.column"
    what = "the training set" if where == "train" else "the held-out set"
    assert err.value.message.startswith(f"{what} (nulls.parquet): column 'answer', which reward 'numeric_match' reads "
                                     "its answer from, is null in every one of its"), err.value.message
    assert "fill in the 'answer' column" in err.value.fix


@pytest.mark.parametrize(("make", "answers", "expected"), [
    (_jsonl, [""] * 6, True),
    (_jsonl, ["", None, "  ", "", None, "\u200b"], True),  # null, empty, spaces, invisible: no answer anywhere
    (_jsonl, [""] * 5 + ["6"], False),  # a mixed set: the rows without one stay unscored, as before
    (_jsonl, [0] * 6, False),  # numbers are answers
    (_parquet, ["", None, " ", "", "", ""], True),
    (_parquet, ["", "", "", "", "", "x"], False),
    (lambda p, a: _parquet(p, a, "null"), [None] * 6, True),
])
def test_blank_everywhere_reads_null_and_empty_text_alike(tmp_path, make, answers, expected):
    suffix = ".jsonl" if make is _jsonl else ".parquet"
    data = load_dataset(path=make(tmp_path / f"rows{suffix}", answers))
    assert data.blank_everywhere("answer") is expected
    assert data.blank_everywhere("missing") is False


@pytest.mark.parametrize("make", [_jsonl, _parquet])
def test_an_answer_column_of_empty_text_in_every_row_is_refused_as_a_null_one_is(tmp_path, make):
    """`exact_match` leaves a row whose answer is "" unscored, so a column of "" passed the dry run
    and the run scored nothing with it, step after step (a null column was already refused)."""
    from polyrl.config import RewardSection
    from polyrl.null_answers import answer_columns, refuse_null

    suffix = ".jsonl" if make is _jsonl else ".parquet"
    data = load_dataset(path=make(tmp_path / f"rows{suffix}", ["", " ", "", "", "", ""]))
    with pytest.raises(ConfigError) as err:
        refuse_null(answer_columns([RewardSection(name="exact_match")]), data, "the training set")
    assert err.value.field == "rewards[0].options.column"
    assert err.value.message.startswith(f"the training set (rows{suffix}): column 'answer', which reward "
                                        "'exact_match' reads its answer from, is null or empty text in every one of "
                                        "its 6 rows"), err.value.message
