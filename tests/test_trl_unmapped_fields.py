"""Every trl.GRPOConfig field, set to another value, is either taken (unread by TRL's GRPO training
as by polyrl's, or translated) or refused with what it does in TRL and what to do instead. Before,
34 fields (optim_args, data_seed, ddp_*, eval_delay, model_init_kwargs...) ended in the generic
"from_trl does not translate it to a polyrl setting", saying neither."""

from __future__ import annotations

import dataclasses
import enum
import warnings

import pytest

trl = pytest.importorskip("trl")

from polyrl import api  # noqa: E402
from polyrl.errors import ConfigError  # noqa: E402

GENERIC = "from_trl does not translate it"


def trl_config(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return trl.GRPOConfig(**{"output_dir": "out", "use_cpu": True, "report_to": "none", **kwargs})


def _other(field: dataclasses.Field, value):
    """A value of ``field`` other than ``value`` (its default)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, enum.Enum):
        return next(m.value for m in type(value) if m != value)
    if isinstance(value, (int, float)):
        return value + 3
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "a": 1}
    kind = str(field.type)
    return True if "bool" in kind else 7 if "int" in kind else 0.3 if "float" in kind else \
        {"a": 1} if "dict" in kind else ["a"] if "list" in kind else "x"


def test_no_grpoconfig_field_is_refused_without_a_reason():
    default = trl_config()
    generic, checked = [], 0
    for field in dataclasses.fields(trl.GRPOConfig):
        if not field.init or field.name == "output_dir":
            continue
        try:
            config = trl_config(**{field.name: _other(field, getattr(default, field.name))})
        except Exception:  # noqa: BLE001 - TRL refuses this value itself (no GPU, no deepspeed, a batch mismatch)
            continue
        checked += 1
        try:
            api.GRPOConfig.from_trl(config)
        except ConfigError as error:
            if GENERIC in str(error):
                generic.append(field.name)
    assert checked > 150 and generic == []


@pytest.mark.parametrize("kwargs", [
    {"optim_args": "foo=1"}, {"optim_target_modules": ["q_proj"]}, {"average_tokens_across_devices": False},
    {"label_smoothing_factor": 0.1}, {"prediction_loss_only": True}, {"eval_accumulation_steps": 2},
    {"batch_eval_metrics": True}, {"label_names": ["labels"]}, {"train_sampling_strategy": "sequential"},
    {"data_seed": 7}, {"resume_from_checkpoint": "out/checkpoint-5"},
    {"liger_kernel_config": {"rope": True}}, {"eval_delay": 5},  # eval_strategy "no": unread
    {"trackio_space_id": "me/space"},  # report_to "none": unread
    {"report_to": "trackio", "trackio_static_space_id": False},  # no static Space: nothing uploaded, as polyrl
])
def test_fields_grpo_training_never_reads_are_taken(kwargs):
    """(a) Read by transformers only in code GRPOTrainer replaces (its compute_loss, prediction_step,
    samplers), by optimizers other than the AdamW polyrl takes, or only with a switch left off."""
    api.GRPOConfig.from_trl(trl_config(**kwargs))


def test_trls_ddp_timeout_is_polyrls_collective_timeout():
    """(b) transformers' process group timeout is polyrl's train.collective_timeout_s, TRL's default
    1800 s included (polyrl's own is 600)."""
    assert api.GRPOConfig.from_trl(trl_config(ddp_timeout=60)).settings["train.collective_timeout_s"] == 60.0
    assert api.GRPOConfig.from_trl(trl_config()).settings["train.collective_timeout_s"] == 1800.0
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(ddp_timeout=-1))
    assert info.value.field == "grpo_config.ddp_timeout"


@pytest.mark.parametrize("kwargs, field, said", [
    ({"data_seed": 7, "full_determinism": True}, "grpo_config.full_determinism", "deterministic = true"),
    ({"bf16_full_eval": True}, "grpo_config.bf16_full_eval", "cast to bfloat16"),
    ({"eval_strategy": "steps", "eval_steps": 4, "eval_delay": 8}, "grpo_config.eval_delay",
     "skips the evaluations before"),
    ({"ignore_data_skip": True}, "grpo_config.ignore_data_skip", "starts the epoch's prompts over"),
    ({"full_determinism": True}, "grpo_config.full_determinism", "deterministic = true"),
    ({"model_init_kwargs": {"attn_implementation": "eager"}}, "grpo_config.model_init_kwargs", "Agent(dtype=...)"),
    ({"report_to": "trackio", "trackio_space_id": "me/space"}, "grpo_config.trackio_space_id",
     "store stays local"),
    ({"torch_compile_mode": "max-autotune"}, "grpo_config.torch_compile", "compile the model with this torch.compile"),
])
def test_fields_that_change_a_run_are_refused_saying_what_they_do(kwargs, field, said):
    """(c) Each refused with what transformers does with it and polyrl's way instead."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs))
    assert info.value.field == field and said in str(info.value) and GENERIC not in str(info.value), info.value


@pytest.mark.parametrize("weights", [0.5, ["1", "2"]])
def test_reward_weights_that_are_no_list_of_numbers_are_one_error(weights):
    """TRL's config takes any reward_weights; from_trl stopped with "TypeError: 'float' object is not
    iterable" (a traceback) for a single number."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(reward_weights=weights))
    assert info.value.field == "grpo_config.reward_weights" and "reward_weights=[1.0, 0.5]" in str(info.value)


DDP_SETTINGS = [{"ddp_find_unused_parameters": False}, {"ddp_find_unused_parameters": True},
                {"ddp_bucket_cap_mb": 100}, {"ddp_broadcast_buffers": False}, {"ddp_static_graph": True}]


@pytest.mark.parametrize("kwargs", DDP_SETTINGS)
def test_ddp_fields_of_a_one_process_run_are_taken(kwargs):
    """transformers passes the ddp_* fields to accelerate's DistributedDataParallelKwargs, which wraps
    the model in DDP only when several processes run: a one-process run never reads them. from_trl
    refused each (a TRL script's ddp_find_unused_parameters=False, kept for its multi-GPU launches,
    stopped a one-GPU run). (ddp_backend without torchrun: TRL's own GRPOConfig fails in accelerate.)"""
    config = trl_config(**kwargs)
    assert config.world_size == 1
    api.GRPOConfig.from_trl(config)


@pytest.fixture
def two_processes(monkeypatch):
    """TRL's args as a 2-process launch reads them (``world_size`` from accelerate's state), without
    starting processes: their batch fields are those of such a launch (steps_per_generation 2 =
    gradient_accumulation_steps 1 x world_size 2 micro-batches)."""
    monkeypatch.setattr(trl.GRPOConfig, "world_size", property(lambda self: 2))


def launched(**kwargs):
    """TRL's args of a torchrun launch: ``ddp_backend`` set after construction, as accelerate takes it
    only with a started process group (this test starts none)."""
    backend = kwargs.pop("ddp_backend", None)
    config = trl_config(steps_per_generation=2, **kwargs)
    config.ddp_backend = backend
    assert config.world_size == 2
    return config


@pytest.mark.parametrize("kwargs", [*DDP_SETTINGS, {"ddp_backend": "nccl"}, {"ddp_backend": "gloo"}])
def test_ddp_fields_that_cannot_change_a_multi_process_run_are_taken(two_processes, kwargs):
    """polyrl wraps no model in DDP: one all-reduce sums every trainable parameter's gradient (none:
    zero), so find_unused_parameters either way, bucket_cap_mb and static_graph (DDP's reducer's speed)
    and broadcast_buffers (a causal LM's buffers never change in training) train the same; nccl and
    gloo are the backends `polyrl launch` starts (the same sums)."""
    api.GRPOConfig.from_trl(launched(**kwargs))


def test_a_ddp_backend_polyrl_does_not_start_is_refused_on_several_processes(two_processes):
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(launched(ddp_backend="mpi"))
    assert info.value.field == "grpo_config.ddp_backend" and "nccl on GPUs, gloo on CPUs" in str(info.value)


def test_shuffle_dataset_none_keeps_the_datasets_order_as_trls_sampler_does():
    """TRL types shuffle_dataset ``bool | None`` and its RepeatSampler tests it for truth, so None
    trains the rows in the dataset's order. from_trl read the None as "unset" and left polyrl's
    default in place: shuffled. The other flags TRL tests for truth read None as False too."""
    config = api.GRPOConfig.from_trl(trl_config(shuffle_dataset=None, mask_truncated_completions=None))
    assert config.settings["data.shuffle"] is False
    assert config.settings.get("algorithm.mask_truncated_completions", False) is False


@pytest.mark.parametrize("name", ["max_grad_norm", "beta", "max_steps", "num_iterations", "learning_rate", "top_p",
                                  "max_completion_length", "loss_type", "scale_rewards"])
def test_a_none_trl_cannot_train_with_is_one_error_naming_the_field(name):
    """A None in a field whose TRL default is a value: TRL's training fails on it (max_grad_norm
    ``None > 0``, beta, epsilon...) or samples with the model's own setting (top_p,
    max_completion_length). from_trl clipped at polyrl's 1.0 for max_grad_norm = None, trained
    polyrl's own lr, top_p, max_new_tokens..., and stopped with a TypeError for beta or max_steps."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**{name: None}))
    assert info.value.field == f"grpo_config.{name}" and f"{name} = None" in str(info.value), info.value


def test_a_none_read_only_with_another_setting_is_taken_without_it():
    """sapo's and vespo's shapes and the reference sync's steps are read by TRL only with that loss
    or sync_ref_model: a None elsewhere is unread there as here, and refused where it is read."""
    api.GRPOConfig.from_trl(trl_config(sapo_temperature_pos=None, ref_model_sync_steps=None,
                                       max_steps=4, num_train_epochs=None))
    for kwargs, name in [({"loss_type": "sapo", "sapo_temperature_pos": None}, "sapo_temperature_pos"),
                         ({"sync_ref_model": True, "ref_model_sync_steps": None}, "ref_model_sync_steps"),
                         ({"num_train_epochs": None}, "num_train_epochs")]:
        with pytest.raises(ConfigError) as info:
            api.GRPOConfig.from_trl(trl_config(**kwargs))
        assert info.value.field == f"grpo_config.{name}", info.value


@pytest.mark.parametrize("kwargs, field, said", [
    ({"num_iterations": 0}, "num_iterations", "num_iterations = 0"),
    ({"num_iterations": 1.5}, "num_iterations", "num_iterations = 1.5"),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps", "gradient_accumulation_steps = 0"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size", "per_device_train_batch_size = 0"),
    ({"generation_batch_size": 0}, "steps_per_generation", "generation_batch_size = 0"),  # TRL derives both
])
def test_a_batch_count_below_one_is_one_error_naming_it(kwargs, field, said):
    """TRL's config takes these (its training then fails); from_trl ended in ZeroDivisionError for a
    0, or named save_steps for a num_iterations of 1.5."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(**kwargs))
    assert info.value.field == f"grpo_config.{field}" and said in str(info.value), info.value


def test_a_loss_type_trl_has_not_is_refused_listing_trls_names():
    """It was passed on as polyrl's algorithm.loss_aggregation, whose error listed polyrl's names
    (token_mean, seq_mean_token_mean...), none of which a TRL script can write."""
    with pytest.raises(ConfigError) as info:
        api.GRPOConfig.from_trl(trl_config(loss_type="dapo2"))
    assert info.value.field == "grpo_config.loss_type" and "'dr_grpo'" in str(info.value), info.value


@dataclasses.dataclass
class _ScriptConfig(trl.GRPOConfig):
    """A script's own GRPOConfig subclass carrying its settings beside TRL's."""

    dataset_name: str = "gsm8k"
    max_samples: int = 100


def test_a_scripts_own_fields_on_a_grpoconfig_subclass_are_left_to_it_and_trls_still_read():
    """TRL's trainer never reads fields a subclass adds; they were refused as untranslated, which
    stopped a script TRL runs. TRL's own fields on the subclass are still read and refused alike."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = _ScriptConfig(output_dir="out", use_cpu=True, report_to="none", dataset_name="math",
                               max_samples=5, learning_rate=3e-6)
        assert api.GRPOConfig.from_trl(config).learning_rate == 3e-6
        with pytest.raises(ConfigError, match="use_liger_kernel"):
            api.GRPOConfig.from_trl(_ScriptConfig(output_dir="out", use_cpu=True, report_to="none",
                                                  dataset_name="math", use_liger_kernel=True))
