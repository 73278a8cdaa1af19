"""A column first written past the block 🤗 datasets types a JSON-lines file by (``polyrl.late_columns``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyrl.data import load_dataset
from polyrl.errors import ConfigError

#: rows of about 1 KB: 11,000 of them pass datasets' first 10 MB block
_EARLY = 11_000


def _late_file(path: Path, early: dict, late: dict) -> Path:
    """``_EARLY`` rows of ``early`` (padded), then three rows of ``late``: a column only ``late``
    names is first seen past datasets' first block, so datasets cannot read the file."""
    pad = "x" * 1000
    with path.open("w") as fh:
        for i in range(_EARLY):
            fh.write(json.dumps({**early, "note": f"{i} {pad}"}) + "\n")
        for i in range(3):
            fh.write(json.dumps({**late, "note": str(i)}) + "\n")
    return path


def test_a_prompt_column_written_only_in_late_rows_names_its_first_line(tmp_path):
    path = _late_file(tmp_path / "late.jsonl", {"question": "2 + 2 ="}, {"question": "1 + 1 =", "prompt": "1 + 1 ="})
    with pytest.raises(ConfigError) as err:
        load_dataset(path=str(path))
    assert err.value.field == "data.prompt_column"
    assert f"first appears at {path} line {_EARLY + 1} (row {_EARLY})" in str(err.value)
    assert 'write "prompt": null' in str(err.value)


@pytest.mark.parametrize(("reward", "field"), [
    ({"name": "numeric_match"}, "rewards[0].options.column"),
    ({"name": "exact_match", "options": {"column": "answer"}}, "rewards[0].options.column"),
    ({"function": "REWARD:by_answer"}, "rewards[0].function"),
])
def test_an_answer_column_written_only_in_late_rows_is_refused_before_any_model_loads(tmp_path, tiny_model_dir,
                                                                                        reward, field):
    """Each row before it reached the reward without an answer, failing steps hours in (a function's
    parameter got None for those rows: TRL could not load the file at all)."""
    pytest.importorskip("polyrl_torch")
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    if "function" in reward:
        module = tmp_path / "rewards_late.py"
        module.write_text("def by_answer(completions, answer, **kwargs):\n    return [float(a == c) for a, c in "
                          "zip(answer, completions)]\n")
        reward = {"function": f"{module}:by_answer"}

    path = _late_file(tmp_path / "late.jsonl", {"prompt": "2 + 2 ="}, {"prompt": "1 + 1 =", "answer": "2"})
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir}, "rewards": [reward], "backends": {"train": "torch"},
        "data": {"path": str(path)}, "train": {"steps": 1, "prompts_per_step": 2, "threads": 1,
                                               "output_dir": str(tmp_path / "run")}})
    with pytest.raises(ConfigError) as err:
        Trainer(config, check_only=True)
    assert err.value.field == field
    assert f"column 'answer', which {field} reads, first appears at {path} line {_EARLY + 1}" in str(err.value)


def test_a_late_column_nothing_reads_is_kept_for_the_rows_that_have_it(tmp_path):
    """Only a column the run reads is refused: the others stay as Python reads them (with datasets' warning)."""
    path = _late_file(tmp_path / "late.jsonl", {"prompt": "2 + 2 ="}, {"prompt": "1 + 1 =", "source": "book"})
    dataset = load_dataset(path=str(path))
    assert dataset.late_columns == {"source": f"{path} line {_EARLY + 1} (row {_EARLY})"}
    assert dataset[len(dataset) - 1]["source"] == "book" and "source" not in dataset[0]
