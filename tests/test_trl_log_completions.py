"""TRL's ``log_completions`` on ``polyrl.trl.GRPOTrainer``: the completions table reaches the
``report_to`` trackers only with ``log_completions=True`` and only with each log (TRL's
``GRPOTrainer.log``: every ``logging_steps``, the end-of-training summary), where polyrl sent it every
step whatever the config said. completions.jsonl, polyrl's own record, keeps every step."""

from __future__ import annotations

import glob
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
pytest.importorskip("tensorboard")

from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


#: the completions table's tag in TensorBoard (``polyrl.tracking.tensorboard``)
TABLE = "completions"


def _steps_by_tag(root: Path) -> dict[str, list[int]]:
    """The steps each summary tag was written at, over every TensorBoard event file under ``root``,
    read with TensorBoard's own loader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[str, list[int]] = {}
    for path in sorted(glob.glob(str(root / "**" / "events.out*"), recursive=True)):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                out.setdefault(value.tag, []).append(event.step)
    return out


def _train(model: str, tmp_path: Path, **fields) -> dict[str, list[int]]:
    """3 steps logged every 2 updates into TensorBoard: the steps of each tag written."""
    args = grpo_args(tmp_path, max_steps=3, max_completion_length=4, logging_steps=2, report_to="tensorboard",
                     **fields)
    GRPOTrainer(model=model, reward_funcs=[short], args=args, train_dataset=prompts_dataset(8)).train()
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert sorted(set(steps)) == [1, 2, 3]  # polyrl's own record: every step, whatever TRL's switch
    return _steps_by_tag(tmp_path / "run")


def test_trls_default_log_completions_false_sends_no_completions_table(tiny_model_dir, tmp_path, capsys):
    """TRL's default (``log_completions=False``) logs no table, nor prints one; polyrl sent one every step."""
    tags = _train(tiny_model_dir, tmp_path)
    assert tags["train/reward"] == [2, 3]  # the logs themselves came
    assert TABLE not in tags, sorted(tags)
    assert "─ Step" not in capsys.readouterr().out


def test_log_completions_sends_the_table_with_each_log_not_every_step(tiny_model_dir, tmp_path, capsys):
    """With ``log_completions=True`` and ``logging_steps=2`` over 3 steps TRL's ``log`` sends its table
    at global_step 2 (the log) and 3 (the end-of-training summary): not at step 1. It prints it with
    rich there too, ``num_completions_to_print`` rows of it, as TRL's console shows it."""
    pytest.importorskip("rich")
    tags = _train(tiny_model_dir, tmp_path, log_completions=True, num_completions_to_print=1)
    assert tags["train/reward"] == [2, 3]
    assert tags.get(TABLE) == [2, 3], sorted(tags)
    out = capsys.readouterr().out
    assert [int(s) for s in re.findall(r"─ Step (\d+) ─", out)] == [2, 3], out[-2000:]
    assert out.count("What is") == 2  # one row each: num_completions_to_print=1 of the step's 4


class Table:
    """A tracker keeping each completions table it got, by step."""

    def __init__(self):
        self.tables: list[tuple[int, list]] = []

    def log_metrics(self, metrics, step):
        pass

    def log_completions(self, records, step):
        self.tables.append((step, [(r["step"], r["prompt"]) for r in records]))

    def close(self):
        pass


def _tracking(tmp_path: Path, table: Table, **fields):
    from polyrl.tracking.session import RunTracking
    from polyrl.tracking.spec import TrackerSpec

    tracking = RunTracking(specs=[TrackerSpec(name="table", create=lambda c: table)], output_dir=tmp_path,
                           completions_per_step=4, run_name="r", project="p", config={}, **fields)
    tracking.open()
    return tracking


def _step(tracking, step: int, prompts: list[str]) -> None:
    tracking.collect_records([{"step": step, "prompt": p, "completion": "c", "rewards": {"f": 1.0}, "reward": 1.0,
                               "advantage": 0.0, "finish_reason": "stop"} for p in prompts])
    tracking.publish({"step": step, "loss": 0.5})


def test_a_log_sends_the_latest_steps_records_once_per_log_and_log_unique_prompts_keeps_one_a_prompt(tmp_path):
    """A TRL run's log (steps of 2 updates) gets the table of the step it ends at, at its global
    step, as TRL's table holds its latest batch; ``log_unique_prompts`` keeps a prompt's first row."""
    table = Table()
    tracking = _tracking(tmp_path, table, window_logs=True, step_scale=2, unique_prompts=True)
    _step(tracking, 1, ["a", "a", "b", "b"])
    _step(tracking, 2, ["c", "c", "d", "d"])
    assert table.tables == []  # no log yet: nothing sent with the steps
    tracking.publish_log({"step": 2, "loss": 0.5}, step=2)
    assert table.tables == [(4, [(4, "c"), (4, "d")])]  # TRL's table: global_step in its step column
    off = Table()
    tracking = _tracking(tmp_path / "off", off, window_logs=True, log_completions=False)
    _step(tracking, 1, ["a", "b"])
    tracking.publish_log({"step": 1, "loss": 0.5}, step=1)
    assert off.tables == []
    native = Table()  # polyrl's own run: each step's table with its step, as before
    tracking = _tracking(tmp_path / "native", native)
    _step(tracking, 1, ["a", "a"])
    _step(tracking, 2, ["b"])
    assert native.tables == [(1, [(1, "a"), (1, "a")]), (2, [(2, "b")])]


def test_a_log_before_its_step_is_recorded_sends_that_steps_records_not_the_step_befores(tmp_path):
    """At a step that ends an epoch (or the run) the trainer logs (transformers' ``on_log`` before
    ``on_epoch_end``) before the step's line is recorded: TRL's table then holds that step's batch.
    It held the step before's (and a resumed run's first such log none), so a crashed run's table
    and its resume's differed."""
    table = Table()
    tracking = _tracking(tmp_path, table, window_logs=True)
    _step(tracking, 1, ["a", "b"])
    tracking.collect_records([{"step": 2, "prompt": p, "completion": "c", "rewards": {"f": 1.0}, "reward": 1.0,
                               "advantage": 0.0, "finish_reason": "stop"} for p in ["c", "d"]])
    tracking.publish_log({"step": 2, "loss": 0.5}, step=2)  # the epoch's end: logged first
    tracking.publish({"step": 2, "loss": 0.5})
    tracking.publish_log({"step": 2, "loss": 0.5}, step=2)  # the end-of-training log: the same records
    assert table.tables == [(2, [(2, "c"), (2, "d")])] * 2
    resumed = Table()  # resumed after step 1: its first step's log has records to show
    tracking = _tracking(tmp_path / "resumed", resumed, window_logs=True)
    tracking.collect_records([{"step": 2, "prompt": "c", "completion": "c", "rewards": {"f": 1.0}, "reward": 1.0,
                               "advantage": 0.0, "finish_reason": "stop"}])
    tracking.publish_log({"step": 2, "loss": 0.5}, step=2)
    assert resumed.tables == [(2, [(2, "c")])]
    off = Table()
    tracking = _tracking(tmp_path / "off", off, window_logs=True, log_completions=False)
    tracking.collect_records([{"step": 1, "prompt": "a", "completion": "c", "rewards": {"f": 1.0}, "reward": 1.0,
                               "advantage": 0.0, "finish_reason": "stop"}])
    tracking.publish_log({"step": 1, "loss": 0.5}, step=1)
    assert off.tables == []


def test_the_console_table_draws_a_chat_prompts_completion_as_trls_assistant_message(capsys):
    """TRL keeps a chat prompt's completion as one assistant message and its console table draws it
    under an ASSISTANT heading; polyrl's record holds the text, which was drawn bare. A text prompt's
    completion stays bare text, as in TRL."""
    pytest.importorskip("rich")
    from polyrl.trl_completions import print_records

    chat = {"prompt": [{"role": "user", "content": "What is 2+2?"}], "completion": "It is 4.",
            "rewards": {"f": 1.0}, "advantage": 0.5}
    text = {"prompt": "The sky is", "completion": " blue.", "rewards": {"f": 0.0}, "advantage": -0.5}
    print_records([chat], 3, None)
    out = capsys.readouterr().out
    assert "ASSISTANT" in out and "It is 4." in out and "USER" in out, out
    print_records([text], 4, None)
    out = capsys.readouterr().out
    assert "blue." in out and "ASSISTANT" not in out, out
