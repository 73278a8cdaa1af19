"""A bad value in a TRL script's ``trl.GRPOConfig`` is one error naming the script's field
(``args.learning_rate``) and its fix, never polyrl's own key (``lr``, ``optimizer.betas[0]``,
``logging.report_to``) or a traceback: the script never wrote those."""

from __future__ import annotations

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
pytest.importorskip("datasets")

from polyrl.errors import ConfigError  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402
from trl_util import grpo_args, prompts_dataset, short  # noqa: E402


def _error(model: str, tmp_path, **fields) -> ConfigError:
    """The ConfigError building a trainer with ``fields`` raises (before any model loads), else
    the one its train() raises."""
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=model, reward_funcs=[short], args=grpo_args(tmp_path, **fields),
                    train_dataset=prompts_dataset()).train()
    return info.value


def test_report_to_none_is_refused_as_transformers_refuses_it_naming_args_report_to(tiny_model_dir, tmp_path):
    """transformers 5's TrainingArguments keeps report_to=None as [None] (not its "none"), and its
    Trainer then refuses it ("None is not supported"); polyrl said "must be a list of tracker
    names", with a TOML fix, about a key the script never wrote."""
    from transformers.integrations import get_reporting_integration_callbacks

    args = grpo_args(tmp_path, report_to=None)
    assert args.report_to == [None]
    with pytest.raises(ValueError, match="None is not supported"):  # transformers' own Trainer refuses it
        get_reporting_integration_callbacks(args.report_to)
    err = _error(tiny_model_dir, tmp_path, report_to=None)
    assert err.field == "args.report_to", err
    assert "TRL's report_to = [None] names no tracker" in err.message and 'report_to="none"' in (err.fix or ""), err


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"learning_rate": -1.0}, "args.learning_rate", "learning_rate = -1.0"),
    ({"learning_rate": 0.0}, "args.learning_rate", "learning_rate = 0.0"),
    ({"adam_beta1": 1.5}, "args.adam_beta1", "TRL's adam_beta1 = 1.5"),
    ({"adam_beta2": float("nan")}, "args.adam_beta2", "TRL's adam_beta2 = nan"),
    ({"sync_ref_model": True}, "args.sync_ref_model", "with beta = 0.0"),
    ({"sync_ref_model": True, "beta": 0.04, "ref_model_sync_steps": 0}, "args.ref_model_sync_steps",
     "TRL's ref_model_sync_steps = 0"),
    ({"sync_ref_model": True, "beta": 0.04, "num_iterations": 2, "max_steps": 2, "ref_model_sync_steps": 3},
     "args.ref_model_sync_steps", "TRL's ref_model_sync_steps = 3 optimizer updates is not a whole number"),
    ({"max_completion_length": 0}, "args.max_completion_length", "TRL's max_completion_length = 0"),
    ({"max_steps": -1, "num_train_epochs": float("nan")}, "args.num_train_epochs", "TRL's num_train_epochs = nan"),
    ({"max_steps": -1, "num_train_epochs": 0}, "args.num_train_epochs", "TRL's num_train_epochs = 0"),
    ({"max_steps": -1, "num_train_epochs": 1, "per_device_train_batch_size": 16}, "args.num_train_epochs",
     "not one whole batch per epoch"),
])
def test_a_bad_trl_value_is_one_error_naming_the_trl_field_and_its_fix(tiny_model_dir, tmp_path, fields, field, words):
    """Each named polyrl's key or none (``lr must be > 0``, ``optimizer.betas[0]``,
    ``algorithm.ref_sync_every``, ``max_new_tokens``, ``grpo_config.epochs``), had no fix, or was a
    ValueError traceback (NaN epochs); 0 epochs trained one step where transformers trains none."""
    err = _error(tiny_model_dir, tmp_path, **fields)
    assert err.field == field, err
    assert words in err.message and err.fix, err


def test_a_batch_size_set_on_the_config_after_it_was_built_is_refused_not_read_stale(tiny_model_dir, tmp_path):
    """GRPOConfig derives generation_batch_size from per_device_train_batch_size when it is built;
    ``args.per_device_train_batch_size = 8`` afterwards left it at 4, which polyrl read as 2 prompts
    a step without a word (TRL's dataloader takes 8 completions, its sampler groups of the old 4).
    Now one error naming the field; the same value given to GRPOConfig(...) itself trains as before."""
    args = grpo_args(tmp_path)
    args.per_device_train_batch_size = 8
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=args, train_dataset=prompts_dataset())
    assert info.value.field == "args.per_device_train_batch_size", info.value
    assert "generation_batch_size = 4 is not per_device_train_batch_size x world_size x steps_per_generation = " \
           "8 x 1 x 1" in info.value.message and "trl.GRPOConfig(...) itself" in (info.value.fix or "")
    from polyrl import api

    assert api.GRPOConfig.from_trl(grpo_args(tmp_path, per_device_train_batch_size=8)).prompts_per_step == 4


def test_gradient_accumulation_steps_set_after_the_config_was_built_says_so_in_the_fix(tmp_path):
    """GRPOConfig makes an unset steps_per_generation gradient_accumulation_steps when it is built;
    ``args.gradient_accumulation_steps = 2`` afterwards left it at 1, and the error named only
    steps_per_generation, a field the script never set, with no word of why."""
    from polyrl import api

    args = grpo_args(tmp_path)
    args.gradient_accumulation_steps = 2
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(args)
    assert info.value.field == "grpo_config.steps_per_generation"
    assert "pass gradient_accumulation_steps to trl.GRPOConfig(...) itself" in (info.value.fix or ""), info.value


def test_numpy_numbers_are_taken_as_the_python_numbers_they_equal(tmp_path):
    """The checks above read numbers as numbers: a numpy float or int (a sweep's value) is no error."""
    import numpy as np

    from polyrl import api

    ours = api.GRPOConfig.from_trl(grpo_args(tmp_path, learning_rate=np.float32(1e-4), adam_beta1=np.float64(0.8),
                                             max_completion_length=np.int64(5), max_steps=-1,
                                             num_train_epochs=np.float32(2.0)))
    assert ours.learning_rate == pytest.approx(1e-4) and ours.epochs == 2.0
    assert ours.settings["optimizer.betas"] == (0.8, 0.999) and ours.settings["generation.max_new_tokens"] == 5


def test_the_fix_of_an_error_renamed_to_a_trl_field_names_that_field_too(tiny_model_dir, tmp_path):
    """The error named the script's field, but its fix said "give logging.project a value": a key
    the script never wrote."""
    err = _error(tiny_model_dir, tmp_path, project="", report_to="tensorboard")
    assert err.field == "args.project", err
    assert "args.project" in (err.fix or "") and "logging." not in str(err), err


def test_renaming_leaves_a_longer_name_in_the_fix_alone():
    err = ConfigError("is empty", field="logging.project", fix="set logging.project or logging.project_dir")
    assert err.renamed("args.project", in_fix=True).fix == "set args.project or logging.project_dir"
    assert ConfigError("x", field="temperature", fix="set generation.temperature").renamed(
        "generation.temperature", in_fix=True).fix == "set generation.temperature"  # a dotted prefix is no match


@pytest.mark.parametrize("weights, words", [
    ([1.0, 2.0], "reward_weights has 2 weights for 1 reward_funcs"),  # built, then refused only in train()
    ([float("nan")], "holds a weight that is not finite"),  # named rewards[0].weight, a key the script never wrote
    ([1e308], "holds a weight past 1e+100"),  # finite, and the weighted rewards were inf or NaN
])
def test_bad_reward_weights_are_refused_as_the_trainer_is_built_naming_args_reward_weights(tiny_model_dir, tmp_path,
                                                                                          weights, words):
    """TRL's constructor raises on reward_weights of another length than reward_funcs; polyrl built
    the trainer and refused them only in ``train()``. A NaN weight (TRL's nansum trains as if that
    reward were absent) is refused naming the script's field."""
    with pytest.raises(ConfigError) as info:
        GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path, reward_weights=weights),
                    train_dataset=prompts_dataset())
    assert info.value.field == "args.reward_weights" and words in info.value.message, info.value
