"""A ``trl.GRPOConfig`` object read as polyrl settings (``polyrl.api.GRPOConfig.from_trl``).

Why: a TRL user hands over the config they already have and expects TRL's behaviour, so every
field with a polyrl equivalent (``polyrl.trl_names.TRL_NAMES``, the one table) keeps TRL's value,
TRL's defaults included (``learning_rate`` 1e-6, ``num_generations`` 8, ``seed`` 42...). A field
that polyrl cannot honour is refused when the user changed it, judged against a ``GRPOConfig``
built by TRL itself with the same mapped values, so values TRL derives in ``__post_init__``
(``generation_batch_size``, ``bf16``...) never count as set.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import numbers
from typing import Any

from polyrl.config import RUN_REWARDS
from polyrl.errors import ConfigError
from polyrl.schedules import SCHEDULES
from polyrl.trl_names import TOML_HINTS, TRL_NAMES, Preset, trl_value
from polyrl.validators import MAX_REWARD_WEIGHT, fits_float, shown

#: TrainingArguments fields that change how a run is logged, saved, shown or placed, not what it
#: trains; polyrl has its own ways (metrics.jsonl, checkpoints, ``Agent(dtype=...)``). ``bf16`` is
#: read by ``GRPOConfig.from_trl`` apart (``compute_dtype``: it needs the backend). ``tf32`` does
#: change the numbers, but transformers applies it itself when the config is built (``enable_tf32``:
#: torch's process-wide float32 matmul precision, under which the torch backend trains in this
#: process), so polyrl has nothing to translate and leaves it as set. ``polyrl.trl.GRPOTrainer``
#: reads the logging strategy, steps and first step from its ``args`` itself (``polyrl.trl_log_steps``),
#: and ``log_completions``, ``num_completions_to_print``, ``log_unique_prompts`` (its completions table).
IGNORED = frozenset({
    "logging_strategy", "logging_steps", "logging_first_step", "log_on_each_node", "logging_nan_inf_filter",
    "logging_dir", "log_level", "log_level_replica", "disable_tqdm",
    "include_num_input_tokens_seen", "skip_memory_metrics", "debug", "enable_jit_checkpoint",
    # what a checkpoint holds and where, not when one is written: polyrl's checkpoint always holds
    # what a resume needs (save_only_model's lighter one cannot be resumed in transformers either),
    # and rank 0 writes it into output_dir (save_on_each_node: a copy per node's local disk)
    "save_only_model", "save_on_each_node",
    "hub_token", "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision",
    "use_cpu", "bf16", "tf32", "local_rank", "do_train", "do_eval", "do_predict", "accelerator_config",
    # dataloader_drop_last: TRL's training sampler yields whole batches only; its evaluation's short last
    # batch is dropped by polyrl.trl's eval rows (``trl_evaluate.whole_eval_batches``)
    "dataloader_drop_last", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
    "dataloader_prefetch_factor", "gradient_checkpointing", "gradient_checkpointing_kwargs",
    "torch_empty_cache_steps", "log_completions", "num_completions_to_print", "log_unique_prompts",
    "log_multimodal", "pad_to_multiple_of", "use_cache", "optim",
    # read by the callbacks through ``args`` (``trl_callbacks``: state.best_metric after each step's
    # evaluation, which transformers' EarlyStoppingCallback compares against)
    "metric_for_best_model", "greater_is_better",
    # read on train(resume_from_checkpoint=...): the callbacks' states restored (``trl_callbacks.restore``)
    "restore_callback_states_from_checkpoint",
    # TRL passes it to transformers' generate() only (its KV cache's layout: speed and memory, not
    # which tokens are drawn); polyrl never calls generate(), its backends keep their own cache
    "cache_implementation",
    # read by transformers' other optimizers only (Adafactor, GaLore, APOLLO...): its AdamW, the one
    # optim polyrl takes (ADAMW below), is built from lr, betas, eps and weight_decay alone
    "optim_args", "optim_target_modules",
    # read by transformers' own compute_loss and its label count (batch["labels"]), both unused by
    # GRPOTrainer: its compute_loss replaces them and normalizes the loss by its own token count
    "average_tokens_across_devices", "label_smoothing_factor",
    # read by transformers' evaluation loop for predictions and compute_metrics (GRPOTrainer takes no
    # compute_metrics, its prediction_step returns the loss alone): the eval loss is the same mean;
    # include_for_metrics' "inputs" fails TRL's evaluation, refused where one runs (refuse_inputs_for_metrics)
    "prediction_loss_only", "eval_do_concat_batches", "eval_accumulation_steps", "eval_use_gather_object",
    "include_for_metrics", "batch_eval_metrics", "label_names",
    # read by transformers' own samplers, which GRPOTrainer replaces with its RepeatSampler (seeded by
    # seed, shuffled by shuffle_dataset): accelerate applies data_seed to a RandomSampler only
    "train_sampling_strategy", "length_column_name", "data_seed",
    # never read by transformers' Trainer: a script passes it to train(resume_from_checkpoint=...)
    "resume_from_checkpoint",
})
#: TRL settings whose value here is what polyrl does anyway (no correction of a generator's
#: mismatch by default): accepted, not refused.
POLYRL_BEHAVIOUR = {"vllm_importance_sampling_correction": False,
                    # False: transformers' trackio integration deploys no static Space (uploads nothing)
                    "trackio_static_space_id": False}
#: ``optim`` values that are the AdamW polyrl runs (another optimizer is refused).
ADAMW = frozenset({"adamw_torch", "adamw_torch_fused"})
#: TRL's evaluation during training, read by ``eval_settings``. ``per_device_eval_batch_size`` only
#: groups the eval completions TRL averages its logged means over (batch by batch), not what is sampled
EVAL_FIELDS = ("eval_strategy", "eval_steps", "eval_on_start", "per_device_eval_batch_size", "num_generations_eval")
#: a ``GRPOConfig.settings`` key, not a config key: evaluate once an epoch (TRL's ``eval_strategy =
#: "epoch"``), turned into ``eval.every`` by ``polyrl.api.run_config`` once the prompts are known
EVERY_EPOCH = "eval.every_epoch"
#: a ``GRPOConfig.settings`` key, not a config key: checkpoint at each epoch's end (TRL's
#: ``save_strategy = "epoch"``), turned into ``train.checkpoint_every`` by ``polyrl.api.run_config``
SAVE_EVERY_EPOCH = "train.checkpoint_every_epoch"
#: a ``GRPOConfig.settings`` key, not a config key: checkpoint each evaluation that beats the best
#: metric (TRL's ``save_strategy = "best"``), which ``polyrl.trl.GRPOTrainer``'s callback handler asks
#: (``trl_callbacks``); ``polyrl.api.run_config`` refuses it on the Python API, which keeps no best metric
SAVE_ON_BEST = "train.checkpoint_on_best"
#: a ``GRPOConfig.settings`` key, not a config key: the TRL field (its name) whose meaning needs the
#: best metric kept as the run goes (``load_best_model_at_end``; ``metric_for_best_model`` where a
#: ``save_total_limit`` prunes checkpoints and the best one must survive), which
#: ``polyrl.trl.GRPOTrainer``'s callback handler keeps; ``polyrl.api.run_config`` refuses it
BEST_KEPT = "train.best_kept"
#: transformers' ``save_steps`` default (``TrainingArguments``; TRL's GRPOConfig keeps it)
HF_SAVE_STEPS = 500
#: a ``GRPOConfig.settings`` key, not a config key: TRL's ``save_steps`` = ``HF_SAVE_STEPS`` rounded up
#: to whole polyrl steps in a ``num_train_epochs`` run, whose length is known only with the prompts:
#: [updates per step, minibatches], for ``polyrl.api.run_config`` to warn where the rounding moves a
#: checkpoint (``rounded_save_warning``)
ROUNDED_SAVE = "train.checkpoint_every_rounded"
#: a ``GRPOConfig.settings`` key, not a config key: TRL's ``save_steps`` below 1 (that fraction of the
#: run's optimizer updates) in a ``num_train_epochs`` run, whose updates are known only with the
#: prompts: [save_steps, num_iterations, minibatches], turned into ``train.checkpoint_every`` by
#: ``polyrl.api.run_config`` (``fraction_every``)
SAVE_FRACTION = "train.checkpoint_every_fraction"
#: ``SAVE_FRACTION`` for TRL's ``eval_steps``, turned into ``eval.every`` (an ``eval.`` key: left out of
#: the settings of one ``evaluate()``, as the run's evaluation schedule is)
EVAL_FRACTION = "eval.every_fraction"
#: a ``GRPOConfig.settings`` key, not a config key: TRL's ``warmup_steps`` below 1 in a
#: ``num_train_epochs`` run: [warmup_steps, updates per polyrl step], turned into
#: ``optimizer.warmup_steps`` by ``polyrl.api.run_config`` (``resolve_fractions``)
WARMUP_FRACTION = "optimizer.warmup_fraction"
#: the settings keys above that are requests to ``polyrl.api.run_config`` or the callbacks, not
#: config values (left out of the log of values taken from TRL)
REQUESTS = frozenset({SAVE_EVERY_EPOCH, SAVE_ON_BEST, BEST_KEPT, ROUNDED_SAVE, SAVE_FRACTION, EVAL_FRACTION,
                      WARMUP_FRACTION})
#: fields read together with others below, not through their own table entry
COMBINED = frozenset({"per_device_train_batch_size", "gradient_accumulation_steps", "max_steps",
                      "num_train_epochs", "sync_ref_model", "ref_model_sync_steps", "ref_model_mixup_alpha",
                      "reward_weights", "loss_type", "lr_scheduler_kwargs", "warmup_ratio", "adam_beta1", "adam_beta2",
                      "use_bias_correction_kl", "delta", "generation_kwargs", "steps_per_generation",
                      "generation_batch_size", "load_best_model_at_end", "save_strategy", "save_steps",
                      "save_total_limit", "report_to", "run_name", "project", "ddp_timeout",
                      *EVAL_FIELDS})
#: read with the model and its LoRA adapters by ``polyrl.api.check_trl_dropout`` (``refuse_dropout_difference``)
MODEL_FIELDS = frozenset({"disable_dropout"})
#: TRL's vLLM settings: its trainer reads every one only with ``use_vllm = True`` (which polyrl refuses),
#: so without it they are unread there as here (``vllm_importance_sampling_*`` included: no sampler
#: mismatch to correct), not refused
VLLM_PREFIX = "vllm_"
#: the bounds and step of TRL's adaptive entropy control: read only with ``use_adaptive_entropy``
#: (which polyrl refuses), so unread there as here without it
ADAPTIVE_ENTROPY_FIELDS = frozenset({"entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target"})
#: fields TRL reads only with another field on (the key, refused with its own note when set), so
#: unread there as here without it: transformers' Liger kernels, FSDP, its trackio integration
#: (a Hub Space and bucket), evaluation during training
READ_WITH = {"liger_kernel_config": "use_liger_kernel", "fsdp_config": "fsdp", "eval_delay": "eval_strategy",
             **{name: "report_to" for name in ("trackio_space_id", "trackio_bucket_id", "trackio_static_space_id")}}
#: fields that shape tool-calling episodes: read by ``polyrl.trl.GRPOTrainer`` when it is given
#: ``tools`` or an ``environment_factory`` (``agent_settings``), refused as TOML-only otherwise
AGENT_FIELDS = frozenset({"max_tool_calling_iterations"})
#: transformers' DistributedDataParallel settings (``Trainer._build_accelerator_args``): accelerate
#: wraps the model in DDP only when several processes run, so one process never reads them. On several,
#: polyrl wraps no model in DDP (``polyrl_torch.distributed.sum_gradients``): one all-reduce sums the
#: gradient of every trainable parameter, one without a gradient counted as zero, so it trains the same
#: with find_unused_parameters either way; it has no buckets (bucket_cap_mb) and no graph to keep
#: (static_graph), both speed knobs of DDP's reducer; it broadcasts no buffers, which a causal LM's
#: training never changes (rotary frequencies, computed alike on every rank), as every rank loads the
#: same weights. None of them changes what trains, so all are taken.
DDP_FIELDS = frozenset({"ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
                        "ddp_static_graph"})
#: ``ddp_backend`` values ``polyrl launch`` starts its process group with (nccl on GPUs, gloo on CPUs):
#: the same sums whichever carries them. Another (mpi, xccl, hccl...) is refused on several processes.
DDP_BACKENDS = frozenset({"nccl", "gloo"})


def _plain(value: Any) -> Any:
    """An enum (TRL's ``lr_scheduler_type``, ``optim``) as its value."""
    return value.value if isinstance(value, enum.Enum) else value


def _refuse_unsupported(trl_config: Any, agent: bool = False) -> None:
    """One ConfigError for the first field the user set that polyrl cannot honour (``agent``:
    ``AGENT_FIELDS`` are read by the caller)."""
    handled = {name for name, entry in TRL_NAMES.items() if entry.key is not None} | IGNORED | COMBINED | MODEL_FIELDS
    if agent:
        handled |= AGENT_FIELDS
    fields = [f for f in dataclasses.fields(trl_config) if f.init and f.name in _library_fields(trl_config)]
    if not getattr(trl_config, "use_vllm", False):  # TRL reads them only with vLLM
        handled |= {f.name for f in fields if f.name.startswith(VLLM_PREFIX)}
    if not getattr(trl_config, "use_adaptive_entropy", False):  # TRL reads them only in adaptive mode
        handled |= ADAPTIVE_ENTROPY_FIELDS
    if not getattr(trl_config, "deepspeed", None):  # read by TRL's generation under DeepSpeed ZeRO-3 only
        handled.add("ds3_gather_for_generation")
    handled |= {name for name, switch in READ_WITH.items() if not _switched_on(trl_config, switch)}
    handled |= DDP_FIELDS
    if processes(trl_config) == 1 or getattr(trl_config, "ddp_backend", None) in DDP_BACKENDS:
        handled.add("ddp_backend")  # one process starts no process group: transformers never reads it
    # the DDP fields derive nothing, and accelerate refuses a ddp_backend outside a started process group
    kept = {f.name: getattr(trl_config, f.name) for f in fields
            if f.name in handled and f.name not in DDP_FIELDS | {"ddp_backend"}}
    try:  # TRL's own defaults for everything else, derived from the same handled values
        reference = type(trl_config)(**kept)
    except Exception:  # noqa: BLE001 - TRL refused the subset: fall back to the declared defaults
        reference = None
    changed: list[tuple[str, Any, Any]] = []
    for f in fields:
        if f.name in handled:
            continue
        value = getattr(trl_config, f.name)
        if reference is not None:
            default = getattr(reference, f.name)
        elif f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue
        if value != default and not (f.name in POLYRL_BEHAVIOUR and value == POLYRL_BEHAVIOUR[f.name]):
            changed.append((f.name, value, default))
    if changed:
        _refuse(changed)
    optim = _plain(trl_config.optim)
    if optim not in ADAMW:
        raise ConfigError(f"TRL's optim = {shown(optim)} is not the AdamW polyrl trains with",
                          field="grpo_config.optim", fix="remove it (polyrl uses torch's AdamW)")


def _library_fields(trl_config: Any) -> frozenset[str]:
    """The fields TRL and transformers declare on ``trl_config``'s class. Why: a script may subclass
    ``GRPOConfig`` to carry its own settings (``dataset_name``, ``max_samples``...), which TRL's
    trainer never reads; refused as untranslated, they stopped a script that TRL runs."""
    for cls in type(trl_config).__mro__:
        if cls.__module__.split(".")[0] in ("trl", "transformers") and dataclasses.is_dataclass(cls):
            return frozenset(f.name for f in dataclasses.fields(cls))
    return frozenset(f.name for f in dataclasses.fields(trl_config))


def processes(trl_config: Any) -> int:
    """How many processes run the script, as TRL's ``TrainingArguments.world_size`` counts them
    (accelerate's state, from torchrun's environment)."""
    try:
        return int(getattr(trl_config, "world_size", 1) or 1)
    except (TypeError, ValueError):
        return 1


def _switched_on(trl_config: Any, switch: str) -> bool:
    """Whether ``switch`` (a ``READ_WITH`` value) turns on the code that reads its fields."""
    value = getattr(trl_config, switch, None)
    if switch == "eval_strategy":
        return _plain(value) != "no"
    if switch == "report_to":  # transformers' trackio integration only
        return value == "trackio" or (isinstance(value, (list, tuple)) and "trackio" in value)
    return bool(value)


def _refuse(changed: list[tuple[str, Any, Any]]) -> None:
    """One ConfigError naming every changed field polyrl cannot honour (the first is ``field``),
    each with its own reason: polyrl's key the Python API does not set, why polyrl has no
    equivalent (the table's note), or, for a field nobody has mapped, that from_trl does not
    translate it (no claim that polyrl lacks it)."""
    for name, value, _ in changed:  # QLoRA: what to do instead, not its whole quantization config
        if name == "model_init_kwargs" and isinstance(value, dict) and value.get("quantization_config") is not None:
            from polyrl.trl_quantized import refuse_quantization_config

            refuse_quantization_config(value["quantization_config"], "grpo_config.model_init_kwargs")
    parts = []
    toml_only = []
    for name, value, default in changed:
        entry = TRL_NAMES.get(name) or TOML_HINTS.get(name)
        if entry is not None and entry.key is not None:  # polyrl has it, set in a TOML config only
            translated = trl_value(entry, _plain(value))
            value_there = f" = {shown(translated)}" if entry.offset and translated != value else ""
            because = f"; {entry.note}" if value_there and entry.note else ""
            shim = "; or pass the tools to polyrl.trl.GRPOTrainer(tools=[...]), which reads it" \
                if name in AGENT_FIELDS else ""
            why = (f" (polyrl's {entry.key}{value_there}, which the Python API does not set: use `polyrl train` with "
                   f"a TOML config{because}{shim})")
            toml_only.append(name)
        elif entry is not None and entry.note:
            why = f": polyrl has no equivalent ({entry.note})"
        else:
            why = ": from_trl does not translate it to a polyrl setting"
        parts.append(f"{name} = {shown(_plain(value))} (TRL's default: {shown(_plain(default))}){why}")
    names = ", ".join(name for name, _, _ in changed)
    what = ": polyrl's Python API cannot take it" if len(toml_only) == len(changed) else ""
    raise ConfigError(f"TRL's {'; '.join(parts)}{what}", field=f"grpo_config.{changed[0][0]}",
                      fix=f"remove {names} from the trl.GRPOConfig (polyrl cannot train it that way), or train "
                          "this run with TRL")


def _min_lr(trl_config: Any, schedule: str) -> dict[str, Any]:
    """``optimizer.min_lr_ratio`` from TRL's ``lr_scheduler_kwargs`` for transformers' schedule
    ``schedule`` (``lr_scheduler_type``). Why per schedule: transformers' ``get_scheduler`` drops
    the keyword arguments of "constant" and "constant_with_warmup" unread, passes them to the
    others, where only ``cosine_with_min_lr`` takes a floor (``min_lr_rate``, or ``min_lr`` over the
    lr, and it needs one), and the rest fail TRL's training with a TypeError on ``min_lr_rate``."""
    kwargs = getattr(trl_config, "lr_scheduler_kwargs", None) or {}
    if isinstance(kwargs, str):  # transformers parses a JSON object's text only; other text stays as it is
        try:
            kwargs = json.loads(kwargs) if kwargs.strip() else {}
        except ValueError:
            raise ConfigError(f"TRL's lr_scheduler_kwargs = {shown(kwargs)} is not JSON (transformers passes it "
                              "to the scheduler as keyword arguments, a dict)", field="grpo_config.lr_scheduler_kwargs",
                              fix='write a dict, e.g. lr_scheduler_kwargs={"min_lr_rate": 0.1}, or remove it') from None
    if not isinstance(kwargs, dict):
        kwargs = {"?": kwargs}
    if schedule in ("constant", "constant_with_warmup"):
        return {}  # transformers never reads them
    unknown = sorted(set(kwargs) - {"min_lr_rate", "min_lr"})
    if unknown or len(kwargs) > 1:
        raise ConfigError(f"TRL's lr_scheduler_kwargs = {shown(kwargs)} has no polyrl equivalent beyond one of "
                          "min_lr_rate and min_lr", field="grpo_config.lr_scheduler_kwargs",
                          fix="keep only min_lr_rate (polyrl's optimizer.min_lr_ratio), or remove it")
    if kwargs and schedule != "cosine_with_min_lr":
        raise ConfigError(f"TRL's lr_scheduler_kwargs = {shown(kwargs)} with lr_scheduler_type = {shown(schedule)}: "
                          f"transformers' {schedule} schedule takes no {next(iter(kwargs))} (TRL's training stops "
                          "with a TypeError when it builds the scheduler)", field="grpo_config.lr_scheduler_kwargs",
                          fix='set lr_scheduler_type="cosine_with_min_lr" for a cosine decay to a floor, or remove '
                              "lr_scheduler_kwargs")
    if schedule == "cosine_with_min_lr" and not kwargs:
        raise ConfigError("TRL's lr_scheduler_type = 'cosine_with_min_lr' without min_lr_rate or min_lr in "
                          "lr_scheduler_kwargs (transformers refuses it when TRL's training builds the scheduler)",
                          field="grpo_config.lr_scheduler_kwargs",
                          fix='set lr_scheduler_kwargs={"min_lr_rate": 0.1} (or the floor you want), or '
                              'lr_scheduler_type="cosine" for a decay to 0')
    if "min_lr_rate" in kwargs:
        return {"optimizer.min_lr_ratio": float(kwargs["min_lr_rate"])}
    if "min_lr" in kwargs:
        return {"optimizer.min_lr_ratio": float(kwargs["min_lr"]) / float(trl_config.learning_rate)}
    return {}


def _as_the_loss_reads_them(out: dict[str, Any], trl_config: Any, loss: str) -> None:
    """TRL's clip and shape values for ``loss_type = loss`` (a polyrl preset), as TRL's loss reads
    them: every value is carried (the preset's own defaults differ from TRL's: luspo's GSPO band,
    cispo's cap), and one TRL ignores for this loss is left out (polyrl refuses a key that does
    nothing). Why cispo is translated: TRL caps the weight at ``epsilon_high`` itself (ε_max,
    ``epsilon`` when unset), polyrl at ``1 + epsilon_high``."""
    epsilon, high = trl_config.epsilon, trl_config.epsilon_high
    if loss == "cispo" and trl_config.importance_sampling_level != "token":
        raise ConfigError("TRL's cispo with importance_sampling_level = 'sequence' weights every token by the "
                          "sequence's clamped ratio; polyrl's cispo weights each token by its own ratio only",
                          field="grpo_config.importance_sampling_level",
                          fix='use importance_sampling_level="token" with loss_type="cispo" (TRL warns that the '
                              'sequence level there weights each sequence by its length), or loss_type="grpo" for '
                              "GSPO's sequence ratio")
    if loss == "vespo":  # TRL's vespo computes its own sequence weight and never reads the ratio level
        out.pop("algorithm.importance_sampling_level", None)
    if loss == "cispo":
        cap = epsilon if high is None else high
        if cap < 1:
            raise ConfigError(f"TRL's cispo caps the importance weight at epsilon_high itself (epsilon when "
                              f"epsilon_high is unset): a cap of {shown(cap)}, below the on-policy ratio 1, "
                              "which polyrl's cispo (a cap of 1 + epsilon_high, at least 1) cannot train",
                              field="grpo_config.epsilon_high",
                              fix="set epsilon_high to the cap you want, at least 1 (TRL recommends 5.0, polyrl's "
                                  "epsilon_high = 4.0)")
        out.pop("algorithm.epsilon", None)  # TRL's cispo reads no lower clip
        out["algorithm.epsilon_high"] = round(cap - 1, 12)
    elif loss in ("sapo", "vespo"):  # no clip in TRL's loss either
        out.pop("algorithm.epsilon", None)
        out.pop("algorithm.epsilon_high", None)
    else:  # TRL's PPO clip, epsilon_high = epsilon when unset
        out["algorithm.epsilon_high"] = epsilon if high is None else high
    for prefix in ("sapo", "vespo"):
        if loss != prefix:
            for key in [k for k in out if k.startswith(f"algorithm.{prefix}_")]:
                del out[key]


#: ``generation_kwargs`` keys TRL's sampling honours that are polyrl generation settings: TRL
#: updates its sampling arguments with them (transformers' names, and vLLM's ``stop``)
_SAMPLING_KWARGS = {"top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
                    "stop_strings": "stop", "stop": "stop"}
#: keys whose value TRL also reads elsewhere: taken only when equal to that field (-> the field's name)
_SAME_AS_FIELD = {"temperature": "temperature", "max_new_tokens": "max_completion_length"}


def _generation_kwargs(trl_config: Any) -> dict[str, Any]:
    """polyrl's generation settings for TRL's ``generation_kwargs``. Why: TRL updates its sampling
    arguments with the dict (Qwen3's recommended ``top_k=20`` is often written there), so it was
    refused as a whole. A key polyrl has overrides the field as in TRL; ``temperature`` and
    ``max_new_tokens`` only where they equal ``temperature`` / ``max_completion_length`` (TRL's loss
    and its length checks read those fields, not the dict, so a different value trains differently
    from how it samples); anything else (``num_beams``, ``suppress_tokens``...) is one error."""
    kwargs = getattr(trl_config, "generation_kwargs", None)
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"TRL's generation_kwargs = {shown(kwargs)} is not a dict", field="grpo_config.generation_kwargs",
                          fix='write a dict, e.g. generation_kwargs={"top_k": 20}, or remove it')
    out: dict[str, Any] = {}
    unknown = []
    for key, value in kwargs.items():
        if key in _SAMPLING_KWARGS:
            name = _SAMPLING_KWARGS[key]
            value = _sampling_value(key, name, value)
            if f"generation.{name}" in out and out[f"generation.{name}"] != value:  # stop and stop_strings
                raise ConfigError(f"TRL's generation_kwargs stop = {shown(kwargs.get('stop'))} and stop_strings = "
                                  f"{shown(kwargs.get('stop_strings'))} differ (TRL's vLLM sampling reads one, "
                                  "transformers' the other); polyrl has one list of stop strings",
                                  field="grpo_config.generation_kwargs", fix="keep one of them")
            out[f"generation.{name}"] = value
        elif key == "do_sample":
            if value is not True:
                raise ConfigError(f"TRL's generation_kwargs do_sample = {shown(value)}: GRPO samples its groups, "
                                  "polyrl always does", field="grpo_config.generation_kwargs",
                                  fix="remove do_sample (for greedy decoding set temperature near 0)")
        elif key in _SAME_AS_FIELD:
            field = _SAME_AS_FIELD[key]
            if value != getattr(trl_config, field):
                raise ConfigError(f"TRL's generation_kwargs {key} = {shown(value)} differs from its {field} = "
                                  f"{shown(getattr(trl_config, field))}, which TRL's loss and length handling read",
                                  field="grpo_config.generation_kwargs",
                                  fix=f"set {field}={shown(value)} in the GRPOConfig and remove {key} from "
                                      "generation_kwargs")
        else:
            unknown.append(key)
    if unknown:
        raise ConfigError(f"TRL's generation_kwargs {', '.join(map(repr, unknown))}: polyrl has no such sampling "
                          f"setting (it has {', '.join(sorted(set(_SAMPLING_KWARGS)))}, and temperature / "
                          "max_new_tokens through their own fields)", field="grpo_config.generation_kwargs",
                          fix=f"remove {', '.join(map(repr, unknown))} from generation_kwargs, or train this run "
                              "with TRL")
    return out


def _sampling_value(key: str, name: str, value: Any) -> Any:
    """``value`` of ``generation_kwargs[key]`` as polyrl's ``generation.<name>``, or one error naming
    the key. Why: a None (transformers' "unset", an error in vLLM) or a value of the wrong type
    ended in "grpo_config.settings: a setting has the wrong type", naming neither; vLLM's
    ``top_k = -1`` (off) was refused, though polyrl's 0 is the same."""
    from polyrl.config import GenerationSection

    if key.startswith("stop") and isinstance(value, str):
        value = [value]
    elif key == "top_k" and value == -1 and not isinstance(value, bool):
        value = 0
    why = "None is no setting here" if value is None else None
    if why is None:
        try:
            GenerationSection(**{name: value})
        except ConfigError as exc:
            why = exc.message
        except (TypeError, ValueError) as exc:
            why = f"not a valid {name} ({exc})"
    if why is not None:
        raise ConfigError(f"TRL's generation_kwargs {key} = {shown(value)}: {why}", field="grpo_config.generation_kwargs",
                          fix=f"give {key} a valid value, or remove it"
                              + ("" if name == "stop" else f" (TRL's {name} field then applies)"))
    return value


def _two_sided_clip(trl_config: Any, out: dict[str, Any]) -> dict[str, Any]:
    """polyrl's ``algorithm.dual_clip`` for TRL's ``delta`` (INTELLECT-2's two-sided clip). Why
    the same: TRL caps the unclipped ratio at ``delta`` before ``min(r A, clip(r) A)``; with
    ``delta >= 1 + epsilon_high`` a positive advantage's term is unchanged (its clipped ratio is
    the smaller) and a negative one's weight is ``max(min(r, delta), clip(r))``, which is dual-clip
    PPO's cap of the loss at ``-A delta``, gradient 0 past it. TRL's cispo, sapo and vespo losses
    never read ``delta``, so it is dropped there as TRL drops it."""
    delta = getattr(trl_config, "delta", None)
    if delta is None or out.get("algorithm.name") in ("cispo", "sapo", "vespo"):
        return {}
    high = out.get("algorithm.epsilon_high", trl_config.epsilon)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not math.isfinite(delta):
        raise ConfigError(f"TRL's delta = {shown(delta)} is not a number", field="grpo_config.delta",
                          fix="set delta to a ratio cap of at least 1 + epsilon_high (INTELLECT-2 uses 4), or remove it")
    if delta < 1 + high or delta <= 1:
        raise ConfigError(f"TRL's delta = {shown(delta)} below 1 + epsilon_high = {shown(1 + high)} caps the ratio of "
                          "tokens with a positive advantage too; polyrl's dual_clip (the same bound from "
                          "1 + epsilon_high up) caps the negative ones' only",
                          field="grpo_config.delta",
                          fix=f"set delta to at least 1 + epsilon_high ({shown(1 + high)}; INTELLECT-2 uses 4), "
                              "or remove it")
    return {"algorithm.dual_clip": float(delta)}


def _warmup(warmup: Any, max_steps: int) -> Any:
    """polyrl's ``optimizer.warmup_steps`` (a count of updates) for TRL's ``warmup_steps``. Why:
    transformers 5 reads a value below 1 (and the deprecated ``warmup_ratio``, copied into it) as
    that fraction of the run's ``max_steps`` updates, rounded up, and a float of 1 or more as its
    integer part."""
    if not isinstance(warmup, float):
        return warmup
    if warmup >= 1:
        return int(warmup)
    if warmup <= 0:
        return 0
    if max_steps <= 0:
        raise ConfigError(f"TRL's warmup_steps = {shown(warmup)} is a fraction of the run's optimizer updates, "
                          "which from_trl knows only from max_steps", field="grpo_config.warmup_steps",
                          fix="set max_steps, or warmup_steps to a number of updates (1 or more)")
    return math.ceil(max_steps * warmup)


def _micro_batches(trl_config: Any) -> int:
    """How many micro-batches TRL splits one optimizer update's completions into: the
    ``gradient_accumulation_steps`` of each of the ``world_size`` processes."""
    return int(trl_config.gradient_accumulation_steps) * int(trl_config.world_size)


def _refuse_micro_batch_mean(trl_config: Any) -> None:
    """TRL's ``loss_type = "bnpo"`` over more than one micro-batch. Why: TRL divides each
    micro-batch's token sum by that micro-batch's own token count (then averages over the
    accumulation steps and processes), so a short micro-batch's tokens weigh more; polyrl's
    ``token_mean`` divides by the whole step's count (over its ``minibatches`` updates: a
    mini-batch by the step's tokens / minibatches), which is TRL's "dapo". With one micro-batch
    (gradient_accumulation_steps = 1 on one process) and one update per rollout
    (steps_per_generation = gradient_accumulation_steps) the two are the same."""
    if trl_config.loss_type != "bnpo" or (_micro_batches(trl_config) == 1 and _minibatches(trl_config) == 1):
        return
    raise ConfigError(f"TRL's loss_type = 'bnpo' is a token mean per micro-batch of per_device_train_batch_size = "
                      f"{trl_config.per_device_train_batch_size} completions, averaged over "
                      f"gradient_accumulation_steps = {trl_config.gradient_accumulation_steps} x world_size = "
                      f"{trl_config.world_size} micro-batches, in each of the steps_per_generation / "
                      f"gradient_accumulation_steps = {_minibatches(trl_config)} updates per rollout; "
                      "polyrl's token_mean divides by the whole step's token count (TRL's \"dapo\") and has no "
                      "per-micro-batch form",
                      field="grpo_config.loss_type",
                      fix='use loss_type="dapo" (the whole-batch token mean polyrl trains), or one micro-batch: '
                          "gradient_accumulation_steps=1 with per_device_train_batch_size raised to keep the batch, "
                          "steps_per_generation and generation_batch_size unset (one update per rollout), on one process")


#: TRL loss types whose policy term polyrl aggregates as a token mean of the whole batch
#: (``token_mean``), and how polyrl aggregates the others: what its entropy bonus follows.
_TOKEN_MEAN_LOSSES = ("dapo", "bnpo", "cispo", "vespo")
_AGGREGATED = {"grpo": "a mean over sequences of each one's token mean", "sapo": "a mean over sequences of each "
               "one's token mean", "dr_grpo": "the token sum over sequences x max_completion_length",
               "luspo": "a mean over sequences of each one's token sum (about the mean length times TRL's bonus)"}


def _refuse_entropy_bonus(trl_config: Any) -> None:
    """TRL's ``entropy_coef > 0`` where TRL's bonus and polyrl's differ. Why: TRL subtracts
    ``entropy_coef`` times the token mean of the entropy over the ``top_entropy_quantile``-selected
    tokens of each micro-batch, whatever the loss_type; polyrl adds ``-entropy_coef * H_t`` to every
    token's loss before the policy loss's aggregation (verl's ``entropy_coeff``). They agree only
    for a whole-batch token-mean loss, every token, and one micro-batch per update."""
    coef, quantile, loss = trl_config.entropy_coef, trl_config.top_entropy_quantile, trl_config.loss_type
    if not coef:
        return
    why = []
    if loss not in _TOKEN_MEAN_LOSSES:
        why.append(f"with loss_type = {shown(loss)} polyrl's bonus is aggregated as its policy loss, "
                   f"{_AGGREGATED.get(loss, 'not a token mean')}")
    if quantile < 1:
        why.append(f"with top_entropy_quantile = {shown(quantile)} TRL's bonus acts on the selected tokens only, "
                   "polyrl's on every token")
    if _micro_batches(trl_config) > 1:
        why.append(f"over gradient_accumulation_steps x world_size = {_micro_batches(trl_config)} micro-batches "
                   "TRL's bonus is a mean of each micro-batch's token mean, polyrl's one token mean of the step")
    elif _minibatches(trl_config) > 1:
        why.append(f"over steps_per_generation / gradient_accumulation_steps = {_minibatches(trl_config)} updates "
                   "per rollout TRL's bonus is each update's own token mean, polyrl's divides by the step's tokens "
                   "/ the updates (as TRL's dapo policy term)")
    if not why:
        return
    raise ConfigError(f"TRL's entropy_coef = {shown(coef)}: TRL's entropy bonus is a token mean of the entropy over "
                      "the tokens top_entropy_quantile selects, whatever the loss_type; polyrl's adds "
                      "-entropy_coef x entropy to every token's loss and aggregates it with the policy loss (verl's "
                      f"entropy_coeff), so the two differ here: {'; '.join(why)}", field="grpo_config.entropy_coef",
                      fix='use loss_type="dapo" (cispo and vespo too) with top_entropy_quantile=1.0, one '
                          "micro-batch per update (gradient_accumulation_steps=1 on one process) and one update per "
                          "rollout (steps_per_generation and generation_batch_size unset), where the two bonuses are the same, or "
                          "entropy_coef=0")


def _refuse_entropy_ranking_across_processes(trl_config: Any) -> None:
    """TRL's ``top_entropy_quantile < 1`` on several processes. Why: TRL's threshold is the quantile
    of the token entropies of every process's micro-batch, gathered (``get_high_entropy_mask``);
    polyrl ranks each rank's micro-batch of ``per_device_train_batch_size`` completions on its own
    (``polyrl.api.run_config`` sets that micro-batch), so on several processes the policy term
    trained on other tokens, with no word. On one process the two rank the same tokens."""
    quantile = trl_config.top_entropy_quantile
    if quantile >= 1 or processes(trl_config) == 1:
        return
    raise ConfigError(f"TRL's top_entropy_quantile = {shown(quantile)} on {processes(trl_config)} processes ranks the "
                      "token entropies of every process's micro-batch together (gathered across processes); polyrl "
                      "ranks each rank's micro-batch of per_device_train_batch_size completions on its own",
                      field="grpo_config.top_entropy_quantile",
                      fix="train on one process, or set top_entropy_quantile=1.0 (every token)")


def _minibatches(trl_config: Any) -> int:
    """polyrl's ``algorithm.minibatches`` for TRL's ``steps_per_generation``. Why: TRL splits each
    process's generation batch (shuffled) into ``steps_per_generation`` slices and makes one
    optimizer update per ``gradient_accumulation_steps`` of them, so one rollout is
    ``steps_per_generation / gradient_accumulation_steps`` updates per pass: polyrl's mini-batches.
    A count that is not whole updates is refused: TRL's update would straddle two rollouts."""
    per_rollout, accumulation = int(trl_config.steps_per_generation), int(trl_config.gradient_accumulation_steps)
    if per_rollout % accumulation:
        raise ConfigError(f"TRL's steps_per_generation = {per_rollout} is not a multiple of "
                          f"gradient_accumulation_steps = {accumulation}: TRL's optimizer updates would straddle two "
                          "rollouts, and a polyrl step is one rollout and its whole updates "
                          "(algorithm.minibatches = steps_per_generation / gradient_accumulation_steps)",
                          field="grpo_config.steps_per_generation",
                          fix=f"set steps_per_generation to a multiple of {accumulation} (or generation_batch_size "
                              "to a multiple of per_device_train_batch_size x processes x "
                              "gradient_accumulation_steps), or leave both unset; GRPOConfig makes an unset "
                              "steps_per_generation gradient_accumulation_steps when it is built, so pass "
                              "gradient_accumulation_steps to trl.GRPOConfig(...) itself, not set on the config after")
    return per_rollout // accumulation


def _steps(max_steps: int, num_iterations: int, minibatches: int = 1) -> int:
    """polyrl's ``train.steps`` for TRL's ``max_steps``. Why: TRL counts optimizer updates and
    makes ``num_iterations`` x ``minibatches`` of them on each rollout batch; a polyrl step is one
    rollout batch and all its updates. A count that is not whole batches is refused: TRL would
    stop part-way through the last batch's updates, which polyrl does not do."""
    return _in_batches("max_steps", max_steps, num_iterations, minibatches,
                       "TRL would stop part-way through the last batch; a polyrl step is one batch and all its updates")


def _in_batches(name: str, updates: int, num_iterations: int, minibatches: int, why: str) -> int:
    """TRL's ``name`` (a count of optimizer updates) in polyrl steps, each one rollout batch of
    ``num_iterations`` x ``minibatches`` updates; one ConfigError naming the nearest whole counts
    where it is not whole batches (``why``: what TRL would do part-way through one)."""
    per_step = num_iterations * minibatches
    if updates % per_step:
        lower = updates - updates % per_step
        nearest = " or ".join(str(n) for n in sorted({max(lower, per_step), lower + per_step}))
        raise ConfigError(f"TRL's {name} = {updates} optimizer updates is not a whole number of rollout "
                          f"batches of {_per_step_words(num_iterations, minibatches)} updates each ({why})",
                          field=f"grpo_config.{name}",
                          fix=f"set {name} to a multiple of {_per_step_name(minibatches)} ({nearest})")
    return updates // per_step


def _per_step_words(num_iterations: int, minibatches: int) -> str:
    """The updates of one rollout batch, as an error names them."""
    if minibatches == 1:
        return f"num_iterations = {num_iterations}"
    return (f"num_iterations x steps_per_generation / gradient_accumulation_steps = {num_iterations} x {minibatches} "
            f"= {num_iterations * minibatches}")


def _per_step_name(minibatches: int) -> str:
    return "num_iterations" if minibatches == 1 else \
        "num_iterations x steps_per_generation / gradient_accumulation_steps"


#: fields whose None TRL's trainer tests for truth, reading it as False: taken as False.
#: Why: ``shuffle_dataset`` is typed ``bool | None`` and TRL's sampler then keeps the dataset's
#: order, where the loop below left polyrl's default (shuffled) in place
NONE_IS_FALSE = frozenset({"shuffle_dataset", "mask_truncated_completions", "sync_ref_model",
                           "use_bias_correction_kl", "eval_on_start"})
#: fields TRL reads only with the loss of that name (``_as_the_loss_reads_them`` drops them for another)
_LOSS_FIELDS = {"sapo": ("sapo_temperature_pos", "sapo_temperature_neg"),
                "vespo": ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")}
#: read only with ``sync_ref_model``
_SYNC_FIELDS = ("ref_model_sync_steps", "ref_model_mixup_alpha")
#: numeric and choice fields TRL reads wherever they are set, none of whose defaults is None
_VALUED = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "seed",
           "max_steps", "num_train_epochs", "max_completion_length", "temperature", "top_p", "top_k",
           "repetition_penalty", "beta", "epsilon", "num_iterations", "loss_type", "scale_rewards",
           "importance_sampling_level", "multi_objective_aggregation", "top_entropy_quantile", "entropy_coef")


def _refuse_none(trl_config: Any) -> dict[str, Any]:
    """polyrl's values for TRL's ``None`` in fields whose default is no None; ConfigError where
    None is no value polyrl can read as TRL does. Why: ``trl_settings`` reads a None as TRL's
    "off" (``min_p``, ``epsilon_high``), which left polyrl's own default in place: ``max_grad_norm
    = None`` clipped at 1.0 (TRL's training fails on it), ``shuffle_dataset = None`` shuffled (TRL
    keeps the order), and ``beta = None`` or ``max_steps = None`` ended in a TypeError."""
    out: dict[str, Any] = {}
    names = list(_VALUED)
    loss = _plain(getattr(trl_config, "loss_type", None))
    names += _LOSS_FIELDS.get(loss, ())
    if getattr(trl_config, "sync_ref_model", False):
        names += _SYNC_FIELDS
    for name in NONE_IS_FALSE:
        if hasattr(trl_config, name) and getattr(trl_config, name) is None:
            out[name] = False
    for name in names:
        if not hasattr(trl_config, name) or getattr(trl_config, name) is not None:
            continue
        if name == "num_train_epochs" and (getattr(trl_config, "max_steps", None) or 0) > 0:
            continue  # max_steps set: transformers never reads num_train_epochs
        declared = {f.name: f.default for f in dataclasses.fields(trl_config)}.get(name, dataclasses.MISSING)
        default = "" if declared is dataclasses.MISSING else f" (TRL's default: {shown(_plain(declared))})"
        raise ConfigError(f"TRL's {name} = None is no value TRL trains with (its training fails on it, or, for a "
                          "sampling setting, falls back to the model's own generation_config), and polyrl would "
                          "train with a value of its own", field=f"grpo_config.{name}",
                          fix=f"set {name} to a value{default}, or leave it out of the GRPOConfig")
    return out


#: TRL's counts of the batch arithmetic: whole numbers of at least 1 (``num_generations``: TRL's own
#: config refuses fewer than 2)
_COUNTS = ("num_iterations", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
           "generation_batch_size")


def _refuse_bad_counts(trl_config: Any) -> None:
    """One ConfigError naming a batch count that is no whole number of at least 1, and a
    ``loss_type`` TRL has not. Why: TRL's config takes ``num_iterations = 0`` or
    ``gradient_accumulation_steps = 0`` (its training then fails), and from_trl ended in a
    ZeroDivisionError; an unknown ``loss_type`` was refused as polyrl's ``algorithm.loss_aggregation``,
    listing polyrl's names (``token_mean``...) where the script writes TRL's."""
    bad = [(name, value) for name in _COUNTS for value in [getattr(trl_config, name, 1)]
           if isinstance(value, bool) or not isinstance(value, int) or value < 1]
    if bad:  # both of generation_batch_size and steps_per_generation: TRL derived one from the other
        said = ", ".join(f"{name} = {shown(value)}" for name, value in bad)
        raise ConfigError(f"TRL's {said}: no count (a whole number of at least 1)", field=f"grpo_config.{bad[0][0]}",
                          fix=f"set {' and '.join(name for name, _ in bad)} to 1 or more, or leave "
                              f"{'it' if len(bad) == 1 else 'them'} out of the GRPOConfig")
    losses = TRL_NAMES["loss_type"].values
    loss = _plain(getattr(trl_config, "loss_type", "dapo"))
    if not isinstance(loss, str) or loss not in losses:
        raise ConfigError(f"TRL's loss_type = {shown(loss)} is not one TRL has (its loss fails on it)",
                          field="grpo_config.loss_type", fix=f"use one of {', '.join(map(repr, losses))}")


def _refuse_stale_batch(trl_config: Any) -> None:
    """One ConfigError when ``generation_batch_size`` is not ``per_device_train_batch_size`` x
    ``world_size`` x ``steps_per_generation``, which ``GRPOConfig.__post_init__`` makes it: one of
    them was set on the config after it was built (``args.per_device_train_batch_size = 8``).
    Why: polyrl read the stale generation batch without a word, while TRL's trainer batches with
    both (its dataloader the new per-device size, its sampler the old generation batch)."""
    per_device, per_rollout = trl_config.per_device_train_batch_size, trl_config.steps_per_generation
    world, generation = processes(trl_config), trl_config.generation_batch_size
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (per_device, per_rollout, generation)):
        return  # a count that is none: _refuse_bad_counts' (or the loss's) to name
    if generation == per_device * world * per_rollout:
        return
    raise ConfigError(
        f"TRL's generation_batch_size = {generation} is not per_device_train_batch_size x world_size x "
        f"steps_per_generation = {per_device} x {world} x {per_rollout}, which GRPOConfig makes it when it is built: "
        "one of them was set on the config afterwards, and TRL's trainer would batch with both (its dataloader "
        "the per-device size set, its sampler the generation batch computed before)",
        field="grpo_config.per_device_train_batch_size",
        fix="pass per_device_train_batch_size, gradient_accumulation_steps, steps_per_generation and "
            "generation_batch_size to trl.GRPOConfig(...) itself, not set on the config after it is built")


def trl_settings(trl_config: Any, agent: bool = False) -> dict[str, Any]:
    """polyrl's ``table.key`` -> value for every field of ``trl_config`` with an equivalent
    (``algorithm.name`` for a loss that is a polyrl preset; ``rewards[].weight`` is TRL's
    ``reward_weights``); ConfigError for a changed field polyrl cannot honour. ``agent``: the
    run has tools, whose ``AGENT_FIELDS`` the caller reads with ``agent_settings``."""
    as_false = _refuse_none(trl_config)
    _refuse_bad_counts(trl_config)
    _refuse_stale_batch(trl_config)
    _refuse_unsupported(trl_config, agent)
    out: dict[str, Any] = {}
    for name, entry in TRL_NAMES.items():
        if entry.key is None or name in COMBINED or not hasattr(trl_config, name):
            continue
        value = trl_value(entry, _plain(as_false.get(name, getattr(trl_config, name))))
        if value is not None:  # TRL's None (min_p, epsilon_high): off, polyrl's default
            out[entry.key] = value
    clip = out.get("optimizer.max_grad_norm")
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip <= 0:
        out["optimizer.max_grad_norm"] = None  # the HF Trainer clips only above 0: 0 turns clipping off
    if out.get("optimizer.schedule", "constant") not in SCHEDULES:
        raise ConfigError(f"TRL's lr_scheduler_type = {shown(out['optimizer.schedule'])} is not a schedule polyrl "
                          "has", field="grpo_config.lr_scheduler_type",
                          fix=f"use one of {', '.join(SCHEDULES)} (or constant_with_warmup)")
    schedule = _plain(trl_config.lr_scheduler_type)
    out["optimizer.betas"] = _betas(trl_config)
    out.update(_min_lr(trl_config, schedule))
    if schedule == "constant":  # transformers' "constant" ignores warmup_steps (only constant_with_warmup warms up)
        out["optimizer.warmup_steps"] = 0
    elif _is_fraction(out.get("optimizer.warmup_steps")) and trl_config.max_steps <= 0:
        # transformers' get_warmup_steps: ceil(max_steps x warmup_steps), max_steps counted from the epochs
        out[WARMUP_FRACTION] = [out.pop("optimizer.warmup_steps"),
                                int(trl_config.num_iterations) * _minibatches(trl_config)]
    elif "optimizer.warmup_steps" in out:
        out["optimizer.warmup_steps"] = _warmup(out["optimizer.warmup_steps"], trl_config.max_steps)
    _refuse_micro_batch_mean(trl_config)
    _refuse_entropy_bonus(trl_config)
    _refuse_entropy_ranking_across_processes(trl_config)
    loss = trl_value(TRL_NAMES["loss_type"], trl_config.loss_type)
    if isinstance(loss, Preset):
        out["algorithm.name"] = loss.name
        _as_the_loss_reads_them(out, trl_config, loss.name)
    else:
        out["algorithm.loss_aggregation"] = loss
    out.update(_generation_kwargs(trl_config))
    out.update(_two_sided_clip(trl_config, out))
    if out.get("algorithm.multi_objective_aggregation") == "normalize_then_sum":
        out.pop("algorithm.scale_rewards", None)  # TRL's GDPO never reads it (its own group and batch scaling)
    minibatches = _minibatches(trl_config)
    if minibatches > 1:
        out["algorithm.minibatches"] = minibatches
    if trl_config.max_steps > 0:
        out["train.steps"] = _steps(trl_config.max_steps, trl_config.num_iterations, minibatches)
    else:
        out["train.epochs"] = _epochs(trl_config.num_train_epochs)
    _refuse_no_length(trl_config.max_completion_length)
    # TRL's generation batch (per_device_train_batch_size x world_size x steps_per_generation, which is
    # gradient_accumulation_steps unless set): the completions of one rollout
    completions = trl_config.generation_batch_size
    if completions % trl_config.num_generations:
        raise ConfigError(f"TRL's generation_batch_size = per_device_train_batch_size x world_size x "
                          f"steps_per_generation = {completions} completions is not a whole number of groups "
                          f"of num_generations = {trl_config.num_generations}",
                          field="grpo_config.per_device_train_batch_size",
                          fix="make it a multiple of num_generations (polyrl counts prompts per step)")
    out["train.prompts_per_step"] = completions // trl_config.num_generations
    _refuse_bad_ref_sync(trl_config)
    out["algorithm.ref_sync_every"] = _ref_sync_every(trl_config, minibatches) if trl_config.sync_ref_model else 0
    if trl_config.sync_ref_model and _never_moves(trl_config.ref_model_mixup_alpha):
        out["algorithm.ref_sync_every"] = 0  # TRL's syncs leave the reference as it is: none is the same run
    elif trl_config.sync_ref_model:
        out["algorithm.ref_sync_alpha"] = trl_config.ref_model_mixup_alpha
    if trl_config.reward_weights is not None:
        weights = _plain_weights(trl_config.reward_weights)
        if not isinstance(weights, (list, tuple)) or not all(
                isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights):
            raise ConfigError(f"TRL's reward_weights = {shown(weights)} is not a list of numbers, one per reward "
                              "function", field="grpo_config.reward_weights",
                              fix="write a list, e.g. reward_weights=[1.0, 0.5], or remove it (weight 1 each)")
        if not all(math.isfinite(w) for w in weights):  # TRL's nansum drops a NaN-weighted reward unsaid
            raise ConfigError(f"TRL's reward_weights = {shown(weights)} holds a weight that is not finite (TRL "
                              "trains as if a NaN-weighted reward were absent, and an infinite one makes the rewards "
                              "inf or NaN)", field="grpo_config.reward_weights",
                              fix="give each reward function a finite weight (0 keeps a reward for logging only)")
        if any(abs(w) > MAX_REWARD_WEIGHT for w in weights):
            raise ConfigError(f"TRL's reward_weights = {shown(weights)} holds a weight past {MAX_REWARD_WEIGHT:g} in "
                              "size, which overflows float64 when it multiplies a score (the rewards inf or NaN)",
                              field="grpo_config.reward_weights",
                              fix=f"give each reward function a weight within ±{MAX_REWARD_WEIGHT:g} (scale its "
                                  "scores instead)")
        out["rewards[].weight"] = list(weights)
    if trl_config.beta > 0:  # read by the KL term only (TRL's default True weights it by the ratio)
        out["algorithm.kl_bias_correction"] = bool(trl_config.use_bias_correction_kl)
    out.update(eval_settings(trl_config))
    out.update(save_settings(trl_config))
    out.update(tracker_settings(trl_config))
    out.update(timeout_settings(trl_config))
    return out


def _epochs(epochs: Any) -> float:
    """polyrl's ``train.epochs`` for TRL's ``num_train_epochs`` (read where ``max_steps`` is not
    above 0). Why checked here: NaN ended in a ValueError traceback when the steps were counted, and
    0 or fewer trained one step, where transformers' Trainer trains none (``ceil(epochs x ...)``)."""
    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Real) or not (fits_float(epochs) and float(epochs) > 0):
        raise ConfigError(f"TRL's num_train_epochs = {shown(epochs)} (read where max_steps is not above 0) is no "
                          "number of epochs polyrl trains (transformers' Trainer trains no step for it, or fails)",
                          field="grpo_config.num_train_epochs",
                          fix="set num_train_epochs above 0 (TRL's default 3.0), or max_steps to a number of "
                              "optimizer updates")
    return float(epochs)


def _refuse_no_length(length: Any) -> None:
    """One ConfigError for a ``max_completion_length`` that is no count of tokens. Why here:
    polyrl's check said "max_new_tokens must be > 0", a name the script never wrote, with no fix."""
    if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 1:
        raise ConfigError(f"TRL's max_completion_length = {shown(length)} is no number of completion tokens",
                          field="grpo_config.max_completion_length",
                          fix="set it to 1 or more (TRL's default 256)")


def _betas(trl_config: Any) -> tuple[float, float]:
    """``optimizer.betas`` for TRL's ``adam_beta1`` and ``adam_beta2``, each a finite number in
    [0, 1) as torch's AdamW requires (TRL's training stops there on another). Why here: polyrl's
    check named ``optimizer.betas[0]``, a key the script never wrote."""
    betas = (trl_config.adam_beta1, trl_config.adam_beta2)
    for name, beta in zip(("adam_beta1", "adam_beta2"), betas):
        if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not (fits_float(beta) and 0 <= float(beta) < 1):
            raise ConfigError(f"TRL's {name} = {shown(beta)} is no AdamW beta (a number in [0, 1); torch's AdamW "
                              "refuses it, and TRL's training stops there)", field=f"grpo_config.{name}",
                              fix=f"set {name} in [0, 1) (TRL's default: {0.9 if name == 'adam_beta1' else 0.999})")
    return float(betas[0]), float(betas[1])


def _refuse_bad_ref_sync(trl_config: Any) -> None:
    """One ConfigError where TRL's ``sync_ref_model = True`` cannot run as TRL runs it: with
    ``beta = 0`` (no reference model; TRL's trainer refuses it), or a ``ref_model_sync_steps`` below 1
    (TRL's callback takes the step modulo it: a ZeroDivisionError, where polyrl's 0 meant "never").
    Why here: polyrl's own check named ``algorithm.ref_sync_every`` and ``beta``, keys the script
    never wrote."""
    if not trl_config.sync_ref_model:
        return
    if not trl_config.beta:
        raise ConfigError("TRL's sync_ref_model = True with beta = 0.0 (TRL's default): no reference model is used, "
                          "so there is nothing to synchronize (TRL's trainer refuses it too)",
                          field="grpo_config.sync_ref_model",
                          fix="set sync_ref_model=False, or beta above 0 (e.g. 0.04) for a KL term")
    steps = trl_config.ref_model_sync_steps
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ConfigError(f"TRL's ref_model_sync_steps = {shown(steps)} is no number of steps between reference "
                          "syncs (TRL's sync callback divides by it)", field="grpo_config.ref_model_sync_steps",
                          fix="set it to 1 or more (TRL's default 512), or sync_ref_model=False")


def _never_moves(alpha: Any) -> bool:
    """Whether TRL's ``ref_model_mixup_alpha`` is 0, said in a warning: TRL's ``SyncRefModelCallback``
    then mixes ``1 x reference + 0 x policy``, the reference never moving, and trains; polyrl's
    ``ref_sync_alpha`` refuses 0 (a refresh that changes nothing), so the TRL script ran on TRL
    alone. A value outside [0, 1] (or no number) is a ``ConfigError`` naming the field. Why not
    accepted as TRL accepts it: TRL extrapolates the reference past the policy (above 1) or away
    from it (below 0) without a word, which TR-DPO never describes; a typo (6 for 0.6) is far
    likelier than that wish."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (fits_float(alpha)
                                                                              and 0 <= float(alpha) <= 1):
        raise ConfigError(f"TRL's ref_model_mixup_alpha = {shown(alpha)} is no share of the policy in [0, 1] to mix "
                          "into the reference (TRL would extrapolate the reference past the policy, or away from "
                          "it, without a word)", field="grpo_config.ref_model_mixup_alpha",
                          fix="set ref_model_mixup_alpha in [0, 1] (TRL's default 0.6; 1.0 copies the policy), or "
                              "sync_ref_model=False")
    if alpha != 0:
        return False
    from polyrl.logs import get_logger

    get_logger("polyrl.trl").warning(
        "TRL's ref_model_mixup_alpha = 0 with sync_ref_model = True: each sync mixes none of the policy into the "
        "reference, so the reference model never moves (as on TRL); polyrl skips the syncs. Fix: set "
        "ref_model_mixup_alpha in (0, 1] (TRL's default 0.6) for a reference that follows the policy, or "
        "sync_ref_model=False")
    return True


def _ref_sync_every(trl_config: Any, minibatches: int) -> int:
    """polyrl's ``algorithm.ref_sync_every`` (rollout batches) for TRL's ``ref_model_sync_steps``
    (optimizer updates: TRL's callback syncs when ``global_step``, which counts updates, is a
    multiple of it). Why: taken as polyrl steps it synced ``num_iterations`` x ``minibatches`` times
    less often than TRL. A count that is not whole batches is refused: TRL would sync part-way
    through a batch's updates, with weights polyrl never holds at a step's end."""
    return _in_batches("ref_model_sync_steps", int(trl_config.ref_model_sync_steps), trl_config.num_iterations,
                       minibatches, "TRL would sync the reference part-way through a batch; polyrl syncs between "
                       "steps, a step being one batch and all its updates")


def timeout_settings(trl_config: Any) -> dict[str, Any]:
    """``train.collective_timeout_s`` for TRL's ``ddp_timeout`` (its default 1800 included). Why:
    transformers makes it the timeout of the process group its ranks wait in for each other, which
    is polyrl's collective timeout under ``polyrl launch``; one process waits for nobody in either."""
    timeout = getattr(trl_config, "ddp_timeout", None)
    if timeout is None:
        return {}
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"TRL's ddp_timeout = {shown(timeout)} is no number of seconds",
                          field="grpo_config.ddp_timeout", fix="set it to seconds above 0 (TRL's default 1800)")
    return {"train.collective_timeout_s": float(timeout)}


#: transformers' ``TrainingArguments.project`` default (read by its trackio integration only)
_HF_PROJECT = "huggingface"


def tracker_settings(trl_config: Any) -> dict[str, Any]:
    """polyrl's ``[logging]`` for TRL's ``report_to`` (and ``run_name``, ``project`` where set):
    the trackers each step's metrics, and the script's own ``trainer.log`` calls during training,
    go to. Why: transformers sends every log to each integration ``report_to`` names (its ``"all"``
    already expanded to the installed ones, ``"none"`` to none); dropping the field trained a
    ``report_to="wandb"`` script without a word in W&B. polyrl's trackers go by the same names
    (tensorboard, wandb, mlflow, trackio); another name is refused when the run is built
    (``tracking.session.resolve_specs``, naming the trackers installed)."""
    given = trl_config.report_to
    names = [] if given in (None, "none") else [given] if isinstance(given, str) else list(given)
    named = [name for name in names if isinstance(name, str) and name]
    if len(named) != len(names):  # TRL's report_to=None: TrainingArguments made it [None]
        raise ConfigError(f"TRL's report_to = {shown(given)} names no tracker; transformers' Trainer refuses it "
                          "(its TrainingArguments keeps report_to=None as an integration named None, which it "
                          "does not support: None is not its 'none')", field="grpo_config.report_to",
                          fix='set report_to="none" for no trackers, or name them, e.g. report_to="tensorboard"')
    names = [name for name in named if name != "none"]
    if not names:
        return {}
    out: dict[str, Any] = {"logging.report_to": names}
    if getattr(trl_config, "run_name", None) is not None:
        out["logging.run_name"] = str(trl_config.run_name)
    project = getattr(trl_config, "project", _HF_PROJECT)
    if project != _HF_PROJECT:
        out["logging.project"] = str(project)
    return out


def save_settings(trl_config: Any) -> dict[str, Any]:
    """polyrl's checkpoints for TRL's ``save_strategy``, ``save_steps`` and ``save_total_limit``,
    as transformers' Trainer writes and prunes them. Why: these were ignored, and a TRL config
    checkpointed at the end only (a crash lost the run) and kept polyrl's 2. "steps" (transformers'
    default): ``train.checkpoint_every`` from ``save_steps`` (``_save_every``); "epoch": each
    epoch's end (``SAVE_EVERY_EPOCH``, TRL's epoch of whole batches); "best": the step whose
    evaluation beats ``state.best_metric`` (asked by ``polyrl.trl_callbacks``, which needs
    ``metric_for_best_model``, as transformers does); "no": none during training. polyrl writes its
    last step's checkpoint and model/ at the end whatever the strategy (its ``save_model``,
    ``evaluate()`` and a resume read them). ``save_total_limit`` is ``train.keep_checkpoints``
    (None or below 1: 0, every checkpoint kept); the newest and the best one
    (``best_model_checkpoint``) are never pruned, counted among the kept, as in transformers'
    ``rotate_checkpoints``."""
    out: dict[str, Any] = {"train.keep_checkpoints": _keep_checkpoints(getattr(trl_config, "save_total_limit", None))}
    strategy = _plain(trl_config.save_strategy)
    if strategy == "steps" and _is_fraction(trl_config.save_steps) and trl_config.max_steps <= 0:
        # transformers' compute_steps: ceil(max_steps x save_steps), max_steps counted from the epochs
        out[SAVE_FRACTION] = [trl_config.save_steps, int(trl_config.num_iterations), _minibatches(trl_config)]
    elif strategy == "steps":
        every = _save_every(trl_config)
        if isinstance(every, tuple):  # rounded in a run of epochs: warned once its length is known
            every, out[ROUNDED_SAVE] = every
        out["train.checkpoint_every"] = every
    elif strategy == "epoch":
        out[SAVE_EVERY_EPOCH] = True
    elif strategy == "best" and getattr(trl_config, "metric_for_best_model", None) is not None:
        out[SAVE_ON_BEST] = True
    elif strategy == "best":
        raise ConfigError("TRL's save_strategy = 'best' saves when the evaluation beats the best metric, and no "
                          "metric_for_best_model names it (transformers' Trainer refuses it too)",
                          field="grpo_config.metric_for_best_model",
                          fix='set metric_for_best_model (e.g. "reward") with an eval_strategy, or another '
                              'save_strategy ("steps")')
    elif strategy != "no":
        raise ConfigError(f"TRL's save_strategy = {shown(strategy)} is not one transformers has",
                          field="grpo_config.save_strategy", fix='use "steps", "epoch", "best" or "no"')
    best = _best_kept(trl_config, strategy, out["train.keep_checkpoints"])
    if best is not None:
        out[BEST_KEPT] = best
    return out


def _best_kept(trl_config: Any, strategy: str, keep: int) -> str | None:
    """The field (``BEST_KEPT``) whose meaning needs the best metric kept during the run, or None:
    ``load_best_model_at_end``, or ``metric_for_best_model`` in a run that evaluates and prunes
    checkpoints (transformers' ``rotate_checkpoints`` keeps ``best_model_checkpoint``). Why: on
    ``polyrl.api.run``, which keeps no best metric, the first trained on and exported the last
    step's model, and the second pruned the best checkpoint, both without a word."""
    if getattr(trl_config, "load_best_model_at_end", False):
        return "load_best_model_at_end"
    evaluates = _plain(getattr(trl_config, "eval_strategy", "no")) != "no"
    if getattr(trl_config, "metric_for_best_model", None) is not None and keep > 0 and evaluates \
            and strategy in ("steps", "epoch"):
        return "metric_for_best_model"
    return None


def _keep_checkpoints(limit: Any) -> int:
    """``train.keep_checkpoints`` for TRL's ``save_total_limit``: transformers keeps every
    checkpoint for None and any count below 1 (polyrl's 0)."""
    if limit is None:
        return 0
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ConfigError(f"TRL's save_total_limit = {shown(limit)} is no number of checkpoints",
                          field="grpo_config.save_total_limit",
                          fix="set it to how many checkpoints to keep (e.g. 2), or None to keep them all")
    return max(limit, 0)


def _save_every(trl_config: Any) -> int | tuple[int, list[int]]:
    """``train.checkpoint_every`` (steps) for TRL's ``save_steps`` (optimizer updates, a fraction
    below 1 of ``max_steps``), as ``_eval_every`` reads ``eval_steps``. transformers' default 500,
    left as it is and not a whole number of polyrl steps (``num_iterations`` x minibatches updates
    each), is rounded up to the next whole step with one warning rather than refused: the user
    asked for no count (or one that happens to be transformers' default), and TRL would save
    part-way through a rollout batch; the warning (``rounded_save_warning``) only where the run is
    longer than ``save_steps`` (shorter, transformers saves at its end only, as polyrl), decided by
    ``polyrl.api.run_config`` (``ROUNDED_SAVE``) for a run of epochs. 0 is 0 (the end
    only): transformers' ``DefaultFlowCallback`` saves every ``save_steps`` only when it is above 0,
    and at ``max_steps`` whatever it is (it was refused as no count of updates)."""
    updates, minibatches = trl_config.save_steps, _minibatches(trl_config)
    if isinstance(updates, (int, float)) and not isinstance(updates, bool) and updates == 0:
        return 0
    per_step = int(trl_config.num_iterations) * minibatches
    if updates == HF_SAVE_STEPS and updates % per_step:
        every = math.ceil(updates / per_step)
        if trl_config.max_steps <= 0:  # num_train_epochs: the run's length is known with the prompts
            return every, [per_step, minibatches]
        rounded_save_warning(trl_config.max_steps, per_step, minibatches)
        return every
    return _eval_every(updates, trl_config.max_steps, trl_config.num_iterations, minibatches, "save_steps")


def _is_fraction(steps: Any) -> bool:
    """Whether TRL's ``save_steps`` (or ``eval_steps``) is a fraction of the run's updates (0 < x < 1)."""
    return isinstance(steps, (int, float)) and not isinstance(steps, bool) and 0 < steps < 1


def resolve_fractions(settings: dict[str, Any], steps: int) -> None:
    """``settings`` with the requests for TRL's fractions of a ``num_train_epochs`` run's updates
    (``SAVE_FRACTION``, ``EVAL_FRACTION``, ``WARMUP_FRACTION``) turned into polyrl's values, now
    that the run is known to take ``steps`` polyrl steps. Why: transformers computes ``max_steps``
    from the epochs, then reads each fraction of it (``compute_steps``, ``get_warmup_steps``); from_trl
    refused them without a ``max_steps``."""
    for key, target, name in ((SAVE_FRACTION, "train.checkpoint_every", "save_steps"),
                              (EVAL_FRACTION, "eval.every", "eval_steps")):
        request = settings.pop(key, None)
        if request is not None:
            settings[target] = fraction_every(request, steps, name)
    warmup = settings.pop(WARMUP_FRACTION, None)
    if warmup is not None:
        settings["optimizer.warmup_steps"] = _warmup(warmup[0], steps * warmup[1])


def fraction_every(request: list[Any], steps: int, name: str = "save_steps") -> int:
    """polyrl's steps between checkpoints for a ``SAVE_FRACTION`` request in a run of ``steps``
    polyrl steps: ``ceil(max_steps x save_steps)`` updates as transformers' ``compute_steps``
    counts them, ``max_steps`` being the updates its Trainer computed from ``num_train_epochs``
    (``steps`` x updates per step, ``polyrl.api.epoch_steps``); refused where that is not whole
    steps, as ``_eval_every`` refuses it with ``max_steps``."""
    fraction, num_iterations, minibatches = request
    return _eval_every(fraction, steps * num_iterations * minibatches, num_iterations, minibatches, name)


def rounded_save_warning(total_updates: int, per_step: int, minibatches: int) -> None:
    """The warning that TRL's ``save_steps`` = ``HF_SAVE_STEPS`` (not whole polyrl steps of
    ``per_step`` updates) is rounded up, in a run of ``total_updates``; none where the run is not
    longer than it: transformers saves there at the end only, as polyrl does. Why not "its
    default": the value may have been set, and is read alike."""
    if total_updates <= HF_SAVE_STEPS:
        return
    from polyrl.logs import get_logger

    every = math.ceil(HF_SAVE_STEPS / per_step)
    get_logger("polyrl.trl").warning(
        f"TRL's save_steps = {HF_SAVE_STEPS} (transformers' default value, rounded rather than refused) is not a "
        f"whole number of polyrl steps of {per_step} optimizer updates each; polyrl checkpoints every {every} steps "
        f"({every * per_step} updates), where transformers' Trainer would every {HF_SAVE_STEPS}",
        fix=f"set save_steps to a multiple of {_per_step_name(minibatches)} ({per_step}) to silence this")


def _plain_weights(weights: Any) -> Any:
    """TRL's ``reward_weights`` with what ``torch.tensor(reward_weights)`` reads as numbers made
    Python floats: a 1-d numpy array or tensor (its ``tolist()``) and numpy's scalars
    (``np.float32(0.5)``, registered as ``numbers.Real``). Why: weights computed with numpy train
    under TRL, and polyrl refused them as "not a list of numbers". Anything else is returned as it
    is, for the checks to name (a bool stays a bool: refused, though ``torch.tensor`` reads True as 1)."""
    if callable(getattr(weights, "tolist", None)) and getattr(weights, "ndim", None) == 1:
        weights = weights.tolist()
    if not isinstance(weights, (list, tuple)):
        return weights
    return [float(w) if isinstance(w, numbers.Real) and not isinstance(w, (int, float)) else w for w in weights]


def eval_settings(trl_config: Any) -> dict[str, Any]:
    """polyrl's ``[eval]`` for TRL's evaluation during training. Why these values: TRL's eval mode
    samples ``num_generations_eval`` (else ``num_generations``) completions per eval prompt with the
    training sampling, scores them with every reward function and ``reward_weights``, and runs no
    greedy pass: ``eval.samples``, ``reward = "run"``, ``greedy = false``; its ``prediction_step``
    computes the loss on them (``eval_loss_settings``). It evaluates every
    ``eval_steps`` optimizer updates (``logging_steps`` when unset, a fraction below 1 of
    ``max_steps``) or at each epoch's end, at the end of training, and before it with
    ``eval_on_start``."""
    strategy = _plain(trl_config.eval_strategy)
    on_start = bool(trl_config.eval_on_start)
    if strategy == "no":
        if on_start:
            raise ConfigError("TRL's eval_on_start = True with eval_strategy = 'no' evaluates once, before training; "
                              "polyrl evaluates after training too whenever it evaluates",
                              field="grpo_config.eval_on_start",
                              fix='set eval_strategy="steps" (an evaluation every eval_steps and at the end), or '
                                  "remove eval_on_start")
        return {}
    refuse_inputs_for_metrics(trl_config)
    out: dict[str, Any] = {"eval.reward": RUN_REWARDS, "eval.greedy": False, "eval.before": on_start,
                           "eval.samples": int(trl_config.num_generations_eval or trl_config.num_generations),
                           **eval_loss_settings(trl_config)}
    if strategy == "epoch":
        out[EVERY_EPOCH] = True
    elif _is_fraction(trl_config.eval_steps) and trl_config.max_steps <= 0:  # as save_steps (``save_settings``)
        out[EVAL_FRACTION] = [trl_config.eval_steps, int(trl_config.num_iterations), _minibatches(trl_config)]
    else:
        out["eval.every"] = _eval_every(trl_config.eval_steps, trl_config.max_steps, trl_config.num_iterations,
                                        _minibatches(trl_config))
    return out


def refuse_inputs_for_metrics(trl_config: Any) -> None:
    """TRL's evaluation fails with ``include_for_metrics`` holding ``"inputs"``: transformers'
    evaluation loop reads ``inputs["input_ids"]`` of each batch, and GRPOTrainer's batches are lists
    of rows (its identity collator), a TypeError after the first eval batch. Why refused, not
    taken: polyrl evaluated and reported numbers where TRL's script stops; training alone (no
    evaluation) is unaffected in both."""
    include = getattr(trl_config, "include_for_metrics", None) or []
    if "inputs" in include:
        raise ConfigError("TRL's include_for_metrics holds 'inputs', with which TRL's evaluation fails (transformers' "
                          "evaluation loop reads batch['input_ids'], and GRPOTrainer's batches are lists of rows: a "
                          "TypeError)", field="grpo_config.include_for_metrics",
                          fix='remove "inputs" from include_for_metrics (GRPOTrainer takes no compute_metrics to read '
                              'them), or evaluate nothing (eval_strategy="no")')


def eval_loss_settings(trl_config: Any) -> dict[str, Any]:
    """``eval.loss`` (TRL's ``prediction_step`` loss) on batches of ``per_device_eval_batch_size``
    completions per process, as TRL's evaluation loop computes and averages it."""
    per_device = int(getattr(trl_config, "per_device_eval_batch_size", 8) or 8)
    return {"eval.loss": True, "eval.loss_batch": per_device * int(getattr(trl_config, "world_size", 1) or 1)}


def _eval_every(eval_steps: Any, max_steps: int, num_iterations: int, minibatches: int = 1,
                name: str = "eval_steps") -> int:
    """polyrl's ``eval.every`` (steps) for TRL's ``eval_steps`` (optimizer updates; below 1 a
    fraction of ``max_steps``, rounded up, as transformers' ``TrainerState.compute_steps``); for
    ``name`` "save_steps", ``train.checkpoint_every`` alike."""
    updates = eval_steps
    if isinstance(updates, bool) or not isinstance(updates, (int, float)) or not updates > 0:
        # transformers puts logging_steps in for None and 0 only: a negative count was called "a
        # fraction of the run's optimizer updates", or with max_steps became eval.every = -20
        raise ConfigError(f"TRL's {name} = {shown(eval_steps)} is no number of optimizer updates",
                          field=f"grpo_config.{name}",
                          fix=f"set {name} to a count of updates (1 or more) or a fraction of max_steps "
                              "between 0 and 1")
    if updates < 1:
        if max_steps <= 0:
            raise ConfigError(f"TRL's {name} = {shown(eval_steps)} is a fraction of the run's optimizer updates, "
                              "which from_trl knows only from max_steps", field=f"grpo_config.{name}",
                              fix=f"set max_steps, or {name} to a number of updates (1 or more)")
        updates = math.ceil(max_steps * updates)
    updates, per_step = int(updates), num_iterations * minibatches
    verb = "evaluate" if name == "eval_steps" else "checkpoint"
    if updates % per_step:
        raise ConfigError(f"TRL's {name} = {shown(eval_steps)} is {updates} optimizer updates, not a whole number "
                          f"of rollout batches of {_per_step_words(num_iterations, minibatches)} updates each (TRL "
                          f"would {verb} part-way through a batch; polyrl {verb}s after whole steps)",
                          field=f"grpo_config.{name}",
                          fix=f"set {name} to a multiple of {_per_step_name(minibatches)} ({per_step})")
    return updates // per_step


#: polyrl's most assistant turns per episode (``environment.max_turns``' range)
MAX_TURNS = 1024


def agent_settings(trl_config: Any) -> dict[str, int]:
    """``[environment]``'s ``max_turns`` and ``max_episode_tokens`` for TRL's tool-calling loop.

    TRL's ``max_tool_calling_iterations`` N counts the tool rounds after the first answer: N + 1
    assistant turns, the last one's calls not run, as polyrl's last turn's; TRL's None (no limit)
    is polyrl's most turns, ``MAX_TURNS``. TRL's ``max_completion_length`` bounds the whole
    completion, tool results included (it drops a tool result that would pass it and cuts the next
    turn to what is left), which is ``max_episode_tokens``; each turn still samples at most
    ``max_completion_length`` (``generation.max_new_tokens``)."""
    rounds = getattr(trl_config, "max_tool_calling_iterations", None)
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or not
                               0 <= rounds < MAX_TURNS):
        raise ConfigError(f"TRL's max_tool_calling_iterations = {shown(rounds)} is not a number of tool rounds polyrl "
                          f"can run (0 to {MAX_TURNS - 1}: polyrl's environment.max_turns is that + 1, at most "
                          f"{MAX_TURNS})", field="grpo_config.max_tool_calling_iterations",
                          fix=f"set it to a whole number from 0 to {MAX_TURNS - 1}, or None for no limit")
    turns = MAX_TURNS if rounds is None else trl_value(TOML_HINTS["max_tool_calling_iterations"], rounds)
    return {"max_turns": turns,
            "max_episode_tokens": int(trl_config.max_completion_length)}


def compute_dtype(bf16: bool, backend: str) -> str | None:
    """polyrl's ``model.compute_dtype`` for TRL's ``bf16`` (``GRPOConfig``'s default: True unless
    ``fp16``) on ``backend``. transformers hands it to accelerate, whose autocast runs the model's
    forward passes (training and sampling) in bfloat16 over its own-dtype weights, on the CPU
    (``use_cpu=True``) and on a GPU alike; polyrl's ``compute_dtype = "bfloat16"`` does the same on a
    backend that offers it (torch). Why: an unchanged TRL config trained in float32 here, another
    precision than under TRL. A backend without it (MLX) computes in the model's dtype, with one
    warning, rather than refusing TRL's default. The one reading of ``bf16`` for every path a TRL
    config takes (``polyrl.trl.GRPOTrainer``, ``GRPOConfig.from_trl``, ``polyrl.api.run``)."""
    from polyrl.errors import BackendUnavailable
    from polyrl.logs import get_logger
    from polyrl.registry import get_registry

    if not bf16:
        return None
    try:
        offered = get_registry().spec(backend).capabilities.compute_dtypes
    except BackendUnavailable:  # an unknown backend: its own error comes when the run is built
        return None
    if "bfloat16" in offered:
        return "bfloat16"
    get_logger("polyrl.trl").warning(
        f"TRL's bf16 (its default) autocasts the model in bfloat16; the {backend} backend offers no bfloat16 "
        "compute, so it computes in the model's dtype",
        fix='set bf16=False to silence this, or model_init_kwargs={"dtype": "bfloat16"} for bfloat16 weights')
    return None


#: config.json dropout keys a causal LM never runs (a classifier's, a sequence summary head's)
_UNUSED_DROPOUT = ("classifier_", "summary_")


def model_dropout(config: Any, prefix: str = "") -> dict[str, float]:
    """The dropout rates above 0 that a model's ``config.json`` (a dict) sets: keys naming
    ``dropout`` or ``pdrop`` (GPT-2's), sub-configs included, those a causal LM never runs left out."""
    rates: dict[str, float] = {}
    if not isinstance(config, dict):
        return rates
    for key, value in config.items():
        if isinstance(value, dict):
            rates.update(model_dropout(value, f"{prefix}{key}."))
        elif (("dropout" in key or "pdrop" in key) and not key.startswith(_UNUSED_DROPOUT)
              and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
            rates[f"{prefix}{key}"] = float(value)
    return rates


def refuse_dropout_difference(disable_dropout: bool, model_config: dict[str, Any] | None, lora_dropout: float) -> None:
    """One ConfigError where TRL's ``disable_dropout`` trains with other dropout than polyrl. Why:
    polyrl always zeroes the model's own dropout (its training log-probs would otherwise be another
    policy's than the sampler's) and keeps the LoRA adapters' ``dropout``; TRL's default False keeps
    the model's dropout on, and its True also zeroes the adapters' (it runs after ``get_peft_model``).
    Where neither has any, the two are the same and nothing is refused. ``model_config``: the policy's
    ``config.json`` (None: not readable here, a polyrl model name)."""
    if disable_dropout:
        if lora_dropout > 0:
            raise ConfigError(f"TRL's disable_dropout = True also turns the LoRA adapters' dropout off (TRL applies it "
                              f"after get_peft_model); polyrl would train with peft_config's lora_dropout = "
                              f"{shown(lora_dropout)}", field="grpo_config.disable_dropout",
                              fix="set lora_dropout=0.0 in the peft_config (what TRL trains with here), or "
                                  "disable_dropout=False")
        return
    rates = model_dropout(model_config) if model_config is not None else {}
    if rates:
        listed = ", ".join(f"{key} = {shown(value)}" for key, value in sorted(rates.items()))
        raise ConfigError(f"TRL's disable_dropout = False (its default) trains with the model's dropout on ({listed}); "
                          "polyrl always turns the model's dropout off (with it on, the trained log-probs are another "
                          "policy's than the sampler's)", field="grpo_config.disable_dropout",
                          fix="set disable_dropout=True in the GRPOConfig (what polyrl trains), or train this run with TRL")
