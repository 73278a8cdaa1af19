"""TRL's ``GRPOConfig`` names and where each lives in polyrl (README: "Coming from TRL").

Why: a TRL user writes ``num_generations = 8`` or ``loss_type = "dapo"`` into polyrl's TOML; a
generic "unknown key" error would leave them to find the translation. This one table turns such
a key, in whatever section it was written, into the fix naming polyrl's ``table.key`` (and the
value to write where TRL's values differ).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from polyrl.validators import shown


@attrs.frozen
class Preset:
    """A TRL value that is a polyrl ``algorithm.name`` preset rather than a value of the key."""

    name: str


@attrs.frozen
class TrlName:
    """Where one ``GRPOConfig`` field lives in polyrl: ``key`` (``table.key``, None: no
    equivalent), ``values`` (TRL value -> polyrl value of ``key``, or a ``Preset``, where they
    differ), ``offset`` (added to an integer TRL value: the two count differently) and ``note``.
    ``GRPOConfig.from_trl`` converts with the same entries."""

    key: str | None
    values: dict[Any, Any] = attrs.field(factory=dict)
    note: str = ""  # may name the user's value as {value}
    offset: int = 0


_SAME = {
    "generation": ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"),
    "algorithm": ("beta", "epsilon", "epsilon_high", "scale_rewards", "num_iterations", "importance_sampling_level",
                  "mask_truncated_completions", "top_entropy_quantile", "entropy_coef", "sapo_temperature_pos",
                  "sapo_temperature_neg", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg",
                  "off_policy_mask_threshold", "router_aux_loss_coef"),
    "optimizer": ("weight_decay", "max_grad_norm"),
}

#: The README's GRPOConfig -> polyrl table (tests/test_trl_names.py keeps the two in step).
TRL_NAMES: dict[str, TrlName] = {
    **{name: TrlName(f"{table}.{name}") for table, names in _SAME.items() for name in names},
    "scale_rewards": TrlName("algorithm.scale_rewards", values={True: "group", False: "none"}),
    "num_generations": TrlName("generation.group_size"),
    "max_completion_length": TrlName("generation.max_new_tokens"),
    "loss_type": TrlName("algorithm.loss_aggregation", values={
        "dapo": "token_mean", "bnpo": "token_mean", "grpo": "seq_mean_token_mean",
        "dr_grpo": "seq_mean_token_sum_norm", **{name: Preset(name) for name in ("cispo", "sapo", "luspo", "vespo")},
    }, note='"dapo" = "token_mean" ("bnpo" too, with one micro-batch per update), "grpo" = "seq_mean_token_mean", '
            '"dr_grpo" = "seq_mean_token_sum_norm"; "cispo", "sapo", "luspo", "vespo" are algorithm.name presets'),
    "sync_ref_model": TrlName("algorithm.ref_sync_every", note="set ref_sync_every to TRL's ref_model_sync_steps "
                                                                "(e.g. 512); 0 never refreshes the reference"),
    "ref_model_sync_steps": TrlName("algorithm.ref_sync_every"),
    "ref_model_mixup_alpha": TrlName("algorithm.ref_sync_alpha"),
    "learning_rate": TrlName("optimizer.lr"),
    "adam_beta1": TrlName("optimizer.betas", note="write betas = [{value}, adam_beta2] in [optimizer] (TRL's "
                                                  "adam_beta1 is the first of AdamW's betas)"),
    "adam_beta2": TrlName("optimizer.betas", note="write betas = [adam_beta1, {value}] in [optimizer] (TRL's "
                                                  "adam_beta2 is the second of AdamW's betas)"),
    "adam_epsilon": TrlName("optimizer.eps"),
    "lr_scheduler_type": TrlName("optimizer.schedule", values={"constant_with_warmup": "constant",
                                                               "cosine_with_min_lr": "cosine"}),
    "warmup_steps": TrlName("optimizer.warmup_steps"),
    "lr_scheduler_kwargs": TrlName("optimizer.min_lr_ratio", note="TRL's {{\"min_lr_rate\": r}} (cosine_with_min_lr) is "
                                                              "min_lr_ratio = r in [optimizer]"),
    "max_steps": TrlName("train.steps", note="TRL counts optimizer updates, polyrl rollout batches of "
                                             "algorithm.num_iterations x minibatches updates each: write steps = "
                                             "{value} / num_iterations in [train] (/ minibatches too)"),
    "num_train_epochs": TrlName("train.steps", note="polyrl counts steps: write steps = {value} x the whole batches "
                                                    "(prompts // prompts_per_step) in [train]"),
    "seed": TrlName("train.seed"),
    "shuffle_dataset": TrlName("data.shuffle"),
    "chat_template_kwargs": TrlName("model.chat_template_kwargs"),
    "output_dir": TrlName("train.output_dir"),
    "per_device_train_batch_size": TrlName("train.prompts_per_step", note="TRL counts completions per process, "
                                                                          "polyrl prompts per step: write "
                                                                          "prompts_per_step = {value} x the processes "
                                                                          "x gradient_accumulation_steps / "
                                                                          "generation.group_size in [train]"),
    "reward_weights": TrlName("rewards[].weight", note="write weight = ... in each [[rewards]] table"),
    "steps_per_generation": TrlName("algorithm.minibatches", note="TRL makes one update per "
                                                                  "gradient_accumulation_steps of its slices: write "
                                                                  "minibatches = {value} / gradient_accumulation_steps "
                                                                  "in [algorithm]"),
    "generation_batch_size": TrlName("train.prompts_per_step", note="TRL counts the completions of one rollout, "
                                                                    "polyrl its prompts: write prompts_per_step = "
                                                                    "{value} / generation.group_size in [train], and "
                                                                    "algorithm.minibatches = steps_per_generation / "
                                                                    "gradient_accumulation_steps"),
    "multi_objective_aggregation": TrlName("algorithm.multi_objective_aggregation",
                                           note='"normalize_then_sum" is GDPO: each reward normalized in its '
                                                "group, the weighted sum over the batch"),
    "use_bias_correction_kl": TrlName("algorithm.kl_bias_correction"),
    "delta": TrlName("algorithm.dual_clip", note="TRL's two-sided clip caps the ratio at delta; for delta >= 1 + "
                                                 "epsilon_high that is dual_clip = delta (negative advantages' loss "
                                                 "capped at -A delta)"),
    # TRL's evaluation: sampled completions scored with every reward function and reward_weights
    "eval_strategy": TrlName("eval.every", note='"steps" is every = eval_steps / num_iterations in [eval], with '
                                                'reward = "run", greedy = false, samples = num_generations and '
                                                "count = the eval rows (data.eval_path)"),
    "eval_steps": TrlName("eval.every", note="TRL counts optimizer updates, polyrl steps: write every = {value} / "
                                             "num_iterations in [eval] (/ minibatches too)"),
    "eval_on_start": TrlName("eval.before", note="polyrl evaluates before training unless before = false in [eval]"),
    "num_generations_eval": TrlName("eval.samples", note='write samples = {value} in [eval], with reward = "run" '
                                                         "and greedy = false (TRL's evaluation)"),
    # transformers' checkpoints: from_trl maps them together (trl_config.save_settings)
    "save_strategy": TrlName("train.checkpoint_every", note='"steps" is checkpoint_every = save_steps / '
                                                        'num_iterations in [train]; "no" is 0 (the end only)'),
    "save_steps": TrlName("train.checkpoint_every", note="TRL counts optimizer updates, polyrl steps: write "
                                                         "checkpoint_every = {value} / num_iterations in [train] "
                                                         "(/ minibatches too)"),
    "save_total_limit": TrlName("train.keep_checkpoints", note="TRL's None (keep all) is keep_checkpoints = 0"),
    # transformers' trackers: from_trl maps them together (trl_config.COMBINED; "none" is no tracker)
    "report_to": TrlName("logging.report_to"),
    "run_name": TrlName("logging.run_name"),
    "project": TrlName("logging.project"),
}


#: transformers' fraction of the updates (``warmup_ratio``, a ``warmup_steps`` below 1) as polyrl's count
_WARMUP = ("warmup_steps = ceil({value} x train.steps x algorithm.num_iterations x algorithm.minibatches), a number "
           "of updates, in [optimizer]")

#: How polyrl shards a model, for the notes of TRL's fsdp, fsdp_config and deepspeed.
_FSDP2 = "polyrl shards with FSDP2 under torchrun: `polyrl launch` with [backends.options] fsdp = true in a TOML config"

#: More ``GRPOConfig`` / ``TrainingArguments`` names a TOML writer may bring, for the unknown-key
#: fix only (``from_trl`` ignores the logging ones, ``trl_config.IGNORED``): without
#: them a close polyrl key would be suggested instead (``delta`` -> "did you mean 'beta'?").
#: How polyrl samples, for the notes of TRL fields that pick TRL's sampler (vLLM, continuous batching).
_OWN_GENERATE = ("polyrl samples with its own generate backend (GenerationConfig(backend=...), [backends] generate "
                 "in a TOML config)")

TOML_HINTS: dict[str, TrlName] = {
    "gradient_checkpointing": TrlName("train.gradient_checkpointing"),
    "trust_remote_code": TrlName("model.trust_remote_code"),
    # TRL's N tool rounds follow a first answer: N + 1 assistant turns, the last one's calls not run,
    # as polyrl's last turn's (GRPOTrainer._tool_call_loop)
    "max_tool_calling_iterations": TrlName("environment.max_turns", offset=1, note=(
        "TRL counts the tool rounds after the first answer, polyrl every assistant turn")),
    "logging_steps": TrlName(None, note="polyrl writes every step's metrics to metrics.jsonl"),
    "warmup_ratio": TrlName("optimizer.warmup_steps", note=f"write {_WARMUP.format(value='{value}')}"),
    "max_prompt_length": TrlName(None, note="polyrl never truncates a prompt: model.max_length bounds prompt + "
                                            "completion and a longer prompt is an error; "
                                            "algorithm.max_completion_length is Dr.GRPO's normaliser, not a limit"),
    # TRL uploads every save and the final model; dropping it would end the run without the upload
    "push_to_hub": TrlName(None, note="polyrl uploads nothing to the Hub: upload output_dir after training "
                                      "(huggingface_hub.upload_folder)"),
    "generation_kwargs": TrlName(None, note="polyrl samples with the generation settings it has (temperature, "
                                            "top_p, top_k, min_p, repetition_penalty, max_new_tokens, stop)"),
    "use_vllm": TrlName(None, note=f"{_OWN_GENERATE}, not TRL's vLLM"),
    # TRL 1.16 GRPOTrainer: lm_head (policy and reference) made float32, its input cast up to it
    "cast_lm_head_to_fp32": TrlName(None, note="TRL casts the lm_head of the policy and reference to float32 "
                                               "(ScaleRL), so the logits come from a float32 matmul; polyrl's "
                                               "lm_head runs in the model's compute dtype and only the log-softmax "
                                               "is float32: load the model in float32 for float32 logits"),
    "use_adaptive_entropy": TrlName(None, note="TRL moves entropy_coef each optimizer step toward entropy_target "
                                               "(Skywork-OR1); polyrl's entropy_coef stays as set"),
    "log_completions_hub_repo": TrlName(None, note="TRL pushes its logged completions to this Hub dataset; polyrl "
                                                   "uploads nothing: its completions.jsonl stays in output_dir "
                                                   "(upload it with huggingface_hub)"),
    **{name: TrlName(None, note="TRL samples with transformers' continuous-batching engine instead of generate(); "
                                f"{_OWN_GENERATE}")
       for name in ("use_transformers_continuous_batching", "use_transformers_paged",
                    "transformers_continuous_batching_config")},
    # transformers' TrainingArguments fields TRL scripts set, each with what it does there
    "fp16": TrlName(None, note="transformers trains with float16 autocast and a gradient scaler; polyrl's mixed "
                               "precision is bfloat16 (bf16=True) and scales no loss"),
    "torch_compile": TrlName(None, note="transformers compiles the model with torch.compile; polyrl's torch "
                                        "backend runs it uncompiled"),
    "use_liger_kernel": TrlName(None, note="TRL computes the loss with Liger's fused lm_head-and-loss kernel; "
                                           "polyrl's own output head already holds the logits a chunk at a time "
                                           "(backends.options.logits_memory_mb)"),
    "neftune_noise_alpha": TrlName(None, note="transformers adds NEFTune noise to the input embeddings in training; "
                                              "polyrl adds none"),
    "fsdp": TrlName(None, note=_FSDP2),
    # TRL's True keeps only GRPOTrainer's signature columns (prompt, image, images): no dataset column
    # reaches the reward functions; TRL's default False is what polyrl does
    "remove_unused_columns": TrlName(None, note="polyrl passes every dataset column to the reward functions, as "
                                                "TRL's default remove_unused_columns = False does"),
    # transformers' process group timeout: how long its ranks wait for each other (from_trl carries it)
    "ddp_timeout": TrlName("train.collective_timeout_s"),
    # transformers' distributed and evaluation settings TRL scripts set, each with what it does there
    # from_trl takes these (trl_config.DDP_FIELDS): polyrl trains the same whatever their value
    **{name: TrlName(None, note="transformers passes it to torch's DistributedDataParallel wrapper of a "
                                "multi-process run; polyrl wraps no model in DDP (under `polyrl launch` one "
                                "all-reduce sums every trainable parameter's gradient, no buckets, no buffers "
                                "broadcast): remove it")
       for name in ("ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_static_graph")},
    "ddp_backend": TrlName(None, note="transformers starts the process group of a multi-process run with this "
                                      "torch.distributed backend; `polyrl launch` picks the backend itself (nccl on "
                                      "GPUs, gloo on CPUs): remove it"),
    "fsdp_config": TrlName(None, note=f"transformers' FSDP settings, read with fsdp only; {_FSDP2}"),
    "deepspeed": TrlName(None, note=f"transformers trains under DeepSpeed with this config; {_FSDP2}"),
    "parallelism_config": TrlName(None, note="accelerate's tensor, context and sequence parallelism; polyrl shards "
                                             "with FSDP2 only (`polyrl launch`, [backends.options] fsdp = true)"),
    **{name: TrlName(None, note=f"transformers evaluates with the model cast to {dtype} weights; polyrl "
                                "evaluates with the weights it trains: load the model in that dtype for both")
       for name, dtype in (("bf16_full_eval", "bfloat16"), ("fp16_full_eval", "float16"))},
    "eval_delay": TrlName(None, note="transformers skips the evaluations before this many optimizer updates "
                                     "(epochs with eval_strategy=\"epoch\"); polyrl evaluates every eval.every "
                                     "steps from the first: remove it, or start evaluating later with eval_steps"),
    "ignore_data_skip": TrlName(None, note="transformers' resumed run then starts the epoch's prompts over instead "
                                          "of skipping those it trained on; polyrl's resume continues with the "
                                          "next prompts, as TRL's default False does"),
    "full_determinism": TrlName(None, note="transformers asks torch for deterministic kernels (GPU runs that repeat "
                                           "bit for bit); polyrl's torch backend does it with [backends.options] "
                                           "deterministic = true in a TOML config"),
    "model_init_kwargs": TrlName(None, note="TRL passes them to from_pretrained when it loads a model named by its "
                                            "path; polyrl.trl.GRPOTrainer reads their dtype, polyrl.api loads the "
                                            "model in Agent(dtype=...)"),
    "liger_kernel_config": TrlName(None, note="transformers' Liger kernel settings, read with use_liger_kernel only; "
                                              "polyrl runs no Liger kernels"),
    **{name: TrlName(None, note=f"transformers turns torch_compile on to compile the model with this {what}; "
                                "polyrl's torch backend runs it uncompiled")
       for name, what in (("torch_compile_backend", "torch.compile backend"),
                          ("torch_compile_mode", "torch.compile mode"))},
    **{name: TrlName(None, note=f"transformers' trackio integration {what}; polyrl's trackio store stays local "
                                "(output_dir/trackio: `TRACKIO_DIR=output_dir/trackio trackio show`)")
       for name, what in (("trackio_space_id", "logs to this Hugging Face Space"),
                          ("trackio_bucket_id", "keeps the logs in this Hub bucket"),
                          ("trackio_static_space_id", "freezes the logs into this static Space after training"))},
    **{name: TrlName("algorithm.mismatch_correction", note=(
        'TRL\'s default mode (sequence_mask) is mismatch_correction = "mis" with mismatch_level = "sequence" in '
        '[algorithm], a *_truncate mode is "tis", false is "none" (the default: polyrl samples with the policy it '
        "trains, so only another generator, MAX or a remote server, needs it)"))
       for name in ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode")},
    **{name: TrlName("algorithm.mismatch_cap") for name in ("vllm_importance_sampling_clip_max",
                                                              "vllm_importance_sampling_cap")},
}


#: Names a TRL script's other arguments bring (transformers' ``TrainingArguments`` fields polyrl
#: spells another way, TRL's ``ModelConfig`` and ``ScriptArguments``), for the unknown-key fix
#: only: ``from_trl`` never reads them from here. Why: ``gradient_accumulation_steps`` or
#: ``model_name_or_path`` got the list of the table's keys, ``per_device_eval_batch_size`` a
#: "did you mean" pointing at the training batch.
SCRIPT_HINTS: dict[str, TrlName] = {
    "gradient_accumulation_steps": TrlName("optimizer.micro_batch_size", note=(
        "TRL splits each update into this many micro-batches to save memory; polyrl's update is the whole "
        "step's batch, split by micro_batch_size = sequences per forward/backward in [optimizer] (the loss is "
        "the same)")),
    "bf16": TrlName("model.compute_dtype", note=(
        'transformers\' bf16 = true is mixed precision: write compute_dtype = "bfloat16" in [model] (float32 '
        "weights, bfloat16 matmuls); false is polyrl's default (remove it)")),
    "per_device_eval_batch_size": TrlName("eval.loss_batch", note=(
        "polyrl's evaluation samples with no batch size to set; with loss = true in [eval], write loss_batch = "
        "{value} x the processes in [eval] (completions per eval-loss batch)")),
    "model_name_or_path": TrlName("model.path"),
    "dataset_name": TrlName("data.name"),
    "dataset_config": TrlName("data.config"),
    "dataset_train_split": TrlName("data.split"),
    "dataset_test_split": TrlName("data.eval_split"),
    "lora_r": TrlName("lora.rank"),
    "lora_alpha": TrlName("lora.alpha"),
    "lora_dropout": TrlName("lora.dropout"),
    "lora_target_modules": TrlName("lora.target_modules"),
    "use_peft": TrlName(None, note="a [lora] table turns LoRA on (rank = ..., alpha = ... under it); without "
                                   "one every weight trains"),
}


def entry_of(name: str) -> TrlName | None:
    """Where a TRL name a TOML writer may bring lives in polyrl, from every table here."""
    return TRL_NAMES.get(name) or TOML_HINTS.get(name) or SCRIPT_HINTS.get(name)


def trl_field_of(key: str) -> str | None:
    """The one ``trl.GRPOConfig`` field ``from_trl`` sets polyrl's ``key`` (``table.key``) from,
    None where none or several do (``train.steps``: max_steps or num_train_epochs; ``[eval]``):
    what an error on that key names where a TRL config set it (the script never wrote the key)."""
    if key.startswith("eval."):  # from_trl derives them from several fields (samples: num_generations too)
        return None
    names = [name for name, entry in TRL_NAMES.items() if entry.key == key]
    return names[0] if len(names) == 1 else None


def trl_fix(name: str, value: Any) -> str | None:
    """The fix for the unknown key ``name`` (set to ``value``) when it is a ``GRPOConfig`` name."""
    entry = entry_of(name)
    if entry is None:
        return None
    if entry.key is None:
        return f"remove it: TRL's {name} has no polyrl equivalent ({entry.note})"
    table, _, key = entry.key.rpartition(".")
    head = f"TRL's {name} is polyrl's {entry.key}"
    translated = _assignment(entry, value)
    if translated is not None:
        why = f" ({entry.note.format(value=shown(value))})" if entry.offset and entry.note else ""
        return f"{head}: for {name} = {shown(value)}, {translated}{why}"
    if entry.note:
        return f"{head}: {entry.note.format(value=shown(value))}"
    if table == "rewards[]":
        return head
    return f"{head}: write {key} = {shown(value)} in [{table}]"


def trl_value_fix(field: str, value: Any) -> str | None:
    """The fix when polyrl's ``field`` (``table.key``) holds a TRL value it spells differently
    (``scale_rewards = true``, ``loss_aggregation = "dapo"``, transformers' fractional ``warmup_steps``)."""
    if field == "optimizer.warmup_steps" and isinstance(value, float) and 0 < value < 1:
        return f"transformers reads warmup_steps below 1 as a fraction of the updates: write {_WARMUP.format(value=value)}"
    for name, entry in TRL_NAMES.items():
        if entry.key == field and entry.values:
            translated = _assignment(entry, value)
            if translated is not None:
                return f"this is TRL's {name} = {shown(value)}: {translated}"
    return None


def trl_value(entry: TrlName, value: Any) -> Any:
    """TRL's ``value`` as polyrl's value of ``entry.key`` (a ``Preset`` for a loss that is one)."""
    if entry.offset and isinstance(value, int) and not isinstance(value, bool):
        return value + entry.offset
    try:
        return entry.values.get(value, value)
    except TypeError:  # an unhashable value (a list, a table): nothing to translate
        return value


def _assignment(entry: TrlName, value: Any) -> str | None:
    """What to write for TRL's ``value`` where polyrl spells it differently (None: no translation)."""
    translated = trl_value(entry, value)
    if isinstance(translated, Preset):
        return f'set algorithm.name = "{translated.name}" (a preset) instead'
    if translated is value or entry.key is None:
        return None
    table, _, key = entry.key.rpartition(".")
    return f"write {key} = {toml_literal(translated)} in [{table}]"


def toml_literal(value: Any) -> str:
    """``value`` as TOML writes it (``"group"``, ``true``), for a fix line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else shown(value)
