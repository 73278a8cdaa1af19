"""TRL's completions files and ``polyrl.api.run``'s completions table. With ``log_completions=True``
TRL's ``GRPOTrainer.log`` writes each log's table to ``output_dir/completions/completions_{global_step:05d}.parquet``
(columns step, prompt, completion, one per reward, the log_extra ones, advantage), which a TRL user's
scripts read: polyrl wrote none. ``polyrl.api.run(grpo_config=trl.GRPOConfig(...))`` sent the table
to the trackers every step, whatever ``log_completions`` said: it now follows the switch and TRL's
logging steps, as ``polyrl.trl.GRPOTrainer`` does. Real ``trl.GRPOConfig`` and training, no mocks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("tensorboard")

from polyrl import api  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from test_trl_log_completions import TABLE, _steps_by_tag  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def _files(run: Path) -> list[str]:
    folder = run / "completions"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_log_completions_writes_trls_parquet_file_at_each_log(tiny_model_dir, tmp_path):
    """3 steps, ``logging_steps=2``: TRL writes completions_00002 (the log) and completions_00003 (the
    end-of-training summary), each with TRL's columns and types; its default writes none. Step 2
    ends an epoch (4 prompts, 2 a step), whose log comes before the step's line is recorded: its
    table held step 1's records."""
    import json

    args = grpo_args(tmp_path, max_steps=3, max_completion_length=4, logging_steps=2, log_completions=True)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset(4)).train()
    run = tmp_path / "run"
    assert _files(run) == ["completions_00002.parquet", "completions_00003.parquet"]
    table = pd.read_parquet(run / "completions" / "completions_00002.parquet")
    recorded = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert list(zip(table["prompt"], table["completion"])) == [(r["prompt"], r["completion"]) for r in recorded
                                                                if r["step"] == 2]
    assert list(table.columns) == ["step", "prompt", "completion", "short", "advantage"]
    assert table["step"].tolist() == [2] * len(table) and len(table) > 0
    assert str(table["step"].dtype) == "int64"
    assert str(table["short"].dtype) == str(table["advantage"].dtype) == "float64"
    assert all(p.startswith("What is ") for p in table["prompt"])
    assert all(isinstance(c, str) for c in table["completion"])
    # each score is the reward the record has in completions.jsonl
    assert all(math.isclose(s, -len(c) / 10, abs_tol=1e-6) for s, c in zip(table["short"], table["completion"]))
    off = tmp_path / "off"
    args = grpo_args(off, max_steps=1, max_completion_length=4)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset(4)).train()
    assert not (off / "run" / "completions").exists()


@pytest.mark.parametrize("chat", [False, True])
def test_the_files_schema_is_the_one_trls_own_trainer_writes(tiny_model_dir, tmp_path, chat):
    """The same config and data through TRL's ``GRPOTrainer`` and polyrl's: the same file name,
    columns and types (a chat's prompt and completion lists of role/content messages in both)."""
    import datasets
    import pyarrow.parquet as pq

    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + 1?"}] if chat else f"What is {i} + 1?",
             "answer": str(i + 1)} for i in range(4)]
    schemas = []
    for name, trainer in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        args = grpo_args(tmp_path / name, max_completion_length=4, log_completions=True)
        trainer(model=tiny_model_dir, reward_funcs=[short], args=args,
                train_dataset=datasets.Dataset.from_list(rows)).train()
        assert _files(tmp_path / name / "run") == ["completions_00001.parquet"], name
        schemas.append(pq.read_schema(tmp_path / name / "run" / "completions" / "completions_00001.parquet")
                       .remove_metadata())
    assert schemas[1].equals(schemas[0]), (schemas[0], schemas[1])


def test_a_chat_prompts_completion_is_one_assistant_message_as_in_trl(tiny_model_dir, tmp_path):
    """TRL keeps a conversational prompt's completion as ``[{"role": "assistant", "content": ...}]``."""
    import datasets

    chats = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
                                         "answer": str(i + 1)} for i in range(4)])
    args = grpo_args(tmp_path, max_completion_length=4, log_completions=True)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=chats).train()
    table = pd.read_parquet(tmp_path / "run" / "completions" / "completions_00001.parquet")
    prompt, completion = list(table["prompt"][0]), list(table["completion"][0])
    assert prompt[-1]["role"] == "user" and prompt[-1]["content"].startswith("What is ")
    assert len(completion) == 1 and completion[0]["role"] == "assistant"


def test_no_folder_for_the_files_is_one_warning_not_the_end_of_the_run(tiny_model_dir, tmp_path, capsys):
    """``output_dir/completions`` taken by a file: the run trains on and says why there are no files."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "completions").write_text("not a folder")
    args = grpo_args(tmp_path, max_completion_length=4, log_completions=True)
    GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset(4)).train()
    assert (tmp_path / "run" / "completions.jsonl").read_text().strip()
    captured = capsys.readouterr()
    assert "no completions parquet files for this run" in captured.out + captured.err


def _api_run(model: str, tmp_path: Path, **fields) -> dict[str, list[int]]:
    args = grpo_args(tmp_path, max_steps=3, max_completion_length=4, logging_steps=2, report_to="tensorboard",
                     **fields)
    api.run(api.grpo, policy=api.Agent(model), prompts=[f"What is {i} + 1?" for i in range(8)],
            rewards=[lambda completions, **kw: [-len(c) / 10 for c in completions]], grpo_config=args,
            progress=False)
    return _steps_by_tag(tmp_path / "run")


def test_api_run_with_trls_default_sends_no_completions_table(tiny_model_dir, tmp_path):
    """TRL's default ``log_completions=False``: no table to the trackers (api.run sent one every step)."""
    tags = _api_run(tiny_model_dir, tmp_path)
    assert TABLE not in tags, sorted(tags)
    assert _files(tmp_path / "run") == []


def test_api_run_sends_the_table_at_trls_logging_steps_only(tiny_model_dir, tmp_path):
    """``log_completions=True``, ``logging_steps=2`` over 3 steps: the table at step 2 only (api.run's
    numbers still go every step), and TRL's parquet file of that log."""
    tags = _api_run(tiny_model_dir, tmp_path, log_completions=True)
    assert tags.get(TABLE) == [2], sorted(tags)
    assert _files(tmp_path / "run") == ["completions_00002.parquet"]


def test_a_run_that_starts_over_moves_the_earlier_runs_files_aside(tiny_model_dir, tmp_path):
    """A second ``train()`` in the same ``output_dir`` moves the earlier run aside, its parquet files too:
    they were left here, the earlier run's ``completions_00002`` beside this run's ``completions_00001``."""
    for steps in (2, 1):
        args = grpo_args(tmp_path, max_steps=steps, max_completion_length=4, log_completions=True)
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset(4)).train()
    run = tmp_path / "run"
    assert _files(run) == ["completions_00001.parquet"]
    (aside,) = [p for p in (run / "previous").iterdir() if p.is_dir()]
    assert sorted(p.name for p in (aside / "completions").iterdir()) == ["completions_00001.parquet",
                                                                         "completions_00002.parquet"]
