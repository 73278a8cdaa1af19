"""The run configuration: one TOML file (or the Python API) describing a whole training run.

Sections mirror the TOML tables: ``[model]``, ``[lora]``, ``[backends]``, ``[generation]``,
``[algorithm]``, ``[optimizer]``, ``[data]``, ``[[rewards]]``, ``[train]``, ``[eval]``, ``[logging]``,
``[environment]``.
See README.md ("Config reference") for every key.
"""

from __future__ import annotations

import difflib
import os
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from polyrl import chat_kwargs, long_numbers
from polyrl.algorithms.presets import GROUP_RELATIVE_ADVANTAGES, AlgorithmConfig, check_given_keys_act, refuse_preset_shaping_under_gdpo
from polyrl.configtools import build, check_type, key_typo, trl_typo, unknown_key_fix
from polyrl.device_names import check_builtin_devices, check_device_type, normalized as normalized_device
from polyrl.errors import ConfigError
from polyrl.path_loops import LOOP_FIX, symlink_loop
from polyrl.path_text import OUTPUT_ROOM, check_path_text, refuse_control_chars
from polyrl.rewards import isolation as reward_isolation
from polyrl.step_line import STEP_LINE_CHOICES
from polyrl.trl_names import trl_fix
from polyrl.types import LoraConfig, OptimizerConfig, SamplingParams, as_lora_config
from polyrl.validators import check_depth, check_record
from polyrl.wide_text import HEAD_BYTES, refuse_wide_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


#: ``eval.reward``'s value for the run's own ``[[rewards]]``, summed with their weights as training
#: sums them (TRL's evaluation scores with every reward function and ``reward_weights``)
RUN_REWARDS = "run"

#: Every dtype some backend runs; which one runs which is ``Capabilities.dtypes``.
MODEL_DTYPES = ("float32", "bfloat16", "float16")


def _home_expanded(value: Any) -> Any:
    """``value`` with a leading ``~`` as the home folder, as the shell would have written it: a path
    quoted in TOML (or in a quoted ``--set``) reaches polyrl unexpanded, and ``~/models/x`` named a
    folder "~" in the working directory, or nothing."""
    return os.path.expanduser(value) if isinstance(value, str) else value


@attrs.define(frozen=True)
class ModelSection:
    #: local HF folder, GGUF file, Hub id in the local HF cache, or an alias ("~" expanded)
    path: str = attrs.field(default="", converter=_home_expanded)
    dtype: str = "float32"
    #: mixed precision: matmuls in this dtype, weights and optimizer state kept in ``dtype``;
    #: None = compute in ``dtype`` itself (no autocast)
    compute_dtype: str | None = None
    #: "auto": the backend's accelerator when this machine has one (CUDA for torch, a GPU for MAX,
    #: Metal for MLX), else the CPU: one recipe runs on a GPU box and a laptop unchanged
    device: str = "auto"
    max_length: int = 1024
    #: the KL reference, when not the initial policy itself
    reference_path: str | None = attrs.field(default=None, converter=_home_expanded)
    trust_remote_code: bool = False  # run Python shipped in the model folder (only when asked)
    #: extra variables for the policy's chat template, every time it renders (TRL's
    #: ``chat_template_kwargs``; ``{enable_thinking = false}`` for Qwen3): ``polyrl.chat_kwargs``
    chat_template_kwargs: dict[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "chat_template_kwargs", chat_kwargs.checked(self.chat_template_kwargs))
        if not self.path or (isinstance(self.path, str) and not self.path.strip()):
            raise ConfigError(  # " " was looked up as a model name once the config had loaded
                f"is blank ({self.path!r}): no model given" if self.path else "no model given", field="model.path",
                fix='set model.path to a local HF folder, a cached Hub id ("org/name") or an alias '
                    'like "smollm2-135m-instruct"',
            )
        _refuse_blank(self, ("reference_path",), "model")
        check_path_text(self.path, "model.path")
        check_path_text(self.reference_path, "model.reference_path")
        check_device_type(self.device)  # its spelling: RunConfig, which knows the backends reading it
        object.__setattr__(self, "device", normalized_device(self.device))  # "GPU" as MLX and MAX read it
        if self.dtype not in MODEL_DTYPES:
            raise ConfigError(f"unknown dtype {self.dtype!r}", field="model.dtype",
                              fix=f"use one of {', '.join(MODEL_DTYPES)} (`polyrl backends` lists "
                                  "each backend's)")
        if self.compute_dtype is not None and self.compute_dtype not in MODEL_DTYPES:
            raise ConfigError(f"unknown compute_dtype {self.compute_dtype!r}", field="model.compute_dtype",
                              fix=f"use one of {', '.join(MODEL_DTYPES)}, or remove it to compute in model.dtype")


@attrs.define(frozen=True)
class BackendsSection:
    """Which backend runs each role; generate/reference default to the train backend."""

    train: str = "torch"
    generate: str | None = None
    reference: str | None = None
    options: dict[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        # generate = "" was read as unset (the train backend) without a word, while " " was refused
        _refuse_blank(self, ("train", "generate", "reference"), "backends")

    @property
    def generate_backend(self) -> str:
        return self.generate or self.train

    @property
    def reference_backend(self) -> str:
        return self.reference or self.train


@attrs.define(frozen=True)
class GenerationSection:
    group_size: int = 4
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False  # sample on past EOS to max_new_tokens (fixed-length benchmarks)
    stop: list[str] = attrs.field(factory=list)
    #: a different file for the generator (e.g. a GGUF for MAX)
    max_model_path: str | None = attrs.field(default=None, converter=_home_expanded)
    overlap: bool = False  # sample step k+1 while training on step k (one step of policy lag)

    def __attrs_post_init__(self) -> None:
        _refuse_blank(self, ("max_model_path",), "generation")
        check_path_text(self.max_model_path, "generation.max_model_path")
        self.sampling(0)  # validates the sampling fields

    def sampling(self, seed: int | None) -> SamplingParams:
        try:
            return SamplingParams(
                max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                top_k=self.top_k, stop=tuple(self.stop), seed=seed, n=self.group_size,
                min_p=self.min_p, repetition_penalty=self.repetition_penalty, ignore_eos=self.ignore_eos,
            )
        except ConfigError as exc:
            raise exc.under("generation") from None


@attrs.define(frozen=True)
class DataSection:
    """Where prompts come from: a built-in task, local files, or a dataset in the 🤗 cache."""

    task: str | None = None  # built-in task name, e.g. "arithmetic"
    path: str | list[str] | None = None  # JSON/JSONL/CSV/Parquet/Arrow file(s), a glob, a save_to_disk folder
    name: str | None = None  # a Hub dataset already in the local datasets cache (read offline)
    config: str | None = None  # its configuration (subset)
    split: str | None = None  # its split, or a saved DatasetDict's (default "train")
    cache_dir: str | None = None  # the datasets cache (default: HF_DATASETS_CACHE)
    prompt_column: str = "prompt"
    columns: dict[str, str] = attrs.field(factory=dict)  # row name -> source column
    system_prompt: str | None = None
    eval_path: str | list[str] | None = None
    eval_split: str | None = None
    #: inline evaluation rows (the Python API: ``run(eval_prompts=...)``, TRL's ``eval_dataset``)
    eval_rows: list[dict[str, Any]] | None = None
    options: dict[str, Any] = attrs.field(factory=dict)
    rows: list[dict[str, Any]] | None = None  # inline rows (the Python API)
    drop_overlong: bool = False  # leave out prompts of model.max_length tokens or more (else an error)
    shuffle: bool = True  # a new seeded order each epoch; false: the dataset's own order (TRL's shuffle_dataset)

    def __attrs_post_init__(self) -> None:
        _refuse_blank(self, ("path", "eval_path", "name", "config", "split", "eval_split", "cache_dir",
                             "prompt_column"), "data")
        for key in ("path", "eval_path", "cache_dir"):
            check_path_text(getattr(self, key), f"data.{key}")
        if sum(x is not None for x in (self.task, self.path, self.name, self.rows)) != 1:
            raise ConfigError(
                "give exactly one of data.task, data.path, data.name (and, from Python, data.rows)", field="data",
                fix='e.g. task = "arithmetic", path = "prompts.parquet" or name = "openai/gsm8k"',
            )
        for key, value in self.columns.items():
            if not isinstance(value, str) or not value:
                raise ConfigError(f"must name a source column, got {value!r}", field=f"data.columns.{key}",
                                  fix=f'e.g. columns = {{{key} = "question"}}')
        sources = list(self.columns.values())
        if len(set(sources)) != len(sources):
            raise ConfigError("maps two names to the same source column", field="data.columns",
                              fix="map each source column once")
        if self.config is not None and self.name is None:
            raise ConfigError("applies only to data.name", field="data.config", fix="remove it")
        if self.split is not None and self.path is None and self.name is None:  # a task's split was ignored
            raise ConfigError("applies only to data.path or data.name (a saved DatasetDict's or a cached "
                              "dataset's split)", field="data.split",
                              fix="remove it: a built-in task has its own train/eval splits (eval.count)"
                              if self.task is not None else "remove it")
        if self.cache_dir is not None and self.path is None and self.name is None:
            raise ConfigError("applies only to data.path or data.name", field="data.cache_dir", fix="remove it")
        if sum(x is not None for x in (self.eval_path, self.eval_split, self.eval_rows)) > 1:
            raise ConfigError("give at most one of data.eval_path, data.eval_split and data.eval_rows",
                              field="data.eval_rows" if self.eval_rows is not None else "data.eval_split",
                              fix="keep the one that holds the evaluation rows")
        if self.eval_rows is not None and self.task is not None:
            raise ConfigError("a built-in task has its own eval split", field="data.eval_rows",
                              fix="remove data.eval_rows, or give the training rows as data.rows / data.path")
        if (self.eval_path is not None or self.eval_split is not None) and (self.task or self.rows is not None):
            raise ConfigError("a separate eval source needs data.path or data.name",
                              field="data.eval_path" if self.eval_path is not None else "data.eval_split",
                              fix="tasks have their own eval split; rows hold out data.options.eval_count")
        if self.eval_path is not None and self.path is not None and _same_files(self.eval_path, self.path):
            raise ConfigError("names the training data itself: the evaluation would score prompts the policy "
                              "trains on", field="data.eval_path",
                              fix="point it at held-out rows, or leave it out and hold rows out with eval.count")
        if self.eval_split is not None and self.eval_split == (self.split or "train"):
            raise ConfigError(f"is the training split {self.eval_split!r} itself", field="data.eval_split",
                              fix="name another split, or hold rows out with eval.count alone")
        if self.task is not None and (self.columns or self.system_prompt is not None):
            raise ConfigError("built-in tasks take no column mapping or system prompt",
                              field="data.columns" if self.columns else "data.system_prompt",
                              fix="use data.path or data.name for your own rows")
        from polyrl.data import check_options  # its readers import this module's classes

        check_options(self.task, self.options)


def _refuse_blank(record: Any, keys: tuple[str, ...], section: str) -> None:
    """An empty (or blank) text in ``keys``, or in one item of a list there, is an error naming it.
    Why: ``data.path = ""`` was reported as the folder '.', ``generation.max_model_path = ""`` was
    read as unset without a word."""
    for key in keys:
        value = getattr(record, key)
        items = value if isinstance(value, list) else [value]
        if any(isinstance(item, str) and not item.strip() for item in items):
            raise ConfigError(f"is empty ({value!r})", field=f"{section}.{key}",
                              fix=f"give {section}.{key} a value, or remove the key")


def _same_files(a: Any, b: Any) -> bool:
    """Whether two ``path`` values name the same files (a string or a list; ``~`` and ``./`` aside)."""
    def names(value: Any) -> list[str] | None:
        items = [value] if isinstance(value, str) else value if isinstance(value, (list, tuple)) else None
        if items is None or not all(isinstance(v, str) for v in items):
            return None
        return sorted(os.path.realpath(os.path.expanduser(v)) for v in items)
    first, second = names(a), names(b)
    return first is not None and first == second


def plain_label(name: str) -> str:
    """A reward's name as the label its metrics are keyed by (``reward/<label>/<metric>``, split at
    ``/``): each ``/`` made ``_``, surrounding spaces dropped. Why: a plugin's reward registered as
    ``acc/strict`` wrote ``reward/acc/strict/mean``, the tag a reward ``acc``'s own ``strict/mean``
    metric has, nested in TensorBoard under ``acc``'s curves; and TRL's ``rewards/<name>/mean``
    for it was left out of ``log_history`` without a word."""
    return name.replace("/", "_").strip() or "reward"


@attrs.define(frozen=True)
class RewardSection:
    name: str | None = None  # a registered reward (see `polyrl backends`)
    #: "module:function" or "file.py:function" ("~/rewards.py:score" is a file in the home folder)
    function: str | None = attrs.field(default=None, converter=_home_expanded)
    weight: float = 1.0
    options: dict[str, Any] = attrs.field(factory=dict)
    #: one call's limit; a stuck reward is an error, not a hung run. Unset: 600 s, raised to what the
    #: reward's batch needs (a plugin's ``call_time_s``: code_tests' looping samples); set: the cap
    timeout_s: float | None = None
    #: where a function reward's calls run: a reward thread, or a forked child killed at the
    #: limit; "auto": a child for math-verify rewards (polyrl.rewards.isolation says why)
    isolation: str = "auto"
    #: what metrics, logs and errors call this entry (``reward/<label>/mean``); default: the name
    #: (``plain_label``: a "/" in it made "_"), or the function's name. Why: two entries of one reward (two reward-model folders) need two.
    label: str = ""

    def __attrs_post_init__(self) -> None:
        if (self.name is None) == (self.function is None):
            raise ConfigError(
                "each [[rewards]] entry needs exactly one of name or function", field="rewards",
                fix='e.g. name = "numeric_match" or function = "my_rewards:score"',
            )
        blank = next((k for k in ("name", "function") if isinstance(getattr(self, k), str)
                      and not getattr(self, k).strip()), None)
        if blank is not None:  # name = "" was reported as "unknown reward 'None'" (its label's fallback)
            raise ConfigError(f"is empty ({getattr(self, blank)!r})", field=blank,
                              fix='name a reward, e.g. name = "numeric_match" (`polyrl rewards` lists them), or '
                                  'function = "my_rewards.py:score"')
        if not self.label:  # a registered name may hold a "/" (a plugin's "math/strict"): its label may not
            object.__setattr__(self, "label", plain_label(self.name or str(self.function).rsplit(":", 1)[-1]))
        elif not isinstance(self.label, str) or "/" in self.label or self.label != self.label.strip():
            raise ConfigError(f"{self.label!r} cannot name metrics (reward/<label>/mean)", field="label",
                              fix='use a plain name without "/" or surrounding spaces, e.g. label = "reward_model_2"')
        if isinstance(self.function, str) and ":" in self.function:  # its file: os.stat raised on a too-long name
            check_path_text(self.function.rsplit(":", 1)[0], "function")
        reward_isolation.check(self.isolation, field="isolation")
        if self.name is not None and self.isolation != "auto":
            raise ConfigError(f"isolation applies to function rewards only, not to the registered reward "
                              f"{self.name!r}", field="isolation",
                              fix="remove it (a registered reward runs on a reward thread), or use function = ...")



#: A sensible value of each count TrainSection requires to be >= 1, for its fix line.
_TRAIN_EXAMPLES = {"steps": 100, "prompts_per_step": 8, "keep_checkpoints": 2, "max_consecutive_skips": 3}


@attrs.define(frozen=True)
class TrainSection:
    steps: int = 10
    prompts_per_step: int = 8
    seed: int = 0
    threads: int | None = None
    #: "~" expanded, as in data.path: "~/runs/x" made a folder named "~" in the working directory
    output_dir: str = attrs.field(default="runs/polyrl", converter=_home_expanded)
    checkpoint_every: int = 0  # 0: only at the end
    keep_checkpoints: int = 2  # 0: every checkpoint kept (TRL's save_total_limit = None)
    #: earlier runs kept in output_dir/previous/ when a fresh run starts there; 0: deleted once it trains
    keep_previous_runs: int = 1
    max_consecutive_skips: int = 3  # stop after this many non-finite (unscored, all-cut) steps in a row
    gradient_checkpointing: bool = False  # recompute activations in backward (memory for compute)
    #: under a launcher: how long a rank waits in a collective for the others before it stops the run
    collective_timeout_s: float = 600.0

    def __attrs_post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "max_consecutive_skips"):
            if getattr(self, name) < 1:
                raise ConfigError(f"must be >= 1, got {getattr(self, name)}", field=f"train.{name}",
                                  fix=f"e.g. {name} = {_TRAIN_EXAMPLES[name]}")
        if self.keep_checkpoints < 0:
            raise ConfigError(f"must be >= 0 (0 = keep every checkpoint), got {self.keep_checkpoints}",
                              field="train.keep_checkpoints", fix="e.g. keep_checkpoints = 2")
        if self.checkpoint_every < 0:
            raise ConfigError("must be >= 0 (0 = only at the end)", field="train.checkpoint_every")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("must be >= 1", field="train.threads")
        # a NUL, a too-long name or a path with no room for the run's files below it: was a traceback
        check_path_text(self.output_dir, "train.output_dir", room=OUTPUT_ROOM)
        refuse_control_chars(self.output_dir, "train.output_dir")
        if not self.output_dir.strip():  # "" would be the current directory, moved aside by a fresh start
            raise ConfigError(f"must name a folder, got {self.output_dir!r}", field="train.output_dir",
                              fix='e.g. output_dir = "runs/my-run"')


@attrs.define(frozen=True)
class EvalSection:
    """Evaluation on held-out prompts (before training, every ``every`` steps, at the end): greedy
    accuracy, and pass@``pass_k`` from ``samples`` sampled completions per prompt when ``samples`` > 0."""

    count: int = 0  # held-out prompts; 0 disables evaluation
    every: int = 0
    #: the reward scored, or ``RUN_REWARDS`` ("run"): the run's own [[rewards]] summed with their weights
    reward: str = "numeric_match"
    max_new_tokens: int | None = None
    samples: int = 0  # sampled completions per prompt for pass@k; 0: greedy only
    pass_k: int = 1
    pass_threshold: float = 1.0  # a sample counts as correct when its reward is at least this
    greedy: bool = True  # false: the sampled completions only (TRL's evaluation), no greedy pass
    before: bool = True  # evaluate before the first step (TRL's eval_on_start)
    #: also the run's loss on the sampled completions (TRL's eval_loss): one more forward pass
    loss: bool = False
    #: completions per batch whose losses are averaged (TRL's per_device_eval_batch_size x processes); 0: one batch
    loss_batch: int = 0

    @staticmethod
    def reward_default() -> str:
        return str(attrs.fields(EvalSection).reward.default)

    def __attrs_post_init__(self) -> None:
        if not self.greedy and self.samples < 1:  # neither pass: the evaluation would generate nothing
            raise ConfigError("greedy = false leaves the sampled completions only, and eval.samples is 0",
                              field="eval.greedy", fix="set eval.samples to the completions per prompt (e.g. 4), "
                                                       "or remove greedy = false")
        if self.loss and self.samples < 1:  # the loss needs groups of sampled completions
            raise ConfigError("loss = true computes the loss on the sampled completions, and eval.samples is 0",
                              field="eval.loss", fix="set eval.samples to the completions per prompt (e.g. 4), "
                                                     "or remove loss = true")
        if self.loss and self.reward != RUN_REWARDS:  # its advantages are the run's rewards' (GDPO: each one's)
            raise ConfigError(f"loss = true is the run's loss, whose advantages come from the run's rewards, and "
                              f"eval.reward = {self.reward!r} scores the eval completions with that reward alone",
                              field="eval.loss", fix='set reward = "run" in [eval] (the run\'s [[rewards]] with '
                                                     "their weights), or remove loss = true")
        if self.loss_batch and self.samples and self.loss_batch % self.samples:  # a batch would cut a group
            raise ConfigError(f"{self.loss_batch} completions per batch cut the groups of eval.samples = "
                              f"{self.samples}", field="eval.loss_batch",
                              fix=f"set it to a multiple of {self.samples} (or 0: the whole eval set as one batch)")
        if self.pass_k > max(self.samples, 1):  # greedy evaluation (samples = 0) has one answer per prompt
            raise ConfigError(f"pass@{self.pass_k} needs at least {self.pass_k} samples, got {self.samples}",
                              field="eval.pass_k", fix=f"raise eval.samples to {self.pass_k} or more, or lower eval.pass_k")


@attrs.define(frozen=True)
class LoggingSection:
    """Where a run is shown besides metrics.jsonl: experiment trackers and the completions log."""

    report_to: list[str] = attrs.field(factory=list)  # e.g. ["tensorboard", "wandb"]; `polyrl trackers`
    completions_per_step: int = 4  # sampled completions logged per step; 0 turns the log off
    project: str = "polyrl"  # the tracker's project / experiment name
    run_name: str | None = None  # default: the output_dir's folder name
    tracker_timeout_s: float = 60.0  # per tracker call; past it the tracker is dropped, the run goes on
    step_line: str = "short"  # the terminal's step line: "short" (the watched numbers) or "full" (every metric)
    #: characters of one completions table cell sent to the trackers (0: uncut); a multi-turn
    #: episode's whole conversation is one cell
    table_cell_chars: int = 16_384

    def __attrs_post_init__(self) -> None:
        # project "": trackio logged into its "default" store without a word, MLflow failed after the model loaded
        _refuse_blank(self, ("project", "run_name"), "logging")
        for key in ("project", "run_name"):  # a tracker's folder or run name (run_name's default: output_dir's)
            refuse_control_chars(getattr(self, key), f"logging.{key}")
        if self.step_line not in STEP_LINE_CHOICES:
            raise ConfigError(f"must be one of {', '.join(STEP_LINE_CHOICES)}, got {self.step_line!r}",
                              field="logging.step_line", fix='step_line = "short" (default) or "full"')
        if isinstance(self.report_to, str) or not all(isinstance(n, str) and n for n in self.report_to):
            raise ConfigError(f"must be a list of tracker names, got {self.report_to!r}", field="logging.report_to",
                              fix='e.g. report_to = ["tensorboard"]; `polyrl trackers` lists them')
        if len(set(self.report_to)) != len(self.report_to):
            raise ConfigError("names a tracker twice", field="logging.report_to", fix="list each tracker once")


@attrs.define(frozen=True)
class EnvironmentSection:
    """Multi-turn episodes: an environment and/or tools (``polyrl environments`` lists both).

    Absent (no ``name`` and no ``tools``), a step is single-turn as always. Each episode is one
    exact token sequence (``polyrl.agents.episodes``); only the model's own tokens are trained.
    """

    name: str | None = None  # a registered environment; None: the dataset prompt, plus tools
    tools: list[str] = attrs.field(factory=list)  # registered names, "module:function" or "file.py:function"
    max_turns: int = 4  # assistant turns per episode
    max_episode_tokens: int = 512  # tokens after the first prompt, sampled and inserted
    tool_timeout_s: float = 10.0  # per tool call; a call past it becomes an error the model reads
    env_timeout_s: float = 60.0  # per call of the environment (create, reset, step); past it the episode ends
    max_concurrent_tools: int = 8  # tool calls running at once across the step's episodes
    #: tool calls run per assistant turn; the rest are answered "not run" (a policy writing dozens
    #: of calls in one turn cost their time and side effects)
    max_tool_calls_per_turn: int = 8
    tool_format: str = "auto"  # how tool calls are written: auto, hermes, llama3, mistral
    #: the ``python`` tool's sandbox isolation, as code_tests' ``isolation`` (polyrl.sandbox.isolation)
    python_isolation: str = "auto"
    options: dict[str, Any] = attrs.field(factory=dict)  # handed to the environment's create()

    @property
    def enabled(self) -> bool:
        return self.name is not None or bool(self.tools)

    def __attrs_post_init__(self) -> None:
        _refuse_blank(self, ("name",), "environment")  # "" was refused only once the run had started
        if isinstance(self.tools, str) or not all(isinstance(t, str) and t for t in self.tools):
            raise ConfigError(f"must be a list of tool names, got {self.tools!r}", field="environment.tools",
                              fix='e.g. tools = ["calculator"]; `polyrl environments` lists them')
        for key, specs in (("name", [self.name]), ("tools", self.tools)):
            for spec in specs:  # "file.py:factory": os.stat raised on a too-long file name
                if isinstance(spec, str) and ":" in spec:
                    check_path_text(spec.rsplit(":", 1)[0], f"environment.{key}")
        idle = [f.name for f in attrs.fields(EnvironmentSection) if f.name not in ("name", "tools", "options")
                and getattr(self, f.name) != f.default]
        if idle and not self.enabled:  # no episodes run: these settings would silently do nothing
            raise ConfigError(f"{', '.join(idle)} set, but neither name nor tools: steps stay single-turn",
                              field=f"environment.{idle[0]}",
                              fix="set environment.name or environment.tools (`polyrl environments` lists them), "
                                  "or remove these keys")
        if self.options and self.name is None:  # they go to the environment's create(): there is none
            raise ConfigError(f"options ({', '.join(sorted(map(str, self.options)))}) are for an environment, "
                              "and none is named", field="environment.options",
                              fix="set environment.name (`polyrl environments` lists them), or remove the options")


@attrs.define(frozen=True)
class RunConfig:
    model: ModelSection
    data: DataSection
    rewards: list[RewardSection]
    backends: BackendsSection = attrs.field(factory=BackendsSection)
    generation: GenerationSection = attrs.field(factory=GenerationSection)
    algorithm: AlgorithmConfig = attrs.field(factory=lambda: AlgorithmConfig.preset("grpo"))
    optimizer: OptimizerConfig = attrs.field(factory=OptimizerConfig)
    lora: LoraConfig | None = attrs.field(default=None, converter=as_lora_config)
    train: TrainSection = attrs.field(factory=TrainSection)
    eval: EvalSection = attrs.field(factory=EvalSection)
    logging: LoggingSection = attrs.field(factory=LoggingSection)
    environment: EnvironmentSection = attrs.field(factory=EnvironmentSection)

    def __attrs_post_init__(self) -> None:
        if not self.rewards:
            raise ConfigError(
                "no reward configured", field="rewards",
                fix='add a [[rewards]] table, e.g. name = "numeric_match"',
            )
        self._check_reward_labels()
        self._check_values()
        self._check_device()
        self._check_some_reward_counts()
        self._check_eval_is_on()
        self._check_hold_out()
        self._check_run_rewards_label()

    def _check_device(self) -> None:
        """``model.device`` spelt as each of polyrl's own backends of the run reads it, here, so
        ``polyrl launch --dry-run`` refuses ``"abc"``; a third-party backend's names are checked
        from its plugin before the engines load (``polyrl.engines.check_engines``)."""
        b = self.backends
        backends = [b.train, b.generate_backend] + ([b.reference_backend] if self.algorithm.beta > 0 else [])
        check_builtin_devices(self.model.device, backends)

    def _check_run_rewards_label(self) -> None:
        """``eval.reward = "run"`` means every ``[[rewards]]`` entry, weighted; with a reward
        labelled "run" among others (a function named ``run``) it silently scored with all of them
        where the entry may have been meant."""
        if self.eval.reward != RUN_REWARDS or len(self.rewards) < 2:
            return
        named = next((i for i, r in enumerate(self.rewards) if r.label == RUN_REWARDS), None)
        if named is not None:
            raise ConfigError(f'eval.reward = "{RUN_REWARDS}" scores with every reward, weighted, and '
                              f'rewards[{named}] is labelled "{RUN_REWARDS}" too', field=f"rewards[{named}].label",
                              fix=f'give that entry another label (label = "{RUN_REWARDS}_2") and set eval.reward to '
                                  "it, or keep eval.reward = \"run\" for every reward")

    def _check_eval_is_on(self) -> None:
        """eval.count = 0 turns evaluation off: an eval file, split or other eval setting given with it
        would be ignored without a word (an ``eval_path`` with no ``count`` is the usual slip)."""
        if self.eval.count > 0:
            return
        given = [(f, v) for f, v in (("data.eval_path", self.data.eval_path), ("data.eval_split", self.data.eval_split),
                                     ("data.eval_rows", self.data.eval_rows),
                                     ("eval.every", self.eval.every or None), ("eval.samples", self.eval.samples or None),
                                     ("eval.max_new_tokens", self.eval.max_new_tokens),
                                     ("eval.greedy", None if self.eval.greedy else False),
                                     ("eval.before", None if self.eval.before else False))
                 if v is not None]
        if self.eval.reward != EvalSection.reward_default():
            given.append(("eval.reward", self.eval.reward))
        if given:
            field, value = given[0]
            raise ConfigError(f"is set ({value!r}) but eval.count is 0, which turns evaluation off: nothing would be "
                              "evaluated", field=field,
                              fix=f"set eval.count to the held-out prompts to evaluate (e.g. count = 100), or remove {field}")

    def _check_hold_out(self) -> None:
        """``data.options.eval_count`` holds a file's rows out for evaluation, which a run sizes by
        eval.count: a value beside another eval.count, another eval source or no evaluation at all
        was replaced or left rows out of training unread, without a word."""
        held = self.data.options.get("eval_count") if self.data.task is None else None
        if not held:  # none, 0 (nothing held out), or a task's (refused as the data section is read)
            return
        data, count = self.data, self.eval.count
        source = next((f for f, v in (("data.eval_path", data.eval_path), ("data.eval_split", data.eval_split),
                                      ("data.eval_rows", data.eval_rows)) if v is not None), None)
        if count == 0:
            problem, fix = ("eval.count is 0 (no evaluation): they would never be evaluated",
                            f"set count = {held} under [eval] and remove data.options.eval_count, or remove it")
        elif source is not None:
            problem, fix = (f"the evaluation reads {source}: they would never be evaluated",
                            "remove data.options.eval_count (eval.count rows are read from the eval source)")
        elif held != count:
            problem, fix = (f"eval.count = {count} sizes the held-out rows too",
                            f"remove data.options.eval_count (eval.count holds {count} rows out), or set "
                            "eval.count to the number of rows to evaluate on")
        else:
            return
        raise ConfigError(f"holds {held} rows out of training for evaluation, and {problem}",
                          field="data.options.eval_count", fix=fix)

    def _check_some_reward_counts(self) -> None:
        """Every weight 0 makes the combined reward 0 for every sample: every advantage is 0 and the
        run trains nothing while it looks healthy (weight 0 is for a reward logged, not trained on)."""
        if any(reward.weight != 0 for reward in self.rewards):
            return
        raise ConfigError("every reward has weight 0, so the combined reward is 0 for every sample and nothing "
                          "would train", field="rewards[0].weight" if len(self.rewards) == 1 else "rewards",
                          fix="give the reward(s) to train on a nonzero weight (weight = 0 keeps a reward for "
                              "logging only)")

    def _check_reward_labels(self) -> None:
        """One label per entry: it names the reward's metrics and, for a function, its plugin (two
        files' ``score`` functions would otherwise both be ``score``)."""
        first: dict[str, int] = {}
        for i, reward in enumerate(self.rewards):
            if reward.label in first:
                what = f"function {reward.function!r}" if reward.function else f"reward {reward.name!r}"
                raise ConfigError(
                    f"{what} is labelled {reward.label!r}, as rewards[{first[reward.label]}] is "
                    "(a label defaults to the reward's or the function's name)", field=f"rewards[{i}].label",
                    fix=f'give this entry its own label, e.g. label = "{reward.label}_2", or merge the entries')
            first[reward.label] = i

    def _check_values(self) -> None:
        """Every numeric field in range (``polyrl.validators``), then the limits fields set on each other."""
        sections: list[tuple[str, Any]] = [
            ("model", self.model), ("backends", self.backends), ("generation", self.generation),
            ("algorithm", self.algorithm), ("optimizer", self.optimizer), ("train", self.train),
            ("eval", self.eval), ("data", self.data), ("logging", self.logging),
            ("environment", self.environment),
        ]
        if self.lora is not None:
            sections.append(("lora", self.lora))
        sections += [(f"rewards[{i}]", r) for i, r in enumerate(self.rewards)]
        for path, record in sections:
            check_record(record, path)
        limit = self.model.max_length
        for field, tokens in (("generation.max_new_tokens", self.generation.max_new_tokens),
                              ("eval.max_new_tokens", self.eval.max_new_tokens)):
            if tokens is not None and tokens >= limit:
                raise ConfigError(
                    f"{tokens} leaves no room for the prompt in model.max_length = {limit}", field=field,
                    fix=f"lower {field} or raise model.max_length (prompt + completion tokens)",
                )
        if self.model.reference_path is not None and self.algorithm.beta == 0:
            raise ConfigError("the reference model is used only by the KL term, which algorithm.beta = 0 turns off",
                              field="model.reference_path",
                              fix="set algorithm.beta > 0 (e.g. 0.04), or remove model.reference_path")
        if self.backends.reference is not None and self.algorithm.beta == 0:  # not even its name was checked
            raise ConfigError("the reference backend runs only the KL term's model, and algorithm.beta = 0 "
                              "turns it off", field="backends.reference",
                              fix="set algorithm.beta > 0 (e.g. 0.04), or remove backends.reference")
        env = self.environment
        gen = self.generation
        if self.algorithm.mask_truncated_completions and gen.ignore_eos and not gen.stop and not env.enabled:
            raise ConfigError("with generation.ignore_eos every completion runs to max_new_tokens, so every one "
                              "is truncated and masked out: nothing would ever train",
                              field="algorithm.mask_truncated_completions",
                              fix="set it to false, or generation.ignore_eos = false")
        if env.enabled and env.max_episode_tokens >= limit:
            raise ConfigError(f"{env.max_episode_tokens} leaves no room for the prompt in model.max_length = {limit}",
                              field="environment.max_episode_tokens",
                              fix="lower it or raise model.max_length (prompt + episode tokens)")
        self._check_overlong_buffer()
        self._check_greedy_groups()
        self._check_group_size()
        self._check_minibatches()

    def _check_overlong_buffer(self) -> None:
        """A token buffer longer than the completions it shapes is refused here, not at the first
        step after the models load (the trainer resolves it against the same length)."""
        algo, env = self.algorithm, self.environment
        buf = algo.overlong_buffer
        if buf is None or isinstance(buf, float):  # a fraction always fits
            return
        if algo.max_completion_length is not None:  # an explicit length wins (checked by AlgorithmConfig)
            return
        length, source = ((env.max_episode_tokens, "environment.max_episode_tokens") if env.enabled
                          else (self.generation.max_new_tokens, "generation.max_new_tokens"))
        if buf > length:
            raise ConfigError(f"{buf} tokens exceeds the completion length it shapes, {source} = {length}",
                              field="algorithm.overlong_buffer",
                              fix=f"use at most {length} tokens or a fraction such as 0.2, or raise {source}")

    def _check_greedy_groups(self) -> None:
        """Greedy sampling gives a group ``group_size`` identical completions, so a group-relative
        advantage is 0 for every sample and nothing trains; an environment may still vary them."""
        gen = self.generation
        if gen.temperature != 0 or self.environment.enabled or self.algorithm.advantage not in GROUP_RELATIVE_ADVANTAGES:
            return
        raise ConfigError(f"0 (greedy) samples the {gen.group_size} completions of a group identically, so "
                          f"{self.algorithm.name}'s group-relative advantage is always 0 and nothing would train",
                          field="generation.temperature",
                          fix="use a temperature > 0, e.g. 1.0 (greedy evaluation needs no setting: eval is greedy)")

    def _check_group_size(self) -> None:
        """One sample per prompt trains only where no statistic is taken over a prompt's group
        (REINFORCE's batch baseline, unscaled or batch-scaled), and then the batch needs two."""
        size, algo = self.generation.group_size, self.algorithm
        if size >= 2:
            return
        needed = algo.needs_groups()
        if needed is not None:
            raise ConfigError(f"must be >= 2 here, got {size}: {needed[0]}", field="generation.group_size",
                              fix=needed[1])
        if self.train.prompts_per_step < 2:
            raise ConfigError(f"{self.train.prompts_per_step} prompt x 1 sample per step: {algo.name}'s batch-mean "
                              "baseline equals the only reward, so every advantage is 0 and nothing trains",
                              field="train.prompts_per_step", fix="use 2 or more, or generation.group_size >= 2")

    def _check_minibatches(self) -> None:
        """More mini-batches than a step samples would leave some with nothing to train, every step."""
        samples = self.train.prompts_per_step * self.generation.group_size
        if self.algorithm.minibatches > samples:
            raise ConfigError(f"{self.algorithm.minibatches} mini-batches but a step samples only "
                              f"{samples} completions (train.prompts_per_step x generation.group_size)",
                              field="algorithm.minibatches", fix=f"use at most {samples}, or sample more per step")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        if not isinstance(data, Mapping):
            raise ConfigError(f"a config must be a table of sections, got {type(data).__name__}", field="config",
                              fix="pass a dict like {'model': {...}, 'data': {...}, 'rewards': [...]}")
        check_depth(data, "")
        known = {f.name for f in attrs.fields(cls)}
        for key in data:
            if key not in known:
                what = (f"unknown section [{key}]" if isinstance(data[key], (Mapping, list))
                        else f"unknown key {key!r} outside any section")
                raise ConfigError(what, field=key, fix=_top_level_fix(str(key), data[key], known))
        for key, value in data.items():
            if key == "rewards":
                if not isinstance(value, list) or not all(isinstance(r, Mapping) for r in value):
                    raise ConfigError("must be an array of tables ([[rewards]])", field="rewards",
                                      fix='write each reward as [[rewards]] with name = "..." under it')
            elif not isinstance(value, Mapping):
                raise ConfigError(f"[{key}] must be a table, got {type(value).__name__}", field=key,
                                  fix=f"write it as a [{key}] section with key = value lines")
        if "model" not in data:
            raise ConfigError("missing [model] section", field="model.path",
                              fix='add [model] with path = "smollm2-135m-instruct" or a local folder')
        if "data" not in data:
            raise ConfigError("missing [data] section", field="data", fix='add [data] with task = "arithmetic"')
        rewards = data.get("rewards", [])
        if not isinstance(rewards, list):
            raise ConfigError("must be an array of tables ([[rewards]])", field="rewards")
        algorithm = dict(data.get("algorithm", {}))
        name = algorithm.pop("name", "grpo")
        return cls(
            model=build(ModelSection, data["model"], "model"),
            data=build(DataSection, data["data"], "data"),
            rewards=[build(RewardSection, r, f"rewards[{i}]") for i, r in enumerate(rewards)],
            backends=build(BackendsSection, data.get("backends", {}), "backends"),
            generation=build(GenerationSection, data.get("generation", {}), "generation"),
            algorithm=_algorithm(name, algorithm),
            optimizer=build(OptimizerConfig, data.get("optimizer", {}), "optimizer"),
            lora=build(LoraConfig, data["lora"], "lora") if "lora" in data else None,
            train=build(TrainSection, data.get("train", {}), "train"),
            eval=build(EvalSection, data.get("eval", {}), "eval"),
            logging=build(LoggingSection, data.get("logging", {}), "logging"),
            environment=build(EnvironmentSection, data.get("environment", {}), "environment"),
        )

    @classmethod
    def from_toml(cls, path: str | Path, overrides: tuple[str, ...] = ()) -> RunConfig:
        """The config in the TOML file ``path``, with ``KEY=VALUE`` ``overrides`` (``--set``) applied."""
        check_path_text(str(path), "config")  # is_file() raises on a NUL or a name past 255 bytes
        # "~" is the home folder, as in train.output_dir and --resume: a quoted "~/runs/x.toml"
        # (a script's variable, no shell to expand it) was "not found"
        path = Path(path).expanduser()
        if not path.is_file():
            loop = symlink_loop(path)
            if loop:
                raise ConfigError(f"config file {str(path)!r} cannot be followed: {loop}", field="config",
                                  fix=f"{LOOP_FIX}, or pass the path of an existing TOML file")
            what = ("is a directory" if path.is_dir() else "is not a regular file (a FIFO, a device)"
                    if path.exists() else "not found")
            raise ConfigError(f"config file {str(path)!r} {what}", field="config",
                              fix="pass the path of an existing TOML file")
        try:
            with path.open("rb") as file:  # no more than the cap: a 1 GB file took 2 GB and 20 s to refuse
                raw = file.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}", field="config",
                              fix="check the file's permissions") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {str(path)!r} is larger than {MAX_CONFIG_BYTES >> 20} MiB, where a run "
                              "config is a few KB of settings", field="config",
                              fix="pass the run's TOML config; rows go in a data file named by data.path")
        # a UTF-16 file (Notepad's "Unicode", PowerShell 5's ">") was "line 1 is not valid UTF-8 (byte
        # 0xff)", or without a byte order mark "not valid TOML": name the encoding and iconv's command
        refuse_wide_text(path, raw[:HEAD_BYTES], "config")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise ConfigError(f"{path} line {line} is not valid UTF-8 (byte {raw[exc.start]:#04x})", field="config",
                              fix="save the file as UTF-8 (TOML files must be UTF-8)") from None
        # a byte-order mark (Windows editors' "UTF-8 with BOM") was "Invalid statement (at line 1, column 1)";
        # it holds no setting, and the data files' readers skip it too
        text = text.removeprefix("\ufeff")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            from polyrl.config_format import hint

            raise ConfigError(f"{path} is not valid TOML: {exc}", field="config",
                              fix=hint(text, str(exc), path.name)) from None
        except ValueError as exc:  # int()'s digit limit, which tomllib lets through as is
            if not long_numbers.is_digit_limit(exc):
                raise
            raise ConfigError(f"{path} {long_numbers.problem(text)}", field="config",
                              fix=long_numbers.SETTING_FIX) from None
        except RecursionError:
            raise ConfigError(f"{path} nests tables or arrays too deeply to parse", field="config",
                              fix="flatten the nesting; no polyrl setting nests more than a few levels") from None
        if overrides:
            from polyrl.config_overrides import apply_overrides

            data = apply_overrides(data, overrides)
        return cls.from_dict(data)


#: Bytes of a config file read at most. Why: a run config is a few KB; a data file or an image passed
#: by mistake (1 GB) was read and decoded whole, 2 GB of memory and 20 s before "not valid TOML", and
#: TOML's parser takes about 16 s per 100 MB of comments.
MAX_CONFIG_BYTES = 16 << 20


#: Tables a TRL or peft user may name for polyrl's (``[peft]`` for ``[lora]``).
_SECTION_ALIASES = {"peft": "lora", "peft_config": "lora", "lora_config": "lora", "training": "train",
                    "trainer": "train", "training_args": "train", "sampling": "generation", "dataset": "data",
                    "datasets": "data", "reward": "rewards", "reward_funcs": "rewards", "optim": "optimizer",
                    "evaluation": "eval", "log": "logging", "env": "environment"}


def _top_level_fix(key: str, value: Any, known: set[str]) -> str:
    """The fix for an unknown name outside any table: TRL's name, then (for a table) the section
    it stands for, then the table that has a key of that name, then a close key, then the sections.
    Why the section before the key: ``[[reward]]`` was sent to eval.reward, a key of another table."""
    fix = trl_fix(key, value)  # a GRPOConfig name written outside any table
    if fix is not None:
        return fix
    if isinstance(value, (Mapping, list)):
        section = close_section(key, known)
        if section == "rewards":
            return "did you mean [[rewards]]? write each reward as a [[rewards]] table (two brackets)"
        if section is not None:
            return f"did you mean [{section}]? rename the table to [{section}]"
    owners = key_owners(key)
    if owners:
        table, _, name = owners[0].rpartition(".")
        return f"polyrl's key of that name is {' or '.join(owners)}: write {name} = ... in [{table}]"
    close = key_typo(key)
    if close is not None:
        return f"did you mean {close!r}? " + _top_level_fix(close, value, known)
    close = trl_typo(key)
    if close is not None:
        return f"did you mean TRL's {close!r}? " + _top_level_fix(close, value, known)
    return f"valid sections: {', '.join(sorted(known))}"


def close_section(name: str, known: typing.Iterable[str] | None = None) -> str | None:
    """The section an unknown table name stands for: TRL's or peft's name for it (``[peft]``), else
    a close spelling (``[genration]``); None when neither."""
    names = sorted(section_classes() if known is None else known)
    return _SECTION_ALIASES.get(name.lower()) or next(iter(difflib.get_close_matches(name, names, n=1)), None)


def section_classes() -> dict[str, type]:
    """Each TOML table's name and the attrs class that validates it, in the config reference's order."""
    return {"model": ModelSection, "backends": BackendsSection, "generation": GenerationSection,
            "algorithm": AlgorithmConfig, "optimizer": OptimizerConfig, "lora": LoraConfig,
            "data": DataSection, "rewards": RewardSection, "train": TrainSection, "eval": EvalSection,
            "logging": LoggingSection, "environment": EnvironmentSection}


def key_owners(key: str) -> list[str]:
    """``section.key`` for every section that has ``key`` (``lr`` -> ``["optimizer.lr"]``), for the
    fix of a key written in the wrong table or outside any."""
    return [f"{name}.{key}" for name, cls in section_classes().items()
            if any(f.name == key and f.init for f in attrs.fields(cls))]


def _algorithm(name: Any, overrides: dict[str, Any]) -> AlgorithmConfig:
    check_type(name, typing.get_type_hints(AlgorithmConfig)["name"], "algorithm.name")
    fields = [f.name for f in attrs.fields(AlgorithmConfig)]
    for key, value in overrides.items():
        if key not in fields:
            raise ConfigError(f"unknown key {key!r}", field=f"algorithm.{key}",
                              fix=unknown_key_fix(key, value, fields))
    base = AlgorithmConfig.preset(name)
    refuse_preset_shaping_under_gdpo(name, overrides)
    checked = build(AlgorithmConfig, {**attrs.asdict(base), **overrides}, "algorithm")
    check_given_keys_act(checked, overrides)
    return checked


def check_world_size(config: RunConfig, world_size: int) -> None:
    """The rules a run of ``world_size`` processes must meet: checked by the trainer on every rank
    and by ``polyrl launch`` once, before it starts any."""
    if world_size > config.train.prompts_per_step:
        raise ConfigError(f"{world_size} processes but only {config.train.prompts_per_step} prompts per step",
                          field="train.prompts_per_step", fix=f"set it to at least {world_size} (one per rank)")
    if config.generation.overlap and world_size > 1:
        raise ConfigError("overlap is not supported under a launcher yet (each rank's pending rollout would "
                          "need a checkpoint of its own)", field="generation.overlap",
                          fix="set generation.overlap = false, or train in one process")
