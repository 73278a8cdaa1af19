"""TRL's ``save_strategy``, ``save_steps`` and ``save_total_limit`` on ``polyrl.trl.GRPOTrainer``:
checkpoints at the steps transformers' Trainer writes them (they were ignored: a TRL config
checkpointed at the end only, and a crash lost the run), pruned as transformers prunes them,
``on_save`` for each, and ``train(resume_from_checkpoint=True)`` from the newest."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")

from transformers import TrainerCallback  # noqa: E402

from polyrl import api  # noqa: E402
from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args  # noqa: E402

# 4 prompts, 2 a step (4 completions / num_generations 2): TRL's epoch is 2 steps
_args = functools.partial(grpo_args, max_completion_length=4)


def _dataset(n: int = 4):
    return datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(n)])


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def peak_at_update_2(completions, trainer_state, **kwargs):
    """Highest when scored at optimizer update 2: the evaluation after step 2 is the run's best."""
    return [-10.0 * abs(trainer_state.global_step - 2) for _ in completions]


class Saves(TrainerCallback):
    """The global_step of each ``on_save``, and of each ``on_step_end``."""

    def __init__(self, epoch_stop_at: int = 0):
        self.saved: list[int] = []
        self.steps: list[int] = []
        self.epoch_stop_at = epoch_stop_at

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)
        control.should_epoch_stop = state.global_step == self.epoch_stop_at

    def on_save(self, args, state, control, **kwargs):
        self.saved.append(state.global_step)


def _train(model, tmp_path, callbacks=(), rewards=(short,), **fields):
    saves = Saves()
    trainer = GRPOTrainer(model=model, reward_funcs=list(rewards), train_dataset=_dataset(),
                          callbacks=[saves, *callbacks], args=_args(tmp_path, **fields),
                          eval_dataset=_dataset(2) if fields.get("eval_strategy", "no") != "no" else None)
    trainer.train()
    return trainer, saves.saved


def _kept(tmp_path) -> list[int]:
    return sorted(int(p.name.rpartition("-")[2]) for p in (tmp_path / "run" / "checkpoints").iterdir())


def test_save_steps_checkpoints_every_save_steps_keeping_save_total_limit(tiny_model_dir, tmp_path):
    _, saved = _train(tiny_model_dir, tmp_path, max_steps=5, save_steps=2, save_total_limit=2)
    assert saved == [2, 4, 5]  # every save_steps, and the end (transformers' DefaultFlowCallback)
    assert _kept(tmp_path) == [4, 5]  # save_total_limit (polyrl's own 2 kept 2 too: see the next test)


def test_a_fraction_of_max_steps_and_no_save_total_limit_keep_every_checkpoint(tiny_model_dir, tmp_path):
    _, saved = _train(tiny_model_dir, tmp_path, max_steps=5, save_steps=0.4)  # ceil(5 x 0.4) = 2 updates
    assert saved == [2, 4, 5]
    assert _kept(tmp_path) == [2, 4, 5]  # TRL's save_total_limit None keeps them all


def test_save_strategy_no_writes_only_polyrls_final_checkpoint(tiny_model_dir, tmp_path):
    """polyrl's own last checkpoint (a resume, save_model and evaluate() read it), with no on_save:
    transformers writes none under "no" and calls none."""
    _, saved = _train(tiny_model_dir, tmp_path, max_steps=2, save_steps=1, save_strategy="no")
    assert saved == [] and _kept(tmp_path) == [2]


def test_save_strategy_epoch_checkpoints_each_epochs_end_after_an_epoch_stop_too(tiny_model_dir, tmp_path):
    """Epochs of 2 steps; a callback ends the first after step 1: transformers saves there
    (on_epoch_end), then at the ends of the next epochs, 3 and 5 (not every 2 steps from the start)."""
    stopper = Saves(epoch_stop_at=1)
    _, saved = _train(tiny_model_dir, tmp_path, callbacks=[stopper], max_steps=5, save_strategy="epoch")
    assert saved == [1, 3, 5]


def test_save_strategy_epoch_with_the_python_api_is_every_epochs_whole_batches():
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(9)],
                               rewards=["numeric_match"], grpo_config=_args(_Tmp(), max_steps=8,
                                                                             save_strategy="epoch"))
    assert config.train.checkpoint_every == 4  # 9 prompts, 2 a step: TRL's epoch is 9 // 2 = 4 steps


def test_save_strategy_best_saves_each_new_best_evaluation(tiny_model_dir, tmp_path):
    trainer, saved = _train(tiny_model_dir, tmp_path, rewards=(short, peak_at_update_2), max_steps=4,
                            eval_strategy="steps", eval_steps=1, save_strategy="best", metric_for_best_model="reward")
    assert saved == [1, 2]  # 1 beats nothing, 2 beats 1, 3 and 4 do not (polyrl's final checkpoint: no on_save)
    assert trainer.state.best_model_checkpoint == str(tmp_path / "run" / "checkpoints" / "step-00000002")


def rising(completions, trainer_state, **kwargs):
    return [float(trainer_state.global_step) for _ in completions]


def test_the_evaluation_at_the_end_of_training_counts_for_the_best(tiny_model_dir, tmp_path):
    """transformers evaluates the last step (eval_steps 2 of max_steps 3: DefaultFlowCallback's
    end-of-training evaluation) and keeps its best as it does every step's; polyrl's evaluation
    after training left best_metric at step 2's, and load_best_model_at_end loaded step 2's weights
    over the better last ones."""
    trainer, saved = _train(tiny_model_dir, tmp_path, rewards=(rising,), max_steps=3, eval_strategy="steps",
                            eval_steps=2, save_strategy="best", metric_for_best_model="reward",
                            load_best_model_at_end=True)
    assert saved == [2, 3]  # the best at 2, and the last step's new best (polyrl's own final checkpoint, told then)
    assert (trainer.state.best_metric, trainer.state.best_global_step) == (3.0, 3)
    assert trainer.state.best_model_checkpoint == str(tmp_path / "run" / "checkpoints" / "step-00000003")


def test_load_best_model_at_end_with_epoch_strategies_loads_the_best_epochs_model(tiny_model_dir, tmp_path):
    """Was refused: an evaluation and a checkpoint at each epoch's end (2 steps), the best (step 2)
    loaded at the end."""
    from safetensors.torch import load_file

    trainer, saved = _train(tiny_model_dir, tmp_path, rewards=(short, peak_at_update_2), max_steps=4,
                            eval_strategy="epoch", save_strategy="epoch", metric_for_best_model="reward",
                            load_best_model_at_end=True)
    assert saved == [2, 4] and trainer.state.best_global_step == 2
    best = load_file(str(tmp_path / "run" / "checkpoints" / "step-00000002" / "model" / "model.safetensors"))
    model = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert all((model[k] == best[k]).all() for k in best)


class _Tmp:
    """A stand-in tmp_path for a config never trained (grpo_args' output_dir)."""

    def __truediv__(self, name):
        return f"/nonexistent/{name}"


def test_save_strategy_best_on_the_python_api_is_one_error():
    """polyrl.api.run keeps no best metric (no callbacks): it checkpointed at the end only, unsaid."""
    with pytest.raises(ConfigError) as err:
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": "q"}] * 2, rewards=["numeric_match"],
                       grpo_config=_args(_Tmp(), save_strategy="best", metric_for_best_model="reward"))
    assert err.value.field == "grpo_config.save_strategy" and "GRPOTrainer" in err.value.fix


@pytest.mark.parametrize(("fields", "field"), [
    ({"load_best_model_at_end": True}, "grpo_config.load_best_model_at_end"),  # the last step's model was exported
    ({"save_total_limit": 1}, "grpo_config.metric_for_best_model"),  # the best checkpoint was pruned
])
def test_keeping_the_best_on_the_python_api_is_one_error(fields, field):
    """polyrl.api.run keeps no best metric: load_best_model_at_end trained on and exported the
    last step's model, and a save_total_limit pruned the best checkpoint transformers keeps, unsaid."""
    with pytest.raises(ConfigError) as err:
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": "q"}] * 2, eval_prompts=[{"prompt": "e"}],
                       rewards=["numeric_match"],
                       grpo_config=_args(_Tmp(), max_steps=4, eval_strategy="steps", eval_steps=2, save_steps=2,
                                         metric_for_best_model="reward", **fields))
    assert err.value.field == field and "GRPOTrainer" in err.value.fix


def test_metric_for_best_model_without_pruning_or_evaluation_is_taken_on_the_python_api():
    """Nothing to keep from pruning (TRL's save_total_limit None), or no evaluation (no best): taken."""
    for fields in ({}, {"save_total_limit": 1, "eval_strategy": "no"}):
        config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": "q"}] * 2,
                                   eval_prompts=None if fields else [{"prompt": "e"}], rewards=["numeric_match"],
                                   grpo_config=_args(_Tmp(), max_steps=4, save_steps=2, metric_for_best_model="reward",
                                                     **({"eval_strategy": "steps", "eval_steps": 2} | fields)))
        assert config.train.checkpoint_every == 2


@pytest.mark.parametrize(("fields", "every"), [
    ({"save_steps": 4, "max_steps": 8, "num_iterations": 2}, 2),  # optimizer updates, 2 a polyrl step
    ({"save_steps": 0.5, "max_steps": 8, "num_iterations": 2}, 2),  # ceil(8 x 0.5) = 4 updates
    ({"num_iterations": 3, "max_steps": 3000}, 167),  # the default 500, rounded up to whole steps (a warning)
    ({"save_strategy": "no", "save_steps": 1}, 0),
    ({"save_steps": 0, "max_steps": 8}, 0),  # transformers saves at max_steps only (was refused)
])
def test_save_steps_count_optimizer_updates(fields, every):
    settings = api.GRPOConfig.from_trl(_args(_Tmp(), **fields)).settings
    assert settings.get("train.checkpoint_every", 0) == every
    assert settings.get("train.keep_checkpoints", 2) == 0  # TRL's save_total_limit None: every one kept


@pytest.mark.parametrize(("fields", "every"), [
    ({"save_steps": 0.5}, 2),  # 2 epochs of 2 batches: max_steps 4 updates, ceil(4 x 0.5) = 2
    ({"save_steps": 0.3}, 2),  # ceil(4 x 0.3) = 2
    ({"save_steps": 0.5, "num_iterations": 2}, 2),  # 8 updates, ceil(8 x 0.5) = 4 updates: 2 steps
    ({"save_steps": 0.99}, 4),  # ceil(3.96) = 4: the end
])
def test_a_fraction_of_an_epoch_runs_updates_is_save_steps_as_in_transformers(fields, every):
    """transformers counts max_steps from num_train_epochs, then save_steps = ceil(max_steps x
    save_steps) (``TrainerState.compute_steps``); from_trl refused a fraction without max_steps."""
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(4)],
                               rewards=["numeric_match"],
                               grpo_config=_args(_Tmp(), max_steps=-1, num_train_epochs=2, **fields))
    assert config.train.steps == 4  # 2 epochs of 2 whole batches of 2 prompts
    assert config.train.checkpoint_every == every


def test_a_fraction_of_an_epoch_run_that_is_not_whole_steps_is_refused_naming_save_steps():
    with pytest.raises(ConfigError) as err:  # 8 updates x 0.3 = 3 updates: part-way through a rollout batch of 2
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(4)],
                       rewards=["numeric_match"], grpo_config=_args(_Tmp(), max_steps=-1, num_train_epochs=2,
                                                                   num_iterations=2, save_steps=0.3))
    assert err.value.field == "grpo_config.save_steps" and "is 3 optimizer updates" in err.value.message, err.value


def test_a_fraction_save_steps_in_an_epoch_run_checkpoints_where_transformers_does(tiny_model_dir, tmp_path):
    trainer, saved = _train(tiny_model_dir, tmp_path, max_steps=-1, num_train_epochs=2, save_steps=0.5)
    assert trainer.state.max_steps == 4 and trainer.state.save_steps == 2  # compute_steps' numbers
    assert saved == [2, 4] and _kept(tmp_path) == [2, 4]


@pytest.mark.parametrize(("fields", "prompts", "warned"), [
    ({"num_iterations": 3, "max_steps": 3000}, 2, True),  # checkpoints at 501 updates, not 500
    ({"num_iterations": 3, "max_steps": 300}, 2, False),  # shorter: transformers saves at the end only
    ({"num_iterations": 3, "max_steps": -1, "num_train_epochs": 2}, 8, False),  # 2 epochs of 4 batches x 3 = 24 updates
    ({"num_iterations": 3, "max_steps": -1, "num_train_epochs": 100}, 8, True),  # 1200 updates
    ({"num_iterations": 3, "max_steps": 3000, "save_steps": 500}, 2, True),  # set, not left: read alike
])
def test_the_rounded_save_steps_warning_only_where_it_moves_a_checkpoint(capfd, fields, prompts, warned):
    """TRL's save_steps 500 (not whole polyrl steps of 3 updates) is rounded up to 167 steps; the
    warning said so for runs shorter than 500 updates too, where transformers never saves before
    the end either (noise), and called 500 "its default" when the script set it."""
    capfd.readouterr()
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(prompts)],
                               rewards=["numeric_match"], grpo_config=_args(_Tmp(), **fields))
    assert config.train.checkpoint_every == 167
    err = capfd.readouterr().err
    assert ("not a whole number of polyrl steps" in err) == warned, err
    assert "its default" not in err
    if warned:
        assert "save_steps = 500 (transformers' default value, rounded rather than refused)" in err


@pytest.mark.parametrize(("fields", "field"), [
    ({"save_steps": 3, "max_steps": 8, "num_iterations": 2}, "grpo_config.save_steps"),  # part-way through a rollout batch
    ({"save_strategy": "best"}, "grpo_config.metric_for_best_model"),  # transformers' Trainer refuses it too
    ({"save_total_limit": 1.5}, "grpo_config.save_total_limit"),
])
def test_save_settings_polyrl_cannot_follow_are_one_error(fields, field):
    with pytest.raises(ConfigError) as err:
        api.GRPOConfig.from_trl(_args(_Tmp(), **fields))
    assert err.value.field == field and err.value.fix


CRASHED_SCRIPT = """
import os, datasets, trl
from transformers import TrainerCallback
from polyrl.trl import GRPOTrainer

class KilledAtStep3(TrainerCallback):  # a crash stand-in: step 3 trained, never checkpointed
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 3:
            os._exit(9)

def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]

args = trl.GRPOConfig(output_dir={out!r}, max_steps=5, save_steps=2, num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=4, learning_rate=1e-4, use_cpu=True, report_to="none",
                      disable_tqdm=True, bf16=False)
rows = datasets.Dataset.from_list([{{"prompt": f"What is {{i}} + 1?"}} for i in range(4)])
GRPOTrainer(model={model!r}, reward_funcs=[short], args=args, train_dataset=rows,
            callbacks=[KilledAtStep3()]).train()
"""


def test_a_crashed_run_resumes_from_its_newest_save_steps_checkpoint(tiny_model_dir, tmp_path):
    script = tmp_path / "train_grpo.py"
    script.write_text(CRASHED_SCRIPT.format(out=str(tmp_path / "run"), model=tiny_model_dir))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 9, done.stdout + done.stderr
    assert _kept(tmp_path) == [2]  # save_steps=2: step 3 was lost, steps 1-2 were not
    saves = Saves()
    resumed = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], train_dataset=_dataset(), callbacks=[saves],
                          args=_args(tmp_path, max_steps=5, save_steps=2))
    out = resumed.train(resume_from_checkpoint=True)
    assert out.global_step == 5 and saves.steps == [3, 4, 5] and saves.saved == [4, 5]


def _launched_saves(script, model, out, ranks):
    """``script`` run on ``ranks`` torchrun ranks (1: python alone); rank 0's ``seen-0.json``
    after each rank's own was checked equal to it."""
    import json
    import os
    import shutil

    command = [sys.executable, str(script), model, str(out)]
    if ranks > 1:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
        command = [str(torchrun), "--standalone", "--nproc_per_node", str(ranks), *command[1:]]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = [json.loads((out / f"seen-{rank}.json").read_text()) for rank in range(ranks)]
    assert all(s == seen[0] for s in seen), seen  # every rank's callbacks saw the same saves and best fields
    return seen[0]


def _trained(folder):
    """(step, loss, grad_norm, reward_mean, eval reward) of each metrics.jsonl line, and the exported weights."""
    import json

    from safetensors.torch import load_file

    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    keys = ("step", "loss", "grad_norm", "reward_mean", "eval/sampled_reward_mean")
    return [tuple(line.get(k) for k in keys) for line in lines], load_file(str(folder / "model" / "model.safetensors"))


@pytest.mark.slow  # one process and two torchrun ranks, 6 short runs each: 60-200 s
def test_epoch_and_best_saves_on_two_ranks_are_one_process_saves_and_resume_exactly(tiny_model_dir, tmp_path):
    """save_strategy "epoch" and "best" under torchrun: the ranks agree when to save (an epoch's
    end, a new best), so 2 ranks write the checkpoints 1 process writes, every rank's callbacks see
    the same on_save steps and best fields (rank 1's best_model_checkpoint was None: rank 0 alone
    set it, writing the checkpoint), and a run stopped after step 2 and resumed ends as the
    uninterrupted one (the same lines, weights, checkpoints and best: a best_metric lost on resume
    would save step 3 as a new best)."""
    from polyrl.launch import cpu_count

    if cpu_count() < 2:
        pytest.skip("two ranks need two CPUs")
    script = Path(__file__).parent / "distributed" / "trl_saves_two_ranks.py"
    one = _launched_saves(script, tiny_model_dir, tmp_path / "one", 1)
    two = _launched_saves(script, tiny_model_dir, tmp_path / "two", 2)
    for seen in (one, two):  # the resumed run restored the best as the checkpoint kept it, to the last digit
        assert seen["best"]["whole"]["best_metric"] == seen["best"]["cut"]["best_metric"] \
            == seen["best"]["resumed"]["best_metric"]
    assert _sampled_apart(two) == _sampled_apart(one)
    best = {"best_metric": pytest.approx(0.0, abs=0.1), "best_global_step": 2, "best_model_checkpoint": "step-00000002"}
    no_best = dict.fromkeys(best)
    assert one["epoch"] == {"whole": {"saved": [2, 4], "global_step": 4, **no_best},  # epochs of 2 steps
                            "cut": {"saved": [2], "global_step": 2, **no_best},
                            "resumed": {"saved": [4], "global_step": 4, **no_best}}
    # bests at 1 and 2: on_save there alone, as TRL's Trainer calls it only for a save its flags asked
    # for (polyrl still checkpoints the last step, 4, for resume: on disk below, no on_save)
    assert one["best"] == {"whole": {"saved": [1, 2], "global_step": 4, **best},
                           "cut": {"saved": [1, 2], "global_step": 2, **best},
                           "resumed": {"saved": [], "global_step": 4, **best}}
    for world in ("one", "two"):
        for strategy, kept in (("epoch", [2, 4]), ("best", [1, 2, 4])):
            whole, cut = tmp_path / world / strategy / "whole", tmp_path / world / strategy / "cut"
            assert _kept_in(whole) == _kept_in(cut) == kept
            (lines, weights), (resumed_lines, resumed_weights) = _trained(whole), _trained(cut)
            assert resumed_lines == lines and len(lines) == 4
            assert all((resumed_weights[k] == weights[k]).all() for k in weights)


def _sampled_apart(seen):
    """``seen`` with each best_metric rounded to the step's part (1 process and 2 ranks sample other
    completions, whose part is under 0.1)."""
    return {strategy: {run: {**fields, "best_metric": fields["best_metric"] and round(fields["best_metric"])}
                       for run, fields in runs.items()} for strategy, runs in seen.items()}


def _kept_in(run) -> list[int]:
    return sorted(int(p.name.rpartition("-")[2]) for p in (run / "checkpoints").iterdir())


class StopAtStep(TrainerCallback):
    """A crash stand-in: the run ends after ``step`` (checkpointed there by polyrl's final save)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        control.should_training_stop = state.global_step == self.step


def rising_eval(completions, trainer_state, **kwargs):
    """The update count: each evaluation beats the one before it."""
    return [float(trainer_state.global_step) for _ in completions]


def test_a_checkpoint_whose_state_the_evaluation_after_training_rewrote_resumes_exactly(tiny_model_dir, tmp_path):
    """The evaluation after training (step 3, after the run was stopped there) sets a new best, which
    polyrl writes into the step-3 checkpoint it had saved before it (``checkpoint.rewrite_state``:
    hard links, a new state file and manifest). A resume from that rewritten checkpoint reads it
    (its manifest checks), starts from the new best, and trains steps 4 and 5 exactly as the
    uninterrupted run: the same metrics lines and the same weights."""
    import json

    def trainer(where, callbacks=()):
        return GRPOTrainer(model=tiny_model_dir, reward_funcs=[short, rising_eval], train_dataset=_dataset(8),
                           eval_dataset=_dataset(2), callbacks=list(callbacks),
                           args=_args(where, max_steps=5, eval_strategy="steps", eval_steps=2, save_steps=2,
                                      metric_for_best_model="reward"))

    whole = trainer(tmp_path / "whole")
    whole.train()
    assert trainer(tmp_path / "cut", [StopAtStep(3)]).train().global_step == 3
    cut = tmp_path / "cut" / "run"
    kept = json.loads((cut / "checkpoints" / "step-00000003" / "trainer_state.json").read_text())
    assert kept["observers"]["trl"]["best_global_step"] == 3  # rewritten: the in-run evaluations were at 2 only

    seen = SeenAtStart()
    resumed = trainer(tmp_path / "cut", [seen])
    assert resumed.train(resume_from_checkpoint=True).global_step == 5
    assert seen.best == (kept["observers"]["trl"]["best_metric"], 3)  # the rewritten best came back
    (lines, weights), (resumed_lines, resumed_weights) = _trained(tmp_path / "whole" / "run"), _trained(cut)
    assert [line[0] for line in resumed_lines] == [1, 2, 3, 4, 5, 5]  # the last: the evaluation after training
    assert resumed_lines == lines
    assert all((resumed_weights[k] == weights[k]).all() for k in weights)
    assert (resumed.state.best_metric, resumed.state.best_global_step) == \
        (whole.state.best_metric, whole.state.best_global_step) == (whole.state.best_metric, 5)


class SeenAtStart(TrainerCallback):
    """The state's best fields as on_train_begin sees them (after a resume restored them)."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.best = (state.best_metric, state.best_global_step)
