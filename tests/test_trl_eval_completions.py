"""What a TRL script's run shows of an evaluation as TRL 1.16 does: with ``log_completions=True``
``GRPOTrainer.log`` prints its completions table after an evaluation's log too (its ``_logs`` then
hold the evaluation's completions); and a reward's ``log_metric(name, ...)`` clashing with a key
only the evaluation logs (``runtime``: ``eval_runtime``) is said once, as a training clash is."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("polyrl_torch")
pytest.importorskip("trl")

from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def _held_out(n: int) -> object:
    """``n`` eval rows whose prompts no training row has, so a table's rows say which set they are."""
    import datasets

    return datasets.Dataset.from_list([{"prompt": f"Held{i}", "answer": str(i)} for i in range(n)])


def _tables(out: str) -> list[tuple[int, str]]:
    """Each rich table printed in ``out``: (its step, its text), in order."""
    starts = [m for m in re.finditer(r"─ Step (\d+) ─", out)]
    return [(int(m.group(1)), out[m.start(): starts[i + 1].start() if i + 1 < len(starts) else len(out)])
            for i, m in enumerate(starts)]


def test_log_completions_prints_the_evaluations_completions_after_its_log(tiny_model_dir, tmp_path, capsys):
    """One step evaluated at step 1 (2 held-out prompts x 2 completions): TRL prints its table after
    the training log, the evaluation's log and the end-of-training log, and after ``evaluate()``. The evaluation's table holds
    the evaluation's completions (all 4: ``num_completions_to_print=None``), with each reward's
    column and no Advantage column (polyrl's evaluation computes none; TRL's holds each eval group's
    normalized rewards); polyrl printed none for it."""
    pytest.importorskip("rich")
    args = grpo_args(tmp_path, log_completions=True, num_completions_to_print=None, eval_strategy="steps",
                     eval_steps=1, per_device_eval_batch_size=4, max_completion_length=4)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset(),
                          eval_dataset=_held_out(2))
    trainer.train()
    tables = _tables(capsys.readouterr().out)
    held = [text for _, text in tables if "Held" in text]
    assert len(held) == 1, [text[:300] for _, text in tables]  # the evaluation's table
    # after the training log's table, as TRL's log at step 1 prints it before evaluating
    assert ["Held" in text for _, text in tables][:2] == [False, True] and tables[1][0] == 1
    trainer.evaluate()  # a script's own evaluation prints its table too
    again = _tables(capsys.readouterr().out)
    assert [(step, "Held" in text and "Advantage" not in text) for step, text in again] == [(1, True)]
    table = held[0]
    assert "What is" not in table and table.count("Held") == 4  # the evaluation's rows, every one
    assert "short" in table and "Advantage" not in table
    trained = [text for _, text in tables if "What is" in text]
    assert trained and all("Advantage" in text for text in trained)  # the training tables keep theirs


def test_an_evaluations_completions_reach_the_parquet_files_and_trackers_beside_the_training_ones(tiny_model_dir,
                                                                                                 tmp_path):
    """TRL's ``log`` after an evaluation writes its completions where it writes the training ones (the
    parquet file, the W&B and trackio table); polyrl kept them in ``eval_completions.jsonl`` only. Now
    ``completions/eval_completions_00001.parquet`` holds them with TRL's columns (its Advantage NaN:
    polyrl's evaluation computes none), beside the training file, which TRL overwrites with them at
    a step that logs and evaluates; TensorBoard has them as text ``eval_completions`` at that step.
    Read back with pandas (pyarrow) and TensorBoard's own loader."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pytest.importorskip("tensorboard")
    from test_trl_log_completions import _steps_by_tag

    args = grpo_args(tmp_path, log_completions=True, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4,
                     max_completion_length=4, report_to="tensorboard")
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset(),
                          eval_dataset=_held_out(2))
    trainer.train()
    folder = tmp_path / "run" / "completions"
    assert sorted(p.name for p in folder.iterdir()) == ["completions_00001.parquet", "eval_completions_00001.parquet"]
    trained = pd.read_parquet(folder / "completions_00001.parquet")
    evaluated = pd.read_parquet(folder / "eval_completions_00001.parquet")
    assert list(evaluated.columns) == list(trained.columns) == ["step", "prompt", "completion", "short", "advantage"]
    assert all(p.startswith("What is") for p in trained["prompt"])  # not replaced by the evaluation's
    assert sorted(evaluated["prompt"]) == ["Held0", "Held0", "Held1", "Held1"] and evaluated["step"].tolist() == [1] * 4
    assert evaluated["advantage"].isna().all() and str(evaluated["short"].dtype) == "float64"
    assert all(abs(s + len(c) / 10) < 1e-6 for s, c in zip(evaluated["short"], evaluated["completion"]))
    tags = _steps_by_tag(tmp_path / "run")
    assert tags.get("eval_completions") == [1] and tags.get("completions") == [1, 1], sorted(tags)
    text = _texts(tmp_path / "run", "eval_completions")[0]
    assert text.count("Held0") == 2 and "What is" not in text
    (folder / "eval_completions_00001.parquet").unlink()
    trainer.evaluate()  # a script's own evaluation: its file in the run's folder too
    assert len(pd.read_parquet(folder / "eval_completions_00001.parquet")) == 4
    # named sets: a file each, named as their metrics (TRL wrote one name, the last set's rows)
    trainer.evaluate(eval_dataset={"a": _held_out(1), "b": _held_out(2)}, metric_key_prefix="test")
    assert [len(pd.read_parquet(folder / f"test_{name}_completions_00001.parquet")) for name in "ab"] == [2, 4]


def _texts(root, tag: str) -> list[str]:
    """The text summaries of ``tag`` under ``root``, read with TensorBoard's own loader."""
    import glob

    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    return [tensor_util.make_ndarray(value.tensor).item().decode("utf-8")
            for path in sorted(glob.glob(str(root / "**" / "events.out*"), recursive=True))
            for event in EventFileLoader(path).Load() for value in event.summary.value if value.tag == tag]


def logs_runtime(completions, log_metric, **kwargs):
    """Logs ``runtime``, a name only an evaluation's entry has (``eval_runtime``)."""
    log_metric("runtime", 1000.0)
    return [-len(c) / 10 for c in completions]


def test_a_log_metric_named_as_an_eval_only_key_keeps_the_runs_value_and_is_said_once(tiny_model_dir, tmp_path):
    """Two evaluations of a reward logging ``runtime``: TRL's entry has transformers' ``eval_runtime``
    there, which keeps the run's value (not 1000.0), and a warning says so once a run, naming the
    key and how to rename the metric; the training steps, where no key clashes, say nothing."""
    from structlog.testing import capture_logs

    args = grpo_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=4,
                     max_completion_length=4)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[logs_runtime], args=args,
                          train_dataset=prompts_dataset(), eval_dataset=_held_out(2))
    with capture_logs() as logs:
        trainer.train()
    evaluations = [h for h in trainer.state.log_history if "eval_reward" in h]
    assert len(evaluations) == 2 and all(h["eval_runtime"] != 1000.0 for h in evaluations)
    said = [e for e in logs if "log_metric('runtime', ...)" in e["event"] and e.get("log_level") == "warning"]
    assert len(said) == 1, [e["event"] for e in logs if e.get("log_level") == "warning"]
    assert "'eval_runtime'" in said[0]["event"] and "log_metric('my/runtime', ...)" in said[0]["fix"]


def test_the_evaluation_table_keeps_the_latest_generation_batch_size_rows_as_trls_deque(tmp_path, capsys):
    """TRL's ``_logs`` are deques of ``generation_batch_size``: after an evaluation of more completions
    its table holds the latest of them; ``num_completions_to_print=None`` prints them all."""
    pytest.importorskip("rich")
    from types import SimpleNamespace

    from polyrl.tracking.session import RunTracking
    from polyrl.trl_completions import follow

    tracking = RunTracking(specs=[], output_dir=tmp_path, completions_per_step=4, run_name="r", project="p", config={})
    follow(tracking, SimpleNamespace(log_completions=True, num_completions_to_print=None, generation_batch_size=2))
    tracking.hold_evaluation([{"prompt": f"P{i}x", "completion": "c", "rewards": {"short": 0.5}} for i in range(4)], 7)
    out = capsys.readouterr().out
    assert "─ Step 7 ─" in out and [p for p in ("P0x", "P1x", "P2x", "P3x") if p in out] == ["P2x", "P3x"]
    assert "Advantage" not in out and "short" in out
