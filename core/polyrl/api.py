"""The Python API in the style of the seed documents::

    from polyrl import run, grpo, Agent, GenerationConfig, GRPOConfig

    summary = run(
        grpo,
        policy=Agent("smollm2-135m-instruct", backend="torch"),
        ref_policy=Agent("smollm2-135m-instruct"),
        prompts=[{"prompt": "What is 2 + 3?", "answer": "5"}, ...],
        rewards=["numeric_match", my_reward_function],
        generation_config=GenerationConfig(backend="torch", max_new_tokens=32),
        grpo_config=GRPOConfig(beta=0.04, epsilon=0.2, steps=20),
    )

It builds the same ``RunConfig`` a TOML file would and runs the same ``Trainer``. ``rewards``
reads TRL's ``reward_funcs`` the way ``GRPOTrainer`` does (see ``reward_entries``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ParamSpec, TypeVar

import attrs

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.config import (
    BackendsSection,
    DataSection,
    EvalSection,
    GenerationSection,
    ModelSection,
    RewardSection,
    RunConfig,
    TrainSection,
    plain_label,
)
from polyrl.errors import ConfigError
from polyrl.global_rngs import seed_global_rngs
from polyrl.column_dicts import column_dict_error, is_column_dict, one_row_error
from polyrl.data_file_args import data_file_error
from polyrl.one_conversation import MESSAGE_ROWS_FIX, refuse_one_conversation
from polyrl.trl_config import (
    BEST_KEPT,
    EVERY_EPOCH,
    EVAL_FRACTION,
    ROUNDED_SAVE,
    SAVE_EVERY_EPOCH,
    SAVE_FRACTION,
    SAVE_ON_BEST,
    WARMUP_FRACTION,
    resolve_fractions,
    rounded_save_warning,
)
from polyrl.trl_window import explain_no_room, with_model_window
from polyrl.types import LoraConfig, OptimizerConfig, as_lora_config
from polyrl.validators import MAX_LR, MAX_REWARD_WEIGHT, fits_float, intended_lr, shown

grpo, dapo, dr_grpo, rloo, reinforce = "grpo", "dapo", "dr_grpo", "rloo", "reinforce"


@attrs.define(frozen=True)
class Agent:
    """A model and the backend that trains it (the policy) or scores with it (the reference)."""

    model: str
    backend: str = "torch"
    #: polyrl's LoraConfig, or a ``peft.LoraConfig`` (converted for ``model``: peft's default
    #: targets are per family; unsupported fields refused)
    lora: LoraConfig | None = None
    dtype: str = "float32"
    #: mixed precision (``[model] compute_dtype``): matmuls in it over ``dtype`` weights; None computes in ``dtype``
    compute_dtype: str | None = None

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "lora", as_lora_config(self.lora, self.model))


@attrs.define(frozen=True)
class GenerationConfig:
    backend: str | None = None  # default: the policy's backend
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    ignore_eos: bool = False
    group_size: int = 4
    stop: tuple[str, ...] = ()
    max_model_path: str | None = None


#: polyrl's ``table.key`` -> the ``GRPOConfig`` argument that sets it (the rest go to ``settings``)
_ARGUMENTS = {"algorithm.beta": "beta", "algorithm.epsilon": "epsilon", "algorithm.epsilon_high": "epsilon_high",
              "algorithm.num_iterations": "num_iterations", "algorithm.loss_aggregation": "loss_aggregation",
              "algorithm.scale_rewards": "scale_rewards", "train.steps": "steps", "train.epochs": "epochs",
              "train.prompts_per_step": "prompts_per_step", "train.seed": "seed", "train.threads": "threads",
              "train.output_dir": "output_dir", "optimizer.lr": "learning_rate",
              "optimizer.max_grad_norm": "max_grad_norm", "rewards[].weight": "reward_weights",
              "model.chat_template_kwargs": "chat_template_kwargs"}


def _where(key: str) -> str:
    """Where polyrl's ``table.key`` is set from Python."""
    if key in _ARGUMENTS:
        return f"GRPOConfig({_ARGUMENTS[key]}=...)"
    table, _, name = key.partition(".")
    if table == "generation":
        return f"GenerationConfig({name}=...)"
    return f"GRPOConfig(settings={{{key!r}: ...}})"


def _refuse_unknown_arguments(given: Mapping[str, Any]) -> None:
    """TRL's names (and typos) as GRPOConfig arguments: one ConfigError naming polyrl's for each,
    instead of Python's TypeError without a hint."""
    from polyrl.config import key_owners
    from polyrl.configtools import unknown_key_fix
    from polyrl.trl_names import TRL_NAMES

    valid = [f.name for f in attrs.fields(GRPOConfig)]
    unknown = [k for k in given if k not in valid]
    if not unknown:
        return
    fixes = []
    for key in unknown:
        entry = TRL_NAMES.get(key)
        owners = key_owners(key)
        if entry is None and owners:  # a config key the constructor does not take by name
            fixes.append(f"{key}: set it with {_where(owners[0])}")
        elif entry is None:
            fixes.append(f"{key}: {unknown_key_fix(key, given[key], valid, other_tables=False)}")
        elif entry.key is None:
            fixes.append(f"{key}: remove it (TRL's {key} has no polyrl equivalent: {entry.note})")
        else:
            fixes.append(f"{key}: TRL's {key} is polyrl's {entry.key}, set with {_where(entry.key)}")
    raise ConfigError(f"GRPOConfig got {len(unknown)} unknown argument{'s' if len(unknown) > 1 else ''} "
                      f"({', '.join(unknown)})", field=f"grpo_config.{unknown[0]}",
                      fix="; ".join(fixes) + " (or pass a trl.GRPOConfig to GRPOConfig.from_trl)")


@attrs.define(frozen=True)
class GRPOConfig:
    """Algorithm knobs plus the few run settings a notebook user changes most. TRL's names as
    arguments are a ConfigError naming polyrl's; ``from_trl`` reads a ``trl.GRPOConfig``."""

    beta: float | None = None
    epsilon: float | None = None
    epsilon_high: float | None = None
    num_iterations: int | None = None
    loss_aggregation: str | None = None
    scale_rewards: str | None = None
    steps: int = 10
    prompts_per_step: int = 8
    learning_rate: float = 1e-5
    max_grad_norm: float | None = 1.0
    seed: int = 0
    threads: int | None = None
    output_dir: str = "runs/api"
    #: TRL's ``reward_weights``: one weight per entry of ``rewards``, in order (default: 1.0 each)
    reward_weights: Sequence[float] | None = None
    #: TRL's ``num_train_epochs`` (when no ``max_steps``): steps = epochs x the whole batches of
    #: prompts_per_step prompts, as TRL counts them (``epoch_steps``)
    epochs: float | None = None
    #: TRL's ``chat_template_kwargs``: extra variables for the policy's chat template
    #: (``{"enable_thinking": False}`` for Qwen3), polyrl's ``model.chat_template_kwargs``
    chat_template_kwargs: Mapping[str, Any] | None = None
    #: any other polyrl ``table.key`` -> value (``"optimizer.schedule": "linear"``); set over the
    #: run's other settings (``from_trl`` puts TRL's values here)
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    #: set by ``from_trl``: the algorithm values are TRL's (a value left out is polyrl's grpo
    #: default, which TRL trains with too), so ``run`` refuses a named preset that changes one
    _from_trl: bool = attrs.field(default=False, repr=False, alias="_from_trl")
    #: set by ``from_trl``: TRL's ``bf16`` (its default True), which ``run_config`` reads as the
    #: policy's compute dtype on its backend (``trl_compute_dtype``) where the ``Agent`` sets none
    _trl_bf16: bool = attrs.field(default=False, repr=False, alias="_trl_bf16")
    #: set by ``from_trl``: TRL's ``disable_dropout``, checked against the policy's dropout
    #: (``check_trl_dropout``); None for polyrl's own config
    _trl_disable_dropout: bool | None = attrs.field(default=None, repr=False, alias="_trl_disable_dropout")
    #: set by ``from_trl``: TRL's ``per_device_train_batch_size``, the micro-batch ``run_config``
    #: trains a MoE model's router term over (``router_micro_batch``); None for polyrl's own config
    _trl_micro_batch: int | None = attrs.field(default=None, repr=False, alias="_trl_micro_batch")
    #: set by ``from_trl``: TRL's ``logging_steps``, ``eval_steps`` and ``save_steps`` as written,
    #: which a reward's ``trainer_state`` shows as transformers' ``compute_steps`` sets them (the
    #: numbers ``polyrl.trl.GRPOTrainer`` gives); None for polyrl's own config (its intervals)
    _trl_steps: Mapping[str, Any] | None = attrs.field(default=None, repr=False, alias="_trl_steps")
    #: set by ``from_trl``: the TRL fields its completions table follows (``TRL_TABLE_FIELDS``), which
    #: ``run`` applies to the trackers (``_follow_trl_table``); None for polyrl's own config
    _trl_table: Mapping[str, Any] | None = attrs.field(default=None, repr=False, alias="_trl_table")

    def __new__(cls, *args: Any, **kwargs: Any) -> GRPOConfig:
        _refuse_unknown_arguments(kwargs)
        return super().__new__(cls)

    def __attrs_post_init__(self) -> None:
        from polyrl.chat_kwargs import checked

        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not fits_float(lr) or lr <= 0:
            # named here: OptimizerConfig's own "lr must be > 0" named no field the caller wrote
            raise ConfigError(f"learning_rate = {shown(lr)} is no AdamW step size polyrl trains with (a finite "
                              "number above 0; 0 would train nothing)", field="grpo_config.learning_rate",
                              fix="set learning_rate above 0, e.g. 1e-6 (TRL's default)")
        if lr >= MAX_LR:  # a lost exponent sign (5e6): named as the argument written, with the value meant
            guess = intended_lr(lr)
            raise ConfigError(f"learning_rate = {shown(lr)} is no AdamW step size (below {MAX_LR:g}): AdamW moves every "
                              "weight by about the learning rate per update, so this wipes out the model in one step",
                              field="grpo_config.learning_rate",
                              fix=f"did you mean learning_rate={guess} (the exponent's minus sign lost)?" if guess
                              else "set e.g. learning_rate=1e-6 (TRL's default)")
        if not self._from_trl:  # from_trl's settings are TRL's values, checked and named by its fields
            check_settings(self.settings)
        if self.chat_template_kwargs is not None:  # named as the argument the caller wrote
            object.__setattr__(self, "chat_template_kwargs",
                               checked(self.chat_template_kwargs, "grpo_config.chat_template_kwargs"))

    @classmethod
    def from_trl(cls, trl_config: Any, *, tools: bool = False) -> GRPOConfig:
        """``trl_config`` (a ``trl.GRPOConfig``) with TRL's values, defaults included, for every
        field polyrl has (``polyrl.trl_names``); a changed field polyrl cannot honour is one
        ConfigError naming it. Logs the values that differ from polyrl's own defaults. ``tools``:
        the run has tools (``polyrl.trl.GRPOTrainer(tools=...)``), which reads the tool-calling
        fields itself (``trl_config.agent_settings``), so they are not refused here."""
        from polyrl.logs import get_logger
        from polyrl.trl_config import REQUESTS, trl_settings

        if not _is_trl_config(trl_config):
            raise ConfigError(f"from_trl takes a trl.GRPOConfig, got {type(trl_config).__name__}",
                              field="grpo_config", fix="pass trl.GRPOConfig(...), or build polyrl's GRPOConfig")
        values = trl_settings(trl_config, agent=tools)
        ours = _polyrl_defaults()
        changed = {k: v for k, v in values.items() if k not in ours or ours[k] != v}
        kept = {k: v for k, v in values.items() if k in changed or _carried_as_is(k, values)}
        arguments = {_ARGUMENTS[k]: v for k, v in values.items()
                     if k in _ARGUMENTS and (k in kept or not k.startswith("algorithm."))}
        settings = {k: v for k, v in kept.items() if k not in _ARGUMENTS}
        if "train.epochs" in values:
            arguments["steps"] = 1  # replaced by epochs once the prompts are known
        config = cls(**arguments, settings=settings, _from_trl=True, _trl_bf16=bool(getattr(trl_config, "bf16", False)),
                     _trl_disable_dropout=bool(getattr(trl_config, "disable_dropout", False)),
                     _trl_micro_batch=int(trl_config.per_device_train_batch_size),
                     _trl_steps={f"{kind}_steps": getattr(trl_config, f"{kind}_steps", None)
                                 for kind in ("logging", "eval", "save")},
                     _trl_table={name: getattr(trl_config, name, None) for name in TRL_TABLE_FIELDS})
        get_logger("polyrl.api").info("polyrl settings taken from TRL's GRPOConfig (TRL's value where polyrl's "
                                      "default differs)",
                                      taken=", ".join(f"{k} = {shown(v)}" for k, v in changed.items()
                                                      if k not in REQUESTS))
        return config


def trl_compute_dtype(config: GRPOConfig, backend: str) -> str | None:
    """The compute dtype TRL's ``bf16`` asks of a policy on ``backend`` (``trl_config.compute_dtype``);
    None for a config not read from TRL's (polyrl's own has no ``bf16``)."""
    from polyrl.trl_config import compute_dtype

    return compute_dtype(config._trl_bf16, backend)


def check_trl_dropout(config: GRPOConfig, policy: Agent) -> None:
    """TRL's ``disable_dropout`` against the dropout polyrl trains ``policy`` with: one ConfigError
    where they differ (``trl_config.refuse_dropout_difference``); nothing for polyrl's own config."""
    from polyrl.trl_config import refuse_dropout_difference

    if config._trl_disable_dropout is None:
        return
    refuse_dropout_difference(config._trl_disable_dropout, _model_config(policy.model),
                              policy.lora.dropout if policy.lora is not None else 0.0)


def router_micro_batch(config: GRPOConfig, model: str, coef: float | None) -> int | None:
    """``optimizer.micro_batch_size`` for a config read from TRL's on a Mixture-of-Experts model
    whose router term is on (``coef``, None: the model's own): TRL's ``per_device_train_batch_size``.
    Why: TRL adds ``coef x aux_loss`` of each micro-batch of that many completions, and the
    load-balancing loss is not linear in a micro-batch's tokens (a product of two means over
    them), so polyrl's term over a larger micro-batch (by default the whole rank's batch) was
    another quantity; a dense model's loss is the same at any micro-batch size, so it is left as
    it was. None: nothing to carry (polyrl's own config, a dense model, the term off)."""
    from polyrl.backend_kit.router_aux import is_moe, own_coef

    if config._trl_micro_batch is None or coef == 0.0:
        return None
    loaded = _model_config(model)
    if loaded is None or not is_moe(loaded):
        return None
    if coef is None and own_coef(loaded) == 0.0:  # null: an error line, as at startup
        return None
    return config._trl_micro_batch


def _model_config(model: str) -> dict[str, Any] | None:
    """A model folder's (or cached Hub id's) ``config.json``; None where there is none to read here
    (a polyrl model name, a file that is no JSON object: the load names those)."""
    from polyrl.hub import looks_like_hub_id, resolve_cached

    folder = Path(model)
    if not folder.is_dir() and looks_like_hub_id(model):
        try:
            folder = Path(resolve_cached(model))
        except ConfigError:
            return None
    try:
        loaded = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _carried_as_is(key: str, values: Mapping[str, Any]) -> bool:
    """Whether TRL's value of ``key`` is kept even where it equals polyrl's default. Why: a
    generation value is compared with an explicit ``GenerationConfig`` (one equal to polyrl's
    default was dropped, and the other one won silently), and under a ``loss_type`` that picks a
    preset the grpo defaults are not the preset's (luspo's clip). Otherwise a value left out is
    the grpo preset's, which TRL trains with too; ``run`` refuses a named preset that would change
    it (``_refuse_preset_over_trl``)."""
    return key.startswith("generation.") or ("algorithm.name" in values and key.startswith("algorithm."))


def _is_trl_config(value: Any) -> bool:
    """A ``trl.GRPOConfig`` (or a subclass), told without importing TRL."""
    return any(c.__name__ == "GRPOConfig" and c.__module__.startswith("trl.") for c in type(value).__mro__)


def _polyrl_defaults() -> dict[str, Any]:
    """polyrl's own value of each ``table.key`` a TRL config can set (the ``grpo`` preset's for
    the algorithm), for the log of what TRL's config changed."""
    sections: dict[str, Any] = {"generation": GenerationSection(), "algorithm": AlgorithmConfig.preset("grpo"),
                                "optimizer": OptimizerConfig(), "train": TrainSection()}
    out = {f"{table}.{name}": value for table, record in sections.items() for name, value in attrs.asdict(
        record, recurse=False).items()}
    out.update({"train.output_dir": attrs.fields(GRPOConfig).output_dir.default, "train.epochs": None,
                "model.chat_template_kwargs": {},
                "data.shuffle": attrs.fields(DataSection).shuffle.default})
    return out


def _data_frame_library(value: Any) -> str | None:
    """The library of a data frame (``"pandas"``, ``"polars"``...), told without importing it."""
    for c in type(value).__mro__:
        if c.__name__ == "DataFrame":
            return c.__module__.partition(".")[0]
    return None


def _frame_rows(frame: Any, library: str) -> list[dict[str, Any]]:
    """A pandas DataFrame's rows as ``datasets.Dataset.from_pandas`` gives them to TRL (Python
    values, None for a missing object value); the index is not a column. Another library's frame
    is refused: it too would iterate as its columns."""
    if library != "pandas":
        raise ConfigError(f"prompts is a {library} DataFrame, which iterates as its columns, not its rows",
                          field="prompts", fix="pass a datasets.Dataset made from it (e.g. Dataset.from_polars(df)) "
                                               "or a list of row dicts")
    import datasets

    return list(datasets.Dataset.from_pandas(frame, preserve_index=False))


#: rows fetched per ``Dataset.__getitems__`` call (``_hf_dataset_rows``)
_FETCH_ROWS = 1024


def _is_hf_dataset(value: Any) -> bool:
    """A 🤗 ``datasets.Dataset`` (a map-style one), told without importing datasets."""
    return any(c.__name__ == "Dataset" and c.__module__.startswith("datasets.") for c in type(value).__mro__)


def _hf_dataset_rows(dataset: Any) -> list[dict[str, Any]]:
    """A 🤗 Dataset's rows as TRL's DataLoader fetches them (``Dataset.__getitems__``), in its
    format. Why not iterate it: with ``with_format("numpy")`` iteration gives other types than
    indexing (a 0-d array for a bool TRL passes as ``np.True_``, float64 for float32) and with
    ``with_format("pandas")`` a one-row DataFrame per row, which became the prompt. A format whose
    rows are no dicts (``"arrow"``, which TRL cannot read either) is one error."""
    rows: list[dict[str, Any]] = []
    kind = (getattr(dataset, "format", None) or {}).get("type")
    for start in range(0, len(dataset), _FETCH_ROWS):
        try:
            part = dataset.__getitems__(list(range(start, min(start + _FETCH_ROWS, len(dataset)))))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"the dataset is a datasets.Dataset formatted as {kind!r} whose rows cannot be read "
                              f"({type(exc).__name__}: {exc})", field="prompts",
                              fix="pass dataset.with_format(None) (TRL's reward functions get each row as a dict)") \
                from None
        bad = next((row for row in part if not isinstance(row, Mapping)), None)
        if bad is not None:
            raise ConfigError(f"the dataset is a datasets.Dataset formatted as {kind!r}, whose rows are "
                              f"{type(bad).__name__}s, not dicts", field="prompts",
                              fix="pass dataset.with_format(None) (TRL's reward functions get each row as a dict)")
        rows.extend(dict(row) for row in part)
    return rows


def prompt_rows(prompts: Any) -> list[dict[str, Any]]:
    """``prompts`` as dataset rows. Why the checks: a ``DatasetDict`` (``load_dataset(...)``
    without ``split``) iterates as its split names, a string as its characters and a data frame as
    its column names, so each would train on prompts such as "train" instead of the data (a pandas
    DataFrame is read as its rows instead); a 🤗 Dataset is read as TRL reads it (``_hf_dataset_rows``);
    a 🤗 IterableDataset is refused: read whole, an endless one never returned (``polyrl.trl`` streams
    one as TRL does, ``polyrl.trl_streams``)."""
    library = _data_frame_library(prompts)
    if library is not None:
        return _frame_rows(prompts, library)
    if _is_hf_dataset(prompts):
        return _hf_dataset_rows(prompts)
    if type(prompts).__name__ == "IterableDataset":  # read whole, an endless stream hung the run unsaid
        raise ConfigError("prompts is an IterableDataset, which may never end; polyrl reads the prompts whole",
                          field="prompts", fix="pass a datasets.Dataset (e.g. prompts=Dataset.from_list("
                                               "list(stream.take(N)))), or train through polyrl.trl.GRPOTrainer "
                                               "with trl.GRPOConfig(max_steps=N), which streams it as TRL does")
    if is_column_dict(prompts):  # dataset[:n]: its columns, which the split error below told to pick one of
        raise column_dict_error(prompts, "prompts")
    row = one_row_error(prompts, "prompts")
    if row is not None:
        raise row
    if isinstance(prompts, Mapping):
        splits = list(prompts)
        raise ConfigError(f"prompts is a {type(prompts).__name__} of splits ({', '.join(map(repr, splits))}), "
                          "not a sequence of prompts", field="prompts",
                          fix=f"pass one split, e.g. prompts=dataset[{(splits or ['train'])[0]!r}]")
    if isinstance(prompts, (str, bytes)):
        as_path = data_file_error(prompts, "prompts")
        if as_path is not None:
            raise as_path
        raise ConfigError("prompts is one string, which would be read as one prompt per character",
                          field="prompts", fix="pass a list of prompts, e.g. prompts=[\"What is 2 + 3?\"]")
    refuse_one_conversation(prompts)
    return [p if isinstance(p, dict) else {"prompt": p} for p in prompts]


def _is_torch_module(value: Any) -> bool:
    """A ``torch.nn.Module`` (a ``PreTrainedModel``), told without importing torch."""
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module" for c in type(value).__mro__)


def reward_model_options(folder: str) -> dict[str, Any]:
    """The ``reward_model`` options for a folder passed as TRL's ``reward_funcs`` takes one. Why
    ``max_length``: TRL tokenizes the whole prompt + completion for its reward model (no
    truncation in ``GRPOTrainer._calculate_rewards``), where the reward_model's default of 1024
    tokens would cut a longer pair from the left without a word, scoring a completion without its
    question; the model's own position limit (``max_position_embeddings``) is the most it reads."""
    import json

    options: dict[str, Any] = {"path": folder}
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return options  # the reward_model names what is wrong with the folder when it loads it
    limit = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        options["max_length"] = limit
    return options


def is_reward_model_folder(reward: Any) -> bool:
    """Whether ``reward_entries`` reads ``reward`` as a reward model: a string naming a local
    folder with a config.json."""
    return isinstance(reward, str) and (Path(reward) / "config.json").is_file()


def trl_model_name(model_id: str) -> str:
    """The name TRL 1.16 logs a reward model under (``rewards/<name>/mean``): the last "/"-part
    of its model id (``config._name_or_path``: for a folder, the string given, so a trailing "/"
    is TRL's empty name)."""
    return model_id.split("/")[-1]


def warn_shared_trl_names(sections: Sequence[RewardSection], plugins: Sequence[Any]) -> None:
    """Warn for each TRL name that two or more of ``sections`` share where one is a reward model
    (two folders both named ``final``; ``plugins``: ``reward_entries``' own): TRL logs one
    ``rewards/<name>/mean``, the mean of theirs, and so does polyrl, which keeps each under its own
    label too. Why: two reward models' numbers merged in one key with no word read as one model's.
    Functions sharing a name are not told: passing one function twice is a choice, and TRL merges
    those alike."""
    from polyrl.step_metrics import trl_reward_names

    names = trl_reward_names(plugins)
    by_name: dict[str, list[RewardSection]] = {}
    for section in sections:
        by_name.setdefault(names.get(section.label, section.label), []).append(section)
    for name, shared in by_name.items():
        if len(shared) > 1 and any(s.name == "reward_model" for s in shared):
            from polyrl.logs import get_logger

            get_logger("polyrl.api").warning(
                f"rewards {', '.join(s.label for s in shared)} share TRL's name {name!r}, so TRL's "
                f"rewards/{name}/mean and /std hold the mean of their numbers, as TRL logs them; each one's own is "
                f"under {', '.join(f'reward/{s.label}/mean' for s in shared)}",
                fix="give the reward model folders different names to tell them apart in TRL's keys")


def _plain_label(name: str) -> str:
    """A callable's TRL name as a polyrl label (``config.plain_label``): a ``/`` (``__name__ =
    "math/accuracy"``, which TRL logs as ``rewards/math/accuracy/mean``) becomes ``_``. TRL's keys
    keep the name (``FunctionReward.trl_name``)."""
    return plain_label(name)


def reward_entries(rewards: Any, weights: Sequence[float] | None = None,
                   tokenizers: Sequence[str | None] | None = None,
                   dtypes: Sequence[str | None] | None = None,
                   model_names: Sequence[str | None] | None = None) -> tuple[list[RewardSection], list[Any]]:
    """The ``[[rewards]]`` entries and function plugins for ``rewards``, read as TRL reads
    ``reward_funcs``: one reward or a list; a function is named as TRL names it (a partial after
    the function it wraps, a callable object after its class; a repeated name gets ``_2``, ``_3``,
    and TRL's metric names stay the function's: ``rewards/f/mean`` the mean of both, as TRL logs it);
    a string naming a local model folder is a reward model (polyrl's ``reward_model``, labelled
    ``reward_model``, ``reward_model_2``... when there are several). A model
    object or a Hub id is one error saying how to pass it; ``weights`` is TRL's ``reward_weights``.
    ``tokenizers``, aligned with ``rewards``: the folder holding the tokenizer each reward model
    scores with (its ``tokenizer`` option: TRL's ``reward_processing_classes``, which
    ``polyrl.trl`` saves); None, or an entry for another reward, leaves the model folder's own.
    ``dtypes``, aligned the same way: the ``dtype`` option each reward model loads in (TRL's,
    from ``polyrl.trl``); None leaves the reward_model's default. ``model_names``, aligned the same
    way: the name TRL logs each reward model under (``polyrl.trl``: a model object's, saved to a
    folder named otherwise); None, a folder's own (``trl_model_name``). A reward model's TRL name
    is returned among the plugins (``TrlRewardName``), as a function's is its plugin's ``trl_name``."""
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.step_metrics import TrlRewardName

    if isinstance(rewards, (str, bytes)) or callable(rewards):
        rewards = [rewards]
    if not isinstance(rewards, Sequence):
        raise ConfigError(f"rewards is {type(rewards).__name__}", field="rewards",
                          fix="pass a reward or a list of rewards (names, reward model folders, callables)")
    if weights is None:
        weights = [1.0] * len(rewards)
    elif isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != len(rewards):
        count = len(weights) if isinstance(weights, Sequence) else type(weights).__name__
        raise ConfigError(f"reward_weights has {count} weights for {len(rewards)} rewards",
                          field="grpo_config.reward_weights",
                          fix=f"give {len(rewards)} weights, one per entry of rewards and in the same order")
    elif any(isinstance(w, numbers.Real) and not isinstance(w, bool) and fits_float(w)
             and abs(w) > MAX_REWARD_WEIGHT for w in weights):  # RunConfig says so too, naming the TOML field
        raise ConfigError(f"reward_weights = {shown(list(weights))} holds a weight past {MAX_REWARD_WEIGHT:g} in size, "
                          "which overflows float64 when it multiplies a score (the rewards inf or NaN)",
                          field="grpo_config.reward_weights",
                          fix=f"give each reward a weight within ±{MAX_REWARD_WEIGHT:g} (scale its scores instead)")
    elif rewards and all(w == 0 for w in weights):  # RunConfig says so too, naming the TOML field
        raise ConfigError("every reward weight is 0, so the combined reward is 0 for every sample and nothing "
                          "would train", field="grpo_config.reward_weights",
                          fix="give the rewards to train on a nonzero weight (0 keeps a reward for logging only)")
    sections: list[RewardSection] = []
    plugins: list[Any] = []
    names: set[str] = set()
    models: dict[str, str] = {}  # a reward model's label -> its TRL name

    def unused(base: str) -> str:
        name, k = base, 1
        while name in names:
            k += 1
            name = f"{base}_{k}"
        return name

    for i, (reward, weight) in enumerate(zip(rewards, weights)):
        if is_reward_model_folder(reward):
            options = reward_model_options(reward)
            tokenizer = tokenizers[i] if tokenizers is not None and i < len(tokenizers) else None
            if tokenizer is not None:
                options["tokenizer"] = tokenizer
            dtype = dtypes[i] if dtypes is not None and i < len(dtypes) else None
            if dtype is not None:
                options["dtype"] = dtype
            sections.append(RewardSection(name="reward_model", weight=weight, options=options,
                                          label=unused("reward_model")))
            given = model_names[i] if model_names is not None and i < len(model_names) else None
            models[sections[-1].label] = trl_model_name(reward) if given is None else given
        elif isinstance(reward, str) and "/" in reward:
            raise ConfigError(f"rewards[{i}] = {reward!r} is neither a reward name nor a model folder with a "
                              "config.json (TRL would download it as a reward model)", field=f"rewards[{i}]",
                              fix="download the model to a folder (hf download REPO --local-dir DIR) and pass "
                                  "that folder, which polyrl scores with through its reward_model reward")
        elif isinstance(reward, str):
            sections.append(RewardSection(name=reward, weight=weight))
        elif _is_torch_module(reward):
            raise ConfigError(f"rewards[{i}] is a {type(reward).__name__} object (TRL scores with a model object "
                              "as a reward model); polyrl loads reward models from a folder", field=f"rewards[{i}]",
                              fix="save it and its tokenizer with save_pretrained(DIR) and pass DIR in rewards")
        elif callable(reward):
            plugin = function_reward_plugin(reward)
            name = unused(_plain_label(plugin.name))
            if name != plugin.name:  # its own label; its logs under TRL's name for it (TRL names both alike)
                trl_name, plugin = plugin.name, function_reward_plugin(reward, name=name)
                plugin.trl_name = trl_name
            plugins.append(plugin)
            sections.append(RewardSection(name=name, weight=weight))
        else:
            raise ConfigError(f"rewards[{i}] is {type(reward).__name__}", field=f"rewards[{i}]",
                              fix="pass a reward name, a reward model folder or a callable")
        names.add(sections[-1].label)
    plugins.extend(TrlRewardName(label, name) for label, name in models.items() if name != label)
    return sections, plugins


_P = ParamSpec("_P")
_R = TypeVar("_R")

#: ``trl.GRPOTrainer``'s argument -> how ``run`` takes it (None: ``run`` has no counterpart)
_TRAINER_ARGUMENTS: dict[str, str | None] = {
    "model": "policy=Agent(model, backend=...)", "reward_funcs": "rewards=...", "train_dataset": "prompts=...",
    "args": "grpo_config=... (a trl.GRPOConfig is read as TRL reads it)",
    "peft_config": "policy=Agent(..., lora=...)", "eval_dataset": None, "processing_class": None,
    "reward_processing_classes": None, "callbacks": None, "optimizers": None, "quantization_config": None,
    "tools": None, "rollout_func": None, "environment_factory": None}


def _refuse_trainer_arguments(unknown: Sequence[str], valid: Sequence[str]) -> None:
    """One ConfigError for keyword arguments ``run`` does not take (TRL's ``GRPOTrainer``
    names, typos), naming ``run``'s argument for each. Why: Python's bare TypeError says neither."""
    fixes, trl = [], False
    for key in unknown:
        if key in _TRAINER_ARGUMENTS:
            trl = True
            ours = _TRAINER_ARGUMENTS[key]
            fixes.append(f"{key}: TRL's GRPOTrainer({key}=...) is run({ours})" if ours else
                         f"{key}: run() has no {key} (TRL's GRPOTrainer argument)")
        elif key in {f.name for f in attrs.fields(GRPOConfig)}:
            fixes.append(f"{key}: pass it as grpo_config=GRPOConfig({key}=...)")
        else:
            close = difflib.get_close_matches(key, valid, n=1)
            fixes.append(f"{key}: did you mean {close[0]}?" if close else
                         f"{key}: run() takes {', '.join(valid)}")
    fix = "; ".join(fixes)
    if trl:
        fix += ("; or keep TRL's arguments unchanged with `from polyrl.trl import GRPOTrainer` "
                "(GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...).train())")
    raise ConfigError(f"run() got {len(unknown)} unknown argument{'s' if len(unknown) > 1 else ''} "
                      f"({', '.join(unknown)})", field=unknown[0], fix=fix)


def _refuses_unknown_keywords(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function``, with a keyword argument it does not take refused by
    ``_refuse_trainer_arguments`` before Python binds the call (a call with TRL's names also
    lacks ``policy`` and ``prompts``, which would be Python's TypeError first). The signature
    stays ``function``'s for type checkers."""
    valid = list(inspect.signature(function).parameters)

    @functools.wraps(function)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        unknown = [k for k in kwargs if k not in valid]
        if unknown:
            _refuse_trainer_arguments(unknown, valid)
        return function(*args, **kwargs)

    return checked


@_refuses_unknown_keywords
def run(
    algorithm: str,
    *,
    policy: Agent,
    prompts: Sequence[Any],
    rewards: Sequence[str | Callable[..., Any]] | str | Callable[..., Any] = ("numeric_match",),
    ref_policy: Agent | None = None,
    generation_config: GenerationConfig | None = None,
    grpo_config: GRPOConfig | Any | None = None,
    eval_count: int = 0,
    progress: bool = True,
    eval_prompts: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Train ``policy`` with ``algorithm`` on ``prompts`` (strings, chats, row dicts, or a 🤗
    ``Dataset``) with ``rewards`` (names, functions, reward model folders: ``reward_entries``);
    ``grpo_config`` may be a ``trl.GRPOConfig`` (read by ``GRPOConfig.from_trl``). ``eval_prompts``:
    held-out rows to evaluate on (TRL's ``eval_dataset``; ``eval_count`` of them, all when 0)."""
    if _is_trl_config(grpo_config):  # read here too: its step intervals go to the trainer below
        grpo_config = GRPOConfig.from_trl(grpo_config)
    config, plugins = run_config(algorithm, policy=policy, prompts=prompts, rewards=rewards, ref_policy=ref_policy,
                                 generation_config=generation_config, grpo_config=grpo_config, eval_count=eval_count,
                                 eval_prompts=eval_prompts)
    warn_shared_trl_names(config.rewards, plugins)
    # here, not in ``make_trainer``: ``polyrl.trl.GRPOTrainer`` seeds when it is built, as transformers'
    # Trainer does, and builds its trainer in ``train()``, which must not seed a second time
    seed_global_rngs(config.train.seed)
    trainer = make_trainer(config, plugins)
    if isinstance(grpo_config, GRPOConfig) and grpo_config._trl_steps is not None:
        trainer.trl_steps = dict(grpo_config._trl_steps)
        trainer.trl_train_batch_size = grpo_config._trl_micro_batch  # transformers' state.train_batch_size
    if isinstance(grpo_config, GRPOConfig) and grpo_config._trl_table is not None:
        _follow_trl_table(trainer, grpo_config)
    return trainer.run(progress=progress)


#: the ``trl.GRPOConfig`` fields that say when and how its completions table is shown (``logging_steps``
#: is in ``GRPOConfig._trl_steps``)
TRL_TABLE_FIELDS = ("log_completions", "num_completions_to_print", "log_unique_prompts", "logging_strategy",
                    "logging_first_step")


def _follow_trl_table(trainer: Any, cfg: GRPOConfig) -> None:
    """The trackers of a run from a ``trl.GRPOConfig`` get the completions table as
    ``polyrl.trl.GRPOTrainer``'s do (``trl_completions.follow``): only with ``log_completions``, at
    the steps TRL logs at (``logging_steps``, ``logging_first_step``, each epoch's end), printed and
    written to parquet there. Why: ``run`` sent it every step whatever the config said; its numbers
    still go every step (``logging_steps``: polyrl writes every step's metrics)."""
    from types import SimpleNamespace

    from polyrl.trl_callbacks import STEPS_DEFAULT, compute_steps
    from polyrl.trl_completions import follow
    from polyrl.trl_log_steps import logs_line

    tracking = getattr(trainer, "tracking", None)
    if tracking is None:  # (a Trainer stand-in in the tests has none)
        return
    args = SimpleNamespace(**dict(cfg._trl_table or {}), **dict(cfg._trl_steps or {}))
    per_step = int(trainer.config.algorithm.updates_per_step)
    state = SimpleNamespace(logging_steps=STEPS_DEFAULT)  # transformers' compute_steps: a fraction of max_steps
    compute_steps(state, args, trainer.config.train.steps * per_step)
    follow(tracking, args, logs_at=functools.partial(logs_line, args, state.logging_steps, per_step=per_step),
           file_scale=per_step)


def make_trainer(config: RunConfig, plugins: Sequence[Any], resume: str | None = None, engines: Any = None) -> Any:
    """The ``Trainer`` for ``run_config``'s answer (``resume``: as ``Trainer``'s, "" for the newest
    checkpoint; ``engines``: loaded ones it uses, as ``Trainer``'s); a prompt column error is told
    as a fix to the ``prompts`` passed in."""
    from polyrl.trainer import Trainer

    given: dict[str, Any] = {}  # (a Trainer stand-in in the tests takes neither)
    if resume is not None:
        given["resume"] = resume
    if engines is not None:
        given["engines"] = engines
    try:
        return Trainer(config, extra_plugins=tuple(plugins), **given)
    except ConfigError as exc:
        raise _prompts_error(exc) from None


#: why ``polyrl.api.run`` refuses a TRL field that needs the best metric kept (``trl_config.BEST_KEPT``)
_BEST_REFUSED = {
    "load_best_model_at_end": "TRL's load_best_model_at_end loads the checkpoint of the best evaluation at the end, "
                              "and polyrl.api.run keeps no best metric (polyrl.trl.GRPOTrainer does): the last "
                              "step's model would be the one exported",
    "metric_for_best_model": "TRL's metric_for_best_model with a save_total_limit keeps the best evaluation's "
                             "checkpoint from pruning, and polyrl.api.run keeps no best metric (polyrl.trl.GRPOTrainer "
                             "does): it would be pruned as any other"}
_BEST_FIX = {
    "load_best_model_at_end": "train with polyrl.trl.GRPOTrainer, or remove load_best_model_at_end",
    "metric_for_best_model": "train with polyrl.trl.GRPOTrainer, or set save_total_limit=None (every checkpoint "
                             "kept), or remove metric_for_best_model"}


def run_config(
    algorithm: str,
    *,
    policy: Agent,
    prompts: Sequence[Any],
    rewards: Sequence[str | Callable[..., Any]] | str | Callable[..., Any] = ("numeric_match",),
    ref_policy: Agent | None = None,
    generation_config: GenerationConfig | None = None,
    grpo_config: GRPOConfig | Any | None = None,
    eval_count: int = 0,
    eval_prompts: Sequence[Any] | None = None,
    reward_tokenizers: Sequence[str | None] | None = None,
    reward_dtypes: Sequence[str | None] | None = None,
    reward_names: Sequence[str | None] | None = None,
) -> tuple[RunConfig, list[Any]]:
    """``run``'s ``RunConfig`` and reward function plugins, built without running
    (``reward_tokenizers``, ``reward_dtypes``, ``reward_names``: ``reward_entries``' ``tokenizers``,
    ``dtypes`` and ``model_names``, from ``polyrl.trl``). An error on a
    polyrl key one ``trl.GRPOConfig`` field set names that field (``grpo_config.max_completion_length``,
    not ``generation.max_new_tokens``: the script never wrote polyrl's key), as ``polyrl.trl`` does."""
    if _is_trl_config(grpo_config):
        grpo_config = GRPOConfig.from_trl(grpo_config)
    try:
        return _run_config(algorithm, policy=policy, prompts=prompts, rewards=rewards, ref_policy=ref_policy,
                           generation_config=generation_config, grpo_config=grpo_config, eval_count=eval_count,
                           eval_prompts=eval_prompts, reward_tokenizers=reward_tokenizers,
                           reward_dtypes=reward_dtypes, reward_names=reward_names)
    except ConfigError as exc:
        explain_no_room(exc, grpo_config, policy)  # MAX, MLX: a fix a TRL script can apply
        key = exc.field
        # from TRL: the settings from_trl wrote, and the GRPOConfig's own values (the algorithm,
        # optimizer and train ones; not generation.*, which a GenerationConfig may have set)
        if isinstance(grpo_config, GRPOConfig) and grpo_config._from_trl and key and (
                key in grpo_config.settings or key.split(".")[0] in ("algorithm", "optimizer", "train")):
            from polyrl.trl_names import trl_field_of

            name = trl_field_of(key)
            if name is not None:
                exc.renamed(f"grpo_config.{name}", in_fix=True)
        raise


def _run_config(
    algorithm: str,
    *,
    policy: Agent,
    prompts: Sequence[Any],
    rewards: Sequence[str | Callable[..., Any]] | str | Callable[..., Any],
    ref_policy: Agent | None,
    generation_config: GenerationConfig | None,
    grpo_config: GRPOConfig | Any | None,
    eval_count: int,
    eval_prompts: Sequence[Any] | None,
    reward_tokenizers: Sequence[str | None] | None,
    reward_dtypes: Sequence[str | None] | None = None,
    reward_names: Sequence[str | None] | None = None,
) -> tuple[RunConfig, list[Any]]:
    """``run_config``'s work (a ``trl.GRPOConfig`` already converted), its errors named by polyrl's keys."""
    gen = generation_config or GenerationConfig()
    if grpo_config is not None and not isinstance(grpo_config, GRPOConfig):
        raise ConfigError(f"grpo_config is a {type(grpo_config).__name__}", field="grpo_config",
                          fix="pass polyrl.api.GRPOConfig(...) or a trl.GRPOConfig")
    cfg = grpo_config or GRPOConfig()
    check_trl_dropout(cfg, policy)
    cfg = with_model_window(cfg, policy)  # TRL caps no prompt + completion: the model's own limit (torch)
    rows = prompt_rows(prompts)
    if not rows:
        raise ConfigError("no prompts given", field="prompts", fix="pass at least one prompt")
    settings = dict(cfg.settings)
    eval_rows = _eval_rows(eval_prompts, settings)
    if eval_rows is not None and settings.pop(EVERY_EPOCH, False):  # TRL's eval_strategy "epoch"
        settings["eval.every"] = max(1, len(rows) // cfg.prompts_per_step)  # TRL's epoch: whole batches
    if settings.pop(SAVE_EVERY_EPOCH, False):  # TRL's save_strategy "epoch": a checkpoint at each epoch's end
        settings["train.checkpoint_every"] = max(1, len(rows) // cfg.prompts_per_step)
    if settings.pop(SAVE_ON_BEST, False):  # left for polyrl.trl.GRPOTrainer's callbacks, which keep the best
        raise ConfigError("TRL's save_strategy = 'best' checkpoints each evaluation that beats the best metric, "
                          "which polyrl.api.run does not keep (polyrl.trl.GRPOTrainer does)",
                          field="grpo_config.save_strategy",
                          fix='train with polyrl.trl.GRPOTrainer, or set save_strategy="steps" (or "epoch")')
    best_field = settings.pop(BEST_KEPT, None)  # left for polyrl.trl.GRPOTrainer's callbacks, as SAVE_ON_BEST
    if best_field is not None:
        raise ConfigError(_BEST_REFUSED.get(best_field, _BEST_REFUSED["metric_for_best_model"]),
                          field=f"grpo_config.{best_field}", fix=_BEST_FIX.get(best_field, _BEST_FIX["metric_for_best_model"]))
    trl_preset = settings.pop("algorithm.name", None)
    algorithm = _preset(algorithm, trl_preset)
    overrides = {k: v for k, v in attrs.asdict(cfg).items()
                 if k in {f.name for f in attrs.fields(AlgorithmConfig)} and v is not None}
    overrides.update({k.partition(".")[2]: settings.pop(k) for k in list(settings) if k.startswith("algorithm.")})
    if cfg._from_trl and algorithm != (trl_preset or grpo):
        _refuse_preset_over_trl(algorithm, overrides)
    reward_sections, plugins = reward_entries(rewards, cfg.reward_weights, reward_tokenizers, reward_dtypes,
                                              reward_names)
    if cfg._from_trl:  # TRL loads a reward-model folder with from_pretrained's dtype "auto" by default
        reward_sections = [attrs.evolve(s, options={"dtype": "auto", **s.options})
                           if s.name == "reward_model" and "path" in s.options else s for s in reward_sections]
    if cfg.chat_template_kwargs:  # TRL renders its reward models' chat templates with them too
        reward_sections = [attrs.evolve(s, options={**s.options, "chat_template_kwargs": dict(cfg.chat_template_kwargs)})
                           if s.name == "reward_model" and "path" in s.options else s for s in reward_sections]
    model_compute = policy.compute_dtype or trl_compute_dtype(cfg, policy.backend)
    if cfg._from_trl and model_compute in ("bfloat16", "float16"):  # TRL's bf16: accelerate autocasts them too
        reward_sections = [attrs.evolve(s, options={**s.options, "compute_dtype": model_compute})
                           if s.name == "reward_model" and "path" in s.options else s for s in reward_sections]
    # kept as given where the prompts are fewer: the Trainer warns and draws some prompts twice
    # per step, as it does for a TOML config (it was shrunk to the rows without a word)
    prompts_per_step = cfg.prompts_per_step
    algorithm_config = AlgorithmConfig.preset(algorithm, **overrides)
    steps = cfg.steps if cfg.epochs is None else epoch_steps(cfg.epochs, len(rows), prompts_per_step,
                                                             algorithm_config.updates_per_step)
    rounded = settings.pop(ROUNDED_SAVE, None)  # TRL's save_steps 500 rounded in a run of epochs
    if rounded is not None:
        rounded_save_warning(steps * rounded[0], rounded[0], rounded[1])
    resolve_fractions(settings, steps)  # TRL's save_steps, eval_steps, warmup_steps below 1 in a run of epochs
    config = RunConfig(
        model=ModelSection(path=policy.model, dtype=policy.dtype,
                           compute_dtype=model_compute,
                           reference_path=ref_policy.model if ref_policy else None,
                           chat_template_kwargs=dict(cfg.chat_template_kwargs or {})),
        data=DataSection(rows=rows, eval_rows=eval_rows),
        rewards=reward_sections,
        backends=BackendsSection(train=policy.backend, generate=gen.backend,
                                 reference=ref_policy.backend if ref_policy else None),
        generation=GenerationSection(group_size=gen.group_size, max_new_tokens=gen.max_new_tokens,
                                     temperature=gen.temperature, top_p=gen.top_p, top_k=gen.top_k,
                                     min_p=gen.min_p, repetition_penalty=gen.repetition_penalty,
                                     ignore_eos=gen.ignore_eos, stop=list(gen.stop), max_model_path=gen.max_model_path),
        algorithm=algorithm_config,
        optimizer=OptimizerConfig(lr=cfg.learning_rate, max_grad_norm=cfg.max_grad_norm),
        lora=policy.lora,
        train=TrainSection(steps=steps, prompts_per_step=prompts_per_step,
                           seed=cfg.seed, threads=cfg.threads, output_dir=cfg.output_dir),
        eval=EvalSection(count=eval_count or (len(eval_rows) if eval_rows is not None else 0)),
    )
    micro = router_micro_batch(cfg, policy.model, algorithm_config.router_aux_loss_coef)
    if micro is None and cfg._trl_micro_batch is not None and algorithm_config.top_entropy_quantile < 1.0:
        # TRL ranks the token entropies of each micro-batch of per_device_train_batch_size completions
        # (get_high_entropy_mask): polyrl's threshold, over its whole batch, selected other tokens
        micro = cfg._trl_micro_batch
    if micro is not None and "optimizer.micro_batch_size" not in settings:  # TRL's micro-batch: its router term
        settings["optimizer.micro_batch_size"] = micro
    return with_settings(config, settings, generation_config), plugins


def _eval_rows(eval_prompts: Sequence[Any] | None, settings: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``eval_prompts`` as rows (None: none given). Evaluation settings without them (a
    ``trl.GRPOConfig`` with an ``eval_strategy``) are one error: TRL refuses an eval_strategy
    without an eval_dataset too."""
    if eval_prompts is None:
        asked = next((k for k in settings if k.startswith("eval.")), None)
        if asked is not None:
            raise ConfigError(f"the grpo_config evaluates ({asked}: TRL's eval_strategy or eval_on_start) but no "
                              "evaluation rows were given", field="eval_prompts",
                              fix="pass eval_prompts=<held-out rows> (TRL's eval_dataset), or set "
                                  'eval_strategy="no" and eval_on_start=False')
        return None
    try:
        rows = prompt_rows(eval_prompts)
    except ConfigError as exc:
        raise ConfigError(exc.message.replace("prompts", "eval_prompts", 1), field="eval_prompts",
                          fix=(exc.fix or "").replace("prompts=", "eval_prompts=")) from None
    if not rows:
        raise ConfigError("eval_prompts is empty", field="eval_prompts",
                          fix="pass at least one held-out row, or leave eval_prompts out")
    return rows


def epoch_steps(epochs: float, prompts: int, prompts_per_step: int, updates_per_step: int = 1) -> int:
    """polyrl's ``train.steps`` for TRL's ``num_train_epochs`` over ``prompts`` rows. Why TRL's
    arithmetic: its ``RepeatSampler`` keeps whole batches of ``prompts_per_step`` prompts only (the
    rest of each epoch is dropped), each reused for ``updates_per_step`` updates (``num_iterations``
    x ``minibatches``), and the HF Trainer runs ``ceil(epochs x updates per epoch)`` updates; a
    polyrl step is one batch and all its updates, so a count that stops part-way through a batch is
    refused."""
    if prompts < prompts_per_step:
        raise ConfigError(f"{epochs} epochs of {prompts} prompts with prompts_per_step = {prompts_per_step}: not one "
                          "whole batch per epoch, so TRL would train nothing", field="grpo_config.epochs",
                          fix=f"set prompts_per_step (TRL's generation_batch_size / num_generations) to {prompts} or "
                              "fewer, add prompts, or give a number of steps (TRL's max_steps)")
    updates = math.ceil(epochs * ((prompts // prompts_per_step) * updates_per_step))
    if updates % updates_per_step:
        raise ConfigError(f"{epochs} epochs of {prompts // prompts_per_step} whole batches of {prompts_per_step} "
                          f"prompts is {updates} optimizer updates in TRL's count, not a whole number of rollout "
                          f"batches of num_iterations x minibatches = {updates_per_step} updates each (TRL would stop "
                          "part-way through the last batch; a polyrl step is one batch and all its updates)",
                          field="grpo_config.epochs",
                          fix="set the epochs (TRL's num_train_epochs) to a whole number, or give a number of steps "
                              "(TRL's max_steps, a multiple of num_iterations x minibatches)")
    return max(1, updates // updates_per_step)


#: "row 3 of eval_rows": the error is about a row of ``eval_prompts`` (``load_train_and_eval`` names them so)
_EVAL_ROW = re.compile(r"\bof eval_rows\b")
#: a prompt-length error naming a row of ``prompts`` or ``eval_prompts``
_ROW_ERROR = re.compile(r"^row \d+ of (eval_)?rows\b")


def _rows_field(message: str) -> str:
    """The ``run`` argument holding the rows an error about ``data`` names: ``eval_prompts`` for a
    row of the held-out rows given, else ``prompts``."""
    return "eval_prompts" if _EVAL_ROW.search(message) else "prompts"


def _prompts_error(exc: ConfigError) -> ConfigError:
    """``exc``, or where it points at a TOML key ``run`` has no argument for, the same problem told
    about the ``prompts`` (or ``eval_prompts``) passed in. ``data.prompt_column`` gets a fix for
    the rows passed in; ``data`` (a row's prompt, role or column refused: every row ``run`` reads
    is one passed in) and an overlong row's ``model.max_length`` (which neither ``run`` nor a TRL
    script sets) name the argument. Why: "data: row 0 of rows ..." named a section no script
    wrote, and the fix for a long prompt named two TOML keys it could not set."""
    if exc.field == "data":
        return ConfigError(exc.message, field=_rows_field(exc.message), fix=exc.fix)
    if exc.field == "model.max_length" and _ROW_ERROR.match(exc.message):
        return ConfigError(exc.message, field=_rows_field(exc.message),
                           fix="shorten or remove that row (a 🤗 Dataset: dataset.filter(...) on the prompt's length), "
                               'or raise the limit with polyrl.api.GRPOConfig(settings={"model.max_length": ...})')
    if exc.field != "data.prompt_column":
        return exc
    if exc.fix and exc.fix.startswith(MESSAGE_ROWS_FIX):  # a dataset of messages: its fix, in Python's words
        fix = ('pass one conversation per prompt, e.g. prompts=[[{"role": "user", "content": ...}]], or rows '
               'holding the messages as a list: prompts=[{"prompt": [{"role": "user", "content": ...}], "answer": ...}] '
               "(each row here is one message)")
        field = "eval_prompts" if re.match(r"row \d+ of eval_rows\b", exc.message) else "prompts"
        return ConfigError(exc.message.replace("eval_rows", "eval_prompts", 1), field=field,
                           fix=fix.replace("prompts=", f"{field}="))
    fix = ('name the column that holds the prompts "prompt", as TRL expects '
           '(a 🤗 Dataset: dataset.rename_column("question", "prompt")), or pass the prompts as a list')
    if re.search(r"its columns: .*\bmessages\b", exc.message):
        fix += ("; a messages column holds whole conversations: keep the turns before the answer as prompt "
                "and put the answer in a column the reward reads")
    if re.match(r"row \d+ of eval_rows\b", exc.message):  # the held-out rows: it named the training prompts
        return ConfigError(exc.message.replace("eval_rows", "eval_prompts", 1), field="eval_prompts",
                           fix=fix.replace("or pass the prompts as a list", "or pass them as a list of strings"))
    return ConfigError(exc.message, field="prompts", fix=fix)


def _preset(algorithm: str, from_trl: str | None) -> str:
    """The preset to run: ``algorithm``, or TRL's loss that is a preset when ``algorithm`` is grpo."""
    if from_trl is None or from_trl == algorithm:
        return algorithm
    if algorithm == grpo:
        return from_trl
    raise ConfigError(f"run({algorithm!r}) but the grpo_config's loss_type is the {from_trl!r} preset",
                      field="grpo_config.loss_type", fix=f"run one of them: run({from_trl!r}, ...) or another loss_type")


def _trl_spelling(key: str, value: Any) -> tuple[str, Any] | None:
    """polyrl's ``algorithm.key = value`` as the ``trl.GRPOConfig`` field and value that set it
    (None: TRL has no field for it)."""
    from polyrl.trl_names import TRL_NAMES, Preset

    for name, entry in TRL_NAMES.items():
        if entry.key == f"algorithm.{key}":
            spelled = [t for t, v in entry.values.items() if v == value and not isinstance(v, Preset)]
            return name, spelled[0] if spelled else value
    return None


def _refuse_preset_over_trl(algorithm: str, overrides: Mapping[str, Any]) -> None:
    """One ConfigError when ``run(algorithm, grpo_config=<a TRL config>)`` names a preset whose
    own values differ from the ones the TRL config trains with. Why: ``overrides`` hold TRL's
    values only where they differ from the grpo preset's (also TRL's), so the named preset's
    values replaced the rest silently (``run(dapo, ...)`` added clip-higher 0.28, dynamic sampling
    and overlong shaping that the TRL config never asked for, and undid its own scale_rewards)."""
    from polyrl.algorithms.presets import PRESETS
    from polyrl.trl_names import TRL_NAMES, Preset

    trl = AlgorithmConfig.preset(grpo, **overrides)  # what the TRL config trains (its loss preset is handled first)
    conflicts = []
    for key, value in PRESETS[algorithm].items():
        theirs = trl.clip_eps_high if key == "epsilon_high" else getattr(trl, key)
        if value != theirs:
            conflicts.append((key, value, theirs))
    if not conflicts:
        return
    said = "; ".join(f"{key} = {shown(value)} where the TRL config trains with {shown(theirs)}"
                     for key, value, theirs in conflicts)
    fix = f"drop the preset name: run({grpo!r}, ...) trains the trl.GRPOConfig as TRL does (its loss_type picks " \
          "cispo, sapo, luspo or vespo)"
    spelled = {key: _trl_spelling(key, value) for key, value, _ in conflicts}
    if Preset(algorithm) in TRL_NAMES["loss_type"].values.values():  # TRL's loss of that name: from_trl reads it
        fix += f", or set loss_type={algorithm!r} in the trl.GRPOConfig (TRL's {algorithm} loss)"
        first = "loss_type"
    else:
        in_trl = [f"{pair[0]}={pair[1]!r}" for pair in spelled.values() if pair is not None]
        not_in_trl = [key for key, pair in spelled.items() if pair is None]
        if in_trl:
            fix += f", or set {', '.join(in_trl)} in the trl.GRPOConfig"
        if not_in_trl:
            fix += (f"; TRL has no field for {', '.join(not_in_trl)}: for the {algorithm} preset's, pass polyrl's "
                    "GRPOConfig instead of a TRL config")
        pair = spelled[conflicts[0][0]]
        first = pair[0] if pair is not None else conflicts[0][0]
    where = f"grpo_config.{first}" if first in TRL_NAMES else f"algorithm.{first}"
    raise ConfigError(f"run({algorithm!r}) with a trl.GRPOConfig: the {algorithm} preset would replace values the "
                      f"TRL config trains with: {said}", field=where, fix=fix)


#: the keys ``with_settings`` takes outside its whole tables
_OTHER_SETTINGS = ("data.shuffle", "model.max_length")
#: the tables ``with_settings`` takes whole
_WHOLE_TABLES = ("generation", "optimizer", "train", "eval", "logging")
#: ``GRPOConfig.settings`` keys that are requests ``run_config`` turns into config keys, not keys
_REQUESTS = (EVERY_EPOCH, SAVE_EVERY_EPOCH, SAVE_ON_BEST, BEST_KEPT, ROUNDED_SAVE, SAVE_FRACTION, EVAL_FRACTION,
             WARMUP_FRACTION, "algorithm.name")


def _setting_changes(sections: Any, settings: Mapping[str, Any],
                     generation_config: GenerationConfig | None = None) -> dict[str, dict[str, Any]]:
    """``settings`` as table -> field -> value over ``sections`` (a ``RunConfig``, or its records
    by table name); an unknown key, or a generation value ``generation_config`` sets differently, refused."""
    changes: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        table, _, name = key.partition(".") if isinstance(key, str) else ("", "", "")
        section = getattr(sections, table, None) if table in _WHOLE_TABLES or key in _OTHER_SETTINGS else None
        if section is None or name not in {f.name for f in attrs.fields(type(section))}:
            raise ConfigError(f"unknown setting {key!r}", field=f"grpo_config.settings.{key}",
                              fix="name a generation.*, optimizer.*, train.*, eval.* or logging.* key of the Config "
                                  "reference, data.shuffle or model.max_length")
        if table == "generation" and generation_config is not None:
            mine = getattr(generation_config, name, None)
            if mine != getattr(GenerationConfig(), name, None) and mine != value:
                raise ConfigError(f"{name} is {mine!r} in generation_config and {value!r} in grpo_config",
                                  field=f"generation_config.{name}", fix="set it in one of them")
        changes.setdefault(table, {})[name] = value
    return changes


def _evolved(record: Any, values: Mapping[str, Any]) -> Any:
    """``attrs.evolve``, a value of the wrong type (a record's check comparing it) a ConfigError."""
    try:
        return attrs.evolve(record, **values)
    except TypeError as exc:
        raise ConfigError(f"a setting has the wrong type: {exc}", field="grpo_config.settings") from None


def with_settings(config: RunConfig, settings: Mapping[str, Any],
                  generation_config: GenerationConfig | None = None) -> RunConfig:
    """``config`` with polyrl's ``table.key`` -> value ``settings`` (generation, optimizer, train,
    eval, logging, data.shuffle and model.max_length) set; a value also set differently in an explicit
    ``generation_config`` is an error. (``model.max_length``: a script's only way to take prompts and
    completions past polyrl's default of 1024 tokens; ``polyrl.trl_window``.)"""
    changes = _setting_changes(config, settings, generation_config)
    if not changes:
        return config
    return _evolved(config, {table: _evolved(getattr(config, table), values) for table, values in changes.items()})


def check_settings(settings: Mapping[str, Any]) -> None:
    """``settings`` of polyrl's own ``GRPOConfig`` checked when it is built, with the errors ``run``
    gives (``with_settings``, each record's own checks and ``check_record``'s rules, the algorithm's
    key names): an unknown key or a refused value was found only once ``train()`` began, maybe after
    the model had loaded. What depends on the rest of the run (the prompts, other tables) waits for
    ``run_config``."""
    from polyrl.config import LoggingSection
    from polyrl.validators import check_record

    try:  # as run_config reads it (a list of pairs too); a string or a number was a traceback at train()
        settings = dict(settings)
    except (TypeError, ValueError):
        raise ConfigError(f"settings is a {type(settings).__name__}, not a mapping of polyrl keys to values",
                          field="grpo_config.settings",
                          fix='pass a dict, e.g. settings={"optimizer.schedule": "cosine"}') from None
    algorithm = {k.partition(".")[2]: v for k, v in settings.items()
                 if isinstance(k, str) and k.startswith("algorithm.") and k not in _REQUESTS}
    AlgorithmConfig.check_setting_names(algorithm)
    own = {k: v for k, v in settings.items()
           if not (isinstance(k, str) and (k in _REQUESTS or k.startswith("algorithm.")))}
    sections = {"generation": GenerationSection(), "optimizer": OptimizerConfig(), "train": TrainSection(),
                "eval": EvalSection(), "logging": LoggingSection(), "model": ModelSection(path="model"),
                "data": DataSection(rows=[{"prompt": "-"}])}
    for table, values in _setting_changes(SimpleNamespace(**sections), own).items():
        check_record(_evolved(sections[table], values), table)

