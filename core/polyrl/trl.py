"""TRL's ``GRPOTrainer``, trained by polyrl: a TRL script changes its import and nothing else::

    from trl import GRPOConfig
    from polyrl.trl import GRPOTrainer      # was: from trl import GRPOTrainer

    trainer = GRPOTrainer(model="path/to/model", reward_funcs=[accuracy], args=GRPOConfig(...),
                          train_dataset=dataset)
    trainer.train()
    trainer.save_model()

Each argument is read as TRL reads it (``args`` by ``polyrl.api.GRPOConfig.from_trl``,
``reward_funcs`` by ``polyrl.api.reward_entries`` (a reward model object saved to a folder first) and
``reward_processing_classes`` as the reward models' tokenizers (``polyrl.trl_reward_models``),
``peft_config`` as LoRA, a ``PeftModel`` as ``model`` as its base and the adapter training starts
from (``polyrl.trl_peft_model``), ``tools`` as the
run's ``[environment] tools``, whose calls polyrl's episodes run, ``environment_factory`` as the
run's environment, ``polyrl.agents.trl_environments``, ``callbacks`` as transformers'
``TrainerCallback`` objects called between polyrl's steps, ``polyrl.trl_callbacks``) or refused with
one ``ConfigError`` naming it and the fix; nothing TRL would use is dropped silently. Why refuse
rather than approximate: an optimizer or tokenizer polyrl would not use trains another run
than the script describes, without a word. The run itself is ``polyrl.api``'s, so its
``output_dir`` holds polyrl's metrics, checkpoints and final model. With ``peft_config``,
``trainer.model`` and ``save_model`` are TRL's too (a ``PeftModel``; the adapter folder), built from
that final model by ``polyrl.trl_peft``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import attrs

from polyrl import run_paths, strict_json, trl_args_seen, trl_saves
from polyrl.errors import ConfigError
from polyrl.global_rngs import seed_global_rngs
from polyrl.logs import get_logger
from polyrl.column_dicts import column_dict_error, is_column_dict, one_row_error
from polyrl.data_file_args import data_file_error
from polyrl.one_conversation import refuse_one_conversation
from polyrl.trl_config import BEST_KEPT, SAVE_EVERY_EPOCH, SAVE_ON_BEST
from polyrl.trl_failed_run import FailedRun, kept_after
from polyrl.trl_names import trl_field_of
from polyrl.trl_quantized import FIX as _QLORA_FIX
from polyrl.trl_tokenizer import align_saved_token_ids, align_token_ids, trl_pad

if TYPE_CHECKING:
    from polyrl.agents.given_tools import GivenTools
    from polyrl.agents.trl_environments import TrlEnvironments
    from polyrl.config import EnvironmentSection
    from polyrl.trl_callbacks import TrlCallbacks

log = get_logger("polyrl.trl")


class TrainOutput(NamedTuple):
    """transformers' ``TrainOutput`` (same fields), returned where transformers is not installed;
    ``train()`` returns transformers' own class where it is (``_train_output``)."""

    global_step: int
    training_loss: float
    metrics: dict[str, float]


def _train_output(global_step: int, training_loss: float, metrics: dict[str, float]) -> Any:
    """What TRL's ``trainer.train()`` returns: ``transformers.trainer_utils.TrainOutput``, so a script's
    ``isinstance`` check or pickling sees transformers' type (polyrl's stand-in without transformers)."""
    try:
        from transformers.trainer_utils import TrainOutput as Output
    except ImportError:
        return TrainOutput(global_step, training_loss, metrics)
    return Output(global_step, training_loss, metrics)


def _last_epoch(history: list[dict[str, Any]]) -> float | None:
    """The ``epoch`` of the run's last step that has one (None: transformers' 0 stays)."""
    return next((m["epoch"] for m in reversed(history) if isinstance(m.get("epoch"), (int, float))), None)


def _train_metrics(seconds: float, training_loss: float, state: Any, args: Any, dataset: Any,
                   processes: int) -> dict[str, float]:
    """The metrics transformers' trainer logs when training ends (the last entry of ``log_history``,
    ``on_log``'s and ``TrainOutput.metrics``): ``train_runtime``, ``train_samples_per_second``,
    ``train_steps_per_second``, ``total_flos`` (the state's: 0, as TRL's GRPO batches hold no
    ``input_ids`` for transformers to count) and ``train_loss``. Samples are counted as transformers
    counts them: ``max_steps`` updates of ``per_device_train_batch_size`` × ``gradient_accumulation_steps``
    × processes, or for an epoch run the dataset's rows × ``num_train_epochs``. Why: scripts and plots
    read ``log_history[-1]["train_loss"]`` and the throughputs."""
    metrics: dict[str, float] = {"train_runtime": round(seconds, 4)}
    batch = getattr(args, "per_device_train_batch_size", None)
    if getattr(args, "max_steps", -1) > 0 and isinstance(batch, int):
        samples: float | None = state.max_steps * batch * getattr(args, "gradient_accumulation_steps", 1) * processes
    else:
        epochs = getattr(args, "num_train_epochs", None)
        samples = len(dataset) * epochs if hasattr(dataset, "__len__") and isinstance(epochs, (int, float)) else None
    if seconds > 0:
        if samples is not None:
            metrics["train_samples_per_second"] = round(samples / seconds, 3)
        metrics["train_steps_per_second"] = round(state.max_steps / seconds, 3)
    metrics["total_flos"] = float(state.total_flos)
    metrics["train_loss"] = training_loss
    return metrics


def _train_loss(losses: list[float], nan_inf_filter: bool) -> float:
    """transformers' ``train_loss`` over the steps' losses (its ``_total_loss_scalar`` over
    ``global_step``), logging every step as polyrl does: under ``logging_nan_inf_filter`` (its
    default True) a NaN or inf step loss adds the mean of the logging window's earlier losses,
    none when each step is logged, so 0, and the step still counts; without the filter it adds
    itself. Why: one skipped step (loss NaN) made the whole run's ``train_loss`` NaN."""
    if not losses:
        return 0.0
    if nan_inf_filter:
        return sum(loss for loss in losses if math.isfinite(loss)) / len(losses)
    return sum(losses) / len(losses)


#: GRPOTrainer arguments polyrl has no counterpart for -> the fix (None / empty is accepted)
_REFUSED = {
    "quantization_config": "remove it: polyrl trains the model in its own precision (quantized training is not "
                           "offered); for QLoRA, " + _QLORA_FIX,
    "rollout_func": "remove it: polyrl samples with its own generate backend; tool calls are tools=[f, g] or "
                    "environment_factory=... here, another multi-turn rollout a polyrl environment (README: "
                    "Environments and tools)",
}


_Method = TypeVar("_Method", bound=Callable[..., Any])

#: polyrl's LoRA fields -> peft's LoraConfig names, which the script wrote
_PEFT_NAMES = {"rank": "r", "alpha": "lora_alpha", "dropout": "lora_dropout"}


#: polyrl's own ``GRPOConfig`` arguments that ``from_trl`` fills from a ``trl.GRPOConfig`` field of
#: another name -> that field: an error naming ``grpo_config.epochs`` named no field the script wrote
_API_FIELDS = {"epochs": "num_train_epochs", "steps": "max_steps", "prompts_per_step": "per_device_train_batch_size"}


def _script_field(field: str | None, trl_args: bool = False) -> str | None:
    """An error's ``field`` as the script names it: ``run``'s ``prompts`` is ``train_dataset``,
    polyrl's ``grpo_config.X`` is the script's ``args.X`` where X is a ``trl.GRPOConfig`` field,
    and its ``lora.X`` the ``peft_config``'s. ``trl_args``: ``args`` is a ``trl.GRPOConfig``, so a
    polyrl key set from exactly one of its fields (``algorithm.scale_rewards``,
    ``generation.max_new_tokens``) is that field, ``args.max_completion_length``: the script never
    wrote polyrl's key."""
    if not field:
        return field
    if field == "prompts":  # polyrl.api.run's name for the rows: the script's train_dataset
        return "train_dataset"
    if field == "rewards.function":  # a reward function's signature: the script's reward_funcs
        return "reward_funcs"
    if field == "model.path":  # the folder the script's model is (or was saved to): its model argument
        return "model"
    head, _, rest = field.partition(".")
    if head == "lora":
        return "peft_config" + (f".{_PEFT_NAMES.get(rest, rest)}" if rest else "")
    if head != "grpo_config":
        trl_name = trl_field_of(field) if trl_args else None
        return field if trl_name is None else f"args.{trl_name}"
    if not rest:
        return "args"
    try:
        import dataclasses

        import trl
    except ImportError:  # no TRL here: the script gave polyrl's own GRPOConfig
        return field
    name = rest.split(".")[0].split("[")[0]
    if trl_args and rest in _API_FIELDS:
        return f"args.{_API_FIELDS[rest]}"
    return f"args.{rest}" if name in {f.name for f in dataclasses.fields(trl.GRPOConfig)} else field


def _given_trl_args(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """Whether the trainer call's ``args`` (the trainer's own, or ``__init__``'s argument) is a
    ``trl.GRPOConfig``: None is TRL's default one, polyrl's own ``GRPOConfig`` is not."""
    from polyrl import api

    config = getattr(args[0], "args", None) if args else None
    if config is None:
        config = kwargs.get("args", args[3] if len(args) > 3 else None)
    return not isinstance(config, api.GRPOConfig)


def _script_names(method: _Method) -> _Method:
    """``method`` with its ConfigErrors naming the script's arguments (``_script_field``,
    ``_named_eval_dataset``): the script wrote ``args=GRPOConfig(beta=...)``, ``peft_config=`` and
    ``eval_dataset=``, not polyrl's names."""
    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ConfigError as exc:
            named = _named_eval_dataset(exc)
            if named.field == "prompts":  # its fix says "the prompts" in words and "prompts=" as run's argument
                named.fix = named.fix and named.fix.replace("prompts=", "train_dataset=")
                named.renamed("train_dataset")
            else:
                named.renamed(_script_field(named.field, _given_trl_args(args, kwargs)), in_fix=True)
            if named is exc:
                raise
            raise named from None
    return wrapped  # type: ignore[return-value]


class GRPOTrainer:
    """``trl.GRPOTrainer``'s constructor, ``train()`` and ``evaluate()``, run by polyrl on ``backend`` (a
    polyrl keyword TRL lacks: "torch", "mlx", ...). The arguments are checked here, before any
    model loads, as TRL checks them when the trainer is built."""

    @_script_names
    def __init__(self, model: Any, reward_funcs: Any = None, args: Any = None, train_dataset: Any = None,
                 eval_dataset: Any = None, processing_class: Any = None, reward_processing_classes: Any = None,
                 callbacks: Any = None, optimizers: Any = (None, None), quantization_config: Any = None,
                 peft_config: Any = None, tools: Any = None, rollout_func: Any = None,
                 environment_factory: Any = None, *, backend: str = "torch") -> None:
        from polyrl import api, trl_reward_models, trl_streams

        given = {"quantization_config": quantization_config, "rollout_func": rollout_func}
        for name, value in given.items():
            if value is not None and not (isinstance(value, (list, tuple)) and not value):
                raise ConfigError(f"GRPOTrainer({name}=...) has no polyrl counterpart", field=name,
                                  fix=_REFUSED[name])
        _refuse_optimizers(optimizers)
        from polyrl import trl_peft_model
        from polyrl.trl_frozen import refuse_frozen_parameters
        from polyrl.trl_quantized import refuse_quantized_model

        refuse_quantized_model(model)  # QLoRA's base: before anything is read from or saved of it
        refuse_frozen_parameters(model, peft_config)

        #: with a PeftModel as model: its adapter's name (TRL trains that adapter), else None
        self._adapter_name: str | None = None
        if trl_peft_model.is_peft_model(model):
            if backend != "torch":
                raise ConfigError(f"model is a PeftModel: training its adapter from its current weights needs the "
                                  f"torch backend, not {backend!r}", field="model",
                                  fix="use backend='torch', or pass the base model with peft_config=LoraConfig(...) "
                                      "(a fresh adapter)")
            self._adapter_name, peft_config = trl_peft_model.adapter_config(model, peft_config)
        self.tools = _tools(tools)
        #: the environment_factory, probed (None without one)
        self.trl_environments = _environments(environment_factory, self.tools)
        env_rewards = self.trl_environments.rewards if self.trl_environments is not None else []
        user_rewards = [] if reward_funcs is None else list(reward_funcs) \
            if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        if not env_rewards and (reward_funcs is None or (isinstance(reward_funcs, (list, tuple)) and not reward_funcs)):
            raise ConfigError("GRPOTrainer needs reward_funcs", field="reward_funcs",
                              fix="pass a reward function, a list of them, or a reward model folder (or an "
                                  "environment_factory whose environment defines get_reward())")
        written_rewards = user_rewards  # as the script wrote them: a Hub id is the name TRL logs it under
        user_rewards = trl_reward_models.hub_reward_models(user_rewards)
        trl_reward_models.refuse_causal_lm_folders(user_rewards, written_rewards)
        reward_tokenizers = trl_reward_models.reward_tokenizers(reward_processing_classes, user_rewards)
        if train_dataset is None and self.trl_environments is None:
            raise ConfigError("GRPOTrainer needs a train_dataset", field="train_dataset",
                              fix="pass a datasets.Dataset (or a list of rows) with a prompt column")
        if type(train_dataset).__name__ == "IterableDataset" and isinstance(args, api.GRPOConfig):
            raise ConfigError("train_dataset is an IterableDataset, which may never end; polyrl reads the prompts "
                              "whole", field="train_dataset",
                              fix="pass a datasets.Dataset (e.g. Dataset.from_list(list(dataset.take(N))))")
        # a chat passed as the dataset: refused here, as TRL's other argument checks are (told as train_dataset)
        refuse_one_conversation(train_dataset)
        refuse_one_conversation(eval_dataset, "eval_prompts")
        _refuse_misshaped(train_dataset, eval_dataset)
        _check_set_names(eval_dataset)
        if isinstance(train_dataset, Mapping):  # load_dataset(...) without split: it iterates as its split names
            splits = list(train_dataset) or ["train"]
            raise ConfigError(f"train_dataset is a {type(train_dataset).__name__} of splits "
                              f"({', '.join(map(repr, splits))}), not a dataset", field="train_dataset",
                              fix=f"pass one split, e.g. train_dataset=dataset[{splits[0]!r}] (as TRL takes it)")
        self.args = args if args is not None else _default_args(model)
        dtype, trl_args = _model_dtype(model, self.args)
        # a reward model object scores in its own dtype under either config (TRL scores it as given)
        reward_dtypes = trl_reward_models.reward_model_dtypes(user_rewards, getattr(self.args, "model_init_kwargs", None),
                                                              folders=not isinstance(self.args, api.GRPOConfig))
        # the names TRL logs the reward models under, read before a model object is saved as reward_funcs_<i>
        reward_names = trl_reward_models.reward_model_names(user_rewards, written_rewards)
        agent = self.tools is not None or self.trl_environments is not None
        self.grpo_config = trl_args if isinstance(trl_args, api.GRPOConfig) else \
            api.GRPOConfig.from_trl(trl_args, tools=agent)
        # output_dir named from the folder the trainer was made in, as the run itself names it
        # (``run_paths``): the working folder is the process's, and code that moves it (a callback, a
        # reward's helper thread, one abandoned past its time limit) moved this trainer's own writes
        # (save_model, save_state, the objects saved here) away from the run's files
        _check_weight_count(self.grpo_config.reward_weights, user_rewards)
        self.grpo_config = attrs.evolve(self.grpo_config, output_dir=run_paths.anchored(
            self.grpo_config.output_dir, run_paths.start_folder()))
        seed_global_rngs(self.grpo_config.seed)
        if trl_streams.is_stream(train_dataset):  # the prompts TRL streams, in its order, trained unshuffled
            train_dataset = trl_streams.stream_rows(train_dataset, self.args, self.grpo_config.steps,
                                                    self.grpo_config.prompts_per_step)
            self.grpo_config = attrs.evolve(self.grpo_config, settings={**self.grpo_config.settings,
                                                                        "data.shuffle": False})
        if train_dataset is None:  # the environment writes the prompts in reset (TRL's rule)
            train_dataset = _placeholder_rows(self.trl_environments, self.args, self.grpo_config)
        if self.trl_environments is not None:
            rows = api.prompt_rows(train_dataset)
            self.trl_environments.check_rows(rows)
            if any(self.trl_environments.prompt_column not in row for row in rows):  # TRL's empty one, reset writes it
                train_dataset = self.trl_environments.default_prompts(rows)
            eval_dataset = _default_eval_prompts(self.trl_environments, eval_dataset, self.args)
            if env_rewards and self.grpo_config.reward_weights is not None:  # TRL adds weight 1 for each
                self.grpo_config = attrs.evolve(self.grpo_config, reward_weights=[
                    *self.grpo_config.reward_weights, *[1.0] * len(env_rewards)])
        self.environment = _environment(self.tools, self.trl_environments, self.args)
        _refuse_cut_sets(eval_dataset, self.grpo_config)
        # evaluated on as TRL's eval_strategy says (from_trl's [eval] settings), else only where a callback asks
        self._evaluates = _evaluates(eval_dataset, self.grpo_config)
        self.accelerator = _Accelerator()
        self.model_path, entries, tokenizer_folders = self._saved_objects(model, processing_class, user_rewards,
                                                                          reward_tokenizers)
        #: the folders saved from objects given (under output_dir), which a later trainer there replaces
        self._saved_folders = [*([self.model_path] if not isinstance(model, (str, Path)) else []),
                               *[e for e, given in zip(entries, user_rewards) if e is not given],
                               *[f for f in tokenizer_folders if f is not None]]
        #: the PreTrainedModel given (None for a folder): train() puts the trained weights into it,
        #: as TRL trains the object a script keeps using after train()
        self._model_object = None if isinstance(model, (str, Path)) else model
        #: whether a model object was given (``trainer.model`` may load one from the folder later)
        self._model_given = self._model_object is not None
        self.policy = api.Agent(self.model_path, backend=backend, lora=peft_config, dtype=dtype,
                                compute_dtype=api.trl_compute_dtype(self.grpo_config, backend))
        api.check_trl_dropout(self.grpo_config, self.policy)  # TRL's disable_dropout, as run_config checks it
        # bf16 is the policy's now: run_config would read it again (a second warning on MLX)
        self.grpo_config = attrs.evolve(self.grpo_config, _trl_bf16=False)
        self._peft_config = peft_config
        #: with peft_config, ``trainer.model``: a peft PeftModel of the base (TRL's), made on first use;
        #: a PeftModel given is that object (TRL trains it)
        self._peft_model: Any = model if self._adapter_name is not None else None
        self._processing_class = processing_class
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.reward_funcs = [*user_rewards, *env_rewards]  # TRL's list: get_reward's rewards appended
        #: reward_funcs as polyrl's rewards read them: a reward model object as the folder it is saved to
        self._reward_entries = [*entries, *env_rewards]
        #: the folder each reward model's tokenizer from reward_processing_classes is saved in (None: its own)
        self._reward_tokenizers = [*tokenizer_folders, *[None] * len(env_rewards)]
        #: the dtype each reward model loads in, as TRL's (``trl_reward_models.reward_model_dtypes``:
        #: model_init_kwargs reach TRL's reward models too); None: the reward_model's own default, as for
        #: a folder under polyrl's own GRPOConfig, which has no model_init_kwargs (an object: its own dtype)
        self._reward_dtypes: list[str | None] = [*reward_dtypes, *[None] * len(env_rewards)]
        #: the name TRL logs each reward model under (``trl_reward_models.reward_model_names``), None elsewhere
        self._reward_names: list[str | None] = [*reward_names, *[None] * len(env_rewards)]
        #: whether reward models sharing one TRL name were told (``api.warn_shared_trl_names``): once a trainer
        self._shared_names_told = False
        self.summary: dict[str, Any] | None = None
        #: the steps this trainer's ``train()`` calls took, a failed one's too (``_refuse_training_again``)
        self._trained_steps = 0
        #: after a ``train()`` that raised past its first step: the weights it left (``trl_failed_run``),
        #: which save_model, ``model`` and evaluate() read; None once a ``train()`` returns
        self._failed_run: FailedRun | None = None
        #: what this trainer saved in output_dir before its run (save_metrics/save_state before
        #: ``train()``): name -> its content (all_results.json: its own metrics, not others' merged
        #: in). ``train()``'s fresh start keeps these and sets every other trainer's results aside.
        self._own_results: dict[str, Any] = {}
        #: after ``train()``: the run files its run held when it returned, and what it saved since
        #: (name -> content); a save finding others there moves them aside (``trl_saves.set_aside_others``)
        self._run_results: dict[str, Any] = {}
        #: (previous/results-<time>/, the run then in output_dir) for each move of another run's
        #: results by a save before ``train()``: its fresh start puts them back with that run
        self._displaced: list[tuple[Path, trl_saves.RunKey]] = []
        #: the trained model/'s files as this trainer's run left them (``trl_saves.model_identity``)
        self._trained_identity: trl_saves.Identity = ()
        #: polyrl's ``Trainer`` while ``train()`` runs (its trackers open), else None: ``log()`` writes to them
        self._run: Any = None
        #: the entries a script's ``trainer.log`` added during the last ``train()`` (a resumed one's: with
        #: those its checkpoint kept), kept in its ``log_history``: the observer's ``script_logs`` where
        #: there is one (transformers installed), which checkpoints keep
        self._logged_in_run: list[dict[str, Any]] = []
        #: (the model folder ``evaluate()`` evaluates, the engines holding it): loaded by the first
        #: ``evaluate()``, or the run's own after ``train()``, so a later ``evaluate()`` loads nothing
        self._eval_engines: tuple[str, Any] | None = None
        #: (``_trl_run``'s value,) once built
        self._trl_run_made: tuple[Any] | None = None
        #: transformers' ``TrainerState`` (``trl_callbacks.trainer_state``), shared with the callbacks
        #: as in transformers; ``train()`` starts a new one, as transformers does
        self.state = self._new_state()
        #: transformers' callbacks (``polyrl.trl_callbacks``); None until a script gives one
        self._callbacks: TrlCallbacks | None = None
        # TRL's __init__: the tokenizer given pads with its EOS where it has no pad token, and the
        # model object given takes its pad id and args.use_cache (``trl_tokenizer.trl_pad``, ``align_token_ids``)
        trl_pad(processing_class)
        if self._model_object is not None:
            align_token_ids(self._model_object, self.processing_class, trained=False, use_cache=self._use_cache())
        #: ``args`` as read into ``grpo_config``: a change a script makes before ``train()`` is refused there
        self._args_seen = trl_args_seen.snapshot(self.args)
        if callbacks:
            self._callbacks = self._callback_handler(list(callbacks) if isinstance(callbacks, (list, tuple))
                                                     else [callbacks])
            self._callbacks.event("on_init_end")

    def _saved_objects(self, model: Any, processing_class: Any, rewards: list[Any],
                       tokenizers: list[Any]) -> tuple[str, list[Any], list[str | None]]:
        """(the policy's folder, ``rewards`` as polyrl reads them, their tokenizers' folders): the
        model objects and tokenizers the script holds saved under output_dir, under its run lock
        (``run_lock.held_while_writing``): a second trainer on the output_dir of a running run
        replaced that run's ``initial_model`` and ``reward_models`` before ``train()`` refused it."""
        from polyrl import run_lock, trl_reward_models, trl_saves

        output_dir = self.grpo_config.output_dir
        with run_lock.held_while_writing(Path(output_dir), self.accelerator.is_main_process):
            self._saver_token = trl_saves.claim(output_dir)  # before the save: a failed one replaced files too
            model_path = _model_folder(model, processing_class, output_dir)
            #: a PeftModel's adapter as given (training starts from it) and, for a KL term, its merged copy
            self._initial_adapter, self._initial_reference = self._saved_adapter(model, output_dir, model_path)
            entries, folders = trl_reward_models.saved_reward_models(rewards, tokenizers, output_dir)
        return model_path, entries, folders

    def _saved_adapter(self, model: Any, output_dir: str, model_path: str) -> tuple[Path | None, Path | None]:
        """A PeftModel's adapter saved under ``output_dir/initial_adapter`` (the torch backend's
        ``initial_adapter``) and, where the run has a KL term, base and adapter merged under
        ``output_dir/initial_reference`` (TRL's reference: a frozen copy of the adapter as given)."""
        from polyrl import trl_peft_model

        if self._adapter_name is None:
            return None, None
        for name in ("initial_adapter", "initial_reference"):
            shutil.rmtree(Path(output_dir) / name, ignore_errors=True)
        adapter = trl_peft_model.save_adapter(model, self._adapter_name, Path(output_dir) / "initial_adapter")
        if not getattr(self.args, "beta", 0.0):
            return adapter, None
        reference = Path(output_dir) / "initial_reference"
        trl_peft_model.save_merged(model, self._adapter_name, reference)
        from transformers import AutoTokenizer

        from polyrl import trl_folder_code

        # the one saved with the base
        trl_folder_code.load(AutoTokenizer, model_path, "model").save_pretrained(str(reference))
        # safetensors writes 0600; each checkpoint hard-links these files as they are (``kept_inputs``)
        from polyrl.file_modes import honour_umask

        honour_umask(reference)
        return adapter, reference

    @_script_names
    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None,
              ignore_keys_for_eval: Any = None) -> Any:
        """Run the training; ``resume_from_checkpoint`` True continues the newest checkpoint in
        ``output_dir`` (polyrl's ``--resume``), a path that checkpoint. Returns transformers'
        ``TrainOutput``; ``self.state`` is then the run's ``TrainerState``."""
        from polyrl import checkpoint
        from polyrl.rewards.trl_compat import with_trl_names
        from polyrl.trainer import AllCompletionsCut
        from polyrl.trl_callbacks import in_updates, restore, run_settings, updates_per_step, with_script_logs

        if trial is not None:
            raise ConfigError("polyrl runs no hyperparameter search", field="trial", fix="remove trial")
        trl_args_seen.refuse_changes(self._args_seen, self.args)
        if not resume_from_checkpoint:
            self._refuse_training_again()
        self._check_own_saves()
        resume: str | None = None
        if resume_from_checkpoint:
            resume = "" if resume_from_checkpoint is True else str(resume_from_checkpoint)
            wrong = checkpoint.not_a_checkpoint(Path(resume)) if resume else None
            if wrong:
                raise ConfigError(wrong[0], field="resume_from_checkpoint", fix=wrong[1])
        started = time.monotonic()
        self._eval_engines = None  # the model is about to change; their memory is the run's
        callbacks = self._callbacks if self._callbacks is not None and self._callbacks.callbacks else None
        if callbacks is None and self._evaluates and getattr(self.args, "metric_for_best_model", None) is not None:
            callbacks = self.callback_handler  # state.best_metric is kept with no callback too, as transformers
        # eval_strategy="no": a callback's control.should_evaluate still evaluates (transformers'
        # _maybe_log_save_evaluate), on the eval_dataset given, and then nothing else does
        asked_only = not self._evaluates and callbacks is not None and _has_eval_rows(self.eval_dataset)
        trainer = self._polyrl_trainer(self.policy, self._asked_eval_config() if asked_only else self.grpo_config,
                                       self.eval_dataset if self._evaluates or asked_only else None, resume=resume)
        if asked_only:
            trainer.evaluate_after = False  # TRL evaluates at the end only on its eval_strategy
        trainer.own_run_files = dict(self._own_results)
        trainer.displaced_results = list(self._displaced)
        if resume is not None and not trainer.resume(resume or None):
            raise ConfigError(f"no checkpoint to resume in {self.grpo_config.output_dir}", field="resume_from_checkpoint",
                              fix="call train() without resume_from_checkpoint to start the run")
        self.state = self._new_state()
        if self._callbacks is not None:
            self._callbacks.state = self.state
        if resume is not None:  # best_metric and the callbacks' states as the checkpoint kept them
            restore(self._callbacks, self.state, trainer.resumed_observer_state, self.args,
                    checkpoint.checkpoint_dir(trainer.checkpoint_root, trainer.step))
        observer = callbacks if callbacks is not None else self._state_keeper()
        if observer is not None:  # on_train_begin when the run starts (``run_begin``); it moves self.state on
            trainer.observers.append(observer)
            trainer.shared_state = self.state  # the rewards' trainer_state, as TRL passes its own
        # TRL's switch for its bar; a transformers progress callback given draws its own bar instead
        progress = not getattr(self.args, "disable_tqdm", False) and not (callbacks and callbacks.draws_progress)
        # the observer's list, which its checkpoints keep and a resume restores (``TrlCallbacks.script_logs``)
        self._run, self._logged_in_run = trainer, getattr(observer, "script_logs", [])
        ended: dict[str, dict[str, float]] = {}  # transformers' end-of-training metrics, taken once
        trainer.end_metrics = lambda run: ended.setdefault(
            "metrics", _with_unlogged(self._end_metrics(run, started), observer))
        first_step = int(getattr(trainer, "step", 0))  # (a Trainer stand-in in the tests has none)
        returned = False
        try:
            summary = trainer.run(progress=progress)
            returned = True
        except AllCompletionsCut as exc:  # its fix in the script's names, not polyrl's keys and CLI
            raise _all_cut_in_trl_names(exc) from None
        finally:
            self._run = None
            # a run that raised after its updates trained the model too
            trained = max(0, int(getattr(trainer, "step", first_step)) - first_step)
            self._trained_steps += trained
            if not returned and trained:
                self._hold_failed_run(kept_after(trainer, trained))
        self.summary, self._failed_run = summary, None
        self._own_results, self._displaced = {}, []  # what it saved before this run is part of this run now
        self._run_results = trl_saves.run_results(Path(self.grpo_config.output_dir))
        best_loaded = self._load_best_model(trainer, summary)
        # what tells this run's model/ from a later run's there (trl_saves.trained_model)
        self._trained_identity = trl_saves.model_identity(Path(summary["model"])) if "model" in summary else ()
        if "model" in summary and self.eval_dataset is not None and not best_loaded:  # evaluate() is likely: on the run's engines
            self._eval_engines = (str(self._model_source("evaluate")), trainer.engines)
        if "model" in summary and self._model_object is not None:
            self._hold_trained(Path(summary["model"]))
        history = list(summary.get("history", []))
        epoch = _last_epoch(history)
        per_step = updates_per_step(trainer)  # TRL's steps count optimizer updates
        logged = getattr(observer, "logged_lines", None)  # the run's logs at its logging_steps (``trl_log_steps``)
        log_history = [in_updates(with_trl_names(m, trainer.trl_names), per_step) for m in _as_logged(history, logged)]
        if self._evaluates or asked_only:  # TRL logs each evaluation as an entry of its own, eval_ names
            log_history = _with_evaluations(log_history, summary, per_step, trainer.trl_names,
                                            untold=set(getattr(observer, "untold_evaluations", ())),
                                            sets=[name for name, _ in trainer.eval_set_sizes])
        log_history = [entry for entry in log_history if not entry.get(_UNLOGGED)]
        log_history = with_script_logs(log_history, self._logged_in_run)  # a resumed run's checkpoint's too
        # the intervals set when the run began (its observer's ``run_begin``) stay, a callback's changes too
        run_settings(self.state, trainer, self.args, intervals=observer is None)
        self.state.global_step = int(summary.get("steps", 0)) * per_step
        if epoch is not None:  # else transformers' 0
            self.state.epoch = epoch
        self.state.log_history = log_history
        tokens = next((m["num_tokens"] for m in reversed(history) if isinstance(m.get("num_tokens"), (int, float))),
                      None)
        if tokens is not None:
            self.state.num_input_tokens_seen = int(tokens)
        metrics = ended.get("metrics") or _with_unlogged(self._end_metrics(trainer, started), observer)
        training_loss = metrics["train_loss"]
        if observer is not None:  # the summary's on_log, then on_train_end, as transformers' trainer
            observer.train_end(log_history, self.state.global_step, summary=metrics)
        else:
            log_history.append({**metrics, "step": self.state.global_step})
        self._args_seen = trl_args_seen.snapshot(self.args)  # a callback's own changes in this run stand
        return _train_output(self.state.global_step, training_loss, metrics)

    def _hold_failed_run(self, failed: FailedRun) -> None:
        """After a ``train()`` that raised past its first step: ``failed`` is what this trainer holds
        (``trl_failed_run``), and a model object in memory (the one given, or ``trainer.model``'s)
        gets its weights, as TRL's raised ``train()`` leaves its model object partly trained. Runs
        while the run's error propagates: a failure to load them is a warning, not a second error."""
        self._failed_run = failed
        self._eval_engines = None
        if self._model_object is None or failed.folder is None:
            return
        try:
            self._hold_trained(failed.folder)
        except Exception as exc:  # noqa: BLE001 - the run's own error is what the script sees
            log.warning("the model object still holds the weights it had before train(); save_model() saves the "
                        "ones trained", error=f"{type(exc).__name__}: {exc}", checkpoint=str(failed.folder))

    @property
    def _trained(self) -> bool:
        """Whether the model this trainer holds is trained: a ``train()`` returned or raised past its first step."""
        return self.summary is not None or self._failed_run is not None

    def _refuse_training_again(self) -> None:
        """A fresh ``train()`` after one that trained (or raised after some steps): one ConfigError.
        Why: transformers' next ``train()`` trains the model object the earlier one left (its
        trained weights, from step 0 with a new optimizer); polyrl's run loads the model the trainer
        was built with, so it trained the untrained model again and set the earlier run aside
        without a word."""
        if not self._trained_steps:
            return  # nothing trained yet (no run, or one stopped before its first step): a fresh start is TRL's
        raise ConfigError(
            f"an earlier train() of this trainer trained its model ({self._trained_steps} step(s)); TRL's next "
            "train() goes on training those weights from step 0, but polyrl's run would start again from the "
            "model the trainer was built with", field="resume_from_checkpoint",
            fix="continue that run with train(resume_from_checkpoint=True), or save the trained model "
                "(trainer.save_model(DIR) after a train() that finished) and build a new GRPOTrainer(model=DIR, "
                "...) to train it from step 0")

    def _end_metrics(self, trainer: Any, started: float) -> dict[str, float]:
        """transformers' end-of-training metrics for ``trainer``'s run (``_train_metrics``, the mean of
        its steps' losses, its last ``epoch``), taken while its trackers are still open
        (``Trainer.end_metrics``). Why: transformers' last ``log`` sends them to every ``report_to``
        integration; polyrl returned them but no tracker got them."""
        from polyrl.trl_callbacks import run_settings

        losses = [m["loss"] for m in trainer.history if isinstance(m.get("loss"), (int, float))]
        # the state's max_steps, which the throughputs count (its intervals are the run's: ``train()``)
        run_settings(self.state, trainer, self.args, intervals=False)
        metrics = _train_metrics(time.monotonic() - started,
                                 _train_loss(losses, getattr(self.args, "logging_nan_inf_filter", True)),
                                 self.state, self.args, self.train_dataset, self.accelerator.num_processes)
        epoch = _last_epoch(trainer.history)
        if epoch is not None:
            metrics["epoch"] = epoch
        return metrics

    def _load_best_model(self, trainer: Any, summary: Mapping[str, Any]) -> bool:
        """TRL's ``load_best_model_at_end``: ``output_dir/model``, which ``save_model``,
        ``trainer.model`` and ``evaluate()`` read, becomes the model of ``state.best_model_checkpoint``
        (the best evaluated step's checkpoint, kept from pruning) in place of the last step's, as
        transformers loads it at the end of ``train()``; the checkpoints stay as written (the last
        one resumes the run). True when it did (the run's engines then hold other weights)."""
        from polyrl import checkpoint

        best = self.state.best_model_checkpoint
        if not getattr(self.args, "load_best_model_at_end", False) or not best or "model" not in summary:
            return False
        folder = Path(best)
        if folder.resolve() == Path(summary["checkpoint"]).resolve():
            return False
        if folder.parent.resolve() != Path(trainer.checkpoint_root).resolve() or not checkpoint.is_complete(folder):
            log.warning("load_best_model_at_end: the best checkpoint is not a complete checkpoint of this run; the "
                        "last step's model is kept", checkpoint=best)
            return False
        log.info("loading the best model (load_best_model_at_end)", checkpoint=best, score=self.state.best_metric)
        trainer.export_final_model(folder)
        return True

    def _state_keeper(self) -> TrlCallbacks | None:
        """The callback handler (with no callbacks) as the run's observer, so ``self.state`` moves on
        step by step and the reward functions get it as ``trainer_state``, as TRL passes its
        trainer's own state (the same object, advancing); None without transformers (the rewards
        get polyrl's own ``TrainerState`` then)."""
        try:
            return self.callback_handler
        except ImportError:
            return None

    def _asked_eval_config(self) -> Any:
        """``grpo_config`` with the ``[eval]`` of TRL's evaluation (``trl_evaluate.eval_settings``: its
        sampled completions, every reward weighted) and no schedule: under ``eval_strategy="no"`` the run
        evaluates only the steps a callback asks for."""
        from polyrl.trl_evaluate import eval_settings

        return attrs.evolve(self.grpo_config, settings=eval_settings(self.grpo_config.settings, self.args))

    def _new_state(self) -> Any:
        """A fresh ``TrainerState`` for this trainer's process (``trl_callbacks.trainer_state``)."""
        from polyrl.trl_callbacks import trainer_state

        return trainer_state(self.args, self.accelerator.process_index,
                             0 if self.accelerator.is_local_main_process else 1)

    def _polyrl_trainer(self, policy: Any, grpo_config: Any, eval_prompts: Any, resume: str | None = None,
                        engines: Any = None) -> Any:
        """polyrl's ``Trainer`` for this script's run (``api.run_config``): its rewards, tools and
        environment, ``policy`` and ``grpo_config``; for ``train()`` and ``evaluate()`` alike
        (``engines``: loaded ones it uses, ``evaluate()``'s), ``eval_prompts`` in the order TRL's
        eval sampler draws them (``trl_eval_order``)."""
        from polyrl import api, run_plan
        from polyrl.trl_evaluate import eval_sets, rows_of, trl_eval_order
        from polyrl.trl_completions import follow
        from polyrl.trl_tags import trl_tags
        from polyrl.trl_window import resumed_window

        sizes: list[tuple[str, int]] = []  # a dict's sets: (name, rows) each, evaluated one by one
        if isinstance(eval_prompts, Mapping):
            sets = [(name, trl_eval_order(rows, self.args)) for name, rows in eval_sets(eval_prompts, None, self.args)]
            sizes = [(str(name), len(rows)) for name, rows in sets]
            eval_prompts = [row for _, rows in sets for row in rows]
        elif eval_prompts is not None:
            eval_prompts = trl_eval_order(rows_of(eval_prompts, "eval_dataset", self.args), self.args)
        asked = (SAVE_EVERY_EPOCH, SAVE_ON_BEST, BEST_KEPT)
        if set(asked) & set(grpo_config.settings):  # asked by the run's callback handler (``trl_callbacks``):
            # each new best, each epoch's end (exact after a callback's epoch stop too), the best kept
            grpo_config = attrs.evolve(grpo_config, settings={k: v for k, v in grpo_config.settings.items()
                                                              if k not in asked})
        config, plugins = api.run_config(api.grpo, policy=policy, prompts=self.train_dataset,
                                         rewards=self._reward_entries, grpo_config=grpo_config, eval_prompts=eval_prompts,
                                         reward_tokenizers=self._reward_tokenizers, reward_dtypes=self._reward_dtypes,
                                         reward_names=self._reward_names)
        if not self._shared_names_told:  # train() and each evaluate() build a run: told once
            self._shared_names_told = True
            api.warn_shared_trl_names(config.rewards, plugins)
        if self.environment is not None:
            config = attrs.evolve(config, environment=self.environment)
            plugins = [*plugins, *([self.tools] if self.tools is not None else [])]
        if self.trl_environments is not None:
            plugins = [*_with_environments(config, plugins), self.trl_environments]
        parser = None
        if self.trl_environments is None and self.environment is None:
            # TRL parses a chat completion with its tokenizer's response_schema, once, for every reward:
            # made here (a schema needing jmespath refused before any model loads), handed over below
            parser = self._response_parser()
        if self._initial_adapter is not None and config.lora is not None:  # a PeftModel's adapter, trained on
            config = attrs.evolve(config, backends=attrs.evolve(config.backends, options={
                **config.backends.options, "initial_adapter": str(self._initial_adapter)}))
            if self._initial_reference is not None and config.algorithm.beta != 0:
                config = attrs.evolve(config, model=attrs.evolve(config.model,
                                                                 reference_path=str(self._initial_reference)))
        config = resumed_window(config, grpo_config, resume)  # the window the run was started with
        trainer = api.make_trainer(config, plugins, resume=resume, engines=engines)
        trainer.eval_set_sizes = sizes
        _with_response_parser(trainer, parser)
        # polyrl report's resume advice: this run goes on with train(resume_from_checkpoint=True)
        trainer.started_by = run_plan.trl_script()
        # the trackers' tags and steps transformers' integrations write in a TRL run (train/loss at global_step)
        if hasattr(trainer, "tracking"):  # (a Trainer stand-in in the tests has none)
            trainer.tracking.rename = functools.partial(trl_tags, names=getattr(trainer, "trl_names", None))
            trainer.tracking.step_scale = int(trainer.config.algorithm.updates_per_step)  # at global_step
            trainer.tracking.trl = True  # transformers' TensorBoard folder, W&B step axis and summary
            trainer.tracking.window_logs = True  # at TRL's logging_steps (``polyrl.trl_callbacks``)
            # TRL's switch for its completions table (default off), its console table and parquet files
            follow(trainer.tracking, self.args)
            if trainer.tracking.specs and trainer.tracking.writer:  # its run name, config and texts
                trainer.tracking.trl_run = self._trl_run()
        return trainer

    def _trl_run(self) -> Any:
        """What transformers' tracker integrations read from this trainer (``polyrl.trl_run``),
        built once (its model config may be read from the folder)."""
        from polyrl.trl_run import trl_run

        if self._trl_run_made is None:
            given = self._model_object if self._model_given else None
            self._trl_run_made = (trl_run(self.args, given, self.model_path, self.policy.dtype,
                                          peft_config=self._peft_config),)
        return self._trl_run_made[0]

    @_script_names
    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None,
                 metric_key_prefix: str = "eval") -> dict[str, Any]:
        """TRL's ``evaluate()``: one evaluation of the policy as it stands (before ``train()`` the
        model given, after it the trained ``output_dir/model``) on ``eval_dataset`` (default: the
        trainer's; a dict of named sets is each, prefixed ``{metric_key_prefix}_{name}``), the
        same pass the run makes during training: ``num_generations_eval`` sampled completions per
        row, scored with the run's rewards and weights. Returns TRL's keys, each entry appended to
        ``state.log_history`` at the current step, as transformers logs it. ``ignore_keys`` names
        model outputs transformers leaves out of predictions; polyrl's evaluation keeps none. The
        model loads once: a later call (and after ``train()`` with an ``eval_dataset``, the first)
        evaluates on the engines already holding it, as TRL evaluates the model it holds."""
        import gc
        import tempfile

        from polyrl.trl_callbacks import updates_per_step
        from polyrl.trl_completions import follow_evaluation
        from polyrl.trl_config import refuse_inputs_for_metrics
        from polyrl.trl_evaluate import eval_sets, eval_settings, trl_metrics

        refuse_inputs_for_metrics(self.args)

        if not isinstance(metric_key_prefix, str) or not metric_key_prefix:
            raise ConfigError(f"metric_key_prefix is {metric_key_prefix!r}", field="metric_key_prefix",
                              fix='pass a name for the keys, e.g. metric_key_prefix="eval" (the default)')
        sets = eval_sets(eval_dataset, self.eval_dataset, self.args)
        self._check_own_saves(trained=self._trained)
        folder = self.model_path if not self._trained else str(self._model_source("evaluate"))
        # the trained folder holds merged weights; before training LoRA adapters start at zero, but
        # a PeftModel's as given (its initial_adapter, loaded with the LoRA layers)
        before_adapter = not self._trained and self._initial_adapter is not None
        policy = attrs.evolve(self.policy, model=folder, lora=self.policy.lora if before_adapter else None)
        batch_size = int(getattr(self.args, "per_device_eval_batch_size", 8) or 8)
        out: dict[str, Any] = {}
        for name, rows in sets:
            prefix = metric_key_prefix if name is None else f"{metric_key_prefix}_{name}"
            with tempfile.TemporaryDirectory(prefix="polyrl-evaluate-") as scratch:  # its eval_completions.jsonl
                config = attrs.evolve(self.grpo_config, output_dir=scratch,
                                      settings=eval_settings(self.grpo_config.settings, self.args))
                engines = self._eval_engines[1] if self._eval_engines and self._eval_engines[0] == folder else None
                trainer = self._polyrl_trainer(policy, config, rows, engines=engines)
                if prefix != "eval" and hasattr(trainer, "tracking"):  # its own parquet file name
                    follow_evaluation(trainer.tracking, self.args, prefix)
                self._eval_engines = (folder, trainer.engines)
                # the seed and trainer_state the run's evaluation has here (its step, not TRL's updates)
                trainer.step = self.state.global_step // updates_per_step(trainer)
                trainer.shared_state = self.state  # what TRL's evaluate() passes the rewards
                started = time.monotonic()
                ours = trainer.evaluate("after" if self._trained else "before")
                seconds = time.monotonic() - started
                names, tracking = trainer.trl_names, trainer.tracking
                del trainer
                gc.collect()  # the rest of it (its engines are kept for the next set and call)
            metrics = trl_metrics({**ours, "num_tokens": self.state.num_input_tokens_seen}, prefix, len(rows),
                                  seconds, batch_size, self.state.epoch, names)
            if self._callbacks is not None and self._callbacks.callbacks:  # on_log, on_evaluate: transformers'
                self._callbacks.state = self.state
                self._callbacks.evaluate_called(metrics)
            else:
                self.state.log_history.append({**metrics, "step": self.state.global_step})
            tracking.show_evaluation()  # its completions after its entry, as TRL's log prints them
            out.update(metrics)
        return out

    def save_model(self, output_dir: str | None = None) -> None:
        """Save the model to ``output_dir`` (TRL's default: the run's ``output_dir``) as TRL does:
        the trained model folder (polyrl writes it to ``output_dir/model``) copied, its tokenizer the
        ``processing_class`` given (or taken from ``trainer.processing_class``) as the script left it
        (``pad_token``, ``padding_side``, ``model_max_length``: what TRL's save writes); with
        ``peft_config`` the adapter alone (``adapter_config.json``, ``adapter_model.safetensors``,
        its base the model folder polyrl trained from) and the tokenizer, which
        ``AutoPeftModelForCausalLM.from_pretrained(dir)`` loads. Before ``train()``, the model as
        given (TRL saves whatever model the trainer holds; with ``peft_config`` its untrained adapter)."""
        target = Path(output_dir or self.grpo_config.output_dir)
        if not self._trained:  # the model as given: its saved copy
            self._check_own_saves()
        if self.policy.lora is not None:
            self._save_adapter(target)
            self._save_args(target)
            return
        source = self._model_source("save_model")
        # into the folder the model is in (the one given, the trained export): the weights are there
        # already, and TRL's save writes its tokenizer and args there all the same
        same = target.resolve() == source.resolve()
        target.mkdir(parents=True, exist_ok=True)
        # TRL saves the processing_class it holds, as the script left it (pad_token, padding_side,
        # model_max_length), or as it loaded it itself (left padding and truncation): the folder's
        # own tokenizer files are left out, lest a stale one win
        tokenizer = self._processing_class
        if tokenizer is None and any((source / name).is_file() for name in _TOKENIZER_FILES):
            from transformers import AutoTokenizer

            from polyrl import trl_folder_code

            # what TRL 1.16 loads without a processing_class (left padding and truncation), from the files saved
            tokenizer = trl_folder_code.load(AutoTokenizer, source, "model", padding_side="left",
                                             truncation_side="left")
            trl_pad(tokenizer)
        if not same:
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=lambda _, names: [
                name for name in names if tokenizer is not None and name in _TOKENIZER_FILES])
        if tokenizer is not None:
            tokenizer.save_pretrained(str(target))
            # the configs' token ids as TRL's model holds them when it saves (``align_token_ids``)
            align_saved_token_ids(target, tokenizer, trained=self._trained, use_cache=self._use_cache())
        self._save_args(target)
        if same and self.summary is not None and "model" in self.summary and target.resolve() == Path(
                self.summary["model"]).resolve():  # the files written are this trainer's, not a later run's
            self._trained_identity = trl_saves.model_identity(target)

    def _use_cache(self) -> bool | None:
        """The ``use_cache`` transformers' ``Trainer.__init__`` sets on the model's config:
        ``args.use_cache`` of TRL's (or transformers') arguments; None for polyrl's own ``GRPOConfig``."""
        from polyrl import api

        value = getattr(self.args, "use_cache", None)
        return value if isinstance(value, bool) and not isinstance(self.args, api.GRPOConfig) else None

    def _save_args(self, target: Path) -> None:
        """transformers' ``training_args.bin`` beside the saved model: ``torch.save`` of ``args``,
        which ``torch.load`` (``TrainingArguments`` reloaded) and the Hub model card read. Written for
        TRL's or transformers' own arguments only; polyrl's ``api.GRPOConfig`` is no ``TrainingArguments``."""
        try:
            from transformers import TrainingArguments
        except ImportError:
            return
        if isinstance(self.args, TrainingArguments):
            import torch

            torch.save(self.args, target / "training_args.bin")

    def _save_adapter(self, target: Path) -> None:
        """``save_model`` with ``peft_config``: what TRL's ``PeftModel.save_pretrained`` and
        transformers' ``processing_class.save_pretrained`` write."""
        from polyrl import trl_peft

        if self._trained:
            trl_peft.copy_adapter(trl_peft.adapter_folder(self._model_source("save_model"), "save_model"), target)
        else:
            self._peft("save_model").save_pretrained(str(target))
            trl_peft.absolute_base(target)
        self.processing_class.save_pretrained(str(target))

    @property
    def model(self) -> Any:
        """The model as TRL's trainer holds it. Without ``peft_config`` a transformers
        ``PreTrainedModel``: the object given (holding the trained weights after ``train()``), else
        the trained folder (before it, the one given) loaded once. With ``peft_config`` a peft
        ``PeftModel`` of the base model holding the trained adapter (before ``train()``, TRL's
        fresh one), its ``merge_and_unload()`` polyrl's merged ``output_dir/model``; a model object
        given is its base, the adapter injected into it as TRL's ``get_peft_model`` does."""
        if self.policy.lora is not None:
            return self._peft("model")
        if self._model_object is None:
            from transformers import AutoModelForCausalLM

            from polyrl import trl_folder_code

            self._model_object = trl_folder_code.load(AutoModelForCausalLM, self._model_source("model"), "model")
            # the token ids TRL's trainer set on the model it holds (its tokenizer's; after train() aligned)
            align_token_ids(self._model_object, self.processing_class, trained=self._trained,
                            use_cache=self._use_cache())
        return self._model_object

    def _peft(self, asked: str) -> Any:
        """``trainer.model`` with ``peft_config``, made once: the trained adapter on the base
        polyrl trained from, or before ``train()`` TRL's untrained one on the model as given."""
        from polyrl import trl_peft

        if self._peft_model is None:
            source = self._model_source(asked)
            trained = self._trained
            adapter = trl_peft.adapter_folder(source, asked) if trained else None
            base = self._model_object
            if base is None:
                from transformers import AutoModelForCausalLM

                from polyrl import trl_folder_code

                base = trl_folder_code.load(AutoModelForCausalLM, trl_peft.recorded_base(adapter) if adapter
                                            else source, "model")
            self._peft_model = trl_peft.trained(base, adapter) if adapter else \
                trl_peft.untrained(base, self._peft_config, asked)
            self._model_object = base
        return self._peft_model

    def _hold_trained(self, folder: Path) -> None:
        """After ``train()``, put the trained model into the model object in memory (the one given,
        or the one ``trainer.model`` loaded): TRL trains the object a script keeps using. With
        ``peft_config`` the trained adapter is injected into it (TRL's ``PeftModel`` around it;
        an untrained one taken before ``train()`` gets the trained weights); else the weights are
        loaded into it."""
        from polyrl import trl_peft

        if self.policy.lora is None or not (folder / "adapter" / "adapter_model.safetensors").is_file():
            if self._peft_model is not None:  # no peft adapter saved (MLX): the untrained adapters out again
                self._model_object, self._peft_model = self._peft_model.unload(), None
            _load_trained_weights(self._model_object, folder)
            # transformers' train() aligned the model's token ids with the tokenizer (``align_token_ids``)
            align_token_ids(self._model_object, self.processing_class, trained=True, use_cache=self._use_cache())
            return
        adapter = trl_peft.adapter_folder(folder, "model")
        if self._peft_model is not None and trl_peft.load_trained(self._peft_model, adapter):
            return
        if self._peft_model is not None:  # adapters on other layers than polyrl trained: replaced
            self._model_object = self._peft_model.unload()
        self._peft_model = trl_peft.trained(self._model_object, adapter)

    def _check_own_saves(self, trained: bool = False) -> None:
        """Refuse to train, evaluate or save when a trainer built later replaced the model objects
        this one saved (``trained``: the given model is past, its reward models are not)."""
        from polyrl import trl_saves

        folders = [f for f in getattr(self, "_saved_folders", []) if not (trained and f == self.model_path)]
        trl_saves.check_still_ours(self.grpo_config.output_dir, getattr(self, "_saver_token", None), folders)

    def _model_source(self, asked: str) -> Path:
        """The folder of the model as it stands: trained after ``train()`` (one that raised: the
        checkpoint of its last trained step, ``trl_failed_run``), else the one given."""
        if self._failed_run is not None:
            return self._failed_run.model(asked)
        if self.summary is not None and "model" in self.summary:  # this run's, not a later run's there
            return trl_saves.trained_model(Path(self.summary["model"]), self._trained_identity, asked)
        if self.summary is not None:
            raise ConfigError("the run stopped before its first step, so there is no trained model", field=asked,
                              fix="look at the run's error above, then call trainer.train() again")
        if not Path(self.model_path).is_dir():
            raise ConfigError(f"model {self.model_path!r} is a name polyrl resolves when it trains, not a folder",
                              field=asked, fix="call trainer.train() first, or give the model as a folder")
        return Path(self.model_path)

    def _run_folder(self, asked: str) -> Path:
        """Where this trainer's run files go: the output_dir, or after ``train()`` the folder its run
        is in now (``trl_saves.run_folder``: a later run there moved it into ``previous/``)."""
        if self.summary is not None and "model" in self.summary:
            return trl_saves.run_folder(Path(self.summary["model"]), self._trained_identity, asked)
        return Path(self.grpo_config.output_dir)

    @property
    def processing_class(self) -> Any:
        """The tokenizer polyrl tokenizes with: the one given, else the model folder's (after
        ``train()``, the copy saved with the trained model)."""
        if self._processing_class is None:
            from transformers import AutoTokenizer

            from polyrl import trl_folder_code

            # after train() the tokenizer saved beside the trained model: a polyrl model name is no Hub id.
            # Left padding and truncation, as TRL 1.16's GRPOTrainer loads it (save_model writes them)
            trained = "model" in (self.summary or {})
            self._processing_class = trl_folder_code.load(
                AutoTokenizer, self._model_source("processing_class") if trained else self.model_path, "model",
                padding_side="left", truncation_side="left")
            trl_pad(self._processing_class)  # TRL's: its EOS where the folder's has no pad token
        return self._processing_class

    def _response_parser(self) -> Any:
        """``trl_responses.response_parser`` of the tokenizer TRL decodes completions with (the
        folder's loaded only when its files name a response_schema)."""
        from polyrl import trl_responses

        tokenizer = self._processing_class
        if tokenizer is None:  # the folder given: its trained copy keeps its tokenizer files
            if not trl_responses.folder_has_schema(self.model_path):
                return None
            tokenizer = self.processing_class
        return trl_responses.response_parser(tokenizer)

    @property
    def callback_handler(self) -> TrlCallbacks:
        """transformers' ``trainer.callback_handler``: its ``callbacks`` list and add/pop/remove."""
        if self._callbacks is None:
            self._callbacks = self._callback_handler([])
        return self._callbacks

    def add_callback(self, callback: Any) -> None:
        """Add a ``TrainerCallback`` (an instance, or a class made with no arguments), as transformers does."""
        self.callback_handler.add_callback(callback)

    def pop_callback(self, callback: Any) -> Any:
        """Remove and return the first callback of that class (or that instance); None when absent."""
        return self.callback_handler.pop_callback(callback)

    def remove_callback(self, callback: Any) -> None:
        """Remove the first callback of that class, or that instance."""
        self.callback_handler.remove_callback(callback)

    def _callback_handler(self, callbacks: list[Any]) -> TrlCallbacks:
        from polyrl.trl_callbacks import TrlCallbacks

        return TrlCallbacks(callbacks, self.args, self._callback_tokenizer, rank=self.accelerator.process_index,
                            local_rank=0 if self.accelerator.is_local_main_process else 1, state=self.state)

    def _callback_tokenizer(self) -> Any:
        """The ``processing_class`` callbacks get: the trainer's, None for a model polyrl resolves by
        name when it trains (no folder to load it from yet)."""
        if self._processing_class is None and not Path(self.model_path).is_dir():
            return None
        return self.processing_class

    def is_world_process_zero(self) -> bool:
        """Whether this is the process that writes (transformers' name); polyrl's run writes from rank 0."""
        return self.accelerator.is_main_process

    def is_local_process_zero(self) -> bool:
        """Whether this is the first process on its machine (transformers' name)."""
        return self.accelerator.is_local_main_process

    def log(self, logs: dict[str, Any], start_time: float | None = None) -> None:
        """transformers' ``Trainer.log``: ``logs``, with the state's ``epoch`` (and
        ``num_input_tokens_seen`` where ``include_num_input_tokens_seen`` asks) added in place,
        appended to ``state.log_history`` at the current step and given to the callbacks'
        ``on_log``; during ``train()`` (a callback's call) also to the run's trackers
        (``report_to``) at the steps taken so far, as transformers' tracker callbacks get every
        log. Why: TRL's example scripts and callbacks log their own metrics so. ``start_time``
        only times transformers' token throughput, which polyrl's steps log. polyrl's trackers
        belong to the run: before ``train()`` they are not open yet and after it they are closed,
        so those calls reach ``log_history`` and the callbacks only, and a warning says so."""
        if self.state.epoch is not None:
            logs["epoch"] = self.state.epoch
        if getattr(self.args, "include_num_input_tokens_seen", "no") not in ("no", False, None):
            logs["num_input_tokens_seen"] = self.state.num_input_tokens_seen
        if self._callbacks is not None and self._callbacks.callbacks:
            self._callbacks.state = self.state
            self._callbacks.log_called(logs)
        else:
            self.state.log_history.append({**logs, "step": self.state.global_step})
        run = self._run
        if run is not None:
            self._logged_in_run.append(self.state.log_history[-1])
            run.tracking.publish_log(logs, step=run.step)  # with TRL's completions table, as its log sends it
            return
        trackers = self.grpo_config.settings.get("logging.report_to")
        if trackers:
            log.warning("trainer.log() outside train() reached state.log_history and the callbacks, not polyrl's "
                        "trackers (report_to): they are open while train() runs (a callback's trainer.log reaches "
                        "them) and close when it returns", report_to=trackers)

    def log_metrics(self, split: str, metrics: dict[str, Any]) -> None:
        """Print ``metrics`` as transformers' ``Trainer.log_metrics`` does."""
        print(f"***** {split} metrics *****")
        width = max((len(key) for key in metrics), default=0)
        for key in sorted(metrics):
            print(f"  {key.ljust(width)} = {metrics[key]}")

    def save_metrics(self, split: str, metrics: dict[str, Any], combined: bool = True) -> None:
        """Write ``output_dir/{split}_results.json`` (and merge into ``all_results.json``), as transformers does;
        after a later run in that output_dir, where it set this trainer's run aside (``_run_folder``).
        On the main process only, as transformers' (``is_world_process_zero``): another rank's copy,
        written beside rank 0's saves, was taken by rank 0 for another run's results and moved aside."""
        if not self.is_world_process_zero():
            return
        with self._saving_into("save_metrics") as (folder, own):
            # each file replaced whole (strict_json's temp file and rename): a write cut short (a kill, a
            # full disk) left all_results.json half written, and every later save_metrics a JSONDecodeError
            name = f"{split}_results.json"
            strict_json.rewrite_lines(folder / name, [json.dumps(metrics, indent=4, sort_keys=True)])
            trl_saves.record_results(folder, name)  # any split's file goes aside with its run (trl_saves)
            own[name] = json.loads(json.dumps(metrics))
            if combined:
                everything = folder / "all_results.json"
                merged = json.loads(everything.read_text()) if everything.is_file() else {}
                strict_json.rewrite_lines(everything, [json.dumps({**merged, **metrics}, indent=4, sort_keys=True)])
                own["all_results.json"] = {**own.get("all_results.json", {}), **json.loads(json.dumps(metrics))}

    @contextlib.contextmanager
    def _saving_into(self, asked: str) -> Iterator[tuple[Path, dict[str, Any]]]:
        """(the folder ``save_metrics``/``save_state`` write into: ``_run_folder``, this trainer's
        own files there: name -> content, to update). In the output_dir, under its run lock (a run
        of another process there is refused before a file of it is replaced), with every run file
        not this trainer's moved aside first (``trl_saves.set_aside_others``): as transformers does,
        an earlier run's or another trainer's files there were overwritten or merged into."""
        from polyrl import run_lock

        folder = self._run_folder(asked)
        own = self._own_results if self.summary is None else self._run_results
        output_dir = Path(self.grpo_config.output_dir)
        if folder.resolve() != output_dir.resolve():  # a previous/ folder holding this trainer's run alone
            folder.mkdir(parents=True, exist_ok=True)
            yield folder, own
            return
        with run_lock.held_while_writing(output_dir, self.accelerator.is_main_process):
            folder.mkdir(parents=True, exist_ok=True)
            run = trl_saves.run_key(output_dir)
            # one process moves them (the lock's holder), as transformers' save_metrics writes on one only
            aside = trl_saves.set_aside_others(folder, own) if self.accelerator.is_main_process else None
            if aside is not None and self.summary is None:  # another run's: back with it when train() sets it aside
                self._displaced.append((aside, run))
            yield folder, own

    def save_state(self) -> None:
        """Write ``output_dir/trainer_state.json`` (``state.save_to_json``), as transformers does; after a
        later run in that output_dir, where it set this trainer's run aside (``_run_folder``). On the
        main process only, as transformers' (see ``save_metrics``)."""
        if not self.is_world_process_zero():
            return
        with self._saving_into("save_state") as (folder, own):
            self.state.save_to_json(str(folder / "trainer_state.json"))
            own["trainer_state.json"] = json.loads((folder / "trainer_state.json").read_text())

    def push_to_hub(self, *args: Any, **kwargs: Any) -> None:
        """Refused: polyrl uploads nothing (``push_to_hub=True`` in the GRPOConfig is refused too)."""
        raise ConfigError("polyrl.trl.GRPOTrainer does not upload to the Hub", field="push_to_hub",
                          fix="upload the saved folder: huggingface_hub.upload_folder(repo_id=..., "
                              "folder_path=<the save_model folder>)")

    def end(self) -> None:
        """transformers' ``Trainer.end()``: polyrl's run closed its trackers when ``train()`` returned."""

    def __getattr__(self, name: str) -> Any:
        """A TRL trainer attribute polyrl has no counterpart for: say what to use instead."""
        fix = _TRL_ONLY.get(name)
        if fix is None:
            raise AttributeError(f"'GRPOTrainer' object has no attribute {name!r}")
        raise AttributeError(f"polyrl.trl.GRPOTrainer has no {name!r} (TRL's trainer has): {fix}")


#: the files a tokenizer is saved in (transformers' ``save_pretrained``, slow and fast): ``save_model``
#: writes the processing_class's own in their place
_TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                              "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model",
                              "sentencepiece.bpe.model", "chat_template.jinja", "chat_template.json"})


#: TRL trainer attributes a script may read that polyrl's trainer cannot give -> what to do instead
_TRL_ONLY = {
    name: "polyrl trains the model in its backend, not in this process; after train() the trained model is "
          "the folder trainer.save_model(dir) writes: AutoModelForCausalLM.from_pretrained(dir)"
    for name in ("model_wrapped", "ref_model", "optimizer", "lr_scheduler")
} | {
    "tokenizer": "use trainer.processing_class (transformers' own name for it)",
    "hub_model_id": "polyrl does not upload to the Hub",
    "create_model_card": "polyrl writes no model card",
}


def _check_weight_count(weights: Any, rewards: list[Any]) -> None:
    """``reward_weights`` of another length than ``reward_funcs`` refused as the trainer is built,
    as TRL's constructor refuses it (a ValueError); polyrl's run refused it only in ``train()``, so
    a script's ``evaluate()`` or saves before it ran on. An environment's ``get_reward`` weights
    are appended after this check, as in TRL."""
    if weights is None or isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        return  # from_trl names a weights value that is no list
    if len(weights) != len(rewards):
        raise ConfigError(f"reward_weights has {len(weights)} weights for {len(rewards)} reward_funcs",
                          field="grpo_config.reward_weights",
                          fix=f"give {len(rewards)} weights, one per entry of reward_funcs and in the same order")


def _evaluates(eval_dataset: Any, grpo_config: Any) -> bool:
    """Whether the run evaluates on ``eval_dataset``: when its config asks for an evaluation
    (``from_trl``'s ``eval.*`` settings), which without an eval_dataset is an error, as in TRL."""
    if not any(key.startswith("eval.") for key in grpo_config.settings):
        return False
    if eval_dataset is None:
        raise ConfigError("the GRPOConfig evaluates (eval_strategy or eval_on_start) but no eval_dataset was given",
                          field="eval_dataset", fix='pass eval_dataset=<held-out rows>, or set eval_strategy="no" '
                                                    "(as TRL asks)")
    return True


def _has_eval_rows(eval_dataset: Any) -> bool:
    """Whether the run has ``eval_dataset`` rows to evaluate during training: a set of rows, or a
    dict of named sets (``_check_set_names``), not None."""
    return eval_dataset is not None


def _refuse_misshaped(train_dataset: Any, eval_dataset: Any) -> None:
    """One ConfigError, as the trainer is built, for a dataset given in another shape than rows:
    a dict of columns (``dataset[:n]``: as eval_dataset, a dict of named sets, each column was read
    as a set), one row, or a data file's path (refused only in ``train()``/``evaluate()``, as a
    string read as one prompt per character)."""
    if is_column_dict(eval_dataset, "prompt"):
        raise column_dict_error(eval_dataset, "eval_dataset")
    if is_column_dict(train_dataset):
        raise column_dict_error(train_dataset, "train_dataset")
    for name, given in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
        problem = one_row_error(given, name) or (data_file_error(given, name) if isinstance(given, (str, bytes))
                                                 else None)
        if problem is not None:
            raise problem


def _check_set_names(eval_dataset: Any) -> None:
    """A dict ``eval_dataset``'s names, which its metrics are logged under (``eval_<name>_...``, as
    transformers prefixes them): an empty dict, a name polyrl cannot keep apart in a step's line
    (empty or with a ``/``: ``step_metrics.named_eval``) or two names that are one string are one
    ConfigError naming ``eval_dataset``."""
    if not isinstance(eval_dataset, Mapping):
        return
    if not eval_dataset:
        raise ConfigError("eval_dataset is an empty dict of datasets", field="eval_dataset",
                          fix="pass one or more named held-out sets, e.g. eval_dataset={\"a\": rows}, or leave it out")
    names = [str(name) for name in eval_dataset]
    bad = next((name for name in names if not name or "/" in name), None)
    if bad is not None:
        raise ConfigError(f"eval_dataset's set name {bad!r} is empty or holds a '/'; polyrl logs each set's "
                          f"metrics under eval/sets/<name>/ (TRL: eval_<name>_...)", field="eval_dataset",
                          fix="name each set without '/', e.g. eval_dataset={\"gsm8k\": ..., \"math\": ...}")
    if len(set(names)) != len(names):
        raise ConfigError(f"eval_dataset's set names {names} repeat as strings", field="eval_dataset",
                          fix="give each set its own name")


def _refuse_cut_sets(eval_dataset: Any, grpo_config: Any) -> None:
    """A dict ``eval_dataset`` whose rows ``eval.count`` (a setting of polyrl's own GRPOConfig) cuts
    short: one ConfigError when the trainer is built. Why: the run evaluates the first ``eval.count``
    rows of the sets put end to end, so a set lost rows (or all of them) and the numbers could not
    be told apart by set; the run refused it only at its first evaluation, after training steps,
    with a fix naming ``data.drop_overlong``. A set without a length (a stream) is counted when read."""
    count = grpo_config.settings.get("eval.count")
    if not isinstance(eval_dataset, Mapping) or not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return
    if not all(hasattr(rows, "__len__") for rows in eval_dataset.values()):
        return
    sizes = {str(name): len(rows) for name, rows in eval_dataset.items()}
    if count < sum(sizes.values()):
        held = ", ".join(f"{name!r}: {size}" for name, size in sizes.items())
        raise ConfigError(f"eval.count = {count} is fewer rows than the named eval sets of eval_dataset hold "
                          f"({held}; {sum(sizes.values())} in all): the first {count} of them end to end would "
                          "leave a set cut short, where TRL evaluates each set whole",
                          field="grpo_config.settings.eval.count",
                          fix="leave eval.count out of the settings (every row of each set is evaluated), or cut "
                              "each set to the rows to evaluate, e.g. eval_dataset={name: ds.select(range(n))}")


#: how the Trainer names an error of the run's rewards on the held-out rows (``Trainer._eval_reward_computer``)
_HELD_OUT_RUN = "the held-out set (eval.reward = 'run'): "


def _named_eval_dataset(exc: ConfigError) -> ConfigError:
    """``exc``, or where it names ``run``'s ``eval_prompts`` or the run's rewards on the held-out
    rows (polyrl's ``eval.reward = 'run'``, a key the script never wrote), the same error told
    about TRL's ``eval_dataset``, the argument this script passed."""
    if exc.message.startswith(_HELD_OUT_RUN):  # the eval rows lack what the run's rewards read
        return ConfigError("eval_dataset (scored with reward_funcs, as TRL's evaluation scores it): "
                           + exc.message.removeprefix(_HELD_OUT_RUN), field="eval_dataset",
                           fix=(exc.fix or "").replace("to the dataset", "to the eval_dataset"))
    if exc.field != "eval_prompts":
        return exc
    return ConfigError(exc.message.replace("eval_prompts", "eval_dataset"), field="eval_dataset",
                       fix=(exc.fix or "").replace("leave eval_prompts out", 'set eval_strategy="no"')
                       .replace("eval_prompts", "eval_dataset"))


def _all_cut_in_trl_names(exc: Any) -> Exception:
    """The all-cut stop (``polyrl.trainer.AllCompletionsCut``) told in GRPOConfig's names: its
    fix named ``generation.max_new_tokens`` and ``polyrl train CONFIG --resume-weights-only``,
    neither of which a TRL script has."""
    from polyrl.trainer import TooManySkippedSteps

    return TooManySkippedSteps(
        f"{exc.steps} steps in a row trained on no completion: every completion was cut at max_completion_length = "
        f"{exc.max_new_tokens} and mask_truncated_completions=True leaves cut completions out of the loss (TRL "
        f"trains on none of them either, without a word); stopping, the state checkpointed in {exc.checkpoint}. Fix: raise "
        "max_completion_length so completions can finish, or set mask_truncated_completions=False to train on cut "
        f"completions, then train again from the checkpoint's weights: GRPOTrainer(model=\"{exc.checkpoint / 'model'}\", "
        "...) (resume_from_checkpoint refuses a changed max_completion_length or mask_truncated_completions)")


def _with_unlogged(metrics: dict[str, Any], observer: Any) -> dict[str, Any]:
    """transformers' end-of-training ``metrics`` as TRL's ``log`` writes them: the means of the
    steps no log held yet (``TrlCallbacks.unlogged``) before ``epoch``, which transformers adds last."""
    unlogged = observer.unlogged() if callable(getattr(observer, "unlogged", None)) else {}
    if not unlogged:
        return metrics
    head = {k: v for k, v in metrics.items() if k != "epoch"}
    return {**head, **{k: v for k, v in unlogged.items() if k not in head},
            **({"epoch": metrics["epoch"]} if "epoch" in metrics else {})}


#: marks a step line no log holds, kept only for its evaluation's entry (``_as_logged``)
_UNLOGGED = "_polyrl_unlogged"


def _as_logged(history: Sequence[Mapping[str, Any]],
               logged: Mapping[int, Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """``history``'s step lines as the run logged them (``logged``: each log by the step it ended
    at, ``TrlCallbacks.logged_lines``): a logged step's line is its log, with the step's own
    evaluation; any other keeps its evaluation only, marked ``_UNLOGGED`` (its ``eval_`` entry is
    TRL's, the step's numbers are not), with its ``num_tokens``, TRL's ``eval_num_tokens`` there
    (left out, that entry lacked it where ``on_log`` had it). ``logged`` None: every line, as logged each."""
    if logged is None:
        return [dict(m) for m in history]
    out = []
    for line in history:
        evaluation = {k: v for k, v in line.items() if k.startswith("eval/")}
        if evaluation and "num_tokens" in line:
            evaluation["num_tokens"] = line["num_tokens"]
        step = line.get("step")
        if isinstance(step, int) and step in logged:
            out.append({**logged[step], **evaluation})
        else:
            out.append({**evaluation, "step": step, "epoch": line.get("epoch"), _UNLOGGED: True})
    return out


def _with_evaluations(log_history: list[dict[str, Any]], summary: Mapping[str, Any],
                      per_step: int = 1, names: Mapping[str, str] | None = None,
                      untold: Collection[int] = (), sets: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``log_history`` with an entry after each evaluation's step under TRL's ``eval_`` names
    (``step_metrics.trl_eval_names``; ``names`` the rewards' TRL names), the one before training
    (``eval_on_start``) at step 0 and the one after training at the last step when no step's line
    holds it, as TRL logs them; none for a step in ``untold`` (global steps whose evaluation a
    callback cleared in ``on_epoch_end`` after polyrl ran it: TRL's trainer runs and logs none); with
    named eval ``sets`` (a dict ``eval_dataset``) one entry per set, as transformers logs each."""
    from polyrl.step_metrics import tokens_seen, trl_eval_entries, trl_eval_names

    out: list[dict[str, Any]] = []

    def logged(evaluated: Mapping[str, Any], epoch: Any, step: Any) -> None:
        """The evaluation's entries (one per named eval set, ``sets``), as transformers logs them."""
        out.extend({**entry, "epoch": epoch, "step": step} for entry in trl_eval_entries(evaluated, sets))

    if summary.get("eval_before"):  # transformers' epoch before any update: the int 0
        logged(trl_eval_names({**summary["eval_before"], **tokens_seen(True, {})}, names), 0, 0)
    for entry in log_history:
        out.append(entry)
        evaluated = trl_eval_names(entry, names)
        if evaluated and entry.get("step") not in untold:
            logged(evaluated, entry.get("epoch"), entry.get("step"))
    last = log_history[-1] if log_history else {}
    if summary.get("eval_after") and not trl_eval_names(last):
        logged(trl_eval_names({**summary["eval_after"], **tokens_seen(False, last)}, names), last.get("epoch"),
               int(summary.get("steps", 0)) * per_step)
    return out


class _Accelerator:
    """The members of ``trainer.accelerator`` TRL's own scripts call (``print``,
    ``is_main_process``, ``wait_for_everyone``), so a script's lines after ``train()`` do not end
    the run in an AttributeError before ``save_model``; polyrl's workers are its own, so this
    process's rank (``RANK``, 0 without a launcher) is all it reports."""

    def __init__(self) -> None:
        self.process_index = int(os.environ.get("RANK", "0") or 0)
        self.num_processes = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.is_main_process = self.process_index == 0
        self.is_local_main_process = int(os.environ.get("LOCAL_RANK", "0") or 0) == 0

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the main process only, as accelerate's does."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    def wait_for_everyone(self) -> None:
        """Nothing to wait for: polyrl's run has ended when ``train()`` returns."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"polyrl.trl.GRPOTrainer's accelerator has print, is_main_process, process_index, "
                             f"num_processes and wait_for_everyone only, not {name!r}: polyrl runs no accelerate "
                             "Accelerator (its backend places the model)")


#: dtypes a model loads in (TRL's ``model_init_kwargs["dtype"]`` strings; polyrl's ``Agent.dtype``)
_DTYPES = ("float32", "bfloat16", "float16")
#: ``model_init_kwargs`` keys TRL's own ``trl/scripts/grpo.py`` always writes (from ``ModelConfig``'s
#: defaults), with the values that load a model folder as polyrl loads it: the default revision, no
#: remote code, transformers' own attention choice. Why taken: refusing them stopped TRL's script
#: with no option of its set; any other value of them is still refused.
_LOADS_AS_POLYRL: dict[str, tuple[Any, ...]] = {"revision": (None, "main"), "trust_remote_code": (False,),
                                                "attn_implementation": (None,)}


def _dtype_name(value: Any) -> str:
    """A dtype as ``model_init_kwargs`` gives it (a string or a ``torch.dtype``) by its name."""
    return str(value).removeprefix("torch.")


def _refuse_unread_torch_dtype(kwargs: dict[str, Any], dtype: str) -> None:
    """One ConfigError where ``model_init_kwargs["torch_dtype"]`` asks for another dtype than the
    one TRL loads the folder in (``dtype``). Why: TRL 1.16's ``create_model_from_path`` reads
    ``dtype`` alone (float32 when unset) and passes it to ``from_pretrained``, where transformers 5
    takes ``dtype`` over the deprecated ``torch_dtype``: ``{"torch_dtype": "bfloat16"}`` trains in
    float32 under TRL, and polyrl trained it in bfloat16 without a word."""
    if "torch_dtype" not in kwargs or _dtype_name(kwargs["torch_dtype"]) == dtype:
        return
    asked = _dtype_name(kwargs["torch_dtype"])
    raise ConfigError(f"TRL's model_init_kwargs['torch_dtype'] = {asked!r} is not read: TRL 1.16 loads the model "
                      f"in dtype = {dtype!r} ({'given' if 'dtype' in kwargs else 'its default'}), which "
                      "transformers takes over the deprecated torch_dtype, so TRL trains it in "
                      f"{dtype} and polyrl will not train {asked} in its place",
                      field="grpo_config.model_init_kwargs",
                      fix=f"write model_init_kwargs={{\"dtype\": {asked!r}}} for {asked} weights (as TRL then "
                          f"loads them), or remove torch_dtype for TRL's {dtype}")


def _recorded_dtype(model: str) -> str | None:
    """The dtype a model folder's (or cached Hub id's) ``config.json`` records (``dtype``, or
    transformers 4's ``torch_dtype``), which TRL's ``model_init_kwargs={"dtype": "auto"}`` loads
    it in; None when it records none polyrl can read (transformers then reads the weights' own)."""
    from polyrl.hub import looks_like_hub_id, resolve_cached

    folder = model if Path(model).is_dir() else resolve_cached(model) if looks_like_hub_id(model) else None
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")) if folder else None
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    recorded = config.get("dtype") or config.get("torch_dtype")
    return recorded if isinstance(recorded, str) else None


def _model_dtype(model: Any, args: Any) -> tuple[str, Any]:
    """The dtype polyrl trains ``model`` in, as TRL loads it, and ``args`` without the
    ``model_init_kwargs`` read here (``from_trl`` refuses what it does not read). Why: a folder
    loads in ``model_init_kwargs["dtype"]`` (TRL's default float32; ``"auto"`` the one its config.json
    records; a ``torch_dtype`` only where it agrees, as TRL reads ``dtype`` alone) and a
    model object trains in its own dtype (TRL ignores ``model_init_kwargs`` then, with a warning),
    where polyrl's float32 default would train a bfloat16 script in float32 without a word."""
    from polyrl.api import GRPOConfig as PolyrlConfig

    if isinstance(model, (str, Path)):
        kwargs = {} if isinstance(args, PolyrlConfig) else getattr(args, "model_init_kwargs", None) or {}
        if not isinstance(kwargs, dict):
            return "float32", args  # from_trl names a model_init_kwargs it cannot read
        for key, value in kwargs.items():
            if key == "quantization_config" and value is not None:
                from polyrl.trl_quantized import refuse_quantization_config

                refuse_quantization_config(value, "grpo_config.model_init_kwargs")
            if key in ("dtype", "torch_dtype") or value in _LOADS_AS_POLYRL.get(key, ()):
                continue
            taken = "" if key not in _LOADS_AS_POLYRL else \
                f" (taken as {' or '.join(map(repr, _LOADS_AS_POLYRL[key]))} only, which load it as polyrl does)"
            raise ConfigError(f"TRL's model_init_kwargs[{key!r}] = {value!r} has no polyrl counterpart",
                              field="grpo_config.model_init_kwargs",
                              fix=f"remove {key!r}{taken}: polyrl reads model_init_kwargs' dtype; it loads and "
                                  "places the model itself")
        dtype = _dtype_name(kwargs.get("dtype", "float32"))
        if dtype in ("auto", "None"):  # transformers reads None as "auto": the dtype config.json records
            dtype = _recorded_dtype(str(model)) or dtype
        _refuse_unread_torch_dtype(kwargs, dtype)
        where = "model_init_kwargs"
    else:
        dtype = str(getattr(model, "dtype", "float32")).removeprefix("torch.")
        where = "model's dtype"
        if getattr(args, "model_init_kwargs", None) is not None:
            from polyrl.logs import get_logger

            get_logger("polyrl.trl").warning("model_init_kwargs is ignored for the model: it is already built (as "
                                             "TRL does; a reward-model folder in reward_funcs still loads in its dtype)")
    if dtype not in _DTYPES:
        raise ConfigError(f"{where} is {dtype!r}; polyrl trains in {', '.join(_DTYPES)}",
                          field="grpo_config.model_init_kwargs" if where == "model_init_kwargs" else "model",
                          fix='name the dtype, e.g. model_init_kwargs={"dtype": "bfloat16"} ("auto" is read only from '
                              "a dtype config.json records)"
                              if where == "model_init_kwargs" else "convert the model, e.g. model.to(torch.bfloat16)")
    if getattr(args, "model_init_kwargs", None) is not None and not isinstance(args, PolyrlConfig):
        args = copy.copy(args)  # the script's own object keeps its value
        args.model_init_kwargs = None
    return dtype, args


def _tools(tools: Any) -> GivenTools | None:
    """TRL's ``tools``: functions the model may call, registered for this run (``given_tools``);
    None when there are none."""
    from polyrl.agents.builtin import BUILTIN_TOOLS
    from polyrl.agents.given_tools import given_tools

    if tools is None or (isinstance(tools, (list, tuple)) and not tools):
        return None
    return given_tools(tools, "tools", taken=[fn.__name__ for fn, _, _ in BUILTIN_TOOLS])


def _environments(environment_factory: Any, tools: GivenTools | None) -> TrlEnvironments | None:
    """TRL's ``environment_factory`` probed (``trl_environments``); None when not given."""
    if environment_factory is None:
        return None
    from polyrl.agents.trl_environments import trl_environments

    return trl_environments(environment_factory, tools.names if tools is not None else ())


def _default_eval_prompts(environments: TrlEnvironments, eval_dataset: Any, args: Any) -> Any:
    """``eval_dataset`` with TRL's empty prompt in rows without one (as the training rows get);
    one polyrl cannot read as rows is left as it is, for its own check to name. An
    ``IterableDataset`` is read as TRL's eval loader reads it (to its end, in its order under
    ``args``: ``trl_evaluate.stream_eval_rows``), which ``api.prompt_rows`` refuses."""
    from polyrl import api, trl_evaluate, trl_streams

    if eval_dataset is None:
        return eval_dataset
    if isinstance(eval_dataset, Mapping):  # named sets: each as one
        return {name: _default_eval_prompts(environments, rows, args) for name, rows in eval_dataset.items()}
    try:
        if trl_streams.is_stream(eval_dataset):
            streamed = trl_evaluate.stream_eval_rows(eval_dataset, args, "eval_dataset")
            return trl_evaluate.StreamOrder(environments.default_prompts(streamed))
        rows = api.prompt_rows(eval_dataset)
    except ConfigError:
        return eval_dataset
    if all(environments.prompt_column in row for row in rows):
        return eval_dataset
    return environments.default_prompts(rows)


def _placeholder_rows(environments: TrlEnvironments | None, args: Any, grpo_config: Any) -> list[dict[str, Any]]:
    """TRL's rows without a ``train_dataset``: one batch of empty prompts, cycled, whose
    environment writes each prompt in ``reset``; refused as TRL refuses it for a dict factory
    (no ``environment`` column to route by) and without ``max_steps`` (no length)."""
    from polyrl.api import GRPOConfig as PolyrlConfig

    assert environments is not None  # the caller refused a missing dataset without one
    if environments.routed:
        raise ConfigError("a dict environment_factory needs a train_dataset with an 'environment' column",
                          field="train_dataset",
                          fix="pass a dataset whose rows name their environment, or a single factory")
    if not isinstance(args, PolyrlConfig) and not getattr(args, "max_steps", -1) > 0:
        raise ConfigError("without a train_dataset the run's length is max_steps, which is not set",
                          field="train_dataset", fix="set GRPOConfig(max_steps=N), or pass a train_dataset")
    return [{"prompt": [{"role": "user", "content": ""}]} for _ in range(grpo_config.prompts_per_step)]


def _with_environments(config: Any, plugins: list[Any]) -> list[Any]:
    """``plugins`` with every reward function handed ``environments=`` (the episodes' instances),
    as TRL's are in a run with an ``environment_factory``. Refused with ``generation.overlap``:
    a pending rollout is checkpointed as JSON, so a resumed run would score it without them."""
    from polyrl.rewards.functions import FunctionReward

    if config.generation.overlap:
        raise ConfigError("environment_factory with generation.overlap: a rollout sampled ahead is checkpointed "
                          "without its environment instances, which reward functions (environments=) and "
                          "get_reward() read", field="environment_factory",
                          fix="set generation.overlap = false (the default) in this run's settings")
    for plugin in plugins:
        if isinstance(plugin, FunctionReward):
            plugin.environments = True
    return plugins


def _with_response_parser(trainer: Any, parser: Any) -> None:
    """Hand ``parser`` to the run's reward computers (training's and the held-out set's), its one
    owner: each parses a chat completion once per call and every reward function and reward model
    reads that parse (``RewardComputer._parsed``), as TRL's ``_generate`` parses once for all.
    Why only there: it was also handed to each ``FunctionReward``, whose own parse is never reached
    inside a computer (the completion already holds the parse), two owners of one setting; a
    function reward called on its own still parses where its ``parse_completion`` is set."""
    for computer in (getattr(trainer, "rewards", None), getattr(trainer, "_eval_rewards", None)):
        if computer is not None and hasattr(computer, "parse_completion"):  # (a Trainer stand-in may lack it)
            computer.parse_completion = parser


def _environment(tools: GivenTools | None, environments: TrlEnvironments | None,
                 args: Any) -> EnvironmentSection | None:
    """The run's ``[environment]`` for TRL's tool-calling loop: the tools by name, the
    environment_factory's environment, and the turn and token limits of ``args``
    (``trl_config.agent_settings``; polyrl's defaults for its own config)."""
    from polyrl.agents.trl_environments import ENVIRONMENT_NAME
    from polyrl.api import GRPOConfig as PolyrlConfig
    from polyrl.config import EnvironmentSection
    from polyrl.trl_config import agent_settings

    if tools is None and environments is None:
        return None
    limits: dict[str, Any] = {} if isinstance(args, PolyrlConfig) else agent_settings(args)
    try:
        return EnvironmentSection(name=ENVIRONMENT_NAME if environments is not None else None,
                                  tools=tools.names if tools is not None else [], **limits)
    except ConfigError as exc:
        raise ConfigError(exc.message, field="tools" if tools is not None else "environment_factory",
                          fix=exc.fix) from None


def _default_args(model: Any) -> Any:
    """TRL's default arguments when ``args`` is None: ``GRPOConfig(f"{model_name}-GRPO")``."""
    name = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "model")
    try:
        from trl import GRPOConfig
    except ImportError:
        from polyrl.api import GRPOConfig as PolyrlConfig

        return PolyrlConfig(output_dir=f"{Path(str(name)).name}-GRPO")
    output_dir = f"{str(name).split('/')[-1]}-GRPO"
    try:
        return GRPOConfig(output_dir)
    except ValueError:  # TrainingArguments' bf16 device check; polyrl places the model itself (use_cpu unread)
        return GRPOConfig(output_dir, use_cpu=True)


def _refuse_optimizers(optimizers: Any) -> None:
    """One ConfigError for TRL's ``optimizers=(optimizer, lr_scheduler)`` other than ``(None, None)``
    (a bare optimizer too, not a TypeError). Why refused: the backend trains its own copy of the
    model, loaded from a folder (``initial_model`` for an object), in its dtype, maybe with LoRA,
    sharded or in another process, so an optimizer built on the script's ``model.parameters()``
    would update tensors no step trains; and a run resumes exactly from AdamW's own saved state and
    polyrl's schedule formula, which a script's optimizer class and scheduler closure are not."""
    pair = optimizers if isinstance(optimizers, (list, tuple)) else (optimizers,)
    if all(part is None for part in pair):
        return
    raise ConfigError("GRPOTrainer(optimizers=...) is not used: polyrl's backend trains its own copy of the model "
                      "(an optimizer on your model.parameters() would update tensors no step trains) and builds "
                      "AdamW and the learning-rate schedule itself, resumed exactly from its checkpoints",
                      field="optimizers",
                      fix="remove it and set learning_rate, adam_beta1, adam_beta2, adam_epsilon, weight_decay, "
                          "lr_scheduler_type and warmup_steps in the GRPOConfig, which polyrl reads")


def _model_folder(model: Any, processing_class: Any, output_dir: str) -> str:
    """The folder (or polyrl model name) the backends load ``model`` from. A model object is saved
    (with its tokenizer) under ``output_dir/initial_model``: its weights may differ from any folder."""
    if isinstance(model, (str, Path)):
        _check_tokenizer(processing_class, str(model))
        return str(model)
    if processing_class is not None and hasattr(processing_class, "save_pretrained") is False:
        raise ConfigError(f"processing_class is a {type(processing_class).__name__}", field="processing_class",
                          fix="pass the model's tokenizer (a transformers tokenizer) or remove it")
    if not hasattr(model, "save_pretrained"):
        raise ConfigError(f"model is a {type(model).__name__}", field="model",
                          fix="pass a model folder, a polyrl model name or a transformers PreTrainedModel")
    from polyrl import trl_peft_model
    from polyrl.trl_tokenizer import refuse_no_eos

    folder = Path(output_dir) / "initial_model"
    tokenizer = processing_class if processing_class is not None else _folder_tokenizer(model)
    refuse_no_eos(tokenizer)  # before anything is saved: TRL's first generation fails without one
    if trl_peft_model.is_peft_model(model):  # the base alone, unmerged: the adapter is trained from its own file
        trl_peft_model.save_base(model, folder)
    else:
        model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _load_trained_weights(model: Any, folder: Path) -> None:
    """Put the trained weights of ``folder`` into ``model`` in place, in the model's own dtype:
    TRL trains the object it was given, so a script saving or sampling from its ``model`` after
    ``train()`` would otherwise use the untrained weights without a word."""
    import torch
    from transformers import AutoModelForCausalLM

    from polyrl import trl_folder_code

    trained = trl_folder_code.load(AutoModelForCausalLM, folder, "model", dtype=model.dtype)
    with torch.no_grad():
        missing, unexpected = model.load_state_dict(trained.state_dict(), strict=False)
    if missing or unexpected:  # another architecture than the one saved: not the model polyrl trained
        raise ConfigError(f"the trained model in {folder} does not fit the model object given (missing "
                          f"{list(missing)[:3]}, unexpected {list(unexpected)[:3]})", field="model",
                          fix=f"load the trained model from {folder} with AutoModelForCausalLM.from_pretrained")
    log.info("the model object given to GRPOTrainer now holds the trained weights", folder=str(folder))


def _folder_tokenizer(model: Any) -> Any:
    """The tokenizer saved beside a model object's weights (its ``name_or_path``): a folder or the
    local Hub cache only, as polyrl never downloads (the Hub's retries kept a machine without
    network waiting half a minute for this error)."""
    source = getattr(model, "name_or_path", "") or ""
    from polyrl import trl_folder_code

    try:
        from transformers import AutoTokenizer

        return trl_folder_code.load(AutoTokenizer, source, "processing_class", local_files_only=True)
    except ConfigError:  # the folder's own code, refused
        raise
    except Exception:  # noqa: BLE001 - any other failure means the same fix
        raise ConfigError(f"model is an object whose tokenizer could not be loaded from {source!r}",
                          field="processing_class", fix="pass processing_class=<the model's tokenizer>") from None


def _check_tokenizer(processing_class: Any, folder: str) -> None:
    """A ``processing_class`` must be the model folder's own tokenizer as the folder holds it:
    polyrl tokenizes with the folder's files, so another tokenizer, or one the script edited in
    memory (its chat template, eos_token, added tokens: ``polyrl.trl_tokenizer``), would be
    ignored silently. Either way a tokenizer without an EOS token id, which TRL cannot sample with,
    is refused (``trl_tokenizer.refuse_no_eos``)."""
    from polyrl.hub import looks_like_hub_id, resolve_cached
    from polyrl.trl_tokenizer import folder_names_eos, refuse_no_eos

    if processing_class is None:  # the folder's own, loaded only where its files name no eos_token
        try:
            local = folder if Path(folder).is_dir() else resolve_cached(folder) if looks_like_hub_id(folder) else None
        except ConfigError:  # not cached: the run's own load of the model says so
            return
        if local and not folder_names_eos(local):
            refuse_no_eos(_local_tokenizer(local))
        return
    refuse_no_eos(processing_class)
    local = folder if Path(folder).is_dir() else resolve_cached(folder) if looks_like_hub_id(folder) else None
    same_source = str(getattr(processing_class, "name_or_path", "")) in {folder, local}
    if not same_source:
        _refuse_tokenizer(f"it was loaded from {getattr(processing_class, 'name_or_path', '?')!r}, not {folder!r}")
    own = _local_tokenizer(local) if local else None
    if own is None:
        return
    from polyrl.trl_tokenizer import differences

    found = differences(processing_class, own)
    if found:
        _refuse_tokenizer("; ".join(found))


def _refuse_tokenizer(what: str) -> None:
    """The one error for a ``processing_class`` that is not the folder's tokenizer (``what``)."""
    raise ConfigError(f"processing_class is not the model folder's own tokenizer: {what}", field="processing_class",
                      fix="polyrl tokenizes with the model folder's files: save the model and yours into a new, "
                          "empty folder (model.save_pretrained(DIR); processing_class.save_pretrained(DIR): over a "
                          "copy of the old folder, its stale special_tokens_map.json would win) and pass model=DIR "
                          "without processing_class, or remove processing_class")


def _local_tokenizer(folder: str) -> Any:
    """The tokenizer ``folder`` holds, loaded afresh from its files; None where it cannot be loaded
    here (the run's own load names why)."""
    from polyrl import trl_folder_code

    try:
        from transformers import AutoTokenizer

        return trl_folder_code.load(AutoTokenizer, folder, "processing_class", local_files_only=True)
    except ConfigError:  # the folder's own code, refused
        raise
    except Exception:  # noqa: BLE001 - nothing to compare against
        return None


def __getattr__(name: str) -> Any:
    """A hint for the TRL name a script imports from here by mistake (``GRPOConfig`` stays TRL's)."""
    if name == "GRPOConfig":
        raise ImportError("polyrl.trl has GRPOTrainer only: keep `from trl import GRPOConfig` (polyrl reads it)")
    raise AttributeError(f"module 'polyrl.trl' has no attribute {name!r}")
