"""TRL's evaluation during training (``eval_strategy``, ``eval_steps``, ``eval_on_start``,
``num_generations_eval``) read by ``GRPOConfig.from_trl`` as polyrl's ``[eval]``: the sampled
completions per eval prompt scored with the run's own rewards and weights (``eval.reward = "run"``,
no greedy pass), on the rows given as ``eval_prompts`` (TRL's ``eval_dataset``)."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl import api, evaluation, resume_config
from polyrl.config import EvalSection
from polyrl.errors import ConfigError
from polyrl import step_metrics

trl = pytest.importorskip("trl")


def trl_config(**kwargs) -> object:
    values = dict(output_dir="runs/x", max_steps=4, num_generations=2, per_device_train_batch_size=4,
                  use_cpu=True, report_to="none", bf16=False)  # float32 (TRL's bf16 default: test_trl_trainer)
    return trl.GRPOConfig(**{**values, **kwargs})


def _eval(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k.startswith("eval.")}


def test_eval_strategy_steps_is_every_eval_steps_sampled_with_the_runs_rewards():
    ours = api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=2))
    assert _eval(ours.settings) == {"eval.every": 2, "eval.samples": 2, "eval.reward": "run", "eval.greedy": False,
                                    "eval.before": False, "eval.loss": True, "eval.loss_batch": 8}


def test_eval_steps_unset_is_logging_steps_and_a_fraction_is_of_max_steps_rounded_up():
    assert api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", logging_steps=3)).settings["eval.every"] == 3
    assert api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=0.3, max_steps=10)) \
        .settings["eval.every"] == 3  # transformers: ceil(10 x 0.3)



@pytest.mark.parametrize(("fields", "every"), [({"eval_steps": 0.5}, 2), ({"eval_steps": 0.3}, 2),
                                               ({"eval_steps": 0.5, "num_iterations": 2}, 2)])
def test_a_fraction_eval_steps_in_an_epoch_run_is_of_the_updates_transformers_counts(fields, every):
    """No max_steps: transformers counts it from num_train_epochs (2 epochs of 2 batches: 4 updates a
    rollout batch each), then eval_steps = ceil(max_steps x eval_steps); from_trl refused it."""
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(4)],
                               rewards=["numeric_match"], eval_prompts=["e"],
                               grpo_config=trl_config(eval_strategy="steps", max_steps=-1, num_train_epochs=2, **fields))
    assert config.train.steps == 4 and config.eval.every == every
    with pytest.raises(ConfigError) as err:  # 8 updates x 0.3 = 3: part-way through a rollout batch of 2
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(4)],
                       rewards=["numeric_match"], eval_prompts=["e"],
                       grpo_config=trl_config(eval_strategy="steps", max_steps=-1, num_train_epochs=2,
                                              num_iterations=2, eval_steps=0.3))
    assert err.value.field == "grpo_config.eval_steps" and "is 3 optimizer updates" in err.value.message


@pytest.mark.parametrize("max_steps", [10, -1])
def test_a_negative_eval_steps_is_one_error_naming_it(max_steps):
    """transformers puts logging_steps in for an unset or 0 eval_steps, but lets a negative one through:
    it was "a fraction of the run's optimizer updates", or with max_steps eval.every = -20."""
    with pytest.raises(ConfigError) as err:
        api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=-2, max_steps=max_steps))
    assert err.value.field == "grpo_config.eval_steps" and "-2" in err.value.message and "fraction" not in \
        err.value.message


def test_eval_steps_count_optimizer_updates_so_num_iterations_divides_them():
    ours = api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=4, num_iterations=2))
    assert ours.settings["eval.every"] == 2
    with pytest.raises(ConfigError) as err:
        api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=3, num_iterations=2))
    assert err.value.field == "grpo_config.eval_steps"


def test_eval_on_start_and_num_generations_eval():
    ours = api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=1, eval_on_start=True,
                                              num_generations_eval=4, per_device_eval_batch_size=4))
    assert ours.settings["eval.before"] is True and ours.settings["eval.samples"] == 4


def test_eval_strategy_no_evaluates_nothing_and_eval_on_start_alone_is_refused():
    assert _eval(api.GRPOConfig.from_trl(trl_config(eval_strategy="no")).settings) == {}
    with pytest.raises(ConfigError) as err:  # TRL: once before training; polyrl would evaluate after it too
        api.GRPOConfig.from_trl(trl_config(eval_on_start=True))
    assert err.value.field == "grpo_config.eval_on_start"


def test_an_eval_delay_is_still_refused_by_name():
    with pytest.raises(ConfigError) as err:
        api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=1, eval_delay=2))
    assert err.value.field == "grpo_config.eval_delay"


def _rows(n: int, start: int = 0) -> list[dict]:
    return [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(start, start + n)]


def test_run_config_takes_the_eval_rows_and_trls_eval_settings():
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=_rows(8), rewards=["numeric_match"],
                               grpo_config=trl_config(eval_strategy="steps", eval_steps=2),
                               eval_prompts=_rows(3, start=100))
    assert config.data.eval_rows == _rows(3, start=100) and config.data.rows == _rows(8)
    ev = config.eval
    assert (ev.count, ev.every, ev.samples, ev.reward, ev.greedy, ev.before) == (3, 2, 2, "run", False, False)


def test_eval_strategy_epoch_is_every_epochs_whole_batches():
    # 9 prompts, 2 a step (4 completions / num_generations 2): TRL's epoch is 9 // 2 = 4 steps
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=_rows(9), rewards=["numeric_match"],
                               grpo_config=trl_config(eval_strategy="epoch"), eval_prompts=_rows(2, start=100))
    assert config.eval.every == 4 and not config.eval.greedy


def test_an_eval_strategy_without_eval_rows_is_an_error_naming_them():
    with pytest.raises(ConfigError) as err:  # TRL: "you didn't pass an eval_dataset"
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=_rows(8), rewards=["numeric_match"],
                       grpo_config=trl_config(eval_strategy="steps", eval_steps=1))
    assert err.value.field == "eval_prompts" and "eval_strategy" in err.value.fix


def test_eval_greedy_false_needs_samples():
    with pytest.raises(ConfigError) as err:
        EvalSection(count=2, greedy=False)
    assert err.value.field == "eval.greedy"


def test_eval_loss_needs_sampled_completions():
    with pytest.raises(ConfigError) as err:
        EvalSection(count=2, loss=True)
    assert err.value.field == "eval.loss" and "eval.samples" in err.value.fix
    with pytest.raises(ConfigError) as cut:  # a batch of 6 would split a group of 4
        EvalSection(count=2, samples=4, greedy=False, loss=True, loss_batch=6, reward="run")
    assert cut.value.field == "eval.loss_batch" and "multiple of 4" in cut.value.fix
    assert EvalSection(count=2, samples=4, greedy=False, loss=True, loss_batch=8, reward="run").loss_batch == 8


@pytest.mark.parametrize("reward", [None, "numeric_match"])
def test_eval_loss_with_another_eval_reward_than_the_runs_is_one_error(reward):
    """The loss's advantages are the run's: scored by one eval reward (the default numeric_match)
    they came from another reward than the one trained, silently, and under GDPO (one column per
    run reward) they were a KeyError traceback."""
    given = {} if reward is None else {"reward": reward}
    with pytest.raises(ConfigError) as err:
        EvalSection(count=2, samples=4, greedy=False, loss=True, **given)
    assert err.value.field == "eval.loss" and 'reward = "run"' in err.value.fix


def test_the_sampled_pass_with_the_runs_rewards_has_trls_names():
    sampled = np.array([1.0, 0.0, 0.5, np.nan])
    parts = {"short": np.array([0.5, -0.5, 0.0, np.nan]), "digit": np.array([1.0, 1.0, 1.0, np.nan])}
    out = evaluation.eval_metrics(None, sampled, 2, 1, 1.0, 2, per_reward=parts, lengths=np.array([3, 5, 4, 4]))
    assert "eval/accuracy" not in out  # greedy = false: no greedy pass
    names = step_metrics.trl_eval_names(out)
    assert names["eval_reward"] == pytest.approx(0.5)
    assert names["eval_reward_std"] == pytest.approx(0.5)  # Bessel's, NaN left out, as TRL's nanstd
    assert names["eval_rewards/short/mean"] == pytest.approx(0.0) and names["eval_rewards/digit/std"] == 0.0
    assert names["eval_completions/mean_length"] == 4.0
    # polyrl's own evaluation (one eval.reward) keeps its names, and gets no TRL ones
    assert step_metrics.trl_eval_names(evaluation.eval_metrics(np.ones(2), sampled, 2, 1, 1.0, 2)) == {}


@pytest.mark.parametrize("rows", ["one prompt", [], {"test": []}])
def test_eval_prompts_that_are_not_rows_are_one_error_naming_them(rows):
    with pytest.raises(ConfigError) as err:
        api.run_config(api.grpo, policy=api.Agent("m"), prompts=_rows(8), rewards=["numeric_match"], eval_prompts=rows)
    assert err.value.field == "eval_prompts"


def test_a_resume_takes_a_changed_eval_on_start_and_refuses_other_eval_rows():
    """eval.before is read at step 0 only, which a resumed run is past: a script resumed with
    eval_on_start changed was refused as breaking exact resumption. Other eval rows still are."""
    def config(rows, **trl):
        return api.run_config(api.grpo, policy=api.Agent("m"), prompts=_rows(8), rewards=["numeric_match"],
                              grpo_config=trl_config(eval_strategy="steps", eval_steps=2, **trl),
                              eval_prompts=rows)[0]

    saved = resume_config.snapshot(config(_rows(3, start=100), eval_on_start=True))
    assert resume_config.check(saved, config(_rows(3, start=100), eval_on_start=True), weights_only=False) == []
    assert resume_config.check(saved, config(_rows(3, start=100)), weights_only=False) == \
        ["eval.before True -> False"]
    with pytest.raises(ConfigError) as err:
        resume_config.check(saved, config(_rows(3, start=200), eval_on_start=True), weights_only=False)
    assert err.value.field == "data.eval_rows"
    # a checkpoint from before eval_loss (no eval.loss, eval.loss_batch) resumes, reporting the loss from then on
    older = {k: v for k, v in saved.items() if not k.startswith("eval.loss")}
    assert resume_config.check(older, config(_rows(3, start=100), eval_on_start=True, per_device_eval_batch_size=4),
                               weights_only=False) == ["eval.loss None -> True", "eval.loss_batch None -> 4"]


def test_eval_prompts_without_the_prompt_column_are_an_error_naming_them(tiny_model_dir, tmp_path):
    """It named field ``prompts``, the training rows, which have the column."""
    with pytest.raises(ConfigError) as err:
        api.run(api.grpo, policy=api.Agent(tiny_model_dir), prompts=_rows(4), rewards=["numeric_match"],
                grpo_config=api.GRPOConfig(steps=1, prompts_per_step=2, output_dir=str(tmp_path / "run")),
                eval_prompts=[{"question": "q", "answer": "1"}], progress=False)
    assert err.value.field == "eval_prompts" and "row 0 of eval_prompts" in err.value.message


def test_a_reward_labelled_run_beside_others_is_refused_under_eval_reward_run():
    """eval.reward = "run" is every reward, weighted: an entry labelled "run" (a function named run)
    among others would have been ignored as the eval reward without a word."""
    from polyrl.config import RunConfig

    def config(rewards):
        return RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"}, "rewards": rewards,
                                    "eval": {"count": 2, "reward": "run"}})

    with pytest.raises(ConfigError) as err:
        config([{"name": "numeric_match", "label": "run"}, {"name": "length_penalty", "options": {"target": 4}}])
    assert err.value.field == "rewards[0].label"
    assert config([{"name": "numeric_match", "label": "run"}]).eval.reward == "run"  # one reward: the same score


# --- GRPOTrainer.evaluate(): TRL's evaluate() on polyrl's evaluation ------------------------------

def _short(completions, **kwargs):
    """A TRL-style reward."""
    return [-len(c) / 10 for c in completions]


def _trainer(model_dir, where, **kwargs):
    datasets = pytest.importorskip("datasets")
    from polyrl.trl import GRPOTrainer

    trl_args = {**dict(max_steps=2, max_completion_length=6, learning_rate=1e-2, disable_tqdm=True,
                       output_dir=str(where / "run")), **kwargs.pop("args", {})}
    rows = kwargs.pop("eval_dataset", datasets.Dataset.from_list(_rows(3, start=10)))
    return GRPOTrainer(model=model_dir, reward_funcs=[_short], args=trl_config(**trl_args),
                       train_dataset=datasets.Dataset.from_list(_rows(4)), eval_dataset=rows, **kwargs)


_TRL_KEYS = {"eval_reward", "eval_reward_std", "eval_rewards/_short/mean", "eval_rewards/_short/std",
             "eval_completions/mean_length", "eval_loss", "eval_runtime", "eval_samples_per_second",
             "eval_steps_per_second", "eval_num_tokens", "eval_clip_ratio/low_mean", "eval_clip_ratio/high_mean",
             "eval_clip_ratio/region_mean", "eval_clip_ratio/low_min", "eval_clip_ratio/high_max",
             "eval_frac_reward_zero_std", "eval_completions/min_length", "eval_completions/max_length",
             "eval_completions/clipped_ratio", "eval_completions/mean_terminated_length",
             "eval_completions/min_terminated_length", "eval_completions/max_terminated_length"}
#: what TRL's evaluate() returns (TRL 1.16, this config) that polyrl's does not (README "Not there")
_NOT_RETURNED = {"eval_entropy", "eval_model_preparation_time"}
_REWARD_KEYS = ("eval_reward", "eval_reward_std", "eval_rewards/_short/mean", "eval_completions/mean_length",
                "eval_frac_reward_zero_std", "eval_completions/min_length", "eval_completions/max_length",
                "eval_completions/clipped_ratio", "eval_completions/mean_terminated_length")


def test_evaluate_is_the_runs_own_evaluation_before_and_after_training(tiny_model_dir, tmp_path):
    """Before train() the model given, after it the trained weights: each equals the run's own
    evaluation at that step (eval_on_start; the end), sampled as TRL's num_generations_eval says
    under the same seed; the untrained model at the end's seed scores otherwise."""
    args = dict(eval_strategy="steps", eval_steps=2, eval_on_start=True, num_generations_eval=4)
    trainer = _trainer(tiny_model_dir, tmp_path, args=args)
    before = trainer.evaluate()
    # epoch 0 before training: transformers' fresh TrainerState, which its evaluate() logs
    assert set(before) == _TRL_KEYS | {"epoch"} and before["epoch"] == 0 and all(np.isfinite(v) for v in before.values())
    assert trainer.state.log_history == [{**before, "step": 0}]  # as transformers logs it
    trainer.train()
    run_before, run_after = [h for h in trainer.state.log_history if "eval_reward" in h]
    after = trainer.evaluate()
    assert set(after) == _TRL_KEYS | {"epoch"} and after["epoch"] == run_after["epoch"] == 1.0
    assert trainer.state.log_history[-1] == {**after, "step": 2}
    for key in _REWARD_KEYS:
        assert before[key] == pytest.approx(run_before[key]) and after[key] == pytest.approx(run_after[key])
    untrained = _trainer(tiny_model_dir, tmp_path / "untrained", args=args)
    untrained.state.global_step = 2  # the end's seed, the model as given
    assert untrained.evaluate()["eval_reward"] != pytest.approx(after["eval_reward"])


def test_evaluate_returns_trls_keys_with_trls_values_where_exact(tiny_model_dir, tmp_path):
    """The same script's evaluate() on TRL's GRPOTrainer and on polyrl's: polyrl returns a subset of
    TRL's keys, every one but the documented few, and TRL's values where they are exact before any
    training: clip ratios 0 (the ratio is 1) and num_tokens 0. polyrl returned neither the clip
    ratios nor eval_num_tokens."""
    datasets = pytest.importorskip("datasets")
    args = dict(eval_strategy="steps", eval_steps=2, num_generations_eval=4)

    def evaluated(trainer_class, where):
        trl_args = trl_config(max_steps=2, max_completion_length=6, learning_rate=1e-2, disable_tqdm=True,
                              output_dir=str(where), **args)
        return trainer_class(model=tiny_model_dir, reward_funcs=[_short], args=trl_args,
                             train_dataset=datasets.Dataset.from_list(_rows(4)),
                             eval_dataset=datasets.Dataset.from_list(_rows(3, start=10))).evaluate()

    ours = _trainer(tiny_model_dir, tmp_path / "polyrl", args=args).evaluate()
    theirs = evaluated(trl.GRPOTrainer, tmp_path / "trl")
    assert set(ours) == set(theirs) - _NOT_RETURNED, sorted(set(ours) ^ (set(theirs) - _NOT_RETURNED))
    exact = [key for key in ours if key.startswith(("eval_clip_ratio/", "eval_num_tokens"))] + ["epoch"]
    assert {key: ours[key] for key in exact} == {key: theirs[key] for key in exact} and len(exact) == 7


def test_the_eval_lengths_and_zero_std_share_are_each_eval_batchs_averaged_as_trl_logs_them():
    """TRL's eval mode logs completions/min_length, max_length, clipped_ratio, the terminated lengths
    (0 where a batch's every completion was cut) and frac_reward_zero_std for each eval batch, and its
    log() averages them over the batches; polyrl's evaluate() returned none of them. Two batches of
    two groups of 2: the second batch all cut, one flat group in each."""
    from polyrl.step_metrics import TRL_EVAL_ALIASES, eval_batch_metrics

    lengths = np.array([3, 6, 2, 4, 6, 6, 5, 6])
    cut = np.array([False, True, False, False, True, True, True, True])
    rewards = np.array([1.0, 1.0, 0.0, 0.5, 0.2, 0.2, 0.1, 0.3])
    out = eval_batch_metrics(lengths, cut, rewards, np.array([0, 0, 0, 0, 1, 1, 1, 1]), 2)
    out = {key: value for key, value in out.items() if "reward_mean" not in key and "reward_std" not in key
           and key != "eval/completion_len_mean"}  # test_..._rewards_are_each_eval_batchs_averaged
    assert out == {"eval/completion_len_min": (2 + 5) / 2, "eval/completion_len_max": (6 + 6) / 2,
                   "eval/clipped_ratio": (0.25 + 1.0) / 2, "eval/terminated_len_mean": (3.0 + 0.0) / 2,
                   "eval/terminated_len_min": (2 + 0) / 2, "eval/terminated_len_max": (4 + 0) / 2,
                   "eval/frac_reward_zero_std": (0.5 + 0.5) / 2}
    assert {TRL_EVAL_ALIASES[k] for k in out} == {
        "eval_completions/min_length", "eval_completions/max_length", "eval_completions/clipped_ratio",
        "eval_completions/mean_terminated_length", "eval_completions/min_terminated_length",
        "eval_completions/max_terminated_length", "eval_frac_reward_zero_std"}
    whole = eval_batch_metrics(lengths, cut, rewards, np.zeros(8, dtype=int), 2)  # one batch: over the whole set
    assert whole["eval/completion_len_min"] == 2 and whole["eval/terminated_len_mean"] == 3.0


def test_the_eval_rewards_and_mean_length_are_each_eval_batchs_averaged_as_trl_logs_them():
    """TRL logs reward, reward_std, rewards/<f>/mean and /std and completions/mean_length for each
    eval batch (torch.nanmean, trl's nanstd: NaN under two valid values) and its log() averages
    them, a NaN left out; polyrl's evaluate() took them over the whole eval set, which differs with
    uneven batches. Batches of 4, 4 and 2 completions (the last uneven), one NaN reward."""
    from polyrl.step_metrics import eval_batch_metrics, trl_eval_names

    lengths = np.array([3, 6, 2, 4, 6, 6, 5, 6, 1, 9])
    rewards = np.array([1.0, 1.0, 0.0, 0.5, 0.2, 0.2, 0.1, 0.3, 0.9, np.nan])
    f = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, np.nan])
    batch_of = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    out = eval_batch_metrics(lengths, np.zeros(10, dtype=bool), rewards, batch_of, 2, raw={"f": f})
    theirs = trl_eval_names(out)

    def std(x):
        return float(np.std(x, ddof=1))

    assert theirs["eval_reward"] == pytest.approx((0.625 + 0.2 + 0.9) / 3)
    assert theirs["eval_reward_std"] == pytest.approx((std([1, 1, 0, 0.5]) + std([0.2, 0.2, 0.1, 0.3])) / 2)
    assert theirs["eval_rewards/f/mean"] == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert theirs["eval_rewards/f/std"] == pytest.approx((std([1, 0, 0, 1]) + std([0, 0, 0, 1])) / 2)
    assert theirs["eval_completions/mean_length"] == pytest.approx((3.75 + 5.75 + 5.0) / 3)
    assert theirs["eval_reward"] != pytest.approx(np.nanmean(rewards))  # the whole set's: what it was


def test_evaluate_loads_the_model_once_and_scores_as_a_fresh_load(tiny_model_dir, tmp_path, monkeypatch):
    """evaluate() loaded the model in a polyrl trainer of its own at every call (and every named
    set): now a second call, a second set and, after train() with an eval_dataset, the first call
    evaluate on the engines already holding the model, with the numbers a fresh load gives."""
    from polyrl import trainer as polyrl_trainer

    loads: list[str] = []
    real = polyrl_trainer.load_engines

    def counted(config, *args, **kwargs):
        loads.append(config.model.path)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(polyrl_trainer, "load_engines", counted)
    args = dict(num_generations_eval=4)
    trainer = _trainer(tiny_model_dir, tmp_path, args=args)
    first = trainer.evaluate()
    second = trainer.evaluate()
    named = trainer.evaluate(eval_dataset={"a": _rows(3, start=10), "b": _rows(2)})
    assert loads == [tiny_model_dir]  # it was once a call and a set: 4
    fresh = _trainer(tiny_model_dir, tmp_path / "fresh", args=args).evaluate()  # loads anew, as every call did
    assert len(loads) == 2
    for key in _REWARD_KEYS:
        assert first[key] == second[key] == fresh[key] == named[key.replace("eval_", "eval_a_", 1)]
    trainer.train()  # eval_strategy "no": the eval_dataset is kept for evaluate(), the run's engines with it
    assert len(loads) == 3
    after = trainer.evaluate()
    assert len(loads) == 3  # the run's engines
    trained = _trainer(str(tmp_path / "run" / "model"), tmp_path / "trained", args=args)
    trained.state.global_step = 2  # the seed evaluate() has after the run's 2 steps
    again = trained.evaluate()  # the trained folder loaded anew
    assert all(after[key] == pytest.approx(again[key]) for key in _REWARD_KEYS)
    assert after["eval_reward"] != pytest.approx(first["eval_reward"])  # the trained model, not the given one


def test_evaluate_after_training_lora_adapters_evaluates_the_trained_adapters(tiny_model_dir, tmp_path):
    peft = pytest.importorskip("peft")
    trainer = _trainer(tiny_model_dir, tmp_path, args=dict(eval_strategy="steps", eval_steps=2, learning_rate=5e-2),
                       peft_config=peft.LoraConfig(r=4, lora_alpha=8))
    trainer.train()
    run_after = [h for h in trainer.state.log_history if "eval_reward" in h][-1]
    after = trainer.evaluate()  # the merged output_dir/model, against the run's adapters
    assert all(after[key] == pytest.approx(run_after[key], abs=1e-6) for key in _REWARD_KEYS)


def test_evaluate_takes_a_prefix_and_named_datasets_as_transformers_does(tiny_model_dir, tmp_path):
    datasets = pytest.importorskip("datasets")
    named = {"a": datasets.Dataset.from_list(_rows(2)), "b": _rows(2, start=5)}
    trainer = _trainer(tiny_model_dir, tmp_path, eval_dataset=named)  # eval_strategy "no": kept for evaluate()
    both = trainer.evaluate(metric_key_prefix="test")
    assert {k for k in both if k.startswith("test_a_")} == {k.replace("eval_", "test_a_") for k in _TRL_KEYS}
    assert {k for k in both if k.startswith("test_b_")} == {k.replace("eval_", "test_b_") for k in _TRL_KEYS}
    assert len(both) == 2 * len(_TRL_KEYS) + 1 and both["epoch"] == 0  # transformers' epoch, before training
    assert [next(k for k in h if k not in ("step", "epoch"))[:7] for h in trainer.state.log_history] == \
        ["test_a_", "test_b_"] and all(h["step"] == 0 for h in trainer.state.log_history)
    one = trainer.evaluate(eval_dataset="a", metric_key_prefix="mine")  # one of the trainer's named sets
    assert set(one) == {k.replace("eval_", "mine_") for k in _TRL_KEYS} | {"epoch"}
    assert one["mine_reward"] == pytest.approx(both["test_a_reward"])  # the same rows, step and seed


@pytest.mark.parametrize(("given", "words"), [
    (None, "no eval_dataset"), ("one prompt", "not a dataset"), (3, "not a dataset"), ([], "is empty"),
    ({}, "empty dict"), ({"a": []}, "eval_dataset['a'] is empty"), ("c", "not one of"),
    ([{"question": "q", "answer": "1"}], "row 0 of eval_dataset")])
def test_evaluate_of_rows_it_cannot_read_is_one_error_naming_eval_dataset(tiny_model_dir, tmp_path, given, words):
    kept = {"a": _rows(1)} if given == "c" else None
    trainer = _trainer(tiny_model_dir, tmp_path, eval_dataset=kept)
    with pytest.raises(ConfigError) as err:
        trainer.evaluate(eval_dataset=given)
    assert err.value.field == "eval_dataset" and words in err.value.message and "eval_prompts" not in str(err.value)
    assert trainer.state.log_history == []


def test_an_iterable_eval_dataset_is_the_rows_trls_eval_dataloader_streams_in_its_order(tiny_model_dir, tmp_path):
    """TRL 1.16 evaluates an IterableDataset (its get_eval_dataloader: the stream shuffled with
    args.seed, each prompt num_generations_eval times, read to its end); polyrl refused one. The rows
    polyrl evaluates are the prompts TRL's own eval dataloader yields, in its order, and evaluate()
    and a training run with it as eval_dataset evaluate them."""
    datasets = pytest.importorskip("datasets")
    from polyrl.trl_evaluate import rows_of, trl_eval_order

    stream = datasets.Dataset.from_list(_rows(7, start=10)).to_iterable_dataset(num_shards=2)
    args = trl_config(max_steps=2, max_completion_length=6, num_generations_eval=2, per_device_eval_batch_size=2,
                      output_dir=str(tmp_path / "trl"), seed=3)
    theirs = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[_short], args=args,
                             train_dataset=datasets.Dataset.from_list(_rows(4)))
    drawn = [row["prompt"] for batch in theirs.get_eval_dataloader(stream) for row in batch]
    assert len(drawn) == 14 and drawn[::2] == drawn[1::2]  # each prompt twice, in a row
    ours = trl_eval_order(rows_of(stream, "eval_dataset", args), args)
    assert [row["prompt"] for row in ours] == drawn[::2] != [row["prompt"] for row in _rows(7, start=10)]
    trainer = _trainer(tiny_model_dir, tmp_path / "polyrl", eval_dataset=stream,
                       args=dict(eval_strategy="steps", eval_steps=2, num_generations_eval=2))
    metrics = trainer.evaluate()
    assert np.isfinite(metrics["eval_reward"]) and metrics["epoch"] == 0
    trainer.train()
    assert [h for h in trainer.state.log_history if "eval_reward" in h]  # the run evaluated on the stream


def test_one_evaluation_samples_as_trls_eval_mode_whatever_the_schedule():
    """eval_strategy "no" leaves [eval] out of from_trl's settings; evaluate() samples
    num_generations_eval (else num_generations) all the same, with no schedule of its own."""
    from polyrl.trl_evaluate import eval_settings

    scheduled = trl_config(eval_strategy="epoch", num_generations_eval=4)
    for args in (trl_config(num_generations_eval=4), scheduled):
        ours = eval_settings(api.GRPOConfig.from_trl(args).settings, args)
        assert _eval(ours) == {"eval.reward": "run", "eval.greedy": False, "eval.samples": 4, "eval.before": False,
                               "eval.every": 0, "eval.loss": True, "eval.loss_batch": 8}
    assert eval_settings({}, trl_config())["eval.samples"] == 2  # num_generations
    assert eval_settings({"generation.group_size": 6}, api.GRPOConfig())["eval.samples"] == 6  # polyrl's own config


def test_the_returned_keys_are_trls_under_the_prefix_with_transformers_speed_metrics():
    from polyrl.trl_evaluate import trl_metrics

    ours = evaluation.eval_metrics(None, np.array([1.0, 0.0, 0.5, 0.5]), 2, 1, 1.0, 2,
                                   per_reward={"f": np.array([1.0, 0.0, 0.5, 0.5])}, lengths=np.array([3, 5, 4, 4]))
    out = trl_metrics(ours, "test", rows=5, seconds=2.0, batch_size=2, epoch=None)
    assert out == {"test_reward": 0.5, "test_reward_std": pytest.approx(np.std([1, 0, .5, .5], ddof=1)),
                   "test_rewards/f/mean": 0.5, "test_rewards/f/std": pytest.approx(np.std([1, 0, .5, .5], ddof=1)),
                   "test_completions/mean_length": 4.0, "test_runtime": 2.0, "test_samples_per_second": 2.5,
                   "test_steps_per_second": 1.5}  # ceil(5 rows / 2) steps, as transformers counts them
    assert trl_metrics(ours, "eval", 5, 0.0, 2, 1.5) == {**{k.replace("test_", "eval_"): v for k, v in out.items()
                                                            if "per_second" not in k}, "eval_runtime": 0.0,
                                                         "epoch": 1.5}


@pytest.mark.parametrize("prefix", ["", None])
def test_evaluate_without_a_metric_key_prefix_is_one_error(tiny_model_dir, tmp_path, prefix):
    with pytest.raises(ConfigError) as err:
        _trainer(tiny_model_dir, tmp_path).evaluate(metric_key_prefix=prefix)
    assert err.value.field == "metric_key_prefix"



def _trl_advantages(rewards: list[float], group: int) -> np.ndarray:
    """TRL's group-scaled advantages, written out: (r - mean) / (unbiased std + 1e-4) per group."""
    g = np.asarray(rewards, dtype=np.float64).reshape(-1, group)
    return ((g - g.mean(axis=1, keepdims=True)) / (g.std(axis=1, ddof=1, keepdims=True) + 1e-4)).reshape(-1)


def _recording_trainer(model_dir, where, seen, **args):
    """A trainer whose one reward depends on the completion ids (length and first token) and
    records every batch it scores: ids and scores."""
    datasets = pytest.importorskip("datasets")
    from polyrl.trl import GRPOTrainer

    def by_ids(completions, completion_ids, **kwargs):
        scores = [float(len(ids) % 3) + 0.25 * (ids[0] % 2 if ids else 0) for ids in completion_ids]
        seen.append(([list(ids) for ids in completion_ids], scores))
        return scores

    trl_args = dict(max_steps=2, max_completion_length=8, learning_rate=1e-2, disable_tqdm=True,
                    output_dir=str(where / "run"), num_generations_eval=4, **args)
    return GRPOTrainer(model=model_dir, reward_funcs=[by_ids], args=trl_config(**trl_args),
                       train_dataset=datasets.Dataset.from_list(_rows(4)),
                       eval_dataset=datasets.Dataset.from_list(_rows(3, start=10)))


def test_eval_loss_is_trls_loss_on_the_eval_completions(tiny_model_dir, tmp_path):
    """TRL's evaluate() returns its loss on the eval batches (prediction_step), averaged with each
    batch's size as weight. With loss_type "dapo" and beta 0 the ratio is 1, so a batch's loss is
    minus its token-weighted mean advantage, computed here from the completion ids and scores the
    reward function saw: 12 completions in batches of per_device_eval_batch_size = 8 (8 and 4)."""
    seen: list[tuple[list[list[int]], list[float]]] = []
    trainer = _recording_trainer(tiny_model_dir, tmp_path, seen, loss_type="dapo", beta=0.0)
    metrics = trainer.evaluate()
    ids = [x for batch in seen for x in batch[0]]
    scores = [x for batch in seen for x in batch[1]]
    assert len(ids) == 12 and np.ptp(scores) > 0  # 3 prompts x 4 samples, not all scored alike
    lengths = np.array([len(x) for x in ids], dtype=np.float64)
    weighted = _trl_advantages(scores, 4) * lengths
    losses = [-weighted[b].sum() / lengths[b].sum() for b in (slice(0, 8), slice(8, 12))]
    assert metrics["eval_loss"] == pytest.approx((8 * losses[0] + 4 * losses[1]) / 12, rel=1e-9, abs=1e-12)
    whole = -weighted.sum() / lengths.sum()  # one batch of all 12 weighs the tokens otherwise
    assert abs(whole - metrics["eval_loss"]) > 1e-6
    assert "eval_kl" not in metrics  # beta 0: TRL logs no kl


def test_eval_loss_with_batch_scaled_rewards_scales_each_eval_batch_by_its_own_std(tiny_model_dir, tmp_path):
    """TRL scores each eval batch on its own (_generate_and_score_completions per batch): with
    scale_rewards="batch" the advantages are divided by the batch's std (unbiased, + 1e-4), not
    the whole eval set's. 12 completions in batches of 8 and 4; polyrl divided by the std of all 12."""
    seen: list[tuple[list[list[int]], list[float]]] = []
    trainer = _recording_trainer(tiny_model_dir, tmp_path, seen, loss_type="dapo", beta=0.0, scale_rewards="batch")
    metrics = trainer.evaluate()
    ids = [x for batch in seen for x in batch[0]]
    scores = np.array([x for batch in seen for x in batch[1]])
    lengths = np.array([len(x) for x in ids], dtype=np.float64)
    losses = []
    for rows in (slice(0, 8), slice(8, 12)):
        group_means = scores[rows].reshape(-1, 4).mean(axis=1).repeat(4)
        advantages = (scores[rows] - group_means) / (scores[rows].std(ddof=1) + 1e-4)
        losses.append(-(advantages * lengths[rows]).sum() / lengths[rows].sum())
    assert np.std(scores[:8], ddof=1) != pytest.approx(np.std(scores, ddof=1), rel=1e-3)  # the premise
    assert metrics["eval_loss"] == pytest.approx((8 * losses[0] + 4 * losses[1]) / 12, rel=1e-9, abs=1e-12)


def test_eval_with_an_entropy_bonus_logs_trls_policy_loss_entropy_and_loss(tiny_model_dir, tmp_path):
    """TRL's evaluate() with entropy_coef > 0 returns eval_policy_loss (its loss without the bonus)
    and eval_entropy beside eval_loss; polyrl returned none of the three (no eval loss where the
    loss reads entropies). loss_type "dapo" (where TRL's bonus and polyrl's agree), beta 0, one eval
    batch of 12: the policy loss is minus the token-weighted mean advantage (ratio 1), the loss it
    less entropy_coef x the entropy."""
    seen: list[tuple[list[list[int]], list[float]]] = []
    coef = 0.05
    trainer = _recording_trainer(tiny_model_dir, tmp_path, seen, loss_type="dapo", beta=0.0, entropy_coef=coef,
                                 per_device_eval_batch_size=12)
    metrics = trainer.evaluate()
    ids = [x for batch in seen for x in batch[0]]
    scores = [x for batch in seen for x in batch[1]]
    assert len(ids) == 12 and np.ptp(scores) > 0
    lengths = np.array([len(x) for x in ids], dtype=np.float64)
    policy = -(_trl_advantages(scores, 4) * lengths).sum() / lengths.sum()
    assert metrics["eval_policy_loss"] == pytest.approx(policy, rel=1e-9, abs=1e-12)
    assert 0 < metrics["eval_entropy"] < np.log(trainer.processing_class.vocab_size + 1)
    assert metrics["eval_loss"] == pytest.approx(policy - coef * metrics["eval_entropy"], rel=1e-9, abs=1e-12)


def test_the_eval_rows_are_evaluated_in_trls_eval_sampler_order(tiny_model_dir, tmp_path):
    """TRL's eval dataloader draws the eval rows through its RepeatSampler, which shuffles them
    with args.seed: that order decides which prompts share an eval batch (and so its advantages and
    loss). polyrl evaluated them in the dataset's order. Here the prompts the reward saw, in order,
    are TRL's own sampler's, for evaluate() and for the run's evaluations alike."""
    datasets = pytest.importorskip("datasets")
    from trl.trainer.utils import RepeatSampler

    from polyrl.trl import GRPOTrainer

    order: list[list[str]] = []

    def record(completions, prompts, **kwargs):
        order.append(list(prompts))
        return [0.0] * len(completions)

    eval_rows = datasets.Dataset.from_list(_rows(6, start=10))
    args = trl_config(max_steps=1, max_completion_length=4, disable_tqdm=True, output_dir=str(tmp_path / "run"),
                      num_generations_eval=2, per_device_eval_batch_size=4, eval_strategy="steps", eval_steps=1,
                      seed=3)
    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[record], args=args,
                          train_dataset=datasets.Dataset.from_list(_rows(4)), eval_dataset=eval_rows)
    trl_order = [eval_rows[i]["prompt"] for i in RepeatSampler(eval_rows, mini_repeat_count=2, seed=args.seed)]
    assert trl_order != [row["prompt"] for row in _rows(6, start=10) for _ in range(2)]  # the premise: shuffled
    held_out = set(trl_order)
    trainer.evaluate()
    assert [p for batch in order for p in batch] == trl_order
    order.clear()
    trainer.train()  # a training step's reward calls, then the evaluation after it
    assert [p for batch in order for p in batch if p in held_out] == trl_order


@pytest.mark.parametrize(("rows", "batch", "generations"), [(3, 4, 2), (5, 4, 2), (7, 6, 3), (4, 4, 2)])
def test_dataloader_drop_last_evaluates_the_prompts_of_trls_whole_eval_batches_only(rows, batch, generations):
    """transformers' eval DataLoader, under TRL's ``dataloader_drop_last=True``, drops the last batch of
    ``per_device_eval_batch_size`` completions when it is short (TRL 1.16 evaluated 2 of 3 prompts with
    a batch of 4 and 2 completions each); polyrl took the field as having no effect and scored every row,
    so its eval_reward was another mean. The rows kept are those of TRL's own sampler and DataLoader
    (the last case: whole batches, nothing dropped)."""
    torch = pytest.importorskip("torch")
    from trl.trainer.utils import RepeatSampler

    from polyrl.trl_evaluate import trl_eval_order

    data = _rows(rows)
    args = trl_config(per_device_eval_batch_size=batch, num_generations_eval=generations, dataloader_drop_last=True,
                      seed=3)
    loader = torch.utils.data.DataLoader(range(rows), batch_size=batch, drop_last=True,
                                         sampler=RepeatSampler(data, mini_repeat_count=generations, seed=3))
    trls = [data[int(i)]["prompt"] for indices in loader for i in indices][::generations]
    assert [row["prompt"] for row in trl_eval_order(data, args)] == trls
    kept_all = trl_eval_order(data, trl_config(per_device_eval_batch_size=batch, num_generations_eval=generations,
                                               seed=3))
    assert len(kept_all) == rows  # transformers' default keeps the short batch


def test_dataloader_drop_last_with_fewer_rows_than_one_eval_batch_is_one_error():
    """TRL's DataLoader would drop the only, short, batch and evaluate nothing: one error naming the field."""
    from polyrl.trl_evaluate import trl_eval_order

    args = trl_config(per_device_eval_batch_size=8, num_generations_eval=2, dataloader_drop_last=True)
    with pytest.raises(ConfigError, match=r"evaluates nothing.*Fix: set dataloader_drop_last=False") as info:
        trl_eval_order(_rows(3), args)
    assert info.value.field == "grpo_config.dataloader_drop_last"


def test_eval_kl_is_zero_before_training_and_grows_with_it(tiny_model_dir, tmp_path):
    """With beta > 0 the eval loss carries the KL term against the reference: none before training
    (the policy is the reference), and after it eval_kl > 0. loss_type "grpo" averages each
    completion's token mean, so the advantage term of whole groups is 0 and the loss is beta x
    the mean KL of the completions."""
    seen: list = []
    trainer = _recording_trainer(tiny_model_dir, tmp_path, seen, loss_type="grpo", beta=0.5)
    before = trainer.evaluate()
    assert before["eval_kl"] == pytest.approx(0.0, abs=1e-6) and before["eval_loss"] == pytest.approx(0.0, abs=1e-6)
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_kl"] > 1e-6 and after["eval_loss"] > 1e-7
    trained = [h for h in trainer.state.log_history if "eval_reward" in h]
    assert all("eval_loss" in h and "eval_kl" in h for h in trained)  # each evaluation during training too


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_eval_loss_divides_by_the_rows_trls_batch_keeps_as_a_training_step_does(aggregation):
    """A completion cut at the length limit under mask_truncated_completions stays in TRL's batch
    with its mask zeroed (a sequence of 0 tokens), so TRL's per-sequence losses divide by every
    row, as polyrl's training step does (``_loss_counts``); the eval loss divided by the rows it
    kept, scaling it by their share."""
    from types import SimpleNamespace

    from polyrl.algorithms import reference
    from polyrl.algorithms.presets import AlgorithmConfig
    from polyrl.trainer import Trainer
    from polyrl.types import Completion, TokenSequence

    policy = {2: np.array([-0.5, -1.0]), 3: np.array([-0.2, -0.3, -0.4]), 1: np.array([-0.7])}

    class Engine:
        def logprobs(self, seqs: list, temperature: float, reference: bool = False) -> list:
            return [policy[len(s.completion_ids)] for s in seqs]

    done = [Completion(0, [1], [5, 6], [-1.0, -1.0], finish_reason="stop"),
            Completion(0, [1], [5, 6, 7], [-1.0] * 3, finish_reason="length"),  # cut: masked out of the loss
            Completion(1, [1], [5], [-1.0], finish_reason="stop"),
            Completion(1, [1], [5, 6, 7], [-1.0] * 3, finish_reason="stop")]
    scores = np.array([1.0, 0.0, 0.0, 1.0])
    algo = AlgorithmConfig.preset("grpo", mask_truncated_completions=True, loss_aggregation=aggregation,
                                  scale_rewards="none")
    config = SimpleNamespace(algorithm=algo, eval=SimpleNamespace(samples=2, loss_batch=0),
                             generation=SimpleNamespace(temperature=1.0), model=SimpleNamespace(path=""))
    one = SimpleNamespace(config=config, model_path="", _max_completion_tokens=8, world_size=1, rank=0,
                          train_engine=Engine(),
                          rewards=SimpleNamespace(rewards=[]), episodes=None)
    got = Trainer._eval_loss(one, done, scores, {})
    trained = [0, 2, 3]
    advantages = algo.advantages(algo.shape_rewards(scores, np.array([2, 3, 1, 3]), 8), 2)
    want, _ = reference.policy_loss([policy[len(done[i].completion_ids)] for i in trained],
                                    [advantages[i] for i in trained], algo.objective(8), num_sequences=4,
                                    num_tokens=sum(int(TokenSequence.of(done[i]).loss_mask.sum()) for i in trained))
    assert got["eval/loss"] == pytest.approx(want, rel=1e-12)


def test_include_for_metrics_inputs_is_refused_where_trl_s_evaluation_fails_with_it(tiny_model_dir, tmp_path):
    """transformers' evaluation loop reads batch["input_ids"] with include_for_metrics=["inputs"];
    GRPOTrainer's batches are lists of rows, so TRL's evaluation raises a TypeError. polyrl
    evaluated and reported numbers: now one error where an evaluation runs (scheduled or
    evaluate()); training without one, and "loss", are taken as TRL takes them."""
    with pytest.raises(ConfigError) as err:
        api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=2, include_for_metrics=["inputs"]))
    assert err.value.field == "grpo_config.include_for_metrics" and "TypeError" in err.value.message
    assert '"inputs"' in (err.value.fix or "")
    api.GRPOConfig.from_trl(trl_config(include_for_metrics=["inputs"]))  # no evaluation: TRL trains too
    api.GRPOConfig.from_trl(trl_config(eval_strategy="steps", eval_steps=2, include_for_metrics=["loss"]))
    trainer = _trainer(tiny_model_dir, tmp_path, args={"include_for_metrics": ["inputs"]})
    with pytest.raises(ConfigError) as err:
        trainer.evaluate()
    assert err.value.field.endswith("include_for_metrics")
    assert trainer.state.log_history == []


def test_each_evaluation_in_log_history_has_transformers_runtime_and_rates_as_trl_logs_them(tiny_model_dir, tmp_path):
    """transformers' ``evaluate()`` logs ``eval_runtime``, ``eval_samples_per_second`` and
    ``eval_steps_per_second`` with each evaluation, so every eval entry of TRL's ``log_history``
    (and TensorBoard's ``eval/runtime``...) has them; polyrl's run left them out (only its
    ``evaluate()`` returned them). 3 eval rows in batches of 2 (``per_device_eval_batch_size``):
    transformers counts 2 steps."""
    import json
    import math

    from polyrl.trl_tags import trl_tags

    args = dict(eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=2, report_to="none")
    trainer = _trainer(tiny_model_dir, tmp_path, args=args)
    trainer.train()
    entries = [h for h in trainer.state.log_history if "eval_reward" in h]
    assert len(entries) == 2
    for entry in entries:
        seconds = entry["eval_runtime"]
        assert 0 < seconds < 600
        assert entry["eval_samples_per_second"] == pytest.approx(3 / seconds, rel=1e-2)
        assert entry["eval_steps_per_second"] == pytest.approx(math.ceil(3 / 2) / seconds, rel=1e-2)
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert trl_tags(line)["eval/runtime"] == line["eval/seconds"] == entries[0]["eval_runtime"]
    # the keys of evaluate(), which test_evaluate_returns_trls_keys_with_trls_values_where_exact checks against TRL's
    assert set(entries[-1]) == set(trainer.evaluate()) | {"step"}


def test_an_evaluation_at_a_step_logging_steps_skips_has_eval_num_tokens_as_trl_logs_it(tiny_model_dir, tmp_path):
    """TRL logs ``eval_num_tokens`` (the training tokens seen so far) in every evaluation's entry;
    polyrl's ``log_history`` left it out of the evaluations of steps ``logging_steps`` (TRL's
    default 10) does not log, though ``on_log`` had it there."""
    import json

    trainer = _trainer(tiny_model_dir, tmp_path, args=dict(eval_strategy="steps", eval_steps=1))
    trainer.train()
    entries = [h for h in trainer.state.log_history if "eval_reward" in h]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in entries] == [1, 2] and not [h for h in trainer.state.log_history if "loss" in h]
    assert [e["eval_num_tokens"] for e in entries] == [x["num_tokens"] for x in lines] and lines[0]["num_tokens"] > 0


def test_named_eval_sets_are_kept_apart_in_a_line_and_logged_one_entry_each():
    """A dict eval_dataset's sets side by side in a step's line (``eval/sets/<name>/``), under TRL's
    ``eval_<name>_`` names, and split into one entry per set, as transformers logs each set."""
    line = {"num_tokens": 7, **step_metrics.named_eval("a", {"eval/sampled_reward_mean": 1.0,
                                                              "eval/sampled_reward_std": 0.5}),
            **step_metrics.named_eval("a_b", {"eval/sampled_reward_mean": 2.0, "eval/sampled_reward_std": 0.0})}
    assert line["eval/sets/a_b/sampled_reward_mean"] == 2.0
    named = step_metrics.trl_eval_names(line)
    assert named == {"eval_a_reward": 1.0, "eval_a_reward_std": 0.5, "eval_a_num_tokens": 7,
                     "eval_a_b_reward": 2.0, "eval_a_b_reward_std": 0.0, "eval_a_b_num_tokens": 7}
    entries = step_metrics.trl_eval_entries(named, ["a", "a_b"])
    assert entries == [{"eval_a_reward": 1.0, "eval_a_reward_std": 0.5, "eval_a_num_tokens": 7},
                       {"eval_a_b_reward": 2.0, "eval_a_b_reward_std": 0.0, "eval_a_b_num_tokens": 7}]


def test_a_dict_eval_dataset_is_evaluated_set_by_set_during_training(tiny_model_dir, tmp_path):
    """TRL (transformers' ``evaluate()``) evaluates each dataset of a dict ``eval_dataset`` and logs
    each under ``eval_<name>_``; polyrl refused the dict at GRPOTrainer(...). Each set's entry, at
    each evaluated step, holds that set's numbers: the last ones are what ``evaluate()`` of that set
    gives on the same weights and seed; the best metric reads a set's name."""
    datasets = pytest.importorskip("datasets")
    named = {"a": datasets.Dataset.from_list(_rows(2, start=10)), "b": _rows(3, start=20)}
    args = dict(eval_strategy="steps", eval_steps=1, metric_for_best_model="eval_b_reward", report_to="none")
    trainer = _trainer(tiny_model_dir, tmp_path, eval_dataset=named, args=args)
    trainer.train()
    entries = [h for h in trainer.state.log_history if any(k.startswith(("eval_a_", "eval_b_")) for k in h)]
    assert [(e["step"], next(k for k in e if k.startswith("eval_"))[:7]) for e in entries] == \
        [(1, "eval_a_"), (1, "eval_b_"), (2, "eval_a_"), (2, "eval_b_")]
    keys = {k for k in _TRL_KEYS}
    assert set(entries[-2]) == {k.replace("eval_", "eval_a_") for k in keys} | {"epoch", "step"}
    assert set(entries[-1]) == {k.replace("eval_", "eval_b_") for k in keys} | {"epoch", "step"}
    assert entries[-1]["eval_b_samples_per_second"] == pytest.approx(3 / entries[-1]["eval_b_runtime"], rel=1e-2)
    assert trainer.state.best_metric == max(e["eval_b_reward"] for e in entries if "eval_b_reward" in e)
    for name in ("a", "b"):
        again = trainer.evaluate(eval_dataset=name)
        last = entries[-2] if name == "a" else entries[-1]
        assert again["eval_reward"] == pytest.approx(last[f"eval_{name}_reward"])
        assert again["eval_completions/mean_length"] == pytest.approx(last[f"eval_{name}_completions/mean_length"])


@pytest.mark.parametrize(("given", "words"), [({}, "empty dict"), ({"a/b": _rows(1)}, "holds a '/'"),
                                              ({1: _rows(1), "1": _rows(1)}, "repeat")])
def test_a_dict_eval_dataset_whose_names_polyrl_cannot_log_is_one_error(tiny_model_dir, tmp_path, given, words):
    with pytest.raises(ConfigError) as err:
        _trainer(tiny_model_dir, tmp_path, eval_dataset=given)
    assert err.value.field == "eval_dataset" and words in err.value.message


def test_a_dict_eval_dataset_cut_short_by_eval_count_is_refused_when_the_trainer_is_built(tmp_path):
    """polyrl's own GRPOConfig(settings={"eval.count": 2}) with named sets of 2 + 1 rows: the run
    evaluates the first 2 rows of the sets end to end, so set "b" is lost. It was refused only at
    the first evaluation (after step 1 trained), with a fix naming data.drop_overlong, a setting a
    script cannot give; now GRPOTrainer(...) refuses it. A count covering every row is accepted."""
    from polyrl.trl import GRPOTrainer

    named = {"a": _rows(2, start=10), "b": _rows(1, start=20)}

    def build(count: int) -> object:
        config = api.GRPOConfig(steps=1, prompts_per_step=2, output_dir=str(tmp_path / "run"),
                                settings={"eval.every": 1, "eval.count": count})
        return GRPOTrainer(model="m", reward_funcs=[_short], args=config, train_dataset=_rows(4),
                           eval_dataset=named)

    with pytest.raises(ConfigError) as err:
        build(2)
    assert err.value.field == "grpo_config.settings.eval.count" and "'b': 1" in err.value.message
    assert "drop_overlong" not in str(err.value)
    assert build(3).eval_dataset is named
