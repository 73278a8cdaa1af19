"""``trainer.state.log_history`` after ``train(resume_from_checkpoint=...)`` on
``polyrl.trl.GRPOTrainer`` is the uninterrupted run's, as transformers restores the whole list from
the checkpoint's ``trainer_state.json``: the entries a script's own ``trainer.log`` wrote (from a
callback) before the checkpoint included, those after it not repeated, and the evaluations' entries
too. polyrl rebuilt ``log_history`` from metrics.jsonl, which never held the script's entries."""

from __future__ import annotations

import json
import random
import re

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from polyrl.checkpoint import STATE_FILE, checkpoint_dir  # noqa: E402
from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from checkpoint_states import rewrite_state  # noqa: E402
from trl_util import grpo_args  # noqa: E402

#: the keys that time the run (its steps, rewards, evaluations, memory): they differ between any two runs
_TIMINGS = re.compile(r"time|_per_s|latency|seconds|runtime|rss")


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(n)])


#: what each scoring saw: (global_step, prompts, completion ids, a draw from Python's ``random``)
SCORED: list[tuple[int, list, list, float]] = []


def short(completions, prompts, completion_ids, trainer_state, **kwargs):
    SCORED.append((trainer_state.global_step, list(prompts), [list(ids) for ids in completion_ids], random.random()))
    return [-len(c) / 10 for c in completions]


class OwnLogs(TrainerCallback):
    """Logs the script's own metric through ``trainer.log`` at every step, as TRL example callbacks do;
    ``stop_at``: ends the run after that global step (its checkpoint written), as a crash would."""

    def __init__(self, stop_at: int = 0):
        self.trainer = None
        self.stop_at = stop_at

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.log({"own/step_squared": float(state.global_step ** 2)})
        if state.global_step == self.stop_at:
            control.should_training_stop = True


def _trainer(tiny_model_dir, out, callback, **fields):
    args = grpo_args(out, max_steps=4, max_completion_length=4, save_steps=2, **fields)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=_dataset(),
                          eval_dataset=_dataset(2) if "eval_strategy" in fields else None, callbacks=[callback])
    callback.trainer = trainer
    return trainer


def _untimed(history):
    return [{k: v for k, v in entry.items() if not _TIMINGS.search(k)} for entry in history]


@pytest.mark.parametrize("fields", [dict(), dict(eval_strategy="steps", eval_steps=1)])
def test_a_resumed_run_keeps_the_scripts_own_log_entries_before_its_checkpoint_and_repeats_none_after(
        tiny_model_dir, tmp_path, fields):
    """The run stopped at step 3 is resumed from its step-2 checkpoint (written before step 3's
    entry): its log_history is the uninterrupted run's, the script's step-1 and step-2 entries
    restored and step 3's logged once, by the resumed step 3; with evaluations their entries too."""
    SCORED.clear()
    whole = _trainer(tiny_model_dir, tmp_path / "whole", OwnLogs(), **fields)
    assert random.getstate() == random.Random(whole.args.seed).getstate()  # set_seed(args.seed), as transformers
    whole.train()
    scored_whole = SCORED[:]
    stopped = _trainer(tiny_model_dir, tmp_path / "cut", OwnLogs(stop_at=3), **fields)
    stopped.train()
    kept = checkpoint_dir(tmp_path / "cut" / "run" / "checkpoints", 2)
    SCORED.clear()
    resumed = _trainer(tiny_model_dir, tmp_path / "cut", OwnLogs(), **fields)
    resumed.train(resume_from_checkpoint=str(kept))
    # the steps after the checkpoint scored the same prompts (shuffled epochs of 2 steps), completion
    # ids and draws from ``random`` (seeded from args.seed as transformers' Trainer seeds it, and
    # restored from the checkpoint): the draws differed, the trainer left Python's RNG unseeded
    # (the evaluation at step 2, before the checkpoint, is not run again)
    assert SCORED[0][0] == 2 and len(SCORED) >= 2
    assert SCORED == scored_whole[len(scored_whole) - len(SCORED):]
    own = [(e["step"], e["own/step_squared"]) for e in resumed.state.log_history if "own/step_squared" in e]
    assert own == [(1, 1.0), (2, 4.0), (3, 9.0), (4, 16.0)]
    if fields:
        assert [e["step"] for e in resumed.state.log_history if "eval_reward" in e] == [1, 2, 3, 4]
    ours, theirs = _untimed(resumed.state.log_history), _untimed(whole.state.log_history)
    assert [(e["step"], sorted(e)) for e in ours] == [(e["step"], sorted(e)) for e in theirs]
    for mine, uninterrupted in zip(ours, theirs):
        assert mine == pytest.approx(uninterrupted)


def test_a_resumed_callback_reads_the_restored_entries_in_state_log_history_during_the_run(tiny_model_dir, tmp_path):
    """transformers' callbacks read the restored log_history from the resumed run's first event on."""
    seen: list[list[int]] = []

    class Reads(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            seen.append([e["step"] for e in state.log_history if "own/step_squared" in e])

    _trainer(tiny_model_dir, tmp_path, OwnLogs(stop_at=2)).train()
    resumed = _trainer(tiny_model_dir, tmp_path, OwnLogs())
    resumed.add_callback(Reads())
    resumed.train(resume_from_checkpoint=True)
    assert seen == [[1, 2]]


def test_a_checkpoint_whose_kept_log_entries_are_not_a_list_of_entries_is_refused(tiny_model_dir, tmp_path):
    """One ``error:`` naming the file and the field, before any step, not a traceback mid-run."""
    _trainer(tiny_model_dir, tmp_path, OwnLogs(stop_at=2)).train()
    file = checkpoint_dir(tmp_path / "run" / "checkpoints", 2) / STATE_FILE
    state = json.loads(file.read_text())
    state["observers"]["trl"]["script_logs"] = [{"own": 1.0}]  # no step
    rewrite_state(file.parent, json.dumps(state))
    with pytest.raises(ConfigError, match=r"observers\.trl\.script_logs"):
        _trainer(tiny_model_dir, tmp_path, OwnLogs()).train(resume_from_checkpoint=True)


def test_a_logged_value_json_cannot_hold_is_kept_as_its_number_or_left_out_and_the_checkpoint_written(
        tiny_model_dir, tmp_path):
    """transformers' ``save_to_json`` raises on a tensor in ``log_history`` (the checkpoint lost);
    polyrl's keeps a one-number value as its float and leaves out the rest of such values."""
    import torch

    class Odd(OwnLogs):
        def on_step_end(self, args, state, control, **kwargs):
            self.trainer.log({"own/tensor": torch.tensor(2.5), "own/object": object(), "own/step": state.global_step})
            if state.global_step == self.stop_at:
                control.should_training_stop = True

    _trainer(tiny_model_dir, tmp_path, Odd(stop_at=2)).train()
    resumed = _trainer(tiny_model_dir, tmp_path, OwnLogs())
    resumed.train(resume_from_checkpoint=True)
    restored = [e for e in resumed.state.log_history if "own/step" in e]
    assert [(e["step"], e["own/step"], e["own/tensor"]) for e in restored] == [(1, 1, 2.5), (2, 2, 2.5)]
    assert not any("own/object" in e for e in restored)
