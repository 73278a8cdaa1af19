"""The config reference, generated from the attrs classes that validate the TOML.

Why generated: the README's "Config reference" must list exactly the keys the parser accepts,
with their real defaults. ``polyrl config-reference`` prints it; a test checks that every field
has a line in :data:`FIELD_DOCS` and that README.md carries the current text.
"""

from __future__ import annotations

from typing import Any

import attrs

from polyrl.config import RunConfig, section_classes

#: One short line per key, by TOML table. A new field without a line here fails the tests.
FIELD_DOCS: dict[str, dict[str, str]] = {
    "model": {
        "path": "local HF folder, a GGUF file, a Hub id found in the local HF cache (`org/name`, never downloaded), or an alias (`smollm2-135m-instruct`, `tiny-llama`); a folder pre-quantized by GPTQ/AWQ/bitsandbytes/fp8 (config.json's `quantization_config`) is refused at startup unless the backends declare its method (MLX: mlx-lm's conversions); on torch, a folder without config.json, a file that is no `.gguf`, a FIFO or a device is refused before any model loads (and by `polyrl launch --dry-run`, which passed them)",
        "dtype": "`float32` (CPU default), `bfloat16`, `float16` (torch and MLX; MAX: float32/bfloat16; on CPU float16 is no faster than bfloat16); a backend that does not run it is refused up front",
        "compute_dtype": "mixed precision: `bfloat16` with dtype `float32` keeps float32 weights and AdamW state and runs the matmuls in bfloat16 (torch autocast; fast where the CPU has AVX512-BF16/AMX); unset = compute in `dtype`; a backend that does not declare it is refused up front",
        "device": "`auto` (the backend's accelerator when this machine has one: CUDA for torch, a GPU for MAX, Metal for MLX; else the CPU), `cpu`, `cuda`, `cuda:1`, `mps`, `gpu` (backend-specific); case and surrounding spaces do not matter (`GPU` is `gpu`); a name a backend of the run does not read (`abc`, `gpu` with torch) is refused when the config loads for polyrl's own backends, and before any engine loads for a plugin's that declares its names (`Capabilities.device_names`; one that declares none gets the name unchecked, its engine decides)",
        "max_length": "longest prompt + completion in tokens; longer prompts are an error",
        "reference_path": "KL reference model when it is not the initial policy; each checkpoint hard-links a local folder (no space spent), so a resume after it was deleted reads the link; where it cannot link (another file system, another user's or immutable files), no copy is kept (a warning says so) and a resume refuses it gone or changed; a pre-quantized folder is refused at startup as `path` is",
        "trust_remote_code": "run a model folder's own Python code (off unless you ask)",
        "chat_template_kwargs": "extra variables for the model's chat template, passed every time it renders the policy's prompts and episode turns (TRL's `chat_template_kwargs`), e.g. `{enable_thinking = false}` for Qwen3 (its generation prompt then writes an empty think block); a table of JSON values keyed by variable names; apply_chat_template's own arguments (`tools`, `add_generation_prompt`...) are refused; a `reward_model` reward's template gets its own `options.chat_template_kwargs` (the Python API from a GRPOConfig passes these to reward-model folders, as TRL does); `polyrl generate --chat-template-kwargs JSON` takes the same table",
    },
    "backends": {
        "train": "backend that runs `train_step` (`torch`, `mlx`, or a third-party name)",
        "generate": "backend for rollouts (default: the train backend), e.g. `mlx`, `max`, `remote`; "
                    "`auto`: the fastest `polyrl bench` measured for this model on this machine",
        "reference": "backend for reference log-probs (default: the train backend; only with `algorithm.beta` > 0, else refused)",
        "options": "table passed to every engine as `EngineConfig.options` (e.g. `max_model_path`; torch: `fsdp = true` shards training under torchrun, `packed_generation = false` samples with the training weights instead of a packed CPU copy, `lean_decode = false` runs transformers' forward for every decode step of that copy, `decode_kernel = \"auto\"` multiplies that float32 copy with polyrl's own AVX-512 or AVX2 kernel (built with `cc` on first use) on Intel CPUs with AVX-512 and on AMD CPUs with AVX2 but not AVX-512 when one thread decodes, its decode step's norms, rotary embedding, SiLU product and shared-prompt attention in C too (`\"on\"`: any AVX-512 or AVX2 CPU and thread count, `\"off\"`: oneDNN's packed weights and torch ops), `shared_prompt_attention = false` gives every row of a group its own copy of the prompt's keys and values (bit for bit transformers' attention; by default a float32 copy attends one shared copy, equal to rounding), `fixed_shape_decode = \"auto\"` decodes with fixed shapes replayed as one CUDA graph per token on a GPU (`\"on\"`: fixed shapes on any device, `\"off\"`: the row-dropping loop), `deterministic = true` asks torch for deterministic kernels (GPU runs that repeat bit for bit, slower), `retain_freed_memory = false` lets glibc return freed memory to the OS (page faults on every large tensor), `shared_prompt_forward`, `logits_memory_mb`, `score_batch_tokens`, `bucket_call_tokens`, `attn_implementation`, `gguf_file`, `initial_adapter = \"DIR\"` starts the train engine's LoRA adapters from a folder `PeftModel.save_pretrained` wrote, its r, lora_alpha and layers [lora]'s, instead of a fresh init; each checkpoint keeps a copy, which a resume reads once the folder is gone, as it does of `model.reference_path`); a key no backend of the run declares is refused with a did-you-mean, and torch and MAX check each value's type and range when they load",
    },
    "generation": {
        "group_size": "completions per prompt (>= 2; 1 only for `reinforce`: its baseline is the batch mean)",
        "max_new_tokens": "completion length cap",
        "temperature": "sampling temperature (0 = greedy; refused with a group-relative advantage and no environment: every group would be identical)",
        "top_p": "nucleus sampling mass (1 = off)",
        "top_k": "top-k sampling (0 = off)",
        "min_p": "min-p sampling: keep tokens with probability >= min_p x the top one's (0 = off; torch, MLX)",
        "repetition_penalty": "transformers' repetition penalty on prompt + completion tokens (1 = off; torch, MLX)",
        "ignore_eos": "keep sampling past an end-of-sequence token until `max_new_tokens` (vLLM's meaning): "
                      "fixed completion lengths for benchmarks, not for training",
        "stop": "stop strings; the completion ends after the first one",
        "max_model_path": "a different file for the generator (e.g. a GGUF for MAX)",
        "overlap": "sample step k+1 on a worker thread while step k trains (one step of policy lag, "
                   "ratio to the sampler's log-probs; needs a generate backend with "
                   "`concurrent_generate`, one process; give each side its cores with train.threads)",
    },
    "algorithm": {
        "name": "preset: `grpo`, `dapo`, `dr_grpo`, `rloo`, `reinforce`, `gspo`, `cispo`, `sapo`, `vespo`, `luspo`; "
                "other keys override it",
        "advantage": "`group` (GRPO), `rloo` (leave-one-out), `reinforce` (batch baseline)",
        "scale_rewards": "divide by the std of the `group`, the `batch`, or `none` (Dr.GRPO)",
        "multi_objective_aggregation": "several `[[rewards]]`: weighted sum, then the advantage above; "
                                       "`normalize_then_sum` (GDPO, TRL's option) normalizes each reward in its group, "
                                       "sums them with their weights and normalizes the sum over the batch (needs "
                                       "`advantage = \"group\"`; no `scale_rewards`, `overlong_buffer` or `kl_in_reward`; "
                                       "`dynamic_sampling` keeps a group where any weighted reward varies)",
        "epsilon": "lower clip: ratio >= 1 - epsilon (1 or more: no lower clip, as TRL's epsilon=10 in its "
                   "DeepSeek-R1 recipe)",
        "epsilon_high": "upper clip (DAPO clip-higher, e.g. 0.28); unset = epsilon",
        "dual_clip": "dual-clip bound for negative advantages (e.g. 3.0); unset = off",
        "beta": "KL coefficient against the reference (0 = no reference pass)",
        "kl_estimator": "`k1`, `k2` or `k3` (Schulman's estimators)",
        "kl_bias_correction": "the loss's KL term times the importance ratio (TRL's use_bias_correction_kl, "
                              "its default); needs beta > 0",
        "loss_aggregation": "`seq_mean_token_mean` (GRPO), `token_mean` (DAPO), `seq_mean_token_sum_norm` (Dr.GRPO), "
                            "`seq_mean_token_sum` (LUSPO)",
        "num_iterations": "passes over the step's one rollout batch, each `minibatches` optimizer updates (> 1 makes the ratio matter)",
        "minibatches": "PPO mini-batches: each pass splits the step's samples (shuffled, seeded per step) into this many, "
                       "one optimizer update each (verl's ppo_mini_batch_size; TRL's steps_per_generation / "
                       "gradient_accumulation_steps); a token_mean loss divides each by the step's tokens / the "
                       "updates (TRL's dapo); at most prompts_per_step x group_size",
        "dynamic_sampling": "drop groups whose rewards are all equal (DAPO)",
        "overlong_buffer": "soft overlong penalty zone: tokens (int, at most the max length) or fraction of the max length",
        "overlong_penalty": "penalty at the hard limit (linear inside the buffer)",
        "policy_loss": "`ppo` (clipped surrogate), `cispo` (clipped, detached IS weight; MiniMax-M1), `sapo` "
                       "(sigmoid gate instead of the clip) or `vespo` (detached gamma weight of the sequence ratio)",
        "importance_sampling_level": "`token` ratio or `sequence` (GSPO: exp of the mean log ratio)",
        "mismatch_correction": "sampler-trainer mismatch: `none`, `tis` (truncate the weight) or `mis` (mask above the cap)",
        "mismatch_level": "`token` or `sequence` (product over the completion) correction weight",
        "mismatch_cap": "cap on the trainer/sampler probability ratio (> 1) for tis/mis",
        "entropy_coef": "entropy bonus: loss -= coef * entropy of the trainer's next-token distribution",
        "top_entropy_quantile": "policy loss only on the top-q highest-entropy tokens (1.0 = all; 0.2 in the paper)",
        "off_policy_mask_threshold": "drop the policy term of a negative-advantage completion whose mean sampler "
                                     "minus current log-prob exceeds it (DeepSeek-V3.2 eq. 9, TRL's name; >= 0, "
                                     "e.g. 0.5); unset = off. The KL term and entropy bonus stay",
        "router_aux_loss_coef": ("Mixture-of-Experts models: weight of the router load-balancing loss added to "
                                 "each micro-batch's loss (TRL's name); unset = the model config's own (left out of "
                                 "config.json: transformers' default for the type, Mixtral, Qwen-MoE: 0.001, "
                                 "OLMoE: 0.01; a config.json's `null` is an error, as transformers refuses it), 0 = off; set on a dense model it is an error. Also on steps that train "
                                 "nothing (no reward scored, every completion cut), as TRL; with "
                                 "mask_truncated_completions a cut completion's prompt counts in it (TRL's "
                                 "attention mask); with micro_batch_size the rows are shuffled into micro-batches "
                                 "with the step's seed, as TRL shuffles them. torch: every MoE model, not under "
                                 "`fsdp = true` under a launcher, one rank included (refused at startup unless 0); mlx: "
                                 "qwen2_moe, qwen3_moe (another MoE family is refused at startup unless 0)"),
        "mask_truncated_completions": ("leave completions cut at max_new_tokens out of the loss (TRL, DAPO); "
                                       "refused with generation.ignore_eos, which cuts every one"),
        "max_completion_length": "length the overlong shaping and Dr.GRPO normaliser use",
        "ref_sync_every": "refresh the KL reference every N steps (TR-DPO, TRL's `sync_ref_model`; 0 = never; loads a separate reference engine, saved in checkpoints)",
        "ref_sync_alpha": "refresh mix: reference = alpha x policy + (1 - alpha) x reference (TRL's `ref_model_mixup_alpha`)",
        "sapo_temperature_pos": "SAPO gate temperature for positive advantages (> 0; TRL's name and default)",
        "sapo_temperature_neg": "SAPO gate temperature for the other advantages (> 0)",
        "vespo_k_pos": "VESPO weight power k for advantages >= 0: down-weights sequences with ratio < 1",
        "vespo_lambda_pos": "VESPO weight decay lambda (> 0) for advantages >= 0: down-weights ratio > 1",
        "vespo_k_neg": "VESPO weight power k for negative advantages",
        "vespo_lambda_neg": "VESPO weight decay lambda (> 0) for negative advantages",
        "kl_in_reward": "subtract beta x each sequence's summed KL from its reward instead of adding a KL "
                        "loss term (verl's `use_kl_in_reward`; needs beta > 0)",
        "kl_ctrl": "`fixed` (beta throughout) or `adaptive` (kl_in_reward's coefficient steered to kl_target, "
                   "Ziegler et al. 2019; verl's `kl_ctrl.type`)",
        "kl_target": "adaptive kl_ctrl: the target KL (each sequence's token mean, averaged over the batch)",
        "kl_horizon": "adaptive kl_ctrl: samples over which the coefficient moves by at most 20%",
    },
    "optimizer": {
        "lr": "AdamW learning rate, above 0 and below 10 (`5e6` is refused with the `5e-6` it likely meant)",
        "weight_decay": "AdamW weight decay",
        "betas": "AdamW betas",
        "eps": "AdamW epsilon",
        "max_grad_norm": "global-norm gradient clipping (unset = off)",
        "micro_batch_size": "sequences per forward/backward (gradient accumulation); unset = all",
        "schedule": "lr after warmup: `constant`, `linear` or `cosine` decay (same on torch and MLX, exact on resume)",
        "warmup_steps": "optimizer updates over which the lr rises linearly from 0 (0 = off)",
        "min_lr_ratio": "linear/cosine decay ends at lr x min_lr_ratio",
        "total_steps": "updates the decay spans; unset = train.steps x algorithm.num_iterations x algorithm.minibatches",
    },
    "lora": {
        "rank": "adapter rank (the table's presence turns LoRA on)",
        "alpha": "adapter scale numerator (scale = alpha / rank)",
        "dropout": "adapter dropout",
        "target_modules": "\"all-linear\" (every linear layer of the decoder blocks, lm_head excluded, whatever the family calls them) or a list of module names (a block path or its end: q_proj, shared_expert.gate_proj); a name reaching no linear layer is an error",
    },
    "data": {
        "task": "built-in task (`arithmetic`)",
        "path": "`.jsonl`/`.json`/`.csv`/`.tsv`/`.parquet`/`.arrow` file, a list or glob of them, or a "
                "`save_to_disk` folder; CSV/Parquet/Arrow stay memory-mapped (🤗 datasets)",
        "name": "a Hub dataset already in the local 🤗 datasets cache, read offline (e.g. `openai/gsm8k`)",
        "config": "its configuration (subset), e.g. `main`",
        "split": "split of `name` or of a saved DatasetDict (unset = `train`); refused beside `task` (a task has its own splits)",
        "cache_dir": "🤗 datasets cache to read `name` from and to keep Arrow copies of files in, keyed by "
                     "their content (unset = `HF_DATASETS_CACHE`)",
        "prompt_column": ("column holding the prompt (string or chat messages; an assistant message may call "
                          'tools, `{"role": "assistant", "content": null, "tool_calls": [...]}` (or content `""` or '
                          "text), where the model's chat template renders the calls: one that does not (SmolLM2's "
                          "writes the content alone, and TRL trains on that turn without its calls), or that raises "
                          "on the null content, is an error naming the row)"),
        "columns": "row name -> source column, e.g. `{prompt = \"question\", answer = \"solution\"}`",
        "system_prompt": ("system message prepended to each chat prompt that does not already start with a system "
                          "message (such a row keeps its own); a text prompt becomes the user turn, so the prompt is "
                          "a chat: reward functions then get chat-shaped `prompts` and `completions`, "
                          '`[{"role": "assistant", "content": text}]`, as TRL gives them for chat prompts. Only what '
                          'the model is asked changes: a reward declaring the prompt column (`question` with '
                          '`prompt_column = "question"`) gets the row\'s own value, as TRL passes every column of '
                          "the original row"),
        "eval_path": "evaluation rows from separate file(s) (same formats as `path`); nothing is held out",
        "eval_split": "evaluation rows from another split of `name` or a saved DatasetDict (e.g. `test`), or "
                      "a slice of `name`'s split disjoint from `split` (`train[:90%]` / `train[90%:]`; "
                      "overlapping rows are an error)",
        "options": "task options (`count`, `digits`, `ops`, `seed`, `eval_fraction`, `chat`, `instruction` for "
                   "`arithmetic`); for other sources `count` (training rows kept) and `seed` of the hold-out "
                   "(`eval_count`, if given, must equal `eval.count`, which sizes it in a run); any other key "
                   "is an error naming the setting meant (`eval_count` beside a task: `eval.count`)",
        "rows": "inline rows (Python API only)",
        "eval_rows": "inline evaluation rows (Python API only: `run(eval_prompts=...)`, TRL's `eval_dataset`); "
                     "nothing is held out",
        "drop_overlong": "leave out (with a warning counting them) prompts of `model.max_length` tokens or more, "
                         "measured with the chat template when the model loads; unset, the first is an error "
                         "naming its file and line",
        "shuffle": "draw prompts in a new seeded order each epoch; false: in the dataset's own order, epoch after "
                   "epoch (TRL's `shuffle_dataset = False`)",
    },
    "rewards": {
        "name": "a registered reward (`polyrl rewards` lists them)",
        "function": "`module:function` or `file.py:function` (loaded by path: a module beside the file needs its "
                    "folder on `PYTHONPATH`)",
        "weight": "weight in the weighted sum of rewards; within ±1e100 (past it, weight × score overflows float64: "
                  "scale the scores instead)",
        "options": "reward options (e.g. the judge's `base_url`, `model`, `rubric`)",
        "timeout_s": "seconds one call may take; longer is an error naming the reward. Unset: 600, raised to what "
                     "the batch needs when a reward declares it (`code_tests`: every sample running to its own "
                     "`timeout_s`); set: your cap, never raised (a warning names the minimum its batch may need)",
        "isolation": "function rewards: `thread` (a reward thread), `process` (each call in a forked child, killed "
                     "at `timeout_s`; POSIX) or `auto`: `process` for math-verify rewards (TRL's "
                     "`accuracy_reward`, or a function of yours that calls math-verify's `parse`/`verify`), "
                     "else `thread`",
        "label": "what metrics (`reward/<label>/mean`), logs and errors call the entry (default: the `name`, a "
                 "`/` in it made `_` so that `acc/strict` keeps off reward `acc`'s keys, or the function's name); two entries with one label (two reward-model folders, two files' `score` "
                 "functions) are an error until one gets its own",
    },
    "train": {
        "steps": "training steps: one rollout batch each, trained with algorithm.num_iterations x algorithm.minibatches optimizer updates (TRL's max_steps counts updates: steps = max_steps / (num_iterations x minibatches))",
        "prompts_per_step": "prompts per rollout batch (each sampled group_size times)",
        "seed": "seed of data order, sampling and init, and of Python's and numpy's global RNGs (a reward drawing "
                "from `random` draws the same in two runs of one seed; `polyrl train`, `polyrl.api.run` and "
                "`polyrl.trl.GRPOTrainer` alike); a resumed run continues it exactly",
        "threads": "CPU threads for the backends (unset = backend default)",
        "output_dir": "metrics.jsonl, checkpoints/ and the final model go here",
        "checkpoint_every": "steps between checkpoints (0 = only at the end)",
        "keep_checkpoints": "how many complete checkpoints to keep (0 = all)",
        "keep_previous_runs": "earlier runs kept in `previous/` when a fresh run starts in the same output_dir "
                              "(the newest N; older ones are deleted with a warning; 0 = delete the earlier run "
                              "once the new run has saved a trained checkpoint)",
        "max_consecutive_skips": "stop after this many non-finite (NaN/Inf) steps, steps no reward scored, or steps whose every completion was cut under mask_truncated_completions, in a row",
        "gradient_checkpointing": "recompute decoder-layer activations in backward: less memory, more compute (torch, MLX)",
        "collective_timeout_s": "under `polyrl launch`: seconds a rank waits in a collective for the others (a rank "
                                "stuck or far slower) before the run stops with an error naming the step; must "
                                "cover the longest a rank works alone (its generation, rank 0's checkpoint write)",
    },
    "eval": {
        "count": "held-out prompts for evaluation (0 = off, and then any other eval setting or "
                 "`data.eval_path`/`eval_split` is an error)",
        "every": "evaluate every N steps (0 = before and after only); results go on that step's metrics line",
        "reward": "any reward as the eval metric; greedy accuracy is its mean; `run`: the run's own "
                  "`[[rewards]]` summed with their weights, as training scores (each reward's mean and std are "
                  "logged too, `eval/reward/<label>/mean`)",
        "max_new_tokens": "completion cap for evaluation (unset = generation.max_new_tokens)",
        "samples": "sampled completions per prompt for pass@k (0 = greedy only); generation's temperature, or 1.0 if greedy",
        "pass_k": "k of the unbiased pass@k estimate (at most `samples`); pass@1 is reported too",
        "pass_threshold": "a sample counts as correct for pass@k when its reward is at least this",
        "greedy": "false: no greedy pass, only the `samples` sampled completions per prompt (TRL's evaluation: "
                  "`eval/sampled_reward_mean`, `_std`, `eval/completion_len_mean`; and, each `loss_batch`'s averaged as "
                  "TRL logs them (those three too, with `reward = \"run\"`), `eval/completion_len_min`, `_max`, `eval/clipped_ratio`, `eval/terminated_len_mean`, "
                  "`_min`, `_max`, `eval/frac_reward_zero_std`)",
        "before": "evaluate before the first step (false: TRL's `eval_on_start = False`); after training always",
        "loss": "also the run's loss on the sampled completions (`eval/loss`, TRL's `eval_loss`; `eval/kl` with "
                "`beta > 0`; TRL's clip ratios, `eval/clip_ratio/*`, 0 at ratio 1; needs `reward = \"run\"`), as an update would compute it before changing the weights (advantages within each "
                "eval group, ratio 1): one more forward pass (two with `beta > 0`, one more with `entropy_coef`); with "
                "`entropy_coef > 0` also `eval/policy_loss` (the loss without the bonus, TRL's `eval_policy_loss`) and, "
                "where the train backend gives token entropies (torch, MLX), `eval/entropy` (TRL's `eval_entropy`), "
                "`eval/loss` being left out on one that does not; not computed where the loss "
                "selects tokens by entropy (`top_entropy_quantile < 1`) or holds a MoE model's router term "
                "(`algorithm.router_aux_loss_coef` not 0: a warning)",
        "loss_batch": "completions per batch of that loss (whole groups); each batch's advantages are its own (with "
                      "`scale_rewards = \"batch\"` its std), and the batches' losses are averaged with their sizes "
                      "as weights, as TRL's evaluation loop scores and averages its `per_device_eval_batch_size` x "
                      "processes batches (0 = the whole eval set as one batch); with `reward = \"run\"` the rewards "
                      "are called once per batch (each rank's share of it), as TRL calls them, and a reward's "
                      "`log_metric(name, ...)` is `eval/log_metric/<name>`, the mean of the batches' values",
    },
    "logging": {
        "report_to": 'experiment trackers, e.g. ["tensorboard", "wandb", "mlflow", "trackio"] '
                     "(`polyrl trackers` lists them)",
        "completions_per_step": "sampled completions per step to completions.jsonl and the trackers (0 = off)",
        "project": "the trackers' project / experiment name",
        "run_name": "the trackers' run name (unset = the output_dir folder name)",
        "tracker_timeout_s": "seconds one tracker call may take; past it a tracker that is starting stops the "
                             "run, one that is logging is dropped and the run goes on, and one still closing "
                             "at the end loses what it had not written (a warning says so); a call over a "
                             "quarter of it (5 s at most) is said once, as the run waits for it",
        "table_cell_chars": "characters of one cell of the trackers' completions tables (a text, a multi-turn "
                            "episode's whole conversation as JSON, a `log_extra` value); a longer one is cut, "
                            "ending `[... N more characters cut by polyrl: logging.table_cell_chars; "
                            "completions.jsonl keeps them]` (0 = uncut)",
        "step_line": 'the terminal\'s line per step: "short" (step, loss, reward, kl, grad norm, lr, entropy, '
                     'lengths, time, eval/...) or "full" (every metric); the files always get every metric',
    },
    "environment": {
        "name": "a registered multi-turn environment (`polyrl environments`); unset with `tools`: the dataset prompt plus tools",
        "tools": 'tools the model may call: registered names (`calculator`, `python`), `"module:function"` or `"file.py:function"`',
        "max_turns": "assistant turns per episode",
        "max_episode_tokens": "tokens after the first prompt (sampled and inserted); an episode reaching it ends as `length`",
        "tool_timeout_s": "seconds per tool call; a call past it becomes an error message the model reads",
        "env_timeout_s": "seconds per call of the environment's code (create, reset, step); a call past it ends that episode as an environment error (abandoned: 32 still running stop the run)",
        "max_concurrent_tools": "tool calls running at once across the step's episodes",
        "max_tool_calls_per_turn": "tool calls run per assistant turn; the others are answered "
                                   "\"not run\" (an error the model reads); also the most such errors and "
                                   "malformed calls' errors shown a turn, one more saying how many were left out",
        "tool_format": "how tool calls are parsed: `auto`, `hermes` (`<tool_call>{...}</tool_call>`), `llama3`, `mistral`, `phi4`, `json` (a call object opening the reply; for templates without a tool format, e.g. SmolLM2)",
        "python_isolation": 'the `python` tool\'s sandbox, as code_tests\' `isolation`: `auto` (bubblewrap, else the '
                            'run is refused before models load), `require` (bubblewrap and seccomp), `weak` (opt-in '
                            'fallback where the code may read the trainer\'s files and keys), `off`',
        "options": "table handed to the environment's `create(options)`",
    },
}

_TABLE_HEADERS = {"rewards": "[[rewards]]"}


def _default(field: attrs.Attribute) -> str:
    default: Any = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    if default is attrs.NOTHING:
        return "required"
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, str):
        return f'"{default}"' if default else "—"
    if isinstance(default, tuple):
        default = list(default)
    return str(default).replace("'", '"')


def missing_docs() -> list[str]:
    """``table.key`` for every accepted key that has no line in :data:`FIELD_DOCS`."""
    out = []
    for table, cls in section_classes().items():
        docs = FIELD_DOCS.get(table, {})
        out += [f"{table}.{f.name}" for f in attrs.fields(cls) if f.name not in docs]
    return out


def render_markdown() -> str:
    """The reference as Markdown: one table per TOML table, keys in declaration order."""
    assert {f.name for f in attrs.fields(RunConfig)} == set(section_classes())
    parts = []
    for table, cls in section_classes().items():
        docs = FIELD_DOCS.get(table, {})
        parts.append(f"**`{_TABLE_HEADERS.get(table, f'[{table}]')}`**\n")
        parts.append("| key | default | meaning |\n|---|---|---|")
        for field in attrs.fields(cls):
            meaning = docs.get(field.name, "(undocumented)")
            parts.append(f"| `{field.name}` | `{_default(field)}` | {meaning} |")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"
