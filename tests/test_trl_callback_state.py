"""The ``TrainerState`` a transformers ``TrainerCallback`` reads on ``polyrl.trl.GRPOTrainer`` is
the one TRL's own ``GRPOTrainer`` gives it for the same script: the same script runs on both
(real TRL on the CPU, the tiny model), a callback records the state at each event, and the
records of the events both call agree, in TRL's units (optimizer updates: ``num_iterations`` 2
makes each polyrl step 2 of them). polyrl gave ``save_steps`` its own interval (the epoch's
length under "epoch", the default 500 rounded up to whole steps), ``eval_steps`` its evaluation
interval and ``logging_steps`` 1, where transformers' ``TrainerState.compute_steps`` gives
``args``' own (a fraction of ``max_steps`` rounded up) whatever the strategies."""

from __future__ import annotations

import functools
import re

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402

_args = functools.partial(grpo_args, max_completion_length=4)

#: the ``TrainerState`` fields compared
FIELDS = ("global_step", "max_steps", "save_steps", "eval_steps", "logging_steps", "epoch", "num_train_epochs",
          "train_batch_size", "best_metric", "best_global_step", "best_model_checkpoint")


def peak_at_update_2(completions, trainer_state, **kwargs):
    """The same on both trainers: highest when scored at optimizer update 2, so the best
    evaluation (and ``best_metric``) is the one after update 2 on both."""
    return [-10.0 * abs(trainer_state.global_step - 2) for _ in completions]


def _update(path):
    """A checkpoint folder's optimizer update: TRL's ``checkpoint-<updates>``, polyrl's
    ``step-<steps>`` (``per_step`` updates each, added by the caller)."""
    if path is None:
        return None
    name = re.fullmatch(r"(checkpoint|step)-0*(\d+)", path.rsplit("/", 1)[-1])
    assert name, path
    return name.group(1), int(name.group(2))


class StateRecorder(TrainerCallback):
    """(event, global_step) -> the state's ``FIELDS`` at that event."""

    def __init__(self):
        self.seen: dict[tuple[str, int], dict] = {}

    def _record(self, event, state):
        seen = {f: getattr(state, f) for f in FIELDS}
        seen["epoch"] = round(seen["epoch"], 6) if seen["epoch"] is not None else None
        self.seen[(event, state.global_step)] = seen

    def on_train_begin(self, args, state, control, **kwargs):
        self._record("on_train_begin", state)

    def on_step_end(self, args, state, control, **kwargs):
        self._record("on_step_end", state)

    def on_evaluate(self, args, state, control, **kwargs):
        self._record("on_evaluate", state)

    def on_save(self, args, state, control, **kwargs):
        self._record("on_save", state)

    def on_train_end(self, args, state, control, **kwargs):
        self._record("on_train_end", state)


def _seen(trainer_class, model, tmp_path, name, fields):
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])
    recorder = StateRecorder()
    args = _args(tmp_path / name, max_steps=4, num_iterations=2, metric_for_best_model="reward", **fields)
    trainer_class(model=model, reward_funcs=[peak_at_update_2], args=args,
                  train_dataset=rows, eval_dataset=rows.select(range(2)), callbacks=[recorder]).train()
    return recorder.seen


@pytest.mark.parametrize("fields", [
    {"save_strategy": "epoch", "eval_strategy": "epoch", "logging_steps": 10},  # TRL's save_steps 500 and logging_steps 10 stand
    {"save_strategy": "steps", "save_steps": 0.5, "eval_strategy": "steps", "eval_steps": 2, "logging_steps": 0.5},
    {"save_strategy": "best", "eval_strategy": "steps", "eval_steps": 0.5, "save_steps": 3},  # save_steps unused
    {"save_strategy": "no", "save_steps": 2, "eval_strategy": "steps", "logging_steps": 10},  # eval_steps: logging_steps (TRL's 10)
], ids=["epoch", "fractions", "best", "no"])
def test_a_callback_reads_the_state_trls_own_trainer_gives_it(tiny_model_dir, tmp_path, fields):
    theirs = _seen(trl.GRPOTrainer, tiny_model_dir, tmp_path, "trl", fields)
    ours = _seen(GRPOTrainer, tiny_model_dir, tmp_path, "polyrl", fields)
    # TRL's on_step_end (and on_save, on_evaluate) at each optimizer update; polyrl's at each of its
    # steps, 2 updates: the records of the updates that end a polyrl step
    theirs = {key: seen for key, seen in theirs.items() if key[1] % 2 == 0}
    for seen in ours.values():  # polyrl's step-K folder holds update 2K
        kind, n = _update(seen["best_model_checkpoint"]) or ("", 0)
        seen["best_model_checkpoint"] = n * 2 if kind == "step" else seen["best_model_checkpoint"]
    for seen in theirs.values():
        kind, n = _update(seen["best_model_checkpoint"]) or ("", 0)
        seen["best_model_checkpoint"] = n if kind == "checkpoint" else seen["best_model_checkpoint"]
    # polyrl checkpoints the last step whatever save_strategy says (README), calling on_save only
    # where transformers' flags asked it, as TRL's trainer does
    assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    for key in sorted(theirs, key=lambda k: (k[1], k[0])):
        assert ours[key] == theirs[key], key
    assert ours[("on_train_begin", 0)]["save_steps"] == theirs[("on_train_begin", 0)]["save_steps"]


class AsksToSaveThenStop(TrainerCallback):
    """Asks a checkpoint at update 2 (``on_step_end``), and to stop once the one at update 4 is
    written (``on_save``); records each ``on_save``'s update."""

    def __init__(self):
        self.saved: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2:  # (``= global_step == 2`` would unask TRL's own saves: its flow callback runs first)
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        self.saved.append(state.global_step)
        if state.global_step == 4:
            control.should_training_stop = True


@pytest.mark.parametrize("save_strategy", ["steps", "no"])
def test_should_save_and_a_stop_asked_in_on_save_act_as_on_trls_own_trainer(tiny_model_dir, tmp_path, save_strategy):
    """save_steps 0.25 of max_steps 8 is every 2 updates, one polyrl step; a callback's should_save
    at update 2 and a stop asked in on_save at update 4: TRL's trainer saves at 2 and 4 and ends
    there (under "no" it saves only where asked, at 2, and never stops: polyrl's own last checkpoint
    at 8 is written, with no on_save, as TRL's trainer calls none there)."""
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])
    results = []
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        callback = AsksToSaveThenStop()
        args = _args(tmp_path / name, max_steps=8, num_iterations=2, save_strategy=save_strategy, save_steps=0.25)
        done = trainer_class(model=tiny_model_dir, reward_funcs=[peak_at_update_2], args=args, train_dataset=rows,
                             callbacks=[callback]).train()
        results.append((callback.saved, done.global_step))
    theirs, ours = results
    assert ours == theirs == (([2, 4], 4) if save_strategy == "steps" else ([2], 8))
    kept = sorted(p.name for p in (tmp_path / "polyrl" / "run" / "checkpoints").iterdir())
    assert kept == (["step-00000001", "step-00000002"] if save_strategy == "steps" else ["step-00000001", "step-00000004"])


class CancelsTheSaveAtUpdate4(TrainerCallback):
    """Clears ``control.should_save`` in ``on_step_end`` at update 4, where ``save_steps`` has a
    checkpoint due; records each ``on_save``'s update."""

    def __init__(self):
        self.saved: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 4:
            control.should_save = False

    def on_save(self, args, state, control, **kwargs):
        self.saved.append(state.global_step)


def test_should_save_cleared_in_on_step_end_cancels_a_save_steps_checkpoint_as_on_trls_own_trainer(
        tiny_model_dir, tmp_path):
    """save_steps 0.25 of max_steps 8 is every 2 updates, one polyrl step: transformers'
    DefaultFlowCallback sets should_save before the user's on_step_end, so clearing it at update 4
    cancels that checkpoint on TRL's trainer; on polyrl's too (the last one, update 8, is written
    on both: transformers asks it at the end under "steps", polyrl always writes it)."""
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])
    results = []
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        callback = CancelsTheSaveAtUpdate4()
        args = _args(tmp_path / name, max_steps=8, num_iterations=2, save_steps=0.25)
        trainer_class(model=tiny_model_dir, reward_funcs=[peak_at_update_2], args=args, train_dataset=rows,
                      callbacks=[callback]).train()
        results.append(callback.saved)
    theirs, ours = results
    assert ours == theirs == [2, 6, 8]
    kept = sorted(p.name for p in (tmp_path / "polyrl" / "run" / "checkpoints").iterdir())
    assert kept == ["step-00000001", "step-00000003", "step-00000004"]


def rises_with_the_update(completions, trainer_state, **kwargs):
    """Each later evaluation scores higher: every one is a new best."""
    return [float(trainer_state.global_step) for _ in completions]


def test_the_last_checkpoint_holds_the_best_the_evaluation_after_training_set(tiny_model_dir, tmp_path):
    """eval_steps 3 of max_steps 4: both trainers evaluate at update 3 and at the end (4), the
    second a new best. TRL's last checkpoint is written after that evaluation, so its
    trainer_state.json holds the new best; polyrl's, written before its evaluation after training,
    held update 3's (a resume compared against it): it is rewritten, still a verified checkpoint."""
    import json

    from polyrl.checkpoint import verify

    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        args = _args(tmp_path / name, max_steps=4, eval_strategy="steps", eval_steps=3, metric_for_best_model="reward")
        trainer_class(model=tiny_model_dir, reward_funcs=[rises_with_the_update], args=args, train_dataset=rows,
                      eval_dataset=rows.select(range(2))).train()
    theirs = json.loads((tmp_path / "trl" / "run" / "checkpoint-4" / "trainer_state.json").read_text())
    last = tmp_path / "polyrl" / "run" / "checkpoints" / "step-00000004"
    ours = json.loads((last / "trainer_state.json").read_text())["observers"]["trl"]
    assert (theirs["best_metric"], theirs["best_global_step"]) == (4.0, 4)
    assert (ours["best_metric"], ours["best_global_step"]) == (4.0, 4)
    assert verify(last) is None
    assert not [p.name for p in last.parent.iterdir() if p.name.startswith(".")]  # no .tmp-/.old- left


def test_the_checkpoints_kept_after_a_new_best_at_the_end_are_trls(tiny_model_dir, tmp_path):
    """save_steps 1, save_total_limit 2, eval_steps 3 of max_steps 5: both trainers evaluate at
    update 3 and at the end (5), each a new best. TRL evaluates update 5 before saving it, so its
    pruning there protects checkpoint-5 and keeps checkpoint-4 and -5. polyrl pruned when it wrote
    step 5, before its evaluation after training, protecting step 3, the best then: it kept
    step-3 and step-5 and removed step-4, which TRL keeps."""
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])
    kept = {}
    for name, trainer_class in (("trl", trl.GRPOTrainer), ("polyrl", GRPOTrainer)):
        args = _args(tmp_path / name, max_steps=5, save_steps=1, save_total_limit=2, eval_strategy="steps",
                     eval_steps=3, metric_for_best_model="reward")
        trainer = trainer_class(model=tiny_model_dir, reward_funcs=[rises_with_the_update], args=args,
                                train_dataset=rows, eval_dataset=rows.select(range(2)))
        trainer.train()
        assert trainer.state.best_global_step == 5, name
        root = tmp_path / name / "run" / ("checkpoints" if name == "polyrl" else "")
        kept[name] = sorted(_update(str(p))[1] for p in root.iterdir() if p.name.startswith(("checkpoint-", "step-")))
    assert kept["polyrl"] == kept["trl"] == [4, 5], kept
