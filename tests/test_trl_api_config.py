"""A TRL user's GRPOConfig in polyrl's Python API: a real ``trl.GRPOConfig`` read with TRL's values
(``GRPOConfig.from_trl``, or passed to ``run``), TRL's names as arguments refused naming polyrl's,
and several reward-model folders each under a label of its own."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from trl_util import captured_trainer_config

from polyrl import api
from polyrl.config import RewardSection
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext, RewardScores, RewardSpec

trl = pytest.importorskip("trl")


def trl_config(**kwargs) -> object:
    """A real trl.GRPOConfig; use_cpu because TRL's own default (bf16) refuses a CPU-only machine."""
    return trl.GRPOConfig(use_cpu=True, **kwargs)


# --- TRL's names as polyrl's GRPOConfig arguments -------------------------------------------------

def test_trl_names_as_arguments_are_one_config_error_naming_polyrls_field():
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig(num_generations=8, learning_rate=1e-6, max_completion_length=256)
    exc = info.value
    assert exc.field == "grpo_config.num_generations", exc
    text = str(exc)
    assert "TRL's num_generations is polyrl's generation.group_size, set with GenerationConfig(group_size=...)" in text
    assert "TRL's max_completion_length is polyrl's generation.max_new_tokens" in text
    assert "learning_rate" not in text.split("Fix:")[0]  # polyrl's own name too: accepted
    with pytest.raises(ConfigError, match=r"max_steps: TRL's max_steps is polyrl's train.steps, set with "
                                          r"GRPOConfig\(steps=\.\.\.\)"):
        api.GRPOConfig(max_steps=5)
    with pytest.raises(ConfigError, match="did you mean 'steps'"):  # a typo is still a typo
        api.GRPOConfig(stepz=5)
    assert api.GRPOConfig(steps=3, learning_rate=1e-6).learning_rate == 1e-6


# --- GRPOConfig.from_trl ------------------------------------------------------------------------

@pytest.mark.parametrize("settings, field, said", [
    ({"data.drop_overlong": True}, "grpo_config.settings.data.drop_overlong", "unknown setting 'data.drop_overlong'"),
    ({"train.chekpoint_every": 5}, "grpo_config.settings.train.chekpoint_every", "unknown setting"),
    ({"optimizer.weight_decay": "a"}, "optimizer.weight_decay", "must be a finite number >= 0, got 'a'"),
    ({"train.checkpoint_every": "five"}, "grpo_config.settings", "a setting has the wrong type"),
    ({"algorithm.bta": 0.1}, "algorithm.bta", "did you mean 'beta'?"),
    ("train.seed", "grpo_config.settings", "settings is a str"),  # was a ValueError traceback at train()
])
def test_own_grpo_configs_bad_settings_are_refused_when_it_is_built(settings, field, said):
    """An unknown, misspelt or wrong-typed settings key was refused only by train()/run, after the
    trainer was built and maybe the model loaded; now by the GRPOConfig itself, in run's words."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig(settings=settings)
    assert info.value.field == field, info.value
    assert said in str(info.value)


def test_own_grpo_configs_settings_the_rest_of_the_run_decides_still_build():
    """What depends on the prompts or other tables (an eval interval without eval rows yet, an
    epoch request, a long completion) waits for run_config, as before."""
    config = api.GRPOConfig(settings={"eval.every": 2, "train.checkpoint_every_epoch": True,
                                      "generation.max_new_tokens": 4096, "algorithm.beta": 0.1,
                                      "data.shuffle": False, "model.max_length": 8192})
    assert config.settings["eval.every"] == 2


def test_an_untouched_trl_config_keeps_trls_defaults_where_they_differ_from_polyrls():
    ours = api.GRPOConfig.from_trl(trl_config())
    assert (ours.learning_rate, ours.seed, ours.output_dir) == (1e-6, 42, "trainer_output")
    assert ours.loss_aggregation == "token_mean"  # TRL's loss_type = "dapo"
    assert ours.epochs == 3.0 and ours.prompts_per_step == 1  # max_steps = -1: TRL's 3 epochs; 8 completions / 8
    assert ours.settings["generation.group_size"] == 8
    assert ours.settings["generation.max_new_tokens"] == trl_config().max_completion_length
    assert ours.settings["optimizer.schedule"] == "linear"  # TrainingArguments' lr_scheduler_type
    # the same in both, yet carried: an explicit GenerationConfig is compared with it (finding: it won silently)
    assert ours.settings["generation.temperature"] == 1.0


def test_the_log_of_values_taken_from_trl_names_config_values_not_requests():
    """The info line lists what polyrl took from TRL's GRPOConfig; a save strategy's request to
    run_config (``train.checkpoint_every_epoch``, ``train.checkpoint_every_rounded``: no config
    key) read there as a setting the user could look up."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        api.GRPOConfig.from_trl(trl_config(save_strategy="epoch", learning_rate=3e-6))
    taken = [e["taken"] for e in logs if "taken from TRL's GRPOConfig" in e["event"]]
    assert len(taken) == 1 and "optimizer.lr = 3e-06" in taken[0], taken
    assert "checkpoint_every_epoch" not in taken[0] and "checkpoint_every_rounded" not in taken[0], taken


@pytest.mark.parametrize("kwargs, field", [
    ({"max_completion_length": 2**21}, "grpo_config.max_completion_length"),  # a setting from_trl wrote
    ({"num_iterations": 2000, "max_steps": 2000}, "grpo_config.num_iterations"),  # a GRPOConfig value from TRL
    ({"top_p": 2.0}, "grpo_config.top_p"),
])
def test_an_error_on_a_key_a_trl_field_set_names_that_field_in_api_run(kwargs, field):
    """``api.run(grpo_config=trl.GRPOConfig(...))``: a TRL value polyrl's settings refuse named
    polyrl's key (generation.max_new_tokens, algorithm.num_iterations), which the script never
    wrote; ``polyrl.trl.GRPOTrainer`` names the script's field (args.max_completion_length), and so
    does api.run now (grpo_config.max_completion_length). polyrl's own configs keep polyrl's keys."""
    with pytest.raises(ConfigError) as err:
        api.run_config(api.grpo, policy=api.Agent("tiny-llama"), prompts=["a", "b"],
                       grpo_config=trl_config(output_dir="unused", **kwargs))
    assert err.value.field == field and str(err.value).startswith(f"{field}: "), err.value
    with pytest.raises(ConfigError) as err:
        api.run_config(api.grpo, policy=api.Agent("tiny-llama"), prompts=["a", "b"],
                       generation_config=api.GenerationConfig(max_new_tokens=2**21))
    assert err.value.field == "generation.max_new_tokens", err.value


@pytest.mark.parametrize("weights", [np.array([1.0, 0.5]), [np.float32(1.0), np.float32(0.5)], (np.int64(1), 0.5)])
def test_reward_weights_computed_with_numpy_are_carried_as_trl_reads_them(weights):
    """TRL builds ``torch.tensor(reward_weights)``, which reads a numpy array and numpy scalars as
    numbers: such a script trains under TRL, and polyrl refused it as "not a list of numbers"."""
    ours = api.GRPOConfig.from_trl(trl_config(reward_weights=weights))
    assert list(ours.reward_weights) == [1.0, 0.5] and all(type(w) in (int, float) for w in ours.reward_weights)
    with pytest.raises(ConfigError, match="is not a list of numbers"):  # a bool is still no weight
        api.GRPOConfig.from_trl(trl_config(reward_weights=[True, 0.5]))


def test_every_mapped_field_the_user_sets_is_carried():
    ours = api.GRPOConfig.from_trl(trl_config(
        max_steps=14, num_generations=4, per_device_train_batch_size=8, gradient_accumulation_steps=2,
        max_completion_length=32, learning_rate=3e-6, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05,
        repetition_penalty=1.1, beta=0.04, epsilon=0.1, epsilon_high=0.3, scale_rewards=False, loss_type="dr_grpo",
        num_iterations=2, weight_decay=0.01, max_grad_norm=0.5, lr_scheduler_type="cosine", warmup_steps=3,
        sync_ref_model=True, ref_model_sync_steps=16, ref_model_mixup_alpha=0.9, reward_weights=[1.0, 0.5],
        seed=7, output_dir="runs/x", mask_truncated_completions=True, top_entropy_quantile=0.5))
    assert (ours.steps, ours.epochs, ours.prompts_per_step) == (7, None, 4)  # 14 updates / 2; 8 x 2 completions / 4
    assert (ours.learning_rate, ours.beta, ours.epsilon, ours.epsilon_high) == (3e-6, 0.04, 0.1, 0.3)
    assert (ours.scale_rewards, ours.loss_aggregation, ours.num_iterations) == ("none", "seq_mean_token_sum_norm", 2)
    assert (ours.max_grad_norm, ours.seed, ours.output_dir, list(ours.reward_weights)) == (0.5, 7, "runs/x", [1.0, 0.5])
    assert ours.settings == {  # num_generations = 4 is polyrl's group_size already, carried all the same
        "generation.group_size": 4, "generation.max_new_tokens": 32, "generation.temperature": 0.7,
        "generation.top_p": 0.9, "generation.top_k": 20, "generation.min_p": 0.05, "generation.repetition_penalty": 1.1,
        "optimizer.weight_decay": 0.01, "optimizer.schedule": "cosine", "optimizer.warmup_steps": 3,
        "algorithm.ref_sync_every": 8,  # 16 updates, 2 a step: TRL's sync lands on every 8th batch's end
        "algorithm.ref_sync_alpha": 0.9, "algorithm.mask_truncated_completions": True,
        "algorithm.top_entropy_quantile": 0.5,
        "algorithm.kl_bias_correction": True,  # TRL's default use_bias_correction_kl, read since beta > 0
        "train.collective_timeout_s": 1800.0,  # TRL's default ddp_timeout
        "train.checkpoint_every": 250,  # TRL's default save_steps, 500 updates, 2 a step
        "train.keep_checkpoints": 0}  # TRL's default save_total_limit None: every checkpoint kept


@pytest.mark.parametrize("norm", [0.0, -1.0])
def test_trls_max_grad_norm_of_zero_or_less_turns_clipping_off(norm):
    """The HF Trainer clips only when max_grad_norm > 0; polyrl's "off" is None (its 0 is refused)."""
    assert api.GRPOConfig.from_trl(trl_config(max_grad_norm=norm)).max_grad_norm is None
    assert api.GRPOConfig.from_trl(trl_config()).max_grad_norm == 1.0  # TRL's default, polyrl's too


def test_trls_cosine_with_a_floor_is_polyrls_cosine_with_min_lr_ratio():
    """transformers' cosine_with_min_lr with min_lr_rate (or min_lr) is polyrl's cosine with
    min_lr_ratio: from_trl refused lr_scheduler_kwargs, and the TOML fix named a schedule polyrl lacks."""
    rate = api.GRPOConfig.from_trl(trl_config(lr_scheduler_type="cosine_with_min_lr", learning_rate=2e-6,
                                              lr_scheduler_kwargs={"min_lr_rate": 0.1}))
    assert (rate.settings["optimizer.schedule"], rate.settings["optimizer.min_lr_ratio"]) == ("cosine", 0.1)
    floor = api.GRPOConfig.from_trl(trl_config(lr_scheduler_type="cosine_with_min_lr", learning_rate=2e-6,
                                               lr_scheduler_kwargs={"min_lr": 5e-7}))
    assert floor.settings["optimizer.min_lr_ratio"] == pytest.approx(0.25)
    with pytest.raises(ConfigError, match="lr_scheduler_kwargs .* has no polyrl equivalent") as info:
        api.GRPOConfig.from_trl(trl_config(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"num_cycles": 2}))
    assert info.value.field == "grpo_config.lr_scheduler_kwargs"


def test_lr_scheduler_kwargs_text_that_is_not_json_is_one_error_not_a_traceback():
    """transformers keeps lr_scheduler_kwargs text that is not a JSON object as text (TRL's training
    then fails building the scheduler); from_trl raised json's JSONDecodeError on it."""
    given = trl_config(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs="min_lr_rate=0.1")
    assert given.lr_scheduler_kwargs == "min_lr_rate=0.1"  # TRL's own config took it
    with pytest.raises(ConfigError, match="is not JSON") as info:
        api.GRPOConfig.from_trl(given)
    assert info.value.field == "grpo_config.lr_scheduler_kwargs"
    assert 'lr_scheduler_kwargs={"min_lr_rate": 0.1}' in info.value.fix


@pytest.mark.parametrize(("fields", "warmup"), [({}, 1), ({"num_iterations": 2}, 2), ({"warmup_steps": 3}, 3)])
def test_a_fraction_warmup_in_an_epoch_run_is_of_the_updates_transformers_counts(fields, warmup):
    """transformers' get_warmup_steps(max_steps): ceil(max_steps x warmup_steps), max_steps counted from
    num_train_epochs (2 epochs of 2 batches: 4 updates, 8 with num_iterations 2); from_trl refused it."""
    args = trl_config(max_steps=-1, num_train_epochs=2, num_generations=2, per_device_train_batch_size=4,
                      lr_scheduler_type="linear", **{"warmup_steps": 0.25, **fields})
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=[{"prompt": f"q{i}"} for i in range(4)],
                               rewards=["numeric_match"], grpo_config=args)
    updates = config.train.steps * fields.get("num_iterations", 1)
    assert config.optimizer.warmup_steps == warmup == args.get_warmup_steps(updates)


@pytest.mark.parametrize(("schedule", "kwargs"), [
    ("constant", {}), ("constant", {"min_lr_rate": 0.1}), ("constant_with_warmup", {}), ("linear", {}),
    ("cosine", {}), ("cosine_with_min_lr", {"min_lr_rate": 0.1}),
])
@pytest.mark.parametrize("warmup", [3, 0.25])
def test_trls_lr_schedule_is_transformers_own_update_by_update(schedule, kwargs, warmup):
    """The lr of every update, as transformers' get_scheduler (what TRL's trainer calls) gives it.
    "constant" returns before reading num_warmup_steps, so TRL never warms it up: from_trl carried
    TRL's warmup_steps and polyrl's constant schedule ramped from lr 0 over them."""
    torch = pytest.importorskip("torch")
    from transformers.optimization import get_scheduler

    from polyrl.schedules import lr_multiplier
    from polyrl.trl_config import trl_settings

    args = trl_config(max_steps=12, lr_scheduler_type=schedule, warmup_steps=warmup, lr_scheduler_kwargs=kwargs)
    settings = trl_settings(args)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(schedule, optimizer, num_warmup_steps=args.get_warmup_steps(12), num_training_steps=12,
                              scheduler_specific_kwargs=kwargs)
    theirs = []
    for _ in range(12):
        theirs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    ours = [lr_multiplier(k, settings["optimizer.schedule"], settings["optimizer.warmup_steps"], 12,
                          settings.get("optimizer.min_lr_ratio", 0.0)) for k in range(12)]
    assert ours == pytest.approx(theirs), (settings, theirs)


@pytest.mark.parametrize(("schedule", "kwargs", "named"), [
    ("linear", {"min_lr_rate": 0.1}, "takes no min_lr_rate"),
    ("cosine", {"min_lr": 1e-7}, "takes no min_lr"),
    ("cosine_with_min_lr", {}, "without min_lr_rate or min_lr"),
])
def test_trl_schedule_arguments_transformers_refuses_are_refused(schedule, kwargs, named):
    """transformers passes lr_scheduler_kwargs to linear and cosine, which take no floor (TRL's
    training fails there), and cosine_with_min_lr needs one: polyrl trained a floor TRL cannot."""
    with pytest.raises(ConfigError, match=named) as info:
        api.GRPOConfig.from_trl(trl_config(max_steps=4, lr_scheduler_type=schedule, lr_scheduler_kwargs=kwargs))
    assert info.value.field == "grpo_config.lr_scheduler_kwargs" and "cosine_with_min_lr" in str(info.value)


def test_trls_max_steps_counts_updates_so_polyrl_steps_are_max_steps_over_num_iterations():
    """TRL's max_steps counts optimizer updates and reuses each rollout batch for num_iterations of
    them; a polyrl step is one batch and its num_iterations updates. max_steps was taken as steps,
    so num_iterations = 2 made twice TRL's rollouts and updates."""
    ours = api.GRPOConfig.from_trl(trl_config(max_steps=4, num_iterations=2))
    assert (ours.steps, ours.num_iterations) == (2, 2)  # TRL: rollouts at updates 0 and 2, 4 updates
    assert api.GRPOConfig.from_trl(trl_config(max_steps=4)).steps == 4  # num_iterations = 1: the same count
    with pytest.raises(ConfigError, match="max_steps = 5 optimizer updates is not a whole number") as info:
        api.GRPOConfig.from_trl(trl_config(max_steps=5, num_iterations=2))
    assert info.value.field == "grpo_config.max_steps" and "(4 or 6)" in str(info.value), info.value
    with pytest.raises(ConfigError, match=r"a multiple of num_iterations \(3\)"):
        api.GRPOConfig.from_trl(trl_config(max_steps=2, num_iterations=3))


@pytest.mark.parametrize(("kwargs", "warmup"), [
    ({"warmup_steps": 0.1}, 2), ({"warmup_steps": 0.5}, 10), ({"warmup_ratio": 0.1}, 2), ({"warmup_steps": 3}, 3),
])
def test_trls_fractional_warmup_is_that_fraction_of_the_updates(kwargs, warmup):
    """transformers 5 reads warmup_steps below 1 (and warmup_ratio, copied into it) as a fraction
    of max_steps, rounded up; from_trl refused it, as polyrl's warmup_steps is a count."""
    ours = api.GRPOConfig.from_trl(trl_config(max_steps=20, **kwargs))
    assert ours.settings["optimizer.warmup_steps"] == warmup
    # in a num_train_epochs run: test_a_fraction_warmup_in_an_epoch_run_is_of_the_updates_transformers_counts


@pytest.fixture()
def world_size(monkeypatch):
    """TRL configs built as under a launcher of ``n`` processes (TRL reads world_size in __post_init__)."""
    def set_to(n: int) -> None:
        monkeypatch.setattr(trl.GRPOConfig, "world_size", property(lambda self: n))
    return set_to


@pytest.mark.parametrize(("kwargs", "processes"), [
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4}, 1),
    ({"per_device_train_batch_size": 4, "num_generations": 4}, 2),
    # one micro-batch per update, two updates per rollout: TRL's bnpo is each update's own token mean
    ({"per_device_train_batch_size": 4, "num_generations": 4, "steps_per_generation": 2}, 1),
])
def test_trls_bnpo_over_several_micro_batches_is_refused_naming_dapo(world_size, kwargs, processes):
    """TRL's bnpo divides each micro-batch by its own token count, polyrl's token_mean the whole
    step by its count (TRL's dapo): from_trl read bnpo as token_mean whatever the micro-batches."""
    world_size(processes)
    with pytest.raises(ConfigError, match="token mean per micro-batch") as info:
        api.GRPOConfig.from_trl(trl_config(loss_type="bnpo", **kwargs))
    assert info.value.field == "grpo_config.loss_type" and 'loss_type="dapo"' in str(info.value), info.value
    assert api.GRPOConfig.from_trl(trl_config(loss_type="dapo", **kwargs)).loss_aggregation == "token_mean"
    world_size(1)
    one = api.GRPOConfig.from_trl(trl_config(loss_type="bnpo", per_device_train_batch_size=8, num_generations=4))
    assert one.loss_aggregation == "token_mean"  # one micro-batch: the same token mean


def test_trls_entropy_bonus_over_several_updates_per_rollout_is_refused():
    """TRL's bonus is each update's own token mean of the entropy; with steps_per_generation >
    gradient_accumulation_steps polyrl's dapo-style token mean divides by the step's tokens / the
    updates instead, so the two differ whenever the updates' token counts do."""
    kwargs = {"loss_type": "dapo", "entropy_coef": 0.01, "per_device_train_batch_size": 4, "num_generations": 4,
              "steps_per_generation": 2, "max_steps": 2}
    with pytest.raises(ConfigError, match="updates per rollout") as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs))
    assert info.value.field == "grpo_config.entropy_coef" and "steps_per_generation and generation_batch_size unset" in str(info.value)
    assert api.GRPOConfig.from_trl(trl_config(**{**kwargs, "entropy_coef": 0.0})).settings["algorithm.minibatches"] == 2


def test_a_loss_type_that_is_a_polyrl_preset_picks_the_preset():
    ours = api.GRPOConfig.from_trl(trl_config(loss_type="cispo", epsilon_high=5.0))
    assert ours.settings["algorithm.name"] == "cispo" and ours.loss_aggregation is None


@pytest.fixture()
def run_config(monkeypatch):
    """The RunConfig ``api.run`` builds for a trl.GRPOConfig, without training."""
    built = captured_trainer_config(monkeypatch)

    def build(args, generation_config=None, prompts=8, algorithm=api.grpo):
        api.run(algorithm, policy=api.Agent("x"), prompts=["hi"] * prompts, generation_config=generation_config,
                rewards=[lambda completions, **kwargs: [0.0] * len(completions)], grpo_config=args, progress=False)
        return built["config"]

    return build


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"loss_type": "luspo"}, {"epsilon": 0.2, "clip_eps_high": 0.2, "importance_sampling_level": "token"}),
    ({"loss_type": "luspo", "importance_sampling_level": "sequence", "epsilon_high": 0.28},
     {"epsilon": 0.2, "clip_eps_high": 0.28, "importance_sampling_level": "sequence"}),
    ({"loss_type": "cispo", "epsilon_high": 5.0}, {"clip_eps_high": 4.0, "policy_loss": "cispo"}),  # cap 1 + 4
    ({"loss_type": "cispo", "epsilon_high": 1.28}, {"clip_eps_high": 0.28}),
    ({"loss_type": "sapo", "sapo_temperature_pos": 2.0}, {"sapo_temperature_pos": 2.0, "policy_loss": "sapo"}),
    ({"loss_type": "vespo"}, {"policy_loss": "vespo", "importance_sampling_level": "token"}),
    # TRL's vespo never reads the ratio level (its gamma weight takes the sequence ratio itself); polyrl refused it
    ({"loss_type": "vespo", "importance_sampling_level": "sequence"}, {"importance_sampling_level": "token"}),
])
def test_a_loss_type_preset_trains_with_the_values_trl_reads_not_the_presets(run_config, kwargs, expected):
    """TRL values equal to the grpo preset's defaults were dropped, so loss_type = "luspo" trained
    with the luspo preset's 3e-4/4e-4 sequence-level clip instead of TRL's 0.2 token-level one, and
    TRL's cispo cap (epsilon_high itself) was read as polyrl's 1 + epsilon_high."""
    algorithm = run_config(trl_config(max_steps=1, **kwargs)).algorithm
    assert algorithm.name == kwargs["loss_type"]
    for name, value in expected.items():
        wanted = pytest.approx(value) if isinstance(value, float) else value
        assert getattr(algorithm, name) == wanted, (name, getattr(algorithm, name))


def test_trls_sequence_level_cispo_is_refused_in_trls_terms():
    """TRL trains cispo with a sequence ratio (warning only); polyrl's cispo is token-level only, and
    the refusal came at run time as polyrl's algorithm.importance_sampling_level ("no sequence-level form")."""
    with pytest.raises(ConfigError, match="polyrl's cispo weights each token by its own ratio only") as info:
        api.GRPOConfig.from_trl(trl_config(loss_type="cispo", epsilon_high=5.0, importance_sampling_level="sequence"))
    assert info.value.field == "grpo_config.importance_sampling_level"


def test_trls_cispo_cap_below_one_is_refused():
    """TRL's cispo with epsilon_high unset caps the weight at epsilon (0.2), below the on-policy
    ratio: polyrl's cap is 1 + epsilon_high, so it cannot train that and says so."""
    with pytest.raises(ConfigError, match=r"TRL's cispo caps the importance weight at epsilon_high itself .* a cap "
                                          r"of 0.2") as info:
        api.GRPOConfig.from_trl(trl_config(loss_type="cispo"))
    assert info.value.field == "grpo_config.epsilon_high" and "epsilon_high = 4.0" in str(info.value)


@pytest.mark.parametrize(("kwargs", "generation", "field"), [
    ({"num_generations": 4, "per_device_train_batch_size": 16}, {"group_size": 8}, "generation_config.group_size"),
    ({"max_completion_length": 64}, {"max_new_tokens": 32}, "generation_config.max_new_tokens"),
    ({"temperature": 1.0}, {"temperature": 0.7}, "generation_config.temperature"),
])
def test_a_trl_generation_value_equal_to_polyrls_default_still_conflicts(run_config, kwargs, generation, field):
    """TRL's value equal to polyrl's default was dropped, so a different GenerationConfig value
    won silently (group_size 8 with prompts_per_step from TRL's 4: twice TRL's completions)."""
    with pytest.raises(ConfigError, match="in generation_config and") as info:
        run_config(trl_config(max_steps=1, **kwargs), api.GenerationConfig(**generation))
    assert info.value.field == field
    same = run_config(trl_config(max_steps=1, temperature=0.7), api.GenerationConfig(temperature=0.7))
    assert same.generation.temperature == 0.7


def test_derived_trl_values_never_count_as_set():
    """generation_batch_size and steps_per_generation follow the batch size in TRL's __post_init__."""
    api.GRPOConfig.from_trl(trl_config(per_device_train_batch_size=16, gradient_accumulation_steps=4,
                                       logging_steps=1, save_steps=5, report_to="none", bf16=False))


@pytest.mark.parametrize(("kwargs", "field", "named"), [
    ({"fp16": True}, "grpo_config.fp16", ["fp16 = True"]),
    ({"use_vllm": True, "bf16_full_eval": True},
     "grpo_config.bf16_full_eval", ["bf16_full_eval = True (TRL's default: False): polyrl has no equivalent "
                                    "(transformers evaluates with the model cast to bfloat16",
                                      "use_vllm = True (TRL's default: False): polyrl has no "
                                      "equivalent (polyrl samples with its own generate backend"]),
    ({"optim": "sgd"}, "grpo_config.optim", ["optim = 'sgd'"]),
    ({"push_to_hub": True}, "grpo_config.push_to_hub", ["push_to_hub = True", "uploads nothing"]),
    ({"lr_scheduler_type": "polynomial"}, "grpo_config.lr_scheduler_type", ["'polynomial'"]),
])
def test_a_changed_field_polyrl_cannot_honour_is_one_error_naming_it(kwargs, field, named):
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs))
    assert info.value.field == field and "Fix:" in str(info.value), info.value
    for text in named:
        assert text in str(info.value), info.value


def test_trls_adam_betas_and_epsilon_are_polyrls_adamw_betas_and_eps(run_config):
    """polyrl's AdamW has betas and eps (OptimizerConfig); from_trl refused adam_beta1, adam_beta2
    and adam_epsilon as fields "polyrl has no equivalent" for."""
    ours = api.GRPOConfig.from_trl(trl_config(adam_beta1=0.8, adam_beta2=0.99, adam_epsilon=1e-6))
    assert (ours.settings["optimizer.betas"], ours.settings["optimizer.eps"]) == ((0.8, 0.99), 1e-6)
    optimizer = run_config(trl_config(max_steps=1, adam_beta2=0.95)).optimizer
    assert (optimizer.betas, optimizer.eps) == ((0.9, 0.95), 1e-8)  # TRL's adam_beta1 and epsilon: AdamW's defaults


def test_trls_shuffle_dataset_false_keeps_the_datasets_order(run_config):
    """shuffle_dataset=False was refused ("polyrl has no equivalent"): it is data.shuffle."""
    assert api.GRPOConfig.from_trl(trl_config(shuffle_dataset=False)).settings["data.shuffle"] is False
    assert "data.shuffle" not in api.GRPOConfig.from_trl(trl_config()).settings  # TRL's default: shuffled, as polyrl
    config = run_config(trl_config(max_steps=1, shuffle_dataset=False))
    assert config.data.shuffle is False


def test_trl_settings_that_are_what_polyrl_does_are_taken_and_agent_ones_name_the_toml_key():
    same = api.GRPOConfig.from_trl(trl_config(vllm_importance_sampling_correction=False))  # polyrl's own behaviour
    assert same.settings == api.GRPOConfig.from_trl(trl_config()).settings
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(max_tool_calling_iterations=3))
    assert info.value.field == "grpo_config.max_tool_calling_iterations"
    assert ("(polyrl's environment.max_turns = 4, which the Python API does not set: use `polyrl train` with a "
            "TOML config; TRL counts the tool rounds after the first answer, polyrl every assistant turn; or pass the "
            "tools to polyrl.trl.GRPOTrainer(tools=[...]), which reads it): polyrl's Python API cannot take it") \
        in str(info.value)
    tools = api.GRPOConfig.from_trl(trl_config(max_tool_calling_iterations=3), tools=True)  # the caller reads it
    assert not any("environment" in key for key in tools.settings)


@pytest.mark.parametrize(("beta", "bias_correction", "expected"), [
    (0.04, True, True), (0.04, False, None), (0.0, True, None), (0.0, False, None)])
def test_use_bias_correction_kl_is_kl_bias_correction_when_there_is_a_kl_term(beta, bias_correction, expected,
                                                                               run_config):
    """TRL's default use_bias_correction_kl = True weights the KL term by the importance ratio;
    polyrl added it unweighted with a warning (another gradient than TRL's, from TRL's defaults).
    With beta = 0 TRL never reads it, and neither does polyrl (its key would be refused as inert)."""
    ours = api.GRPOConfig.from_trl(trl_config(beta=beta, use_bias_correction_kl=bias_correction))
    assert ours.settings.get("algorithm.kl_bias_correction") == expected  # False: polyrl's default, left out
    config = run_config(trl_config(max_steps=1, beta=beta, use_bias_correction_kl=bias_correction))
    assert config.algorithm.objective(8).kl_bias_correction is bool(expected)


def test_from_trl_takes_only_a_trl_config():
    with pytest.raises(ConfigError, match="from_trl takes a trl.GRPOConfig"):
        api.GRPOConfig.from_trl({"num_generations": 8})


def test_run_refuses_a_loss_preset_other_than_the_algorithm_it_runs(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError) as info:
        api.run(api.dapo, policy=api.Agent(tiny_model_dir), prompts=["1 + 1?"],
                grpo_config=trl_config(loss_type="sapo", output_dir=str(tmp_path / "run")), progress=False)
    assert info.value.field == "grpo_config.loss_type", info.value


@pytest.mark.parametrize(("algorithm", "kwargs", "field", "named"), [
    # TRL's loss_type "dapo" is the aggregation only: the dapo preset's clip-higher, dynamic sampling and
    # overlong shaping were added silently
    ("dapo", {"loss_type": "dapo"}, "grpo_config.epsilon_high",
     ["epsilon_high = 0.28 where the TRL config trains with 0.2", "dynamic_sampling = True where the TRL config "
      "trains with False", "overlong_buffer = 0.2", "set epsilon_high=0.28 in the trl.GRPOConfig",
      "TRL has no field for dynamic_sampling, overlong_buffer"]),
    ("dapo", {"loss_type": "grpo"}, "grpo_config.epsilon_high",
     ["loss_aggregation = 'token_mean' where the TRL config trains with 'seq_mean_token_mean'", "loss_type='dapo'"]),
    ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "group"}, "grpo_config.scale_rewards",
     ["scale_rewards = 'none' where the TRL config trains with 'group'", "set scale_rewards=False"]),
    ("gspo", {"loss_type": "grpo"}, "grpo_config.importance_sampling_level",
     ["importance_sampling_level = 'sequence' where the TRL config trains with 'token'", "epsilon = 0.0003"]),
    ("rloo", {}, "algorithm.advantage", ["advantage = 'rloo' where the TRL config trains with 'group'"]),
    ("cispo", {"loss_type": "dapo"}, "grpo_config.loss_type",
     ["policy_loss = 'cispo' where the TRL config trains with 'ppo'", "set loss_type='cispo'"]),
])
@pytest.mark.parametrize("converted", [False, True])
def test_run_refuses_a_named_preset_that_would_replace_a_value_the_trl_config_trains_with(
        run_config, algorithm, kwargs, field, named, converted):
    """from_trl leaves out a value equal to the grpo preset's, and run(ALGO) then took ALGO's own
    value for it: run("dapo", TRL's loss_type="dapo") trained with clip-higher, dynamic sampling and
    overlong shaping, run("dr_grpo", scale_rewards="group") without the std scaling TRL applies."""
    args = trl_config(max_steps=1, **kwargs)
    with pytest.raises(ConfigError) as info:
        run_config(api.GRPOConfig.from_trl(args) if converted else args, algorithm=algorithm)
    text = str(info.value)
    assert info.value.field == field, info.value
    assert f"run({algorithm!r}) with a trl.GRPOConfig" in text and "drop the preset name: run('grpo', ...)" in text
    for part in named:
        assert part in text, text


def test_run_takes_a_named_preset_that_changes_nothing_the_trl_config_trains_with(run_config):
    """Where the TRL config already trains the named preset's values, the run carries its name; a
    polyrl GRPOConfig still tunes the named preset (its unset values are the preset's)."""
    algorithm = run_config(trl_config(max_steps=1, loss_type="dr_grpo", scale_rewards=False),
                           algorithm=api.dr_grpo).algorithm
    assert (algorithm.name, algorithm.scale_rewards, algorithm.loss_aggregation, algorithm.clip_eps_high) == (
        "dr_grpo", "none", "seq_mean_token_sum_norm", 0.2)
    gspo = run_config(trl_config(max_steps=1, loss_type="grpo", importance_sampling_level="sequence", epsilon=3e-4,
                                 epsilon_high=4e-4), algorithm="gspo").algorithm
    assert (gspo.name, gspo.importance_sampling_level, gspo.epsilon) == ("gspo", "sequence", 3e-4)
    assert run_config(trl_config(max_steps=1, loss_type="cispo", epsilon_high=5.0),
                      algorithm="cispo").algorithm.clip_eps_high == pytest.approx(4.0)  # TRL's own loss preset
    ours = run_config(api.GRPOConfig(steps=1, beta=0.01), algorithm=api.dapo).algorithm
    assert (ours.dynamic_sampling, ours.clip_eps_high, ours.beta) == (True, 0.28, 0.01)


# --- several reward-model folders -----------------------------------------------------------------

def test_reward_model_folders_get_distinct_labels(tmp_path):
    folders = []
    for name in ("rm-a", "rm-b", "rm-c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        folders.append(str(tmp_path / name))
    sections, _ = api.reward_entries([folders[0], "numeric_match", folders[1], folders[2]])
    assert [s.label for s in sections] == ["reward_model", "numeric_match", "reward_model_2", "reward_model_3"]
    assert [s.name for s in sections] == ["reward_model", "numeric_match", "reward_model", "reward_model"]
    assert [s.options.get("path") for s in sections] == [folders[0], None, folders[1], folders[2]]


class _EchoPath:
    """A fake reward plugin (core unit test): scores each completion with its options' number."""

    @hookimpl
    def polyrl_register_rewards(self, register):
        register(RewardSpec(name="echo", summary="test"))

    @hookimpl
    def reward(self, prompts, completions, context):
        if "echo" not in context.wanted:
            return None
        return {"echo": RewardScores([float(context.options["echo"]["value"])] * len(completions))}


def test_one_reward_twice_under_two_labels_is_called_with_each_entrys_options():
    pm = get_plugin_manager(extra=(_EchoPath(),))
    computer = RewardComputer(pm, [("echo", 1.0, {"value": 1}, "echo"), ("echo", 2.0, {"value": 5}, "echo_2")])
    comps = [Completion(0, [1], [2], [0.0], text="x") for _ in range(2)]
    result = computer(["p", "p"], comps, RewardContext(rows=[{}, {}], wanted=("echo", "echo_2")))
    assert result.per_reward["echo"].tolist() == [1.0, 1.0] and result.per_reward["echo_2"].tolist() == [5.0, 5.0]
    assert result.metrics["echo_2"]["mean"] == 5.0 and result.total.tolist() == [11.0, 11.0]
    with pytest.raises(ConfigError, match="configured twice") as info:
        RewardComputer(pm, [("echo", 1.0, {"value": 1}), ("echo", 1.0, {"value": 2})])
    assert 'label = "..."' in str(info.value)


def test_two_toml_entries_with_one_label_are_one_error_line_before_any_plugin_loads(tmp_path):
    """Two files' ``score`` functions (or one reward twice) default to one label; the config names
    the second entry and the fix instead of pluggy's 'Plugin name already registered' traceback."""
    from polyrl.config import RunConfig

    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "r.py").write_text("def score(completions, **kw):\n    return [1.0] * len(completions)\n")
    base = {"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"}}
    twice = [{"function": f"{tmp_path}/a/r.py:score"}, {"function": f"{tmp_path}/b/r.py:score"}]
    with pytest.raises(ConfigError, match="labelled 'score', as rewards\\[0\\] is") as info:
        RunConfig.from_dict({**base, "rewards": twice})
    assert info.value.field == "rewards[1].label" and 'label = "score_2"' in str(info.value)
    with pytest.raises(ConfigError, match="reward 'numeric_match' is labelled"):
        RunConfig.from_dict({**base, "rewards": [{"name": "numeric_match"}, {"name": "numeric_match", "weight": 2}]})
    labelled = RunConfig.from_dict({**base, "rewards": [twice[0], {**twice[1], "label": "score_b"}]})
    assert [r.label for r in labelled.rewards] == ["score", "score_b"]


def test_a_label_that_cannot_name_metrics_is_refused():
    with pytest.raises(ConfigError, match="cannot name metrics") as info:
        RewardSection(name="reward_model", label="a/b")
    assert info.value.field == "label"
    assert RewardSection(function="rewards.py:brevity").label == "brevity"


def test_a_checkpoint_from_before_labels_still_resumes_and_a_new_label_is_a_change():
    from polyrl import resume_config
    from polyrl.config import RunConfig

    def config(*rewards: dict) -> RunConfig:
        return RunConfig.from_dict({"model": {"path": "tiny-llama"}, "data": {"task": "arithmetic"},
                                    "rewards": list(rewards)})

    current = config({"name": "numeric_match"}, {"function": "m:brevity"})
    saved = resume_config.snapshot(current)
    saved["rewards"] = [{k: v for k, v in entry.items() if k != "label"} for entry in saved["rewards"]]
    assert resume_config.check(saved, current, weights_only=False) == []
    with pytest.raises(ConfigError, match="rewards"):
        resume_config.check(saved, config({"name": "numeric_match", "label": "math"}, {"function": "m:brevity"}),
                            weights_only=False)


# --- a real tiny run from a trl.GRPOConfig --------------------------------------------------------

def test_a_tiny_run_from_a_trl_config_with_two_reward_model_folders(tiny_model_dir, tmp_path):
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    folders = [build_tiny_reward_model(tmp_path / name) for name in ("rm-a", "rm-b")]
    out = tmp_path / "trl-out"
    args = trl_config(output_dir=str(out), max_steps=1, num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=4, learning_rate=2e-6, seed=3, reward_weights=[1.0, 0.5])
    summary = api.run(api.grpo, policy=api.Agent(tiny_model_dir), prompts=[f"What is {i} + 1?" for i in range(3)],
                      rewards=folders, grpo_config=args, progress=False)
    assert Path(summary["output_dir"]) == out  # TRL's output_dir
    [step] = summary["history"]  # TRL's max_steps = 1
    assert math.isfinite(step["reward/reward_model/mean"]) and math.isfinite(step["reward/reward_model_2/mean"])
    assert step["lr"] == pytest.approx(2e-6)  # TRL's learning rate (its linear decay starts at it)
    assert step["samples_kept"] == 4 and step["tokens"] <= 16  # 4 completions / num_generations 2; 4 tokens each
    assert step["reward_mean"] == pytest.approx(step["reward/reward_model/mean"]
                                                + 0.5 * step["reward/reward_model_2/mean"])  # TRL's reward_weights
    records = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert records and all(set(r["rewards"]) == {"reward_model", "reward_model_2"} for r in records)


def test_a_trl_config_with_num_iterations_samples_and_counts_as_trl_does(tiny_model_dir, tmp_path):
    """TRL's max_steps = 4 with num_iterations = 2 is 2 rollout batches of 2 updates each, and a
    reward's trainer_state runs on TRL's clock of updates (global_step 0 then 2, of max_steps 4)."""
    seen = []

    def clock(completions, trainer_state, **kwargs):
        seen.append((trainer_state.global_step, trainer_state.max_steps))
        return [float(len(c) % 3) for c in completions]

    args = trl_config(output_dir=str(tmp_path / "out"), max_steps=4, num_iterations=2, num_generations=2,
                      per_device_train_batch_size=4, max_completion_length=4, learning_rate=1e-5)
    summary = api.run(api.grpo, policy=api.Agent(tiny_model_dir), prompts=[f"q{i}" for i in range(4)],
                      rewards=[clock], grpo_config=args, progress=False)
    assert len(summary["history"]) == 2 and seen == [(0, 4), (2, 4)], seen


@pytest.mark.parametrize("fields", [
    {"save_strategy": "epoch", "logging_steps": 0.5},  # polyrl checkpoints each epoch (2 steps): TRL's 500 stands
    {"save_strategy": "steps", "save_steps": 0.5, "eval_steps": 3, "logging_steps": 3},
], ids=["epoch", "fractions"])
def test_a_reward_in_api_run_reads_trls_step_intervals(tiny_model_dir, tmp_path, fields):
    """A reward's trainer_state in ``api.run`` from a trl.GRPOConfig shows logging_steps,
    eval_steps and save_steps as transformers' own ``TrainerState.compute_steps`` sets them for
    those args (what ``polyrl.trl.GRPOTrainer`` and TRL's trainer give), not polyrl's checkpoint
    and evaluation intervals (save_steps 2, one epoch of 2 steps; logging_steps 1; eval_steps 0)."""
    import transformers

    seen = []

    def intervals(completions, trainer_state, **kwargs):
        seen.append((trainer_state.logging_steps, trainer_state.eval_steps, trainer_state.save_steps))
        return [0.0 for _ in completions]

    args = trl_config(output_dir=str(tmp_path / "out"), max_steps=4, num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=2, **fields)
    api.run(api.grpo, policy=api.Agent(tiny_model_dir), prompts=[f"q{i}" for i in range(4)],
            rewards=[intervals], grpo_config=args, progress=False)
    theirs = transformers.TrainerState()
    theirs.compute_steps(args, 4)
    assert seen and set(seen) == {(theirs.logging_steps, theirs.eval_steps, theirs.save_steps)}, (seen, theirs)


def test_trainer_state_counts_optimizer_updates_as_trl_does():
    from polyrl.rewards.trl_compat import TrainerState

    state = TrainerState.for_run(step=3, max_steps=5, prompts_per_step=2, group_size=2, dataset_size=8,
                                 history=[], save_steps=2, updates_per_step=2)
    assert (state.global_step, state.max_steps, state.save_steps, state.epoch) == (6, 10, 4, 0.75)


def test_trl_fields_polyrl_has_under_the_same_name_are_carried_and_report_to_is_ignored():
    """SAPO's and VESPO's shape parameters and entropy_coef are algorithm keys of the same name
    and meaning; report_to is a logging field (README: logging fields are ignored)."""
    ours = api.GRPOConfig.from_trl(trl_config(loss_type="sapo", sapo_temperature_pos=2.0, sapo_temperature_neg=1.2,
                                              report_to=["tensorboard"]))
    assert ours.settings["algorithm.name"] == "sapo"
    assert (ours.settings["algorithm.sapo_temperature_pos"], ours.settings["algorithm.sapo_temperature_neg"]) == (2.0, 1.2)
    assert api.GRPOConfig.from_trl(trl_config(entropy_coef=0.01)).settings["algorithm.entropy_coef"] == 0.01  # dapo
    vespo = api.GRPOConfig.from_trl(trl_config(loss_type="vespo", vespo_k_pos=3.0, vespo_lambda_neg=1.5))
    assert (vespo.settings["algorithm.vespo_k_pos"], vespo.settings["algorithm.vespo_lambda_neg"]) == (3.0, 1.5)


def test_trls_report_to_run_name_and_project_are_the_runs_trackers():
    """transformers sends every log to the integrations report_to names; from_trl ignored the field, so
    a report_to="wandb" script trained with no tracker, without a word. The same names are polyrl's
    trackers; "none" and transformers' default project ("huggingface") set nothing."""
    ours = api.GRPOConfig.from_trl(trl_config(report_to=["tensorboard", "wandb"], run_name="lr1e-6", project="gsm8k"))
    assert {k: v for k, v in ours.settings.items() if k.startswith("logging.")} == {
        "logging.report_to": ["tensorboard", "wandb"], "logging.run_name": "lr1e-6", "logging.project": "gsm8k"}
    for off in ("none", [], ["none"]):
        assert not any(k.startswith("logging.") for k in api.GRPOConfig.from_trl(trl_config(report_to=off)).settings)
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=["p"], rewards=[lambda completions, **k: [0.0]],
                               grpo_config=trl_config(report_to="tensorboard", max_steps=1, num_generations=2,
                                                      per_device_train_batch_size=2))
    assert (config.logging.report_to, config.logging.run_name, config.logging.project) == (["tensorboard"], None,
                                                                                           "polyrl")


@pytest.mark.parametrize("bf16", [True, False])
def test_trls_bf16_is_the_compute_dtype_on_the_api_paths_as_in_grpo_trainer(bf16):
    """TRL's bf16 (its default) autocasts the forward passes in bfloat16; polyrl.trl.GRPOTrainer read
    it as compute_dtype "bfloat16" (test_trl_trainer), but GRPOConfig.from_trl and api.run(grpo_config=
    trl_config) dropped it: the same TRL config trained in float32 there. One reading for every path now;
    an Agent's own compute_dtype stays its own."""
    pytest.importorskip("polyrl_torch")  # the torch backend, which offers bfloat16 compute

    def reward(completions, **kwargs):
        return [0.0] * len(completions)

    def compute_dtype(grpo_config, policy=None):  # what api.run builds its run from
        config, _ = api.run_config(api.grpo, policy=policy or api.Agent("m"), prompts=["p"], rewards=[reward],
                                   grpo_config=grpo_config)
        return config.model.compute_dtype

    values = dict(bf16=bf16, max_steps=1, num_generations=2, per_device_train_batch_size=2)
    want = "bfloat16" if bf16 else None
    assert compute_dtype(trl_config(**values)) == want  # api.run(grpo_config=trl.GRPOConfig(...))
    assert compute_dtype(api.GRPOConfig.from_trl(trl_config(**values))) == want
    assert compute_dtype(api.GRPOConfig()) is None  # polyrl's own config has no bf16
    assert compute_dtype(trl_config(**values), api.Agent("m", compute_dtype="bfloat16")) == "bfloat16"


# --- the entropy bonus --------------------------------------------------------------------------

LOSS_TYPES = ("grpo", "dapo", "bnpo", "dr_grpo", "luspo", "sapo", "cispo", "vespo")


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize(("quantile", "accumulation"), [(1.0, 1), (0.2, 1), (1.0, 2)])
def test_trls_entropy_bonus_is_taken_only_where_polyrls_is_the_same(run_config, loss_type, quantile, accumulation):
    """TRL 1.16 subtracts entropy_coef x the token mean of the entropy over the tokens
    top_entropy_quantile selects, per micro-batch, whatever the loss_type; polyrl adds -coef x H_t to
    every token's loss and aggregates it with the policy loss (verl's). from_trl carried entropy_coef
    1:1, so luspo's bonus was ~the mean length times TRL's and a quantile's bonus acted on every
    token. Where it is taken, polyrl's bonus gradient is TRL's; everywhere else it is refused."""
    torch = pytest.importorskip("torch")
    from polyrl_torch.training import objective_loss

    kwargs = {"loss_type": loss_type, "entropy_coef": 0.01, "top_entropy_quantile": quantile, "max_steps": 1,
              "per_device_train_batch_size": 8 // accumulation, "gradient_accumulation_steps": accumulation,
              "num_generations": 4, "max_completion_length": 64, "epsilon_high": 5.0 if loss_type == "cispo" else None}
    if loss_type not in ("dapo", "bnpo", "cispo", "vespo") or quantile < 1 or accumulation > 1:
        with pytest.raises(ConfigError) as info:
            api.GRPOConfig.from_trl(trl_config(**kwargs))
        bnpo = loss_type == "bnpo" and accumulation > 1  # refused for its policy term already
        assert info.value.field == f"grpo_config.{'loss_type' if bnpo else 'entropy_coef'}", info.value
        assert 'loss_type="dapo"' in str(info.value), info.value
        return
    config = run_config(trl_config(**kwargs))
    lengths = [3, 10, 50, 7]
    generator = torch.Generator().manual_seed(0)
    entropy = [(torch.rand(n, generator=generator, dtype=torch.float64) * 2).requires_grad_(True) for n in lengths]
    logp = [-torch.rand(n, generator=generator, dtype=torch.float64) for n in lengths]
    loss, _ = objective_loss(logp, [0.0] * len(lengths), config.algorithm.objective(64), entropy=entropy)
    loss.backward()
    trl_bonus = -0.01 * torch.cat([e.detach() for e in entropy]).mean()  # TRL: token mean over the one micro-batch
    assert float(loss.detach()) == pytest.approx(float(trl_bonus))
    for e in entropy:
        assert torch.allclose(e.grad, torch.full_like(e, -0.01 / sum(lengths)))


# --- batch size and epochs as TRL counts them ------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "processes", "prompts_per_step"), [
    ({"per_device_train_batch_size": 8, "num_generations": 4}, 1, 2),
    ({"per_device_train_batch_size": 8, "num_generations": 4}, 2, 4),
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4}, 4, 8),
])
def test_prompts_per_step_is_trls_generation_batch_over_all_processes(world_size, kwargs, processes, prompts_per_step):
    """TRL's rollout is generation_batch_size = per_device_train_batch_size x world_size x
    gradient_accumulation_steps completions; polyrl's prompts_per_step is global, and from_trl left
    world_size out (a config read under a launcher gave polyrl a world_size-times smaller batch)."""
    world_size(processes)
    args = trl_config(**kwargs)
    ours = api.GRPOConfig.from_trl(args)
    assert ours.prompts_per_step == prompts_per_step == args.generation_batch_size // args.num_generations


@pytest.mark.parametrize(("prompts", "kwargs"), [
    (10, {"num_train_epochs": 3, "per_device_train_batch_size": 12}),  # 3 whole batches of 3 per epoch, not 10/3
    (10, {"num_train_epochs": 3, "per_device_train_batch_size": 6, "gradient_accumulation_steps": 2,
          "num_iterations": 2}),
    (12, {"num_train_epochs": 1.5, "per_device_train_batch_size": 12}),
    (10, {"num_train_epochs": 0.5, "per_device_train_batch_size": 12, "num_iterations": 2}),  # 3 updates: refused
])
def test_epochs_train_as_many_updates_as_trls_trainer(run_config, tiny_model_dir, tmp_path, prompts, kwargs):
    """TRL's RepeatSampler keeps whole generation batches only and the HF Trainer runs
    ceil(epochs x updates per epoch) updates: polyrl's run rounded epochs x prompts / prompts_per_step
    up, one step more per epoch whenever the prompts were not whole batches (and a longer lr decay)."""
    import datasets

    args = trl_config(output_dir=str(tmp_path / "trl"), num_generations=4, max_completion_length=4, report_to=[],
                      **kwargs)
    trainer = trl.GRPOTrainer(model=tiny_model_dir, reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                              args=args, train_dataset=datasets.Dataset.from_list([{"prompt": f"q{i}"}
                                                                                   for i in range(prompts)]))
    updates = trainer.set_initial_training_values(args, trainer.get_train_dataloader())[-1]  # TRL's max_steps
    if updates % args.num_iterations:
        with pytest.raises(ConfigError, match="not a whole number of rollout batches") as info:
            run_config(args, prompts=prompts)
        assert info.value.field == "grpo_config.epochs"
        return
    config = run_config(args, prompts=prompts)
    assert config.train.steps * config.algorithm.num_iterations == updates, (config.train.steps, updates)


def test_remove_unused_columns_true_is_refused_not_ignored():
    """TRL's remove_unused_columns = True drops every dataset column but GRPOTrainer's signature
    columns (prompt, image, images), so its reward functions get none of them; polyrl passes them
    all, so from_trl took the field as a logging setting and trained other rewards silently. TRL's
    default (False) is what polyrl does, and stays accepted."""
    assert api.GRPOConfig.from_trl(trl_config(remove_unused_columns=False)).settings == \
        api.GRPOConfig.from_trl(trl_config()).settings
    with pytest.raises(ConfigError, match="polyrl passes every dataset column to the reward functions") as info:
        api.GRPOConfig.from_trl(trl_config(remove_unused_columns=True))
    assert info.value.field == "grpo_config.remove_unused_columns"


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("use_vllm", True, "its own generate backend"),
    ("cast_lm_head_to_fp32", True, "float32 matmul.*load the model in float32"),
    ("use_adaptive_entropy", True, "entropy_coef stays as set"),
    ("use_transformers_continuous_batching", True, "continuous-batching.*its own generate backend"),
    ("transformers_continuous_batching_config", {"max_batch_tokens": 64}, "its own generate backend"),
    ("fp16", True, "bfloat16 \\(bf16=True\\) and scales no loss"),
    ("torch_compile", True, "runs it uncompiled"),
    ("use_liger_kernel", True, "a chunk at a time"),
    ("neftune_noise_alpha", 5.0, "polyrl adds none"),
    ("fsdp", "full_shard", "FSDP2 under torchrun"),
])
def test_common_trl_fields_polyrl_lacks_are_refused_saying_polyrl_has_no_equivalent(field, value, reason):
    """Fields most TRL GRPO scripts set (use_vllm=True) were refused as
    "from_trl does not translate it", which reads as a gap in the translation, not in polyrl."""
    with pytest.raises(ConfigError, match=f"polyrl has no equivalent \\(.*{reason}") as info:
        api.GRPOConfig.from_trl(trl_config(**{field: value}))
    assert info.value.field == f"grpo_config.{field}"


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"log_completions": True, "log_completions_hub_repo": "me/completions"},
     "log_completions_hub_repo = 'me/completions' (TRL's default: None): polyrl has no equivalent (TRL pushes"),
    ({"use_transformers_paged": True},  # TRL's __post_init__ sets use_transformers_continuous_batching from it
     "use_transformers_continuous_batching = True (TRL's default: False): polyrl has no equivalent (TRL samples "
     "with transformers' continuous-batching engine"),
])
def test_trl_fields_set_with_others_are_refused_saying_why(kwargs, named):
    """The refusals of fields TRL reads together with another one say what they do in TRL (they
    said "from_trl does not translate it")."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs))
    assert named in str(info.value) and "does not translate" not in str(info.value), info.value


@pytest.mark.parametrize("kwargs", [{"cache_implementation": "static"},
                                    {"entropy_target": 0.5, "entropy_coef_max": 0.3, "entropy_coef_delta": 0.01}])
def test_trl_fields_that_change_nothing_polyrl_trains_are_accepted(kwargs):
    """cache_implementation is the KV cache layout of transformers' generate(), which polyrl never
    calls; the adaptive-entropy bounds are read by TRL only with use_adaptive_entropy = True. Both
    were refused as "from_trl does not translate it"."""
    api.GRPOConfig.from_trl(trl_config(**kwargs))


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "luspo"])
def test_trls_two_sided_clip_delta_trains_trls_loss_as_dual_clip(run_config, loss_type):
    """TRL's ``delta`` (INTELLECT-2) caps the unclipped ratio before ``-min(r A, clip(r) A)``; it was
    refused as having no polyrl counterpart, while for delta >= 1 + epsilon_high it is dual-clip
    PPO. The polyrl run's loss and gradient (the numpy reference the backends match) equal TRL's
    formula on ratios far past both bounds, advantages of either sign."""
    import torch

    from polyrl.algorithms.reference import policy_loss, policy_loss_grad

    level = "sequence" if loss_type == "luspo" else "token"  # luspo at its paper's (GSPO's) sequence level
    algorithm = run_config(trl_config(max_steps=1, loss_type=loss_type, delta=3.0,
                                      importance_sampling_level=level)).algorithm
    assert algorithm.dual_clip == 3.0 and algorithm.importance_sampling_level == level
    objective = algorithm.objective(max_completion_length=16)
    rng = np.random.default_rng(0)
    logp = [rng.uniform(-3, 0, 16) for _ in range(6)]
    old = [lp - rng.uniform(-2.5, 2.5, 16) for lp in logp]  # ratios from e^-2.5 to e^2.5: past 1 +- 0.2 and 3
    adv = [1.5, -1.5, 0.7, -0.4, -2.0, 0.0]
    eps_low, eps_high = 0.2, 0.2
    current = [torch.tensor(lp, requires_grad=True) for lp in logp]
    per_sequence = []
    for lp, o, a in zip(current, old, adv):
        log_ratio = lp - torch.tensor(o)
        if loss_type == "luspo":  # the sequence's ratio: exp(mean log ratio), for every token
            log_ratio = log_ratio.mean().expand(16)
        coef_1 = torch.exp(log_ratio)
        coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
        coef_1 = torch.clamp(coef_1, max=3.0)  # TRL's delta
        per_sequence.append(-torch.min(coef_1 * a, coef_2 * a))
    if loss_type == "dapo":
        trl_loss = torch.cat(per_sequence).sum() / 96
    elif loss_type == "grpo":
        trl_loss = torch.stack([t.mean() for t in per_sequence]).mean()
    else:  # luspo: each sequence's token sum, averaged over sequences
        trl_loss = torch.stack([t.sum() for t in per_sequence]).mean()
    trl_loss.backward()
    ours, _ = policy_loss(logp, adv, objective, old_logprobs=old)
    assert ours == pytest.approx(float(trl_loss.detach()), rel=1e-9, abs=1e-12)
    for mine, theirs in zip(policy_loss_grad(logp, adv, objective, old_logprobs=old), current):
        np.testing.assert_allclose(mine, theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("delta", "words"), [(1.1, "below 1 + epsilon_high = 1.2"), (math.nan, "not a number")])
def test_a_trl_delta_polyrl_cannot_train_is_one_error_naming_it(delta, words):
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(delta=delta))
    assert info.value.field == "grpo_config.delta" and words in str(info.value)


def test_trls_delta_is_dropped_where_trls_loss_never_reads_it(run_config):
    algorithm = run_config(trl_config(max_steps=1, loss_type="cispo", epsilon_high=5.0, delta=3.0)).algorithm
    assert algorithm.name == "cispo" and algorithm.dual_clip is None


def test_trls_generation_kwargs_are_read_key_by_key():
    """TRL updates its sampling arguments with generation_kwargs (Qwen3's top_k = 20 is often written
    there); the whole dict was refused."""
    ours = api.GRPOConfig.from_trl(trl_config(generation_kwargs={"top_k": 20, "min_p": 0.05, "top_p": 0.95,
                                                                 "repetition_penalty": 1.1, "stop_strings": "</a>",
                                                                 "do_sample": True}))
    wanted = {"generation.top_k": 20, "generation.min_p": 0.05, "generation.top_p": 0.95,
              "generation.repetition_penalty": 1.1, "generation.stop": ["</a>"]}
    assert {k: ours.settings[k] for k in wanted} == wanted
    same = api.GRPOConfig.from_trl(trl_config(temperature=0.6, generation_kwargs={"temperature": 0.6}))
    assert same.settings["generation.temperature"] == 0.6


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"generation_kwargs": {"num_beams": 2, "suppress_tokens": [1]}}, "'num_beams', 'suppress_tokens': polyrl has no"),
    ({"generation_kwargs": {"temperature": 0.6}}, "temperature = 0.6 differs from its temperature = 1.0"),
    ({"generation_kwargs": {"max_new_tokens": 64}}, "max_new_tokens = 64 differs from its max_completion_length"),
    ({"generation_kwargs": {"do_sample": False}}, "do_sample = False"),
])
def test_trl_generation_kwargs_polyrl_cannot_honour_are_one_error(kwargs, words):
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs))
    assert info.value.field == "grpo_config.generation_kwargs" and words in str(info.value)


def test_vllms_top_k_off_in_generation_kwargs_is_polyrls_top_k_off():
    """vLLM's top_k = -1 (off; TRL passes generation_kwargs to vLLM's SamplingParams) was refused
    as generation.top_k < 0; polyrl's 0 is the same setting."""
    assert api.GRPOConfig.from_trl(trl_config(generation_kwargs={"top_k": -1})).settings["generation.top_k"] == 0


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"min_p": None}, "min_p = None"),
    ({"top_k": None}, "top_k = None"),
    ({"stop": None}, "stop = None"),
    ({"top_p": "0.9"}, "top_p = '0.9'"),
    ({"stop": "</a>", "stop_strings": "</b>"}, "stop = '</a>' and stop_strings = '</b>' differ"),
])
def test_generation_kwargs_values_polyrl_cannot_take_are_one_error_naming_generation_kwargs(run_config, kwargs, words):
    """A None or wrongly typed value ended in "grpo_config.settings: a setting has the wrong type",
    naming neither the key nor generation_kwargs; stop and stop_strings disagreeing kept one silently."""
    with pytest.raises(ConfigError) as info:
        run_config(trl_config(max_steps=1, generation_kwargs=kwargs))
    assert info.value.field == "grpo_config.generation_kwargs" and words in str(info.value), info.value


@pytest.mark.parametrize("field", ["loss_type", "entropy_coef"])
def test_several_updates_per_rollout_from_generation_batch_size_name_it_in_the_fix(field):
    """generation_batch_size = 2 x the batch makes two updates per rollout as steps_per_generation = 2
    does; the fix named only steps_per_generation, which the script never set."""
    kwargs = {"per_device_train_batch_size": 4, "num_generations": 4, "generation_batch_size": 8, "max_steps": 2}
    extra = {"loss_type": "bnpo"} if field == "loss_type" else {"loss_type": "dapo", "entropy_coef": 0.01}
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs, **extra))
    assert info.value.field == f"grpo_config.{field}" and "generation_batch_size unset" in info.value.fix


@pytest.mark.parametrize("fields", [{"gradient_accumulation_steps": 2, "max_steps": 1},
                                    {"steps_per_generation": 4, "max_steps": 4}],
                         ids=["accumulation", "minibatches"])
def test_a_reward_in_api_run_reads_trls_train_batch_size(tiny_model_dir, tmp_path, fields):
    """A reward's trainer_state.train_batch_size in ``api.run`` from a trl.GRPOConfig is what
    transformers' Trainer writes (``state.train_batch_size = args.train_batch_size``: one process's
    micro-batch, per_device_train_batch_size on one device), as ``polyrl.trl.GRPOTrainer`` gives;
    it was one rollout's completions over polyrl's mini-batches, so 8 for 4 under
    gradient_accumulation_steps 2 (a rollout of 2 micro-batches, one update); steps_per_generation
    (4 updates of a rollout, no accumulation) gave 4 already."""
    seen = []

    def batch(completions, trainer_state, **kwargs):
        seen.append(trainer_state.train_batch_size)
        return [0.0 for _ in completions]

    args = trl_config(output_dir=str(tmp_path / "out"), num_generations=2, per_device_train_batch_size=4,
                      max_completion_length=2, bf16=False, **fields)
    api.run(api.grpo, policy=api.Agent(tiny_model_dir), prompts=[f"q{i}" for i in range(8)],
            rewards=[batch], grpo_config=args, progress=False)
    assert args.train_batch_size == 4
    assert seen and set(seen) == {args.train_batch_size}, seen
