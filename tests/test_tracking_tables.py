"""The completions tables the trackers get: each cell cut to ``[logging] table_cell_chars`` (a
multi-turn episode's whole conversation went unbounded into every row), the columns under the names
TRL's ``GRPOTrainer`` gives its table (one per reward function, ``advantage``...), and a TRL run's
parquet files rewound with ``completions.jsonl`` on a resume. TensorBoard is the real library; the
``Recorder`` tracker keeps what a plugin tracker is handed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyrl.config import LoggingSection
from polyrl.tracking import TrackerSpec
from polyrl.tracking import completions as clog
from polyrl.tracking.session import RunTracking


class Recorder:
    """A tracker that keeps the completions tables it is handed."""

    def __init__(self) -> None:
        self.completions: list[tuple[int, list]] = []

    def log_metrics(self, metrics, step):
        pass

    def log_completions(self, records, step):
        self.completions.append((step, list(records)))

    def close(self):
        pass


def _tracking(tmp_path: Path, recorder: Recorder, *specs: TrackerSpec, **fields) -> RunTracking:
    spec = TrackerSpec(name="recorder", create=lambda context: recorder, summary="records calls")
    tracking = RunTracking(specs=[spec, *specs], output_dir=tmp_path, completions_per_step=4, run_name="r",
                           project="p", config={}, **fields)
    tracking.open()
    return tracking


def _episode(turns: int, chars: int) -> list[dict]:
    """A multi-turn agent's conversation: assistant tool calls and their long results."""
    out = []
    for i in range(turns):
        out.append({"role": "assistant", "content": f"call {i}"})
        out.append({"role": "tool", "content": "r" * chars, "name": "search"})
    return out


def _record(step: int, completion, **rewards: float) -> dict:
    return {"step": step, "prompt": "Find it", "completion": completion, "rewards": rewards or {"found": 1.0},
            "reward": 1.0, "advantage": 0.5, "finish_reason": "stop"}


def test_a_long_episode_is_one_cut_cell_in_every_tracker_table(tmp_path):
    """A 20-turn episode of 5,000-character tool results (200,000 characters) went whole into each
    row of every table (each message cut to 65,536 only): now its cell is cut to ``table_cell_chars``
    and says so and where the rest is; completions.jsonl keeps the conversation."""
    pytest.importorskip("tensorboard")
    from polyrl.registry import get_registry
    from test_tracking import _tensorboard_texts

    recorder = Recorder()
    tracking = _tracking(tmp_path, recorder, get_registry().trackers_by_name()["tensorboard"])
    episode, limit = _episode(20, 5000), 16_384  # the default, as documented
    tracking.collect_records([_record(1, episode), _record(1, "short answer")])
    tracking.publish({"step": 1, "loss": 0.5})
    tracking.close()
    whole = len(clog.cell(episode))
    (_, text), = _tensorboard_texts(tmp_path / "tensorboard", "completions")
    assert len(text) < 2 * limit and f"{whole - limit} more characters cut by polyrl" in text
    (_, (long, short)), = recorder.completions
    assert long["completion"] == clog.cell(episode)[:limit] + clog.cell_cut_marker(whole - limit)
    assert "logging.table_cell_chars; completions.jsonl keeps them" in long["completion"]
    assert short["completion"] == "short answer" and long["rewards"] == {"found": 1.0}
    kept = [json.loads(line) for line in (tmp_path / clog.FILE_NAME).read_text().splitlines()]
    assert kept[0]["completion"] == episode  # the file keeps the whole conversation


def test_table_cell_chars_0_leaves_cells_uncut_and_the_default_is_the_documented_one(tmp_path):
    recorder = Recorder()
    tracking = _tracking(tmp_path, recorder, cell_chars=0)
    episode = _episode(20, 5000)
    tracking.collect_records([_record(1, episode)])
    tracking.publish({"step": 1})
    tracking.close()
    assert recorder.completions[0][1][0]["completion"] == episode
    assert LoggingSection().table_cell_chars == clog.TABLE_CELL_CHARS


def test_an_extra_columns_long_value_is_cut_as_a_cell_of_its_own(tmp_path):
    recorder = Recorder()
    tracking = _tracking(tmp_path, recorder)
    tracking.collect_records([{**_record(1, "c"), "extra": {"judge_notes": "n" * 20_000, "score": 3}}])
    tracking.publish({"step": 1})
    tracking.close()
    extra = recorder.completions[0][1][0]["extra"]
    assert len(extra["judge_notes"]) < 17_000
    assert extra["judge_notes"] == "n" * 16_384 + clog.cell_cut_marker(20_000 - 16_384)
    assert extra["score"] == 3


def test_the_tables_columns_are_trls_one_per_reward_then_polyrls_own():
    """TRL's ``GRPOTrainer`` logs ``step``, ``prompt``, ``completion``, one column per reward function
    (its name), the ``log_extra`` columns and ``advantage``; polyrl's tables had one ``rewards`` cell
    of JSON text and no extra columns, so a notebook reading ``table["accuracy"]`` failed."""
    records = [{**_record(4, "42", accuracy=1.0, format=0.0), "extra": {"parsed": "42"}},
               {**_record(4, "x", accuracy=0.0), "extra": {"parsed": None}}]
    assert clog.markdown_table(records).splitlines()[0] == (  # TensorBoard's text table
        "| step | prompt | completion | accuracy | format | parsed | advantage | reward | finish\\_reason |")
    columns, rows = clog.table(records)  # W&B's, trackio's and MLflow's
    assert columns == ["step", "prompt", "completion", "accuracy", "format", "parsed", "advantage", "reward",
                       "finish_reason"]
    assert rows == [[4, "Find it", "42", 1.0, 0.0, "42", 0.5, 1.0, "stop"],
                    [4, "Find it", "x", 0.0, None, None, 0.5, 1.0, "stop"]]


def test_a_reward_named_as_a_column_keeps_trls_name_and_moves_polyrls():
    """A reward function named ``reward`` is TRL's ``reward`` column; polyrl's weighted total moves
    to ``polyrl/reward``; one named ``prompt`` cannot take TRL's prompt column: ``rewards/prompt``."""
    columns, rows = clog.table([_record(1, "c", reward=0.25, prompt=0.5)])
    assert columns == ["step", "prompt", "completion", "reward", "rewards/prompt", "advantage", "polyrl/reward",
                       "finish_reason"]
    assert rows[0][3:7] == [0.25, 0.5, 0.5, 1.0]


def test_a_trl_runs_table_step_is_trls_global_step(tmp_path):
    """TRL's table holds ``global_step`` (updates) in its ``step`` column, the step its trackers log
    at; polyrl's held its own step there while the trackers got the table at ``global_step``."""
    recorder = Recorder()
    tracking = _tracking(tmp_path, recorder, step_scale=3, window_logs=True)
    tracking.collect_records([_record(2, "c")])
    tracking.publish({"step": 2, "loss": 0.5})
    tracking.publish_log({"loss": 0.5}, 2)
    tracking.close()
    (at, (record,)), = recorder.completions
    assert at == 6 and record["step"] == 6
    assert json.loads((tmp_path / clog.FILE_NAME).read_text())["step"] == 2  # polyrl's own file: its step


def test_a_resume_removes_the_parquet_files_a_stopped_run_wrote_after_its_checkpoint(tmp_path):
    """A TRL run resumed from its step-2 checkpoint left the stopped run's ``completions_00003`` and
    later files (and eval ones) beside those it writes again: a notebook reading the folder got those
    steps twice, or the dead run's rows. Now they go with completions.jsonl's later records; a file
    that is not one of them stays. Real ``trl.GRPOConfig``."""
    pytest.importorskip("trl")
    from polyrl.trl_completions import follow
    from trl_util import grpo_args

    args = grpo_args(tmp_path, log_completions=True)
    tracking = RunTracking(specs=[], output_dir=Path(args.output_dir), completions_per_step=4, run_name="r",
                           project="p", config={}, step_scale=2)
    follow(tracking, args)
    folder = Path(args.output_dir) / "completions"
    names = ["completions_00002.parquet", "completions_00004.parquet", "eval_completions_00004.parquet",
             "completions_00006.parquet", "eval_completions_00006.parquet", "eval_a_completions_00008.parquet",
             "notes.txt"]
    for name in names:
        (folder / name).write_bytes(b"PAR1")
    tracking.rewind(2)  # the checkpoint of step 2: global_step 4
    assert sorted(p.name for p in folder.iterdir()) == sorted(names[:3] + ["notes.txt"])


def test_a_column_of_text_and_numbers_is_text_that_wandb_takes():
    """A ``log_extra`` column holding ``"42"`` in one row and ``42`` in another made ``wandb.Table``
    raise (a column is one type), which dropped the W&B tracker for the rest of the run."""
    wandb = pytest.importorskip("wandb")
    records = [{**_record(1, "a"), "extra": {"parsed": "42", "ok": True}},
               {**_record(1, "b"), "extra": {"parsed": 42, "ok": 1.0}},
               {**_record(1, "c"), "extra": {"parsed": None, "ok": None}}]
    columns, rows = clog.table(records)
    assert [row[columns.index("parsed")] for row in rows] == ["42", "42", None]
    assert [row[columns.index("ok")] for row in rows] == ["True", "1.0", None]
    assert [row[columns.index("found")] for row in rows] == [1.0, 1.0, 1.0]  # one kind: as it was
    table = wandb.Table(columns=columns, data=rows)
    assert table.data == rows
