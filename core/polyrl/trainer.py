"""The training loop: generate -> reward -> advantages -> (old/ref log-probs) -> update -> sync.

One step, for ``prompts_per_step`` prompts and ``group_size`` samples each:

1. the *generate* engine samples completions (token ids + sampler log-probs, never re-tokenized);
2. reward plugins score them, seeing the dataset row's columns; DAPO shaping/filtering applies;
3. the algorithm turns rewards into advantages (group-normalised, RLOO, REINFORCE...);
4. ``old_logprobs`` are computed only when they can differ from the current policy
   (``num_iterations > 1`` or ``minibatches > 1``); ``ref_logprobs`` only when ``beta > 0``;
5. ``num_iterations`` passes of ``minibatches`` optimizer steps each on the *train* engine
   (``polyrl.minibatches``: the batch shuffled and split, one update per part);
6. weights are pushed to the generator when it is a different engine, so the policy that
   generates is always the policy being trained.

With ``generation.overlap`` the generator samples step k+1 on a worker thread during steps 3-5 of
step k (one step of policy lag; see ``polyrl.rollouts``), and the weights are pushed at the start
of each step, the only moment the generator is idle.

Everything a resumed run needs (step, data position, RNG, engine + optimizer) is checkpointed
atomically; SIGINT/SIGTERM finish the current step, checkpoint and return (a second Ctrl-C leaves at once).
"""

from __future__ import annotations

import json
import os
import functools
import math
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from polyrl import checkpoint as ckpt
from polyrl import kept_inputs, previous_runs, resume_config, safe_stats, skip_causes, strict_json, trl_reward_models, trl_saves
from polyrl.algorithms.kl_control import adapted_kl_coef, batch_kl
from polyrl.algorithms.objective import Objective
from polyrl.algorithms.shaping import kl_penalized_rewards
from polyrl.backend_kit.gap_metrics import RANK_KEYS
from polyrl.config import RUN_REWARDS, RunConfig, check_world_size
from polyrl.control_chars import ControlProbe, engines_probe
from polyrl.control_setup import check_setup_text
from polyrl.data import Dataset, PromptSampler, check_prompt_lengths, dataset_changed_error, load_train_and_eval
from polyrl.backend_features import check_router_aux
from polyrl.engines import RunEngines, check_engines, choose_generate_backend, load_engines, run_optimizer
from polyrl import episode_scoring, eval_log_metrics, eval_loss
from polyrl.episode_prompts import first_prompt_encoder
from polyrl.folder_chat import FolderChat
from polyrl.hook_prompts import HookPromptEncoder
from polyrl.errors import (
    CallbackError,
    CollectiveTimeout,
    ConfigError,
    EnvironmentFailed,
    OutOfMemory,
    PluginError,
    PolyrlError,
    RewardError,
    StoppedAtOnce,
)
from polyrl.late_columns import refuse_needed, reward_columns
from polyrl.null_answers import answer_columns, refuse_null
from polyrl.logs import get_logger, log_from_signal_handler, readable
from polyrl.tracking.tensorboard import LOG_DIR as TENSORBOARD_DIR
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.resume_point import check_backend_files, resume_point
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import load_function_reward
from polyrl.rewards.guard import RewardCancelled
from polyrl.rank_fingerprint import check_same, fingerprint, model_files, reward_code, reward_files
from polyrl.reasoning import closes_reasoning, opens_reasoning, think_suffix
from polyrl.reward_agreement import agreed_reward_failure, reward_outcome
from polyrl.rewards.trl_compat import TrainerState, shadowed_eval_log_metrics, shadowed_log_metrics
from polyrl.sandbox_hidden import hide_from_samples
from polyrl.rollouts import Rollout, RolloutAhead
from polyrl.run_observer import CANCEL_EVALUATION, RunObserver, StepAsk, checkpoint_due
from polyrl.schedules import lr_at, updates_in_history
from polyrl import run_paths, run_plan
from polyrl.run_lock import OUTPUT_DIR_BUSY_FIX, OutputDirBusy, OutputDirLock, check_output_dir
from polyrl import evaluation, metrics_file
from polyrl import minibatches, router_rows, step_gather
from polyrl.stored_rows import as_stored
from polyrl.step_metrics import (clip_region_metrics, epoch_stop_skips, eval_batch_metrics, joined_gaps,
                                 no_loss_token_metrics, nothing_scored_metrics, peak_rss_mb, sampling_metrics, step_tokens, trl_aliases, trl_epoch,
                                 trl_gathered_sampling, trl_process_sampling, TrlRewardName, trl_reward_names, trl_step_time,
                                 untrained_gap)
from polyrl.step_metrics import step_metrics as common_step_metrics
from polyrl.step_line import step_line_fields
from polyrl.tracking.session import for_run as tracking_for_run
from polyrl.types import Completion, Prompt, RewardContext, SamplingParams, StepMetrics, TokenSequence, TrainBatch

if TYPE_CHECKING:  # imported lazily at run time: single-turn runs never load the agents package
    from polyrl.agents.episodes import EpisodeRunner
    from polyrl.agents.setup import EnvironmentPlan
    from polyrl.algorithms.presets import AlgorithmConfig
    from polyrl.engine import Engine
    from polyrl.progress import StepClock  # rich, imported by the run itself

log = get_logger("polyrl.trainer")


class TooManySkippedSteps(PolyrlError):
    """Training produced non-finite losses/gradients, no reward scored any sample, or every
    completion was cut under mask_truncated_completions, too many steps in a row."""


#: what ``train.max_consecutive_skips`` counts in a row (checkpoint state ``in_a_row``)
IN_A_ROW = ("skips", "unscored", "cut")


class AllCompletionsCut(TooManySkippedSteps):
    """``train.max_consecutive_skips`` steps in a row whose every completion was cut under
    ``mask_truncated_completions``. Why a class: its message names polyrl's keys and CLI, and a
    caller whose user wrote other names (``polyrl.trl``: TRL's ``max_completion_length``) says
    the fix in those, from ``steps``, ``max_new_tokens`` and the ``checkpoint`` written."""

    def __init__(self, message: str, steps: int, max_new_tokens: int, checkpoint: Path) -> None:
        super().__init__(message)
        self.steps, self.max_new_tokens, self.checkpoint = steps, max_new_tokens, checkpoint


class OutputWriteError(PolyrlError):
    """A file of the run could not be written (disk full, read-only); the last good checkpoint is kept."""


def check_run(config: RunConfig, world_size: int = 1, *, warn_context: bool = True) -> None:
    """What ``polyrl train`` refuses before loading a model (rewards and their options, data,
    trackers, the environment, backends and their options, the models' paths and architectures, how
    the chat template shows a tool's result, prompt messages in roles it drops), checked without loading a model or touching the
    output_dir. ``warn_context``: it also warns, as the run does, of episodes whose later turns see a
    context the template never shows; ``polyrl launch`` leaves that to its rank 0, which warns once its
    models load (both said it: the same warning twice), and asks it under ``--dry-run``, where no rank
    starts. ``polyrl launch`` (and its ``--dry-run``) runs it, so a config every rank would refuse is
    one error before torchrun starts."""
    trainer = Trainer(config, check_only=True)
    trainer.registry.check_data_parallel(trainer.config.backends.train, world_size)
    model, _ = check_engines(trainer.config, trainer.registry, launched=True)
    from polyrl.dry_run_roles import check_dataset_roles

    folder = FolderChat(model, trainer.config.model.chat_template_kwargs)  # its tokenizer loaded once, for all three
    trainer._check_template(folder)
    # the tools' schemas and the config's text in every prompt, before the rows (a system_prompt is in each)
    check_setup_text(folder.control_probe(), trainer.config, trainer._env_plan)
    check_dataset_roles(trainer.config, trainer._env_plan, trainer._source_data, folder)  # the tokenizer alone
    if warn_context and trainer._env_plan is not None:  # warned of as the run warns once its models load
        from polyrl.agents.setup import check_reasoning_context

        check_reasoning_context(trainer.config, trainer._env_plan, folder)


def _refuse_unless_weights_only(weights_only: bool, warning: str, details: dict[str, Any], problem: str, field: str,
                                restore: str) -> None:
    """What a resume does about something changed since its checkpoint: --resume-weights-only
    warns and goes on; a full resume is refused with the three ways on."""
    if weights_only:
        log.warning(warning, **details)
        return
    raise ConfigError(problem, field=field, fix=f"restore {restore} as it was, or continue from the weights with "
                                                "--resume-weights-only, or train into a new output_dir")


def _rng_states() -> dict[str, Any]:
    """Python's and numpy's global RNG states as JSON (a user's reward may draw from them)."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python_random": {"version": version, "internal": list(internal), "gauss": gauss},
        "numpy_random": {"name": name, "keys": keys.tolist(), "pos": int(pos),  # type: ignore[attr-defined]  # the legacy tuple
                         "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
    }


def _restore_rng_states(state: dict[str, Any]) -> None:
    py, npy = state.get("python_random"), state.get("numpy_random")
    if isinstance(py, dict):
        random.setstate((py["version"], tuple(py["internal"]), py["gauss"]))
    if isinstance(npy, dict):
        np.random.set_state((npy["name"], np.asarray(npy["keys"], dtype=np.uint32), npy["pos"],
                             npy["has_gauss"], npy["cached_gaussian"]))


#: What ``Trainer._load_engines`` sets: reading one first loads the models (see ``Trainer.__getattr__``).
_MODEL_ATTRIBUTES = frozenset({"engines", "model_path", "train_engine", "gen_engine", "ref_engine", "ref_sync",
                               "episodes", "dataset", "eval_dataset", "sampler"})


def _launcher_rank() -> tuple[int, int]:
    """(rank, world size) from a multi-process launcher's environment (torchrun sets both)."""
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def _loss_counts(completions: list[Completion], group_kept: np.ndarray,
                 untruncated: np.ndarray) -> tuple[int, int]:
    """This rank's (sequences, tokens) for the loss's divisors (``TrainBatch.normaliser_*``).

    TRL's GRPOTrainer keeps in its batch the completions polyrl does not train on: one cut at the
    length limit under ``mask_truncated_completions`` (loss mask zeroed: a sequence with 0
    tokens) and an unscorable one (every reward None, advantage 0: a sequence with its tokens;
    trained here too when the KL term is in the loss, where it is not zero).
    Its per-sequence means divide by all of them and its token means count the unscorable ones'
    tokens; dividing by the trained rows alone scaled the step by their ratio. Groups dynamic
    sampling drops stay out: DAPO refills its batch with informative groups in their place."""
    rows = np.flatnonzero(group_kept)
    tokens = sum(int(TokenSequence.of(completions[i]).loss_mask.sum()) for i in rows if untruncated[i])
    return len(rows), tokens


def _length_of(encode: Callable[[Prompt], Any], prompt: Prompt) -> int | None:
    """The tokens of ``prompt`` as ``encode`` renders it (the startup length check's count); None
    when ``encode`` cannot render it."""
    ids = encode(prompt)
    return None if ids is None else len(ids)


def _lengths_of(encode_many: Callable[[list[Prompt]], Sequence[Any]], prompts: list[Prompt]) -> list[int | None]:
    """``_length_of`` of each prompt, encoded in one call (an engine's ``encode_prompts``)."""
    return [None if ids is None else len(ids) for ids in encode_many(prompts)]


def _rendered(engine: Engine, messages: list[dict[str, Any]], add_generation_prompt: bool) -> np.ndarray:
    """``engine.encode_chat`` without tools, from an engine that answered it once."""
    ids = engine.encode_chat(messages, None, add_generation_prompt)
    return np.zeros(0, dtype=np.int64) if ids is None else ids


def _overflow_message(shaped: np.ndarray) -> str:
    """The error for a reward total that overflowed float64 (each score was finite on its own)."""
    first = int(np.flatnonzero(np.isinf(shaped))[0])
    return (f"the weighted reward total of sample {first} is {shaped[first]} (each score is finite, but the "
            "weighted sum, overlong shaping or KL penalty overflows float64). Fix: scale the reward scores or "
            "[[rewards]] weights down")


#: Every train backend receives advantages as float32 (``TrainBatch``): past this they become inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _unrepresentable_advantages(advantages: np.ndarray, algo: AlgorithmConfig,
                                per_reward: Mapping[str, np.ndarray]) -> str | None:
    """The error for advantages past float32's range, or None. Unscaled estimators (REINFORCE, RLOO,
    scale_rewards = "none") keep the rewards' own scale, and no rescale keeps their update the same
    (the gradient's size is the advantage's), so the step is refused, naming the reward, instead of
    training on inf (a NaN loss, skipped steps, then a stop that blamed the learning rate)."""
    top = float(np.max(np.abs(advantages), initial=0.0))
    if top <= _FLOAT32_MAX:
        return None
    spans = {name: float(np.nanmax(np.abs(v), initial=0.0)) for name, v in per_reward.items() if np.isfinite(v).any()}
    name = max(spans, key=lambda k: spans[k]) if spans else "the reward"
    return (f"{algo.name}'s advantages reach {top:.3g} with scale_rewards = {algo.scale_rewards!r} (the rewards' own "
            f"scale; reward {name!r} scored up to {spans.get(name, float('nan')):.3g}), past float32's "
            f"{_FLOAT32_MAX:.3g} that every train backend computes in. Fix: scale reward {name!r} down, or set "
            'algorithm.scale_rewards = "batch" (scale-free advantages)')


def _finite_or_none(value: float) -> float | None:
    """A score for a JSON record: None for a reward that did not score the sample (NaN)."""
    return float(value) if np.isfinite(value) else None


def _step_seed(seed: int, step: int) -> int:
    """A per-step seed derived from the run seed, so a resumed run samples the same."""
    return (seed * 1_000_003 + step * 7919) % (2**31 - 1)


#: (``encode_chat(messages, add_generation_prompt)``, ``decode``) of an engine (``Trainer._chat_reader``)
ChatReader = tuple[Callable[[list[dict[str, Any]], bool], np.ndarray], Callable[..., str]]


@attrs.frozen(eq=False)
class _Rewarded:
    """This rank's scored step (``Trainer._step_rewards``): what the step-wide selection gathers."""

    scored: Any  # the reward computer's result (total, per_reward, metrics, metric_counts)
    rewards: np.ndarray  # each completion's reward total
    shaped: np.ndarray  # after overlong shaping and a KL penalty in the reward
    kl_sums: np.ndarray | None  # kl_in_reward: each sequence's summed KL to the reference
    kl_metrics: dict[str, float]  # kl_in_reward: the coefficient these rewards used
    seconds: float  # scoring's duration here


@attrs.frozen(eq=False)
class _StepBatch:
    """The step's rewards and loss selection over every rank (``Trainer._select_step``), decided
    once, so the update, a step with nothing to train and the metrics all read the same values on
    every rank. Arrays are the whole step's, in rank order, but ``my_untruncated``; ``mine`` is
    this rank's slice of them."""

    step: step_gather.Shard  # every rank's shard, joined
    sizes: list[int]  # every rank's completion count
    mine: slice
    my_untruncated: np.ndarray  # this rank's completions not cut under mask_truncated_completions
    rewards: np.ndarray  # reward totals (unshaped)
    shaped: np.ndarray  # shaped rewards; NaN for an episode with nothing to train on
    untruncated: np.ndarray
    matrix: np.ndarray | None  # GDPO: the per-reward scores, each normalized in its group
    barred: np.ndarray | None  # episodes: rows no loss term trains (an environment error's)
    router_on: bool  # the loss holds a MoE model's router term
    keep: np.ndarray  # rows the update trains on
    advantages: np.ndarray
    group_kept: np.ndarray  # rows of TRL's batch (the groups dynamic sampling keeps)
    cut_rows: np.ndarray  # prompt-only rows of the router term
    kl_in_loss: bool  # the KL to the reference is a loss term

    @property
    def global_kept(self) -> int:
        """The samples the update trains on, over every rank."""
        return int(self.keep.sum())


def _run_folders(config: RunConfig) -> list[str | None]:
    """The run's output folder and dataset paths, for ``sandbox_hidden``."""
    data = config.data
    paths: list[str | None] = [config.train.output_dir, data.cache_dir]
    for value in (data.path, data.eval_path):
        paths += value if isinstance(value, list) else [value]
    return paths


class Trainer:
    """Runs a ``RunConfig``. Build it, then call ``run()``; ``evaluate()`` works any time."""

    def __init__(self, config: RunConfig, extra_plugins: tuple[Any, ...] = (), *,
                 resume: str | Path | None = None, weights_only: bool = False, check_only: bool = False,
                 engines: RunEngines | None = None) -> None:
        """``resume``: the ``resume()`` to come ("" for the newest checkpoint, or its path). Its
        checkpoint is chosen, verified and its saved config checked now, before any model loads,
        so a refused resume (another backends.train, a changed model...) costs no engine load;
        ``run()`` then resumes it unless ``resume()`` was called first. ``check_only``: the checks
        alone, no model loaded (``check_run``). ``engines``: engines already loaded for this
        config's models, used instead of loading them (``polyrl.trl``'s ``evaluate()`` evaluates
        on the ones it loaded before, or on the run's own after ``train()``)."""
        #: the working folder as the run began: its relative paths name files from there, wherever
        #: plugin code moves the process's working folder later (``run_paths``)
        self._start_dir = run_paths.start_folder()
        #: train.output_dir as written: what ranks compare (nodes may start in other folders)
        self._given_output_dir = config.train.output_dir
        self.config = config = run_paths.with_output_dir(config, self._start_dir)
        self._given_engines = engines
        self.output_dir = Path(config.train.output_dir)
        check_output_dir(self.output_dir)  # a file or a symlink loop: refused before anything loads
        hide_from_samples(_run_folders(config))  # code samples see none of them, wherever they lie
        self.checkpoint_root = self.output_dir / "checkpoints"
        self.final_model_dir = self.output_dir / "model"
        self.lock = OutputDirLock(self.output_dir)
        self._resumed = False
        #: the checkpoint whose copies stand in for start folders that are gone (``kept_inputs``): the
        #: one a resume reads, set as it is chosen, then each checkpoint this run writes
        self._kept_from: Path | None = None
        #: the reference folders ``kept_inputs`` could not keep, said once a run
        self._unkept_warned: set[Path] = set()
        function_plugins = [
            load_function_reward(r.function, name=r.label, isolation=r.isolation) for r in config.rewards if r.function
        ]
        self._reward_codes = [reward_code(p.fn) for p in function_plugins]  # as loaded: compared across ranks
        plugins = tuple(p for p in extra_plugins if not isinstance(p, TrlRewardName))  # names, not plugins
        self.registry = Registry(get_plugin_manager(extra=(*plugins, *function_plugins)))
        #: reward label -> the name TRL logs it under, where they differ (``trl_reward_names``)
        self.trl_names = trl_reward_names(extra_plugins)
        self.config = config = choose_generate_backend(config, self.registry)
        #: the rows as read, before ``_fit_prompts`` checks them against the tokenizer
        self._source_data = self._datasets()
        #: every column of the training and held-out sets, passed to function rewards for every
        #: sample (``RewardContext.columns``); read once: a row-backed set finds them row by row
        self._columns = tuple(tuple(data.columns) if data is not None else () for data in self._source_data)
        read = reward_columns(config.rewards, [p.fn for p in function_plugins])
        for data in self._source_data:  # a column a reward reads, missing from a JSON file's first rows
            if data is not None:
                refuse_needed(read, data.late_columns, data.name)
        # an answer column null in every row: the reward would score nothing (``polyrl.null_answers``)
        train_data, held_out = self._source_data
        refuse_null(answer_columns(config.rewards), train_data, "the training set")
        if held_out is not None:
            refuse_null(answer_columns(config.rewards, config.eval.reward, RUN_REWARDS), held_out, "the held-out set")
        self.stop_requested = False
        #: the run was stopped by a signal (or its agreement under a launcher) before its last step
        self._stopped_on_request = False
        #: who of the run's own code asked it to stop before its last step (an observer, a TRL
        #: callback: ``StepAsk.why``), or None; ``run_plan`` records it as the run's end
        self._stopped_by_code: str | None = None
        #: who started the run where not ``polyrl train`` (``run_plan.trl_script``: a TRL script),
        #: recorded for the report's resume advice
        self.started_by: dict[str, str] | None = None
        #: code watching the run in this process (``polyrl.run_observer``; ``polyrl.trl``'s callbacks)
        self.observers: list[RunObserver] = []
        #: what the observers kept in the checkpoint a full resume restored (``RunObserver.checkpoint_state``,
        #: by each one's key), for them to read in ``run_begin``; {} on a fresh start or a weights-only resume
        self.resumed_observer_state: dict[str, Any] = {}
        #: the ``trainer_state`` every reward call gets, kept current by whoever set it (``polyrl.trl``:
        #: its ``trainer.state``, which its callbacks observer moves on, as TRL passes its trainer's
        #: own); None: the run's own ``TrainerState``, moved on before each call (``_trainer_state``)
        self.shared_state: Any = None
        #: TRL's ``logging_steps``/``eval_steps``/``save_steps`` as its GRPOConfig has them (``polyrl.api.run``
        #: with a ``trl.GRPOConfig``): the run's own ``TrainerState`` shows them as transformers'
        #: ``compute_steps`` does, as ``polyrl.trl.GRPOTrainer``'s does; None: polyrl's intervals
        self.trl_steps: Mapping[str, Any] | None = None
        #: TRL's ``per_device_train_batch_size`` (``polyrl.api.run`` with a ``trl.GRPOConfig``): the run's own
        #: ``TrainerState.train_batch_size``, as transformers writes it; None: polyrl's mini-batch
        self.trl_train_batch_size: int | None = None
        #: numbers for the trackers when the run has ended well, while they are still open, at the last
        #: step taken (``polyrl.trl``: transformers' ``train_runtime``, ``train_loss``..., which TRL logs
        #: to its ``report_to`` at the end); None: nothing
        self.end_metrics: Callable[[Trainer], Mapping[str, Any]] | None = None
        #: a TRL trainer's own saves in output_dir before this run (name -> content): a fresh start
        #: sets aside every other trainer's results there, not these (``trl_saves.leftover_run_files``)
        self.own_run_files: Mapping[str, Any] = {}
        #: (folder, the run then in output_dir) for each ``previous/results-<time>/`` a TRL trainer's
        #: saves before this run moved another run's results into: a fresh start setting that run
        #: aside puts them back with it (``trl_saves.rejoin``)
        self.displaced_results: Sequence[tuple[Path, Any]] = ()
        self._reward_state: TrainerState | None = None
        #: evaluate after training (with held-out rows); False: only the steps ``eval.every`` or an
        #: observer asks for (``polyrl.trl`` under TRL's eval_strategy="no", where a callback's
        #: should_evaluate evaluates and TRL evaluates nothing at the end)
        self.evaluate_after = True
        #: (name, rows) of each named eval set, in order, that ``eval_dataset`` holds one after another
        #: (``polyrl.trl``: TRL's dict ``eval_dataset``): each evaluated on its own (``_evaluate_sets``)
        self.eval_set_sizes: Sequence[tuple[str, int]] = ()
        #: a weight push that failed after its step trained: raised once the step is recorded
        self._sync_failed: PolyrlError | None = None
        #: (epoch, position) of the prompt sampler where the current step's prompts start (``_end_epoch``)
        self._step_start = (0, 0)
        #: steps of TRL's epochs an epoch stop left out (``_end_epoch``): TRL's ``epoch`` counts them
        self._epoch_steps_skipped = 0
        #: the last step's rewards were all None (no reward scored any sample): counted toward the stop
        self._nothing_scored = False
        #: the last step trained nothing because every completion was cut under mask_truncated_completions
        self._all_cut = False
        #: the backend refused the last step's update (a non-finite loss or gradient): counted toward the stop
        self._update_refused = False
        #: eval.loss was skipped once for a MoE model's router term (warned once a run)
        self._router_eval_warned = False
        #: steps in a row whose every episode (on every rank) ended in an environment error
        self._failed_steps = 0
        #: the steps in a row so far that had a non-finite update, no score, every completion cut
        #: (``train.max_consecutive_skips``); checkpointed, so a resumed run stops where this one would
        self._in_a_row: dict[str, int] = dict.fromkeys(IN_A_ROW, 0)
        self.rewards = RewardComputer(
            self.registry.pm, [(r.name or r.label, r.weight, dict(r.options), r.label) for r in config.rewards],
            columns=self._columns[0], timeouts={r.label: r.timeout_s for r in config.rewards},
            should_stop=lambda: self.stop_requested,
        )
        #: scores held-out rows (None: no eval set); made now, so its checks run before any model loads
        self._eval_rewards = self._eval_reward_computer()
        self.rank, self.world_size = _launcher_rank()
        self.registry.check_data_parallel(config.backends.train, self.world_size)
        check_world_size(config, self.world_size)
        #: (the resume() arguments, their checkpoint and state) checked before the engines loaded
        self._checked_resume: tuple[tuple[str | None, bool], tuple[Path, dict[str, Any]] | None] | None = None
        #: where the run is, named by a collective that times out there (``CollectiveTimeout.during``)
        self._phase = "loading the models"
        try:
            if resume is not None:
                self._own_output_dir()
                request = (str(resume) or None, weights_only)
                self._checked_resume = (request, self._resume_point(*request))
            self._load(config)
            if check_only:
                return
            if resume is not None or not ckpt.complete_checkpoints(self.checkpoint_root):
                self._load_models()
            # else at first use: a resume() checks its checkpoint before any model loads
        except BaseException:
            self.lock.release()  # taken for the early resume check; this trainer never came to be
            raise

    if not TYPE_CHECKING:  # hidden from mypy, which would accept any attribute name otherwise
        def __getattr__(self, name: str) -> Any:
            """The models and what needs them, loaded on first use (``_MODEL_ATTRIBUTES``)."""
            if name not in _MODEL_ATTRIBUTES or self.__dict__.get("_loading_models"):
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            self._load_models()
            return object.__getattribute__(self, name)

    def _load(self, config: RunConfig) -> None:
        """The trackers and environment: what is checked before any model loads."""
        self.step = 0
        #: TRL's ``num_tokens``: prompt and sampled tokens of every step so far (checkpointed)
        self.num_tokens = 0
        #: optimizer updates applied so far (checkpointed): where the lr schedule is, for the
        #: ``lr`` of a step whose update was skipped (the backend reports it for the ones it makes)
        self.updates_applied = 0
        self.kl_coef = float(config.algorithm.beta)  # kl_in_reward's coefficient (kl_ctrl adapts it)
        self.rollouts = RolloutAhead(self._generate)
        self._saved_step: int | None = None  # the step of the last checkpoint this run wrote
        self._prune_deferred = False  # the last checkpoint's pruning waits for the evaluation after training
        #: the prompt sampler's state before the rows of the oldest rollout not trained yet (the
        #: step's own, or one sampled ahead), None: it is after every trained step's rows already
        self._untrained_before: dict[str, Any] | None = None
        self._ahead_before: dict[str, Any] | None = None  # before the rows of the rollout sampled ahead
        #: the step's update began and the step is not counted yet: the weights are neither
        #: ``step``'s nor the next one's, so no checkpoint of them is sound (``_out_of_memory``)
        self._updating = False
        self._model_prints: dict[str, str] | None = None  # _model_files, once computed
        #: keep_previous_runs = 0 on a fresh start: previous/ is emptied once this run saves a trained
        #: checkpoint (so a start that fails costs nothing); ``_set_aside``: the run moved there then
        self._prune_pending = False
        self._set_aside: Path | None = None
        self._env_reward_warned = False  # _warn_unused_env_reward: once a run
        self._shadowed_told: set[str] = set()  # _warn_shadowed_log_metrics: each name once a run
        #: the generation prompt's ids when the chat template opens <think> there (set once the models load)
        self._think_suffix: np.ndarray | None = None
        self.history: list[dict[str, Any]] = []
        #: the evaluation before training kept by a resume's rewound metrics.jsonl (``_rewind_metrics``)
        self._kept_eval_before: dict[str, Any] | None = None
        # an unknown tracker: an error now
        self.tracking = tracking_for_run(config, self.registry, self.rank, self._start_dir)
        self._env_plan = self._check_environment()  # before the models load: a bad tool name errs now

    def _load_models(self) -> None:
        """The engines, then the prompts fitted to the tokenizer. At construction, or (when
        output_dir holds a checkpoint that ``resume()`` may refuse) when first needed."""
        self._loading_models = True
        try:
            self._load_engines(self._start_config())
        finally:
            self._loading_models = False

    def _start_config(self) -> RunConfig:
        """The config the models load with: its local paths from the start folder (``run_paths``),
        and on a resume, a start folder that is gone read from the checkpoint's own copy
        (``kept_inputs``), not from where the config names it."""
        config = run_paths.with_start_inputs(self.config, self._start_dir)
        return config if self._kept_from is None else kept_inputs.with_copies(config, self._kept_from)

    def _load_engines(self, config: RunConfig) -> None:
        if self._given_engines is not None:
            # what load_engines checks of the router term (a coefficient on a dense model, a MoE
            # family the train backend has no term for), before any step on engines loaded elsewhere
            check_router_aux(config, self.registry, self._given_engines.model_path)
            self._check_template(self._given_engines.model_path)
            self.engines = self._given_engines
        else:
            self.engines = load_engines(config, self.registry, before_load=self._check_template)
        self.model_path, self.train_engine = self.engines.model_path, self.engines.train
        self.gen_engine, self.ref_engine = self.engines.generate, self.engines.reference
        self.ref_sync = self.engines.ref_sync
        reader = self._chat_reader()  # once: both questions below render through it
        self._think_suffix = self._reasoning_prompt(reader)
        # the control characters the tokenizer misreads (the train engine first, as for the lengths):
        # asked of the prompts here and of what the episodes insert; none to ask is said once
        probe = engines_probe([self.train_engine, self.gen_engine], say=self.rank == 0)
        check_setup_text(probe, config, self._env_plan)  # the tools' schemas and the config's text, once
        self.episodes = self._episode_runner(probe)
        if self.episodes is not None:
            self.episodes.think_suffix = self._think_suffix
            if self.rank == 0:  # one warning under a launcher, not one per rank
                self.episodes.check_reasoning_kept(self._reasoning_closed(reader))
        self.dataset, self.eval_dataset = self._fit_prompts(probe)  # needs the tokenizer; before step 0
        self.sampler = PromptSampler(self.dataset, config.train.prompts_per_step, seed=config.train.seed,
                                     shuffle=config.data.shuffle)
        ev = config.eval
        if self.eval_dataset is not None and self.rank == 0 and ev.reward != RUN_REWARDS and \
                ev.reward not in {r.label for r in config.rewards}:
            log.warning(f"evaluation scores with eval.reward = {ev.reward!r}, which is not one of this run's rewards"
                        + (" (the default; it reads the 'answer' column)" if ev.reward == "numeric_match" else ""),
                        rewards=", ".join(r.label for r in config.rewards),
                        fix="set eval.reward to the registered reward that measures success on this data")
        if config.train.prompts_per_step > len(self.dataset):
            log.warning("train.prompts_per_step is more than the dataset's rows: each step samples some prompts "
                        "twice or more", prompts_per_step=config.train.prompts_per_step, rows=len(self.dataset),
                        fix=f"set train.prompts_per_step <= {len(self.dataset)}, or add rows")

    # --- setup ---------------------------------------------------------------------------------

    def _eval_reward_computer(self) -> RewardComputer | None:
        """``eval.reward`` over the held-out rows' columns (None without an eval set): an answer
        column they lack is a ConfigError here, before any model loads, not at the first eval.
        Where it names one of the run's rewards it scores with that entry's options (its answer
        column, its pattern...), as training does, not with the reward's defaults; ``"run"``
        (``RUN_REWARDS``) scores with every entry of the run and its weight, as training does."""
        held_out = self._source_data[1]
        if held_out is None:
            return None
        ev = self.config.eval
        if ev.reward == RUN_REWARDS:
            rewards = self.config.rewards
            try:
                return RewardComputer(self.registry.pm, [(r.name or r.label, r.weight, dict(r.options), r.label)
                                                         for r in rewards], columns=self._columns[1],
                                      timeouts={r.label: r.timeout_s for r in rewards},
                                      should_stop=lambda: self.stop_requested, evaluation=True)
            except ConfigError as exc:
                raise ConfigError(f"the held-out set (eval.reward = {RUN_REWARDS!r}): {exc.message}",
                                  field=exc.field, fix=exc.fix) from None
        same = next((r for r in self.config.rewards if r.label == ev.reward), None)
        spec = (same.name or same.label, 1.0, dict(same.options), same.label) if same is not None else (ev.reward, 1.0, {})
        timeouts = {same.label: same.timeout_s} if same is not None else {}
        try:
            return RewardComputer(self.registry.pm, [spec], columns=self._columns[1],
                                  timeouts=timeouts, should_stop=lambda: self.stop_requested, evaluation=True)
        except ConfigError as exc:  # its one entry is rewards[0] to the computer: name the real setting
            field = "eval.reward" if same is None else f"rewards[{self.config.rewards.index(same)}].options"
            message, fix = exc.message, exc.fix
            if same is None and fix and ", or set this reward's option" in fix:
                # no [[rewards]] entry holds this reward's options: that half of its fix pointed at nothing
                fix = (f'set eval.reward = "{RUN_REWARDS}" to score the held-out set with this run\'s own [[rewards]] '
                       f"summed with their weights, as TRL evaluates (or to one of them: "
                       f"{', '.join(r.label for r in self.config.rewards)}), or {fix.split(', or set')[0]}")
            raise ConfigError(f"the held-out set (eval.reward = {ev.reward!r}): {message}", field=field,
                              fix=fix) from None

    def _datasets(self) -> tuple[Dataset, Dataset | None]:
        return load_train_and_eval(self.config.data, self.config.eval.count)

    def _fit_prompts(self, probe: ControlProbe | None) -> tuple[Dataset, Dataset | None]:
        """The datasets with every prompt checked against model.max_length once, encoded as
        generation encodes it, and every chat prompt's roles against those the chat template
        renders (``check_prompt_lengths``). The train engine's tokenizer is asked
        first: it is local even when the generator is a server. Backends whose engines have no
        ``encode_prompt`` (third-party ones) are asked through the hooks (``HookPromptEncoder``:
        chats through ``encode_chat``, text left uncounted). Episodes on tools alone count
        their first prompt with the tool instructions (``first_prompt_encoder``); an environment
        writes its own first messages, so its prompts are left to the episode runner. ``probe``:
        the control characters the tokenizer misreads (``polyrl.control_chars``; None: unasked)."""
        raw = next((e.raw for e in (self.train_engine, self.gen_engine)
                    if callable(getattr(e.raw, "encode_prompt", None))), None)
        encode: Callable[[Prompt], Any] | None = raw.encode_prompt if raw is not None else None
        if encode is None:
            encode = HookPromptEncoder([self.gen_engine, self.train_engine])
        # the same engine's batch encoding (one tokenizer call per block of rows), where it has one
        many = getattr(raw, "encode_prompts", None)
        count_many = functools.partial(_lengths_of, many) if callable(many) else None
        counted = "chat template included"
        if self.episodes is not None:  # tools alone: with their instructions; an environment: None
            encode, counted = first_prompt_encoder(self.episodes), "chat template and tool instructions included"
            count_many = None
        source, source_eval = self._source_data
        if encode is None:
            return source, source_eval
        count = functools.partial(_length_of, encode)
        limit, drop = self.config.model.max_length, self.config.data.drop_overlong
        # an episode's budget is max_episode_tokens over its turns, not one completion's
        new_tokens = self.config.generation.max_new_tokens if self.episodes is None else None
        train, _ = check_prompt_lengths(source, count, limit, drop=drop, counted=counted, render=encode,
                                        max_new_tokens=new_tokens, probe=probe, count_many=count_many)
        if source_eval is None:
            return train, None
        return train, check_prompt_lengths(source_eval, count, limit, drop=drop, counted=counted, render=encode,
                                           max_new_tokens=self.config.eval.max_new_tokens or new_tokens
                                           if self.episodes is None else None, probe=probe,
                                           count_many=count_many)[0]

    def _check_environment(self) -> EnvironmentPlan | None:
        if not self.config.environment.enabled:
            return None
        from polyrl.agents.setup import check_environment

        return check_environment(self.config, self.registry)

    def _check_template(self, model: str | FolderChat) -> None:
        """The chat template's checks that need the model folder's tokenizer alone, run before any
        weight loads (``agents.setup.check_template``); ``model``: the folder, or its ``FolderChat``
        where other checks ask it too (``check_run``)."""
        if self._env_plan is None:
            return
        from polyrl.agents.setup import check_template

        folder = model if isinstance(model, FolderChat) else FolderChat(model, self.config.model.chat_template_kwargs)
        check_template(self.config, self._env_plan, folder)

    def _episode_runner(self, probe: ControlProbe | None) -> EpisodeRunner | None:
        """Multi-turn episodes (``[environment]``), or None: single-turn completions; ``probe``
        asks the text they insert for control characters the tokenizer misreads."""
        if self._env_plan is None:
            return None
        from polyrl.agents.setup import build_runner

        return build_runner(self.config, self._env_plan, self.gen_engine, self.train_engine, probe=probe)

    @property
    def _max_completion_tokens(self) -> int:
        """The longest completion a step can hold (DAPO's overlong limit, Dr.GRPO's normaliser): an
        episode's budget of sampled and inserted tokens, which turns' max_new_tokens would undercount."""
        env = self.config.environment
        return env.max_episode_tokens if env.enabled else self.config.generation.max_new_tokens

    def _sample(self, rows: list[dict[str, Any]], sampling: SamplingParams, training: bool = True) -> list[Completion]:
        """Completions for ``rows``: episodes when an environment or tools are configured. The
        rollout is one generation phase, entered once on every rank whatever its episodes do: a
        sharded (FSDP) generator gathers its weights there, not per generate call, whose count
        differs by rank when one rank's episodes end after one turn and another's after four.
        ``training=False`` (evaluation): the episodes leave the training rollouts' failure streak as
        it is, which an eval set the environment handles would otherwise reset every time."""
        with self.gen_engine.generation_phase():
            if not rows:  # a rank with no eval row still takes part in the phase
                return []
            if self.episodes is not None:
                completions = self.episodes.run(rows, sampling, counted=training)
            else:
                completions = self.gen_engine.generate([row[self.config.data.prompt_column] for row in rows], sampling)
        for c in completions:  # the template opened the reasoning: the rewards read it so (reasoning.final_part)
            c.reasoning_open = opens_reasoning(c.prompt_ids, self._think_suffix)
        return completions

    def _reasoning_prompt(self, reader: ChatReader | None) -> np.ndarray | None:
        """The chat template's generation prompt ids when it opens a ``<think>`` (QwQ, DeepSeek-R1
        distills: the completion starts inside its reasoning), else None (``reasoning.think_suffix``).
        Asked through ``reader`` (``_chat_reader``); None when no engine renders chats and decodes ids."""
        try:
            return None if reader is None else think_suffix(*reader)
        except (ConfigError, PluginError):  # a template that renders no conversation without a generation prompt
            return None

    def _reasoning_closed(self, reader: ChatReader | None) -> bool:
        """Whether the generation prompt closes a ``<think>`` block itself (``reasoning.closes_reasoning``);
        False when no engine renders chats and decodes ids."""
        try:
            return False if reader is None else closes_reasoning(*reader)
        except (ConfigError, PluginError):
            return False

    def _chat_reader(self) -> ChatReader | None:
        """(``encode_chat(messages, add_generation_prompt)``, ``decode``) of the first engine that
        renders chats and decodes ids, or None."""
        probe = [{"role": "user", "content": "hi"}]
        for engine in (self.gen_engine, self.train_engine):
            raw = engine.raw
            decode = getattr(raw, "decode", None) or getattr(getattr(raw, "tokenizer", None), "decode", None)
            try:
                if callable(decode) and engine.encode_chat(probe, None, True) is not None:
                    return functools.partial(_rendered, engine), decode
            except (ConfigError, PluginError):  # no chat template (a base model on text prompts): nothing opened
                continue
        return None

    # --- the loop ------------------------------------------------------------------------------

    def _draw(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The next batch's rows for this rank, and the prompt sampler's state before drawing them."""
        before = self.sampler.state()
        rows = self.sampler.next_batch()  # the global batch: the same on every rank
        if self.world_size > 1:
            rows = rows[self.rank::self.world_size]  # whole groups stay on one rank
        return rows, before

    def _generate(self, step: int, rows: list[dict[str, Any]]) -> list[Completion]:
        """Step ``step``'s completions (on the rollout worker thread under overlap)."""
        c = self.config
        seed = _step_seed(c.train.seed, step) + 104_729 * self.rank
        return self._sample(rows, c.generation.sampling(seed))

    def _rollout(self, times: dict[str, float]) -> Rollout:
        """This step's rollout: sampled ahead during the last step, or now. Under overlap, then
        push the weights (the generator is idle only now) and start sampling the next step's."""
        t0 = time.perf_counter()
        rollout = self.rollouts.take(self.step)  # raising: _untrained_before is its own already
        if rollout is None:
            rows, before = self._draw()
            self._untrained_before = before
            rollout = self.rollouts.sample(self.step, rows, before, self.engines.generator_version)
        self._untrained_before = rollout.sampler_before
        times["generate"] = time.perf_counter() - t0
        if self.config.generation.overlap:
            try:
                times["sync"] = self.engines.sync_weights(self.step)
            except PolyrlError:  # nothing of this step trained: resume samples it again, same prompts
                self._unscored(rollout)
                self._save_last_good_state()
                raise
            if self.step + 1 < self.config.train.steps:
                rows, before = self._draw()
                self._ahead_before = before
                self.rollouts.start(self.step + 1, rows, before, self.engines.generator_version)
        return rollout

    def _ref_logprobs(self, seqs: list[TokenSequence], temperature: float) -> list[np.ndarray]:
        if self.ref_engine is not None:
            return self.ref_engine.logprobs(seqs, temperature)  # type: ignore[return-value]
        out = self.train_engine.logprobs(seqs, temperature, reference=True)
        assert out is not None
        return out

    def _kl_in_reward(self, shaped: np.ndarray,
                      completions: list[Completion]) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
        """Rewards minus the KL coefficient x each sequence's summed KL to the reference
        (``algorithm.kl_in_reward``), from the trainer's log-probs of the sampled tokens (the
        behaviour policy, as verl's ``old_log_prob``), each sequence's summed KL (the step's
        ``kl_in_reward`` metric is their mean over every rank's) and ``kl_coef`` (the coefficient
        these rewards used). The
        coefficient is beta, or with ``kl_ctrl = "adaptive"`` beta steered after each batch
        (``polyrl.algorithms.kl_control``; checkpointed in the trainer state)."""
        algo = self.config.algorithm
        seqs = [TokenSequence.of(x) for x in completions]
        temperature = self.config.generation.temperature or 1.0
        policy = self.train_engine.logprobs(seqs, temperature) if seqs or self.world_size > 1 else []
        ref = self._ref_logprobs(seqs, temperature) if seqs else []
        used = self.kl_coef
        shaped, sums = kl_penalized_rewards(shaped, list(policy or []), list(ref), used, algo.kl_estimator,
                                            [s.mask for s in seqs])
        if algo.kl_ctrl == "adaptive":  # every rank steers by the global batch's KL
            mine = (sums, [int(s.loss_mask.sum()) for s in seqs])
            parts = self.train_engine.all_gather(mine, self.world_size) if self.world_size > 1 else [mine]
            kl = batch_kl([x for p in parts for x in p[0]], [n for p in parts for n in p[1]])
            self.kl_coef = adapted_kl_coef(used, kl, sum(len(p[0]) for p in parts), algo.kl_target,
                                           algo.kl_horizon)
        return shaped, np.asarray(sums, dtype=np.float64), {"kl_coef": used}

    def _rows_per_completion(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        n = self.config.generation.group_size
        return [row for row in rows for _ in range(n)]

    def _score(self, rows: list[dict[str, Any]], completions: list[Completion]) -> Any:
        """The step's rewards; episodes that ended in an environment error (before the first turn
        or after) are left unscored (NaN: out of the loss and of their group's baseline) rather than
        handed to the reward functions (``episode_scoring``)."""
        per_completion = self._rows_per_completion(rows)
        prompts = episode_scoring.prompts_asked(per_completion, completions, self.config.data.prompt_column)
        return episode_scoring.score_started(self._call_rewards, prompts, per_completion, completions)

    def _trainer_state(self) -> Any:
        """What reward functions get as ``trainer_state`` now, in training and in evaluation alike
        (TRL's ``_calculate_rewards`` passes ``self.state`` in both modes): the same object in every
        call, as TRL's, either ``shared_state`` (kept current by its owner) or the run's own, moved
        to where the run is now."""
        if self.shared_state is not None:
            return self.shared_state
        now = self._state_now()
        if self._reward_state is None:
            self._reward_state = now
        return self._reward_state.advance(now)

    def _state_now(self) -> TrainerState:
        """A ``TrainerState`` with the run's progress as TRL counts it (``TrainerState.for_run``)."""
        cfg = self.config
        return TrainerState.for_run(
            step=self.step, max_steps=cfg.train.steps, prompts_per_step=cfg.train.prompts_per_step,
            group_size=cfg.generation.group_size, dataset_size=len(self.dataset),
            history=list(self.history), save_steps=cfg.train.checkpoint_every, eval_steps=cfg.eval.every,
            rank=self.rank, updates_per_step=cfg.algorithm.updates_per_step, minibatches=cfg.algorithm.minibatches,
            names=self.trl_names, trl_steps=self.trl_steps, train_batch_size=self.trl_train_batch_size)

    def _call_rewards(self, prompts: list[Any], per_completion: list[Any], completions: list[Completion]) -> Any:
        state = self._trainer_state()
        context = RewardContext(
            rows=[as_stored(row) for row in per_completion], wanted=tuple(r.label for r in self.config.rewards),
            options={r.label: dict(r.options) for r in self.config.rewards},
            completion_ids=[c.completion_ids for c in completions], step=self.step, trainer_state=state,
            columns=self._columns[0],
        )
        return self.rewards(prompts, completions, context)

    def _unscored(self, rollout: Rollout) -> None:
        """The step's reward failed or was abandoned: nothing was trained, so its rollout becomes
        the pending one again (a rollout sampled ahead of it is dropped), and a checkpoint written
        now resumes at this step with exactly these prompts."""
        self.rollouts.drop()
        self.rollouts.put(rollout)

    def _unsampled(self, rollout: Rollout) -> None:
        """An environment stopped the run during this step's rollout: nothing was trained, and the
        rollout is dropped (its failed episodes must not be trained on resume, and TRL's environment
        instances a pending rollout needs are not checkpointed), so the prompt sampler goes back to
        before its rows: a checkpoint written now resumes at this step, sampling the same prompts."""
        self.rollouts.drop()
        self.sampler.load_state(rollout.sampler_before)

    def _save_last_good_state(self, agreed: bool = False) -> None:
        """Checkpoint the state before the failed step, unless that is the newest checkpoint already.
        Under a launcher only when every rank fails at this point (``agreed``: a reward failure, see
        ``agreed_reward_failure``): saving is collective, so a rank failing alone must not start it."""
        if (self.world_size == 1 or agreed) and self._saved_step != self.step:
            self.save()

    def train_one_step(self) -> dict[str, Any]:
        """One step (the module's 1-6), its metrics returned. Its phases run in this order on every
        rank, as their collectives, RNG draws and failure checkpoints need: rollout, rewards, the
        step-wide selection, the update (or the idle updates of a step with nothing to train), the
        weight push, then the metrics that describe all of it."""
        times: dict[str, float] = {"sync": 0.0}
        t_step = time.perf_counter()
        rollout = self._step_rollout(times)
        lag = self.step - rollout.policy_version
        rewarded = self._step_rewards(rollout, times)
        batch = self._select_step(rollout, rewarded)
        metrics = self._step_head_metrics(batch, lag, rewarded.kl_metrics)
        self._all_cut = self._update_refused = False
        if batch.global_kept == 0:
            self._idle_step(batch, rollout.completions, metrics, times)
        else:
            self._trained_step(batch, rollout.completions, lag, metrics, times)
        self._push_weights(metrics, times)
        self._step_tail_metrics(batch, metrics, times, t_step)
        self._warn_shadowed_log_metrics(metrics)
        return metrics

    def _step_rollout(self, times: dict[str, float]) -> Rollout:
        """The step's rollout (``_rollout``), refused before any scoring when an environment raised
        to stop the run: a resume then samples the same prompts again (``_unsampled``)."""
        rollout = self._rollout(times)
        raised = self._raised_by_environment()
        if raised is not None:  # nothing of this step is scored or trained; a resume samples it again
            self._unsampled(rollout)
            raise raised
        self._step_start = (int(rollout.sampler_before["epoch"]), int(rollout.sampler_before["position"]))
        return rollout

    def _step_rewards(self, rollout: Rollout, times: dict[str, float]) -> _Rewarded:
        """This rank's rewards, shaped (DAPO overlong, ``kl_in_reward``). A reward that failed on any
        rank stops every rank here, before a collective, its rollout kept for the resume."""
        algo = self.config.algorithm
        rows, completions = rollout.rows, rollout.completions
        t0 = time.perf_counter()
        failed: RewardError | RewardCancelled | None = None
        try:
            scored = self._score(rows, completions)
        except (RewardError, RewardCancelled) as exc:
            failed = exc
        if self.world_size > 1:  # a reward failing on one rank: every rank stops here, not in a collective
            failed = agreed_reward_failure(self.train_engine.all_gather(reward_outcome(failed)), self.rank)
        if failed is not None:
            self._unscored(rollout)
            raise failed
        rewards = np.asarray(scored.total, dtype=np.float64)
        lengths = np.array([len(x.completion_ids) for x in completions])
        shaped = algo.shape_rewards(rewards, lengths, self._max_completion_tokens)
        kl_sums: np.ndarray | None = None
        kl_metrics: dict[str, float] = {}
        if algo.kl_in_reward:
            shaped, kl_sums, kl_metrics = self._kl_in_reward(shaped, completions)
        times["reward"] = time.perf_counter() - t0
        return _Rewarded(scored, rewards, shaped, kl_sums, kl_metrics, times["reward"])

    def _select_step(self, rollout: Rollout, rewarded: _Rewarded) -> _StepBatch:
        """Advantages (and batch-level statistics) over the global batch, gathered from every rank,
        and which rows the loss trains; truncated completions (mask_truncated_completions) stay in
        the baseline, out of the loss. Metrics and the untrainable-episode decision take the whole
        step too (``polyrl.step_gather``). A total past float range is refused on every rank alike."""
        c, algo = self.config, self.config.algorithm
        rows, completions, scored = rollout.rows, rollout.completions, rewarded.scored
        untruncated = algo.untruncated_mask([x.finish_reason for x in completions])
        shard = step_gather.Shard.of(completions, per_reward=scored.per_reward, reward_metrics=scored.metrics,
                                     metric_counts=scored.metric_counts, kl_sums=rewarded.kl_sums,
                                     seconds={"generate": rollout.seconds, "reward": rewarded.seconds},
                                     peak_rss_mb=peak_rss_mb())
        mine_all = (rewarded.rewards, rewarded.shaped, untruncated, shard,
                    self._sample_completions(rows, completions, scored))
        everyone = self.train_engine.all_gather(mine_all, self.world_size) if self.world_size > 1 else [mine_all]
        offset = sum(len(part[0]) for part in everyone[: self.rank])
        step = step_gather.join([part[3] for part in everyone])
        all_shaped = np.concatenate([part[1] for part in everyone])
        if self.episodes is not None:  # episodes with nothing to train on count as unscored, decided step-wide
            all_shaped = np.where(step_gather.untrainable(step), np.nan, all_shaped)
            self._failed_steps = self._failed_steps + 1 if step_gather.every_episode_failed(step) else 0
            if self._failed_steps and self.rank == 0:  # once, for the whole step
                self.episodes.warn_failed_step(self._failed_steps)
        if np.isinf(all_shaped).any():  # a score x weight (or a KL penalty) past float64's range, on any rank
            self._unscored(rollout)
            raise RewardError(_overflow_message(all_shaped))
        mine = slice(offset, offset + len(rewarded.shaped))
        all_untruncated = np.concatenate([part[2] for part in everyone])
        rewards = np.concatenate([part[0] for part in everyone])  # metrics describe the global batch
        matrix = None
        if algo.decouples_rewards:  # GDPO: each reward normalized in its group, from the whole step's scores
            matrix = self._reward_matrix(step.per_reward, all_shaped)
        barred = step_gather.out_of_loss(step) if self.episodes is not None else None
        # a MoE model's router term counts every row of TRL's batch: an unscored one whole (kept at
        # advantage 0, as for the KL term), and the prompt of one cut under mask_truncated_completions
        # (TRL's attention mask covers it): a prompt-only row (polyrl.router_rows)
        router_on = eval_loss.needs_router_loss(algo, self.model_path)
        all_keep, all_advantages, group_kept = algo.loss_selection(
            rewards, all_shaped, all_untruncated, c.generation.group_size, matrix,
            [weight for _, weight, _ in self.rewards.rewards], barred, router=router_on)
        all_cut_rows = router_rows.router_rows(group_kept, all_untruncated, barred) if router_on else \
            np.zeros(len(all_keep), dtype=bool)
        too_big = _unrepresentable_advantages(all_advantages, algo, step.per_reward)
        if too_big is not None:  # the same global advantages on every rank: all refuse together
            self._unscored(rollout)
            raise RewardError(too_big)
        self.tracking.collect_records(step_gather.step_records(
            [part[4] for part in everyone], [len(part[0]) for part in everyone], all_advantages))
        self._nothing_scored = skip_causes.nothing_scored(rewards)  # the same on every rank
        return _StepBatch(step=step, sizes=[len(part[0]) for part in everyone], mine=mine, my_untruncated=untruncated,
                          rewards=rewards, shaped=all_shaped, untruncated=all_untruncated, matrix=matrix,
                          barred=barred, router_on=router_on, keep=all_keep, advantages=all_advantages,
                          group_kept=group_kept, cut_rows=all_cut_rows,
                          kl_in_loss=algo.beta > 0 and not algo.kl_in_reward)

    def _step_head_metrics(self, batch: _StepBatch, lag: int, kl_metrics: dict[str, float]) -> dict[str, Any]:
        """The step's first metrics, known before its update: rewards, lengths, samples kept, lag, KL."""
        step = batch.step
        if step.kl_sums is not None:
            kl_metrics = {"kl_in_reward": float(np.mean(step.kl_sums)) if len(step.kl_sums) else 0.0,
                          **kl_metrics}
        reward_mean, reward_std = safe_stats.mean_std(batch.rewards)
        return {
            "step": self.step + 1,  # counts the steps taken, as checkpoints do (metrics_file)
            "reward_mean": reward_mean,
            "reward_std": reward_std,
            "completion_len_mean": float(step.completion_len.mean()) if step.size else float("nan"),
            "samples_kept": batch.global_kept,
            "policy_lag": lag,
            **{f"reward/{k}/{m}": v for k, ms in step.reward_metrics.items() for m, v in ms.items()},
            # each log_metric name over every reward's values (TRL's one list per name)
            **{f"{step_gather.LOG_METRIC_PREFIX}{k}": v for k, v in step_gather.log_metric_means(step).items()},
            **kl_metrics,
        }

    def _idle_step(self, batch: _StepBatch, completions: list[Completion], metrics: dict[str, Any],
                   times: dict[str, float]) -> None:
        """A step with no informative sample on any rank: warned of with its causes, and TRL's
        optimizer steps on it (``_idle_updates``), with the loss values TRL logs there."""
        c, algo = self.config, self.config.algorithm
        rewards, kl_in_loss = batch.rewards, batch.kl_in_loss
        causes = skip_causes.empty_step_causes(rewards, batch.shaped, batch.untruncated, batch.group_kept)
        self._all_cut = skip_causes.all_cut(rewards, batch.shaped, batch.untruncated)  # the same on every rank
        fix = ({"fix": "make at least one reward function return a number for each completion (None "
                       f"means no reward); {c.train.max_consecutive_skips} such steps in a row stop the run"}
               if self._nothing_scored else
               {"fix": f"{self._cut_fix()}; "
                       f"{c.train.max_consecutive_skips} such steps in a row stop the run"}
               if self._all_cut else {})
        # a MoE model's router term still trains over TRL's batch (its rows, the cut ones' prompts)
        router_only = batch.router_on and bool(batch.group_kept.any())
        what = ("only the MoE router term trained (TRL's loss there is that term alone)" if router_only else
                "nothing trained (the optimizer steps on a zero gradient, as TRL's)")
        log.warning(f"no informative samples this step ({'; '.join(causes)}); {what}",
                    step=self.step + 1, **fix)
        metrics.update(skipped=True, loss=float("nan"))
        if not batch.untruncated.any():  # TRL's batch had no loss token left: its loss and masked means are 0
            metrics.update(no_loss_token_metrics(kl_in_loss, algo.objective(self._max_completion_tokens)))
        elif self._nothing_scored and not kl_in_loss:  # TRL's: every advantage 0, no KL term: loss 0
            metrics.update(nothing_scored_metrics(algo.objective(self._max_completion_tokens)))
        # TRL's forward over such a batch gives its entropy: the idle updates run over it then,
        # less the episodes no term trains (an environment error's tokens are no trained tokens)
        untruncated = batch.my_untruncated
        in_loss = untruncated if batch.barred is None else untruncated & ~batch.barred[batch.mine]
        covered = in_loss if self._nothing_scored and not kl_in_loss else None
        # a MoE model's router term: TRL adds coef x aux_loss to such a step's zero policy loss,
        # over its batch's rows (``group_kept``: barred rows are out of it; every row cut here, its
        # prompt alone; none where dynamic sampling dropped every group: those rows are out of the
        # step's batch), split into updates and micro-batches as a trained step's rows, on every
        # rank when any rank has one
        parts = self._router_parts(completions, batch.group_kept, batch.group_kept, untruncated,
                                   batch.sizes) if router_only else None
        t0 = time.perf_counter()
        idle = self._idle_updates(completions, algo.updates_per_step, covered, parts, algo.router_aux_loss_coef,
                                  algo.num_iterations)
        times["train"] = time.perf_counter() - t0
        # TRL logs each of these on such a step too (aux_loss: its loss is coef x aux_loss there)
        metrics.update({key: value for key, value in idle.items() if value is not None})

    def _trained_step(self, batch: _StepBatch, completions: list[Completion], lag: int, metrics: dict[str, Any],
                      times: dict[str, float]) -> None:
        """A step with samples to train: its log-probs, then ``num_iterations`` passes over its
        mini-batches, and the update's metrics (TRL's names for its clip and sampling values)."""
        algo = self.config.algorithm
        if self._nothing_scored and self.rank == 0:
            self._warn_terms_alone(batch)
        batches, untrained = self._update_batches(batch, completions, lag, times)
        t0 = time.perf_counter()
        objective = algo.objective(self._max_completion_tokens)
        updates, last = self._apply_updates(batches, objective)
        times["train"] = time.perf_counter() - t0
        self._update_refused = last.skipped
        metrics.update(last.as_dict() if last.skipped else minibatches.pass_metrics(updates))
        if not batch.kl_in_loss:  # no reference in the loss: a backend's kl is 0, read as "no drift" (TRL omits it)
            metrics.pop("kl", None)
        metrics.update(clip_region_metrics(metrics, objective.policy_loss))
        metrics.update(self._trl_sampling(metrics, completions, batch.group_kept[batch.mine], batch.my_untruncated,
                                          objective.mismatch_level == "sequence",
                                          untrained_gap(*untrained, objective) if untrained[0] else None))

    def _warn_terms_alone(self, batch: _StepBatch) -> None:
        """A step no reward scored that still trains (kept for the KL term, entropy bonus or router
        term, as TRL does): said, since every advantage is 0 and the rewards need fixing."""
        c, algo = self.config, self.config.algorithm
        terms = " and ".join(t for t, on in (("the KL term", batch.kl_in_loss),
                                             ("the entropy bonus", algo.entropy_coef > 0),
                                             ("the MoE router term", batch.router_on)) if on)
        log.warning(f"no reward scored any sample this step: it trains {terms} alone, every advantage "
                    "0, as TRL does", step=self.step + 1,
                    fix="make at least one reward function return a number for each completion (None "
                        f"means no reward); {c.train.max_consecutive_skips} such steps in a row stop the run")

    def _update_batches(self, batch: _StepBatch, completions: list[Completion], lag: int,
                        times: dict[str, float]) -> tuple[list[TrainBatch], tuple[list[np.ndarray], list[np.ndarray]]]:
        """This rank's mini-batches of the step, with the log-probs the loss needs (old: only when
        they can differ from the current policy; reference: only with the KL term in the loss), and
        the (trainer, sampler) log-probs of TRL's rows the update leaves out (``_untrained_logprobs``)."""
        c, algo = self.config, self.config.algorithm
        kl_in_loss, mine = batch.kl_in_loss, batch.mine
        idx = np.flatnonzero(batch.keep[mine])
        seqs = [TokenSequence.of(completions[i]) for i in idx]
        temperature = c.generation.temperature or 1.0
        old = None
        t0 = time.perf_counter()
        if lag > 0:  # sampled by older weights: the ratio is to the behaviour policy, its own log-probs
            old = [completions[i].logprobs for i in idx]
        elif algo.updates_per_step > 1 and (seqs or self.world_size > 1):
            # the weights before the step's first update (mini-batches or iterations change them);
            # an empty shard still calls: a sharded (FSDP) backend gathers weights collectively
            old = self.train_engine.logprobs(seqs, temperature)
        ref = self._ref_logprobs(seqs, temperature) if kl_in_loss and seqs else None
        untrained = self._untrained_logprobs(completions, batch.group_kept & batch.untruncated & ~batch.keep,
                                             mine, temperature)
        if kl_in_loss and not seqs:  # an empty shard still takes part in the step
            ref = []
        times["logprobs"] = time.perf_counter() - t0
        whole = TrainBatch(seqs, batch.advantages[mine][idx], old_logprobs=old, ref_logprobs=ref,
                           temperature=temperature, sampler_logprobs=[completions[i].logprobs for i in idx])
        whole, rows_in = router_rows.joined(whole, idx, np.flatnonzero(batch.cut_rows[mine]), completions)
        batches = self._minibatches(whole, completions, rows_in, batch.group_kept, batch.keep | batch.cut_rows,
                                    batch.my_untruncated, batch.sizes,
                                    shuffle=batch.router_on or self.config.algorithm.top_entropy_quantile < 1.0)
        return batches, untrained

    def _apply_updates(self, batches: list[TrainBatch], objective: Objective) -> tuple[list[StepMetrics], StepMetrics]:
        """``num_iterations`` passes over ``batches`` in TRL's order (every mini-batch, then again),
        stopping at the first update the backend refuses: (the last pass's updates, the last result)."""
        updates: list[StepMetrics] = []
        self._updating = True  # until the step is counted (_run)
        for _ in range(self.config.algorithm.num_iterations):  # TRL's order: every mini-batch, then again
            updates = []
            for part in batches:
                step_metrics = self.train_engine.train_step(part, objective)
                if step_metrics.skipped:
                    break
                updates.append(step_metrics)
                self.updates_applied += 1
            if step_metrics.skipped:
                break
        return updates, step_metrics

    def _push_weights(self, metrics: dict[str, Any], times: dict[str, float]) -> None:
        """After the update: a skipped step logs the schedule's lr and keeps the generator's weights
        (unchanged); a trained one pushes them to the generator unless overlap pushes at the next
        step's start. A failed push is kept to raise once the step is recorded (``_run``)."""
        c = self.config
        if metrics.get("skipped") and "lr" not in metrics:
            # its lr too, as TRL logs learning_rate every step: the schedule's value for the next
            # update, where the skip left it (a backend reports the lr of the updates it makes)
            metrics["lr"] = lr_at(run_optimizer(c), self.updates_applied)
            self.engines.generator_version = self.step + 1  # the weights did not change
        elif not c.generation.overlap:
            try:
                times["sync"] = self.engines.sync_weights(self.step + 1)
            except PolyrlError as exc:  # the update is in: record and checkpoint it, then stop (_run)
                self._sync_failed = exc

    def _step_tail_metrics(self, batch: _StepBatch, metrics: dict[str, Any], times: dict[str, float],
                           t_step: float) -> None:
        """The metrics of the whole step, added last: timings, throughput, the common step metrics,
        TRL's names and counters (counted once the step is in) and the episodes'."""
        c, algo, step = self.config, self.config.algorithm, batch.step
        total = time.perf_counter() - t_step
        metrics.update({f"time/{k}": round(v, 4) for k, v in times.items()})
        metrics["time/step"] = round(total, 4)
        # the rollout's own duration, ahead or not (the slowest rank's), and the job's tokens/s
        metrics["generate_seconds"] = round(step.seconds["generate"], 4)
        metrics["tokens_per_s"] = float(step.sampled_len.sum() / max(step.seconds["generate"], 1e-9))
        trained = int(step.sequence_len[batch.keep].sum())  # every rank's kept sequences
        metrics.update(common_step_metrics(step, batch.rewards, c.generation.group_size,
                                           {**times, **step.seconds}, trained * algo.num_iterations,
                                           algo.scale_rewards, batch.matrix,
                                           [weight for _, weight, _ in self.rewards.rewards]))
        # TRL's names and counters (its dashboards' keys), counted once the step is in
        self.num_tokens += step_tokens(step)
        metrics.update(trl_aliases(metrics, self.trl_names), num_tokens=self.num_tokens,
                       epoch=trl_epoch(self.step + 1 + self._epoch_steps_skipped, c.train.prompts_per_step,
                                       len(self.dataset), self._step_start),
                       step_time=trl_step_time(total, algo.updates_per_step))
        bonus = algo.objective(self._max_completion_tokens).entropy_coef
        if bonus:  # TRL logs its entropy coefficient where there is a bonus (polyrl's stays as set)
            metrics["entropy_coef"] = float(bonus)
        if self.episodes is not None:
            metrics.update(step_gather.episode_metrics(step))
            self._warn_unused_env_reward(metrics)

    def _idle_updates(self, completions: list[Completion], updates: int, whole: np.ndarray | None = None,
                      router: list[TrainBatch] | None = None,
                      router_coef: float | None = 0.0, passes: int = 1) -> dict[str, float | None]:
        """TRL's optimizer steps on a step with nothing to train: its loss there is 0 (every
        advantage 0, or no loss token), yet transformers still calls ``optimizer.step()`` and
        ``lr_scheduler.step()``, so the schedule advances and AdamW's moments decay and move the
        weights (weight decay too). Skipping them instead shifted every later lr by a step and
        left the decay unfinished at ``train.steps``. Each of ``updates`` (the step's updates,
        ``num_iterations`` x ``minibatches``) is one ``train_step`` on this rank's shortest
        completion at advantage 0 under a plain objective (no KL, no entropy bonus): its gradient
        is exactly 0 on any backend, so the update is the optimizer's alone, at the cost of one
        short forward and backward. ``whole`` (this rank's mask of the completions TRL's loss
        covers: a step no reward scored, beta 0): the updates run over all of them instead, at the
        cost of a normal step's forward and backward, since TRL logs that batch's ``entropy`` (its
        forward runs whatever the advantages); the step logs the last update's, as a trained step
        logs its last pass's. Returns the last update's ``lr``, ``entropy`` and ``aux_loss`` (and
        with the router term its ``loss`` and ``grad_norm``), each None when the backend gave none
        (no completion with a loss token on any rank, a refused step: the schedule then stays where
        it was; a backend without entropies; the router term off).

        ``router`` (given when the loss holds a MoE model's router term and some rank's batch has
        a row: this rank's batches of one pass, ``_router_parts``, weighted ``router_coef``: None is
        the model's own): TRL's loss on such a step is ``coef x aux_loss``, whose gradient is not 0,
        so each of ``passes`` (``num_iterations``) runs those batches with that term, as a trained
        step's mini-batches; every row there was cut under ``mask_truncated_completions``, so it holds its
        prompt alone, as TRL's attention mask does. Otherwise the term is off (its gradient would
        move the weights on a step that trains nothing)."""
        temperature = self.config.generation.temperature or 1.0
        if router is not None:
            objective = Objective(router_aux_loss_coef=router_coef)
            plan = [part for _ in range(passes) for part in router]
        else:
            trainable = [i for i, x in enumerate(completions)
                         if TokenSequence.of(x).loss_mask.any() and (whole is None or whole[i])]
            pick = trainable if whole is not None else \
                [min(trainable, key=lambda i: len(completions[i].prompt_ids) + len(completions[i].completion_ids))] \
                if trainable else []
            objective = Objective(router_aux_loss_coef=0.0)
            plan = [TrainBatch([TokenSequence.of(completions[i]) for i in pick], np.zeros(len(pick)),
                               temperature=temperature)] * updates
        lr = entropy = aux_loss = loss = grad_norm = None
        self._updating = True  # until the step is counted (_run): the weights move
        for batch in plan:
            out = self.train_engine.train_step(batch, objective)
            if out.skipped:
                break
            self.updates_applied += 1
            lr = out.extra.get("lr", lr)
            entropy = out.extra.get("entropy") if whole is not None else None
            if router is not None:  # TRL's loss and gradient there are the router term's
                aux_loss, loss, grad_norm = out.extra.get("aux_loss"), out.loss, out.grad_norm
        return {"lr": lr, "entropy": entropy, "aux_loss": aux_loss, "loss": loss, "grad_norm": grad_norm}

    def _router_parts(self, completions: list[Completion], in_batch: np.ndarray, counted: np.ndarray,
                      untruncated: np.ndarray, sizes: list[int]) -> list[TrainBatch]:
        """This rank's batches of one pass over a step that trains nothing but a MoE model's router
        term: the rows of TRL's batch (``in_batch``, the whole step's), at advantage 0, a cut one as
        its prompt alone (``polyrl.router_rows``), split as ``_minibatches`` splits a trained step."""
        start = sum(sizes[: self.rank])
        rows = np.flatnonzero(in_batch[start:start + sizes[self.rank]])
        seqs = [TokenSequence.of(completions[i]) if untruncated[i] else router_rows.prompt_only(completions[i])
                for i in rows]
        whole = TrainBatch(seqs, np.zeros(len(seqs)), temperature=self.config.generation.temperature or 1.0)
        return self._minibatches(whole, completions, rows, counted, in_batch, untruncated, sizes, shuffle=True)

    def _minibatches(self, whole: TrainBatch, completions: list[Completion], idx: np.ndarray,
                     counted: np.ndarray, trained: np.ndarray, untruncated: np.ndarray,
                     sizes: list[int], shuffle: bool = False) -> list[TrainBatch]:
        """This rank's batches for one pass over the step (``polyrl.minibatches``): ``whole`` holds
        its rows ``idx`` (trained ones, and the prompt-only rows of a MoE model's router term,
        ``polyrl.router_rows``); ``counted`` / ``trained`` are the whole step's masks of the rows the
        loss counts and trains, ``sizes`` every rank's shard. Each batch divides its loss by what
        TRL's does (``_loss_counts``), not by the rows trained on: its own rows' sequences
        (``seq_mean_*``), and its step's tokens / ``minibatches`` (``token_mean``: TRL's "dapo"
        divides every update by the generation batch's tokens / updates per pass, here the parts
        stepped); parts that train
        nothing on any rank are left out on every rank, so all make the same train_step calls.
        ``shuffle`` (the loss holds the router term, or ranks token entropies per micro-batch:
        ``top_entropy_quantile`` < 1): one mini-batch's rows are shuffled too, as
        TRL's are, when ``optimizer.micro_batch_size`` cuts it (``router_rows.shuffled``); several
        mini-batches are always drawn shuffled."""
        c = self.config
        start = sum(sizes[: self.rank])
        mine = slice(start, start + sizes[self.rank])
        seeds = [_step_seed(c.train.seed + 2, self.step) + 104_729 * rank for rank in range(len(sizes))]
        if c.algorithm.minibatches == 1:
            norm_seqs, norm_tokens = _loss_counts(completions, counted[mine], untruncated)
            micro = c.optimizer.micro_batch_size
            if shuffle and micro is not None and micro < len(whole.sequences):
                whole = router_rows.shuffled(whole, seeds[self.rank])
            return [attrs.evolve(whole, normaliser_sequences=norm_seqs, normaliser_tokens=norm_tokens)]
        splits = minibatches.rank_splits(counted, sizes, c.algorithm.minibatches, seeds)
        position = {int(row): j for j, row in enumerate(idx)}  # a trained row -> its place in ``whole``
        live = np.flatnonzero(minibatches.live_parts(splits, trained, sizes))
        # TRL's "dapo" divides every update by its generation batch's tokens / the updates per pass
        # (parts dynamic sampling emptied are no updates: the rest keep the step's scale)
        _, step_tokens = _loss_counts(completions, counted[mine], untruncated)
        share = step_tokens / max(len(live), 1)
        batches = []
        for k in live:
            rows = splits[self.rank][k]
            part = np.zeros(len(completions), dtype=bool)
            part[rows] = True
            norm_seqs, _ = _loss_counts(completions, part, untruncated)
            batches.append(minibatches.take(whole, [position[int(r)] for r in rows if int(r) in position],
                                            norm_seqs, share))
        return batches

    def _untrained_logprobs(self, completions: list[Completion], wanted: np.ndarray, mine: slice,
                            temperature: float) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(trainer, sampler) log-probs over the loss tokens of this rank's completions TRL's batch
        holds with loss tokens that the update does not train (``wanted``: the step's, every
        rank's; ``untrained_gap``), before the update, for TRL's ``sampling/`` values. One
        ``logprobs`` call on every rank when any rank has such a row (a sharded backend's call
        is collective), none otherwise."""
        if not wanted.any():
            return [], []
        rows = [i for i in np.flatnonzero(wanted[mine]) if completions[i].logprobs is not None
                and TokenSequence.of(completions[i]).loss_mask.any()]
        seqs = [TokenSequence.of(completions[i]) for i in rows]
        trainer = self.train_engine.logprobs(seqs, temperature) if seqs or self.world_size > 1 else []
        masks = [seq.loss_mask for seq in seqs]
        return ([np.asarray(t)[m] for t, m in zip(trainer or [], masks)],
                [np.asarray(completions[i].logprobs)[m] for i, m in zip(rows, masks)])

    def _trl_sampling(self, metrics: dict[str, Any], completions: list[Completion], counted: np.ndarray,
                      untruncated: np.ndarray, sequence_level: bool,
                      untrained: Mapping[str, float] | None = None) -> dict[str, float]:
        """TRL's ``sampling/...`` values of the step, popping the backend's per-rank gap
        (``RANK_KEYS``) from ``metrics``: each rank's over its shard (``counted``: its rows in TRL's
        batch; those with no loss token weigh 1 in a sequence-level ratio; ``untrained``: the gap
        of those with loss tokens the update left out, ``step_metrics.untrained_gap``), then TRL's
        gather of the per-process values (one ``all_gather``, on every rank alike: the keys come
        from the backend's all-reduced step). A backend without them: its global means, as before."""
        gap = {key: metrics.pop(key) for key in RANK_KEYS if key in metrics}
        if not gap:
            return sampling_metrics(metrics)
        if untrained:
            gap = joined_gaps(gap, untrained)
        empty = sum(1 for i in np.flatnonzero(counted)
                    if not untruncated[i] or not TokenSequence.of(completions[i]).loss_mask.any())
        mine = trl_process_sampling(gap, empty, sequence_level)
        everyone = self.train_engine.all_gather(mine, self.world_size) if self.world_size > 1 else [mine]
        return trl_gathered_sampling(everyone)

    def _warn_unused_env_reward(self, metrics: dict[str, Any]) -> None:
        """Once a run: the environment gave rewards that no [[rewards]] entry reads (a TRL
        environment's success reward, moved over, would silently train nothing)."""
        if self._env_reward_warned or "episode/env_reward_mean" not in metrics or self.rank != 0:
            return
        if any(r.name == "environment" for r in self.config.rewards):
            return
        self._env_reward_warned = True
        log.warning("the environment gives per-turn rewards, but no [[rewards]] entry reads them: they are "
                    "logged (episode/env_reward_mean), not trained on", step=self.step + 1,
                    fix='add [[rewards]] name = "environment" (with a weight) to train on them')

    def _warn_shadowed_log_metrics(self, metrics: Mapping[str, Any]) -> None:
        """Once a run for each name: a reward's ``log_metric(name, ...)`` whose name is a key the
        run logs itself (``trl_compat.shadowed_log_metrics``). ``log_history`` keeps the run's own
        value there; the reward's is under ``log_metric/<name>``. Why a warning: a script reading
        ``log_history[-1][name]`` (TRL replaces or averages that key with the reward's value) got
        another number than it logged, without a word."""
        if self.rank != 0:
            return
        for name, rewards in shadowed_log_metrics(metrics, self.trl_names).items():
            by = "reward " + ", ".join(repr(r) for r in rewards) if rewards else "a reward"
            self._warn_shadowed_once(
                name, f"{by} called log_metric({name!r}, ...), a name the run logs itself: log_history's {name!r} "
                f"keeps the run's own value, the reward's is under {step_gather.LOG_METRIC_PREFIX + name!r} "
                "(TRL's log may replace the run's value with it or average the two)", step=self.step + 1,
                fix=f"give the metric a name of its own, e.g. log_metric({(rewards[0] if rewards else 'my') + '/' + name!r}, ...)")

    def _warn_shadowed_eval_log_metrics(self, evaluated: Mapping[str, Any]) -> None:
        """``_warn_shadowed_log_metrics`` for an evaluation's names (``shadowed_eval_log_metrics``):
        once a run for each ``eval_<name>`` whose entry keeps the run's own value (``eval_runtime``)."""
        for name in shadowed_eval_log_metrics(evaluated, self.trl_names):
            key = f"eval_{name}"
            self._warn_shadowed_once(
                key, f"a reward called log_metric({name!r}, ...) in an evaluation, where {key!r} is a key the "
                f"evaluation logs itself: its log_history entry keeps the run's own value, the reward's is "
                f"under {eval_log_metrics.PREFIX + name!r} in polyrl's metrics", step=self.step,
                fix=f"give the metric a name of its own, e.g. log_metric({'my/' + name!r}, ...)")

    def _warn_shadowed_once(self, key: str, message: str, *, step: int, fix: str) -> None:
        """The shadowed-name warning, once a run for each log_history key: a reward logs every step."""
        if key in self._shadowed_told:
            return
        self._shadowed_told.add(key)
        log.warning(message, step=step, fix=fix)

    def _sample_completions(self, rows: list[dict[str, Any]], completions: list[Completion],
                            scored: Any) -> list[tuple[int, int, dict[str, Any]]]:
        """This rank's part of the step's completions log: (one-process position, index here,
        record) of its completions among those drawn over the whole step with the step's seed."""
        c = self.config
        n = c.generation.group_size
        positions = step_gather.one_process_positions(len(completions), self.rank, self.world_size, n)
        here = step_gather.picked_here(self.tracking.completions_per_step, positions, c.train.prompts_per_step * n,
                                       _step_seed(c.train.seed, self.step))
        prompts = episode_scoring.prompts_asked(self._rows_per_completion(rows), completions, c.data.prompt_column)
        records = self.tracking.sample(self.step + 1, prompts, completions, scored, here)
        return [(positions[i], i, record) for i, record in zip(here, records)]

    def _raised_by_environment(self) -> EnvironmentFailed | None:
        """What an environment call raised to stop the run in the rollout just sampled (``EpisodeRunner.raised``:
        TRL's environments raise where TRL's ``train()`` stops), None when none did; under a launcher any
        rank's, on every rank (one gather), so all stop at the same point."""
        if self.episodes is None:
            return None
        raised = self.episodes.raised
        if self.world_size == 1:
            return raised
        texts = self.train_engine.all_gather(None if raised is None else str(raised))
        first = next((text for text in texts if text), None)
        return None if first is None else EnvironmentFailed(first, alone=True)

    def _stop_if_environment_raised(self) -> None:
        """Raise what an environment raised to stop the run (``_raised_by_environment``), if one did."""
        raised = self._raised_by_environment()
        if raised is not None:
            raise raised

    def _environment_failure(self) -> EnvironmentFailed | None:
        """The error that stops a run whose environment never works; under a launcher the ranks
        agree on it (one gather), so none stops alone while its peers wait in the next step."""
        if self.episodes is None:
            return None
        from polyrl.agents.episodes import agreed_failure

        failed = self.episodes.failure()
        if self.world_size == 1:
            return failed
        return agreed_failure(self.train_engine.all_gather(None if failed is None else failed.shared()))

    def _cut_fix(self) -> str:
        c = self.config
        return skip_causes.cut_fix(c.generation.max_new_tokens,
                                   c.environment.max_episode_tokens if c.environment.enabled else None)

    def _unscored_message(self, steps: int) -> str:
        """The stop after ``steps`` steps in a row that no reward scored, naming the rewards."""
        names = ", ".join(r.label for r in self.config.rewards)
        return (f"{steps} steps in a row no reward scored any sample (the reward functions {names} returned "
                "None for every completion); stopping, the state checkpointed. Fix: make at least one of them "
                "return a number for each completion (None means no reward: check the dataset columns and "
                f"answer format it reads), then continue with {run_plan.resume_command(self.started_by, '`')}")

    # --- evaluation ----------------------------------------------------------------------------

    def evaluate(self, phase: str = "during") -> dict[str, float]:
        """Greedy accuracy (the eval reward's mean) on the held-out prompts and, with
        ``eval.samples`` > 0, the sampled reward mean and unbiased pass@k. Each completion and its
        reward go to ``eval_completions.jsonl`` under ``phase`` (before / during / after).

        Under a launcher every rank calls it and scores its share of the rows (rows[rank::world]);
        the scores are gathered, so every rank returns the same numbers for the whole set
        (``eval/seconds``: the slowest rank's time, TRL's ``eval_runtime``, ``step_metrics.eval_speed``).
        """
        self._phase = f"the evaluation {phase} training (after {self.step} steps)"
        if self.eval_dataset is None:
            return {}
        if self.eval_set_sizes:
            return self._evaluate_sets(phase)
        self.rollouts.pending()  # the generator is busy until the rollout sampled ahead is done
        started = time.perf_counter()  # the evaluation's own time, TRL's eval_runtime
        self.engines.sync_weights(self.step)
        ev, c = self.config.eval, self.config
        everything = list(self.eval_dataset)
        rows = everything[self.rank::self.world_size]
        prompts = [row[c.data.prompt_column] for row in rows]
        greedy_sampling = attrs.evolve(c.generation.sampling(0), temperature=0.0, n=1,
                                       max_new_tokens=ev.max_new_tokens or c.generation.max_new_tokens)
        greedy, sampled, failed = None, None, None
        completions: list[Completion] = []  # the sampled pass's, for eval.loss
        records: list[dict[str, Any]] = []
        parts: dict[str, np.ndarray] = {}  # the sampled pass's scores of each reward
        lengths: np.ndarray | None = None  # and its completion lengths
        logged: list[eval_log_metrics.Sums] = []  # and its reward calls' log_metric sums, one per batch
        try:
            if ev.greedy:
                greedy, records, _, _, _, _ = self._eval_pass(rows, prompts, greedy_sampling, phase)
            if ev.samples:
                sampling = attrs.evolve(greedy_sampling, temperature=c.generation.temperature or 1.0, n=ev.samples,
                                        seed=_step_seed(c.train.seed + 1, self.step) + 104_729 * self.rank)
                # TRL's eval batches, each rank's share of one in one call (eval.loss_batch: every rank's)
                batch = max(ev.loss_batch // self.world_size, 1) if ev.loss_batch and ev.reward == RUN_REWARDS else 0
                sampled, more, parts, lengths, completions, logged = self._eval_pass(rows, prompts, sampling, phase,
                                                                                     batch)
                records += more
        except (RewardError, RewardCancelled) as exc:
            failed = exc
        if self.world_size > 1:  # the eval reward failing on one rank: every rank raises it, none waits
            failed = agreed_reward_failure(self.train_engine.all_gather(reward_outcome(failed)), self.rank)
        if failed is not None:
            raise failed
        loss_metrics = self._eval_loss(completions, sampled, parts) if ev.loss and sampled is not None else {}
        cut = np.array([x.finish_reason == "length" for x in completions], dtype=bool)  # the sampled pass's
        everyones_logged = [logged]
        seconds = time.perf_counter() - started
        if self.world_size > 1:
            gathered = self.train_engine.all_gather((greedy, sampled, records, parts, lengths, cut, logged, seconds))
            seconds = max(g[7] for g in gathered)  # the slowest rank's: one number on every rank
            greedy = np.concatenate([g[0] for g in gathered]) if ev.greedy else None
            sampled = np.concatenate([g[1] for g in gathered]) if ev.samples else None
            records = [r for g in gathered for r in g[2]]
            parts = {key: np.concatenate([g[3][key] for g in gathered]) for key in parts}
            lengths = np.concatenate([g[4] for g in gathered]) if lengths is not None else None
            cut = np.concatenate([g[5] for g in gathered])
            everyones_logged = [g[6] for g in gathered]
        if self.rank == 0 and records:
            try:
                evaluation.append_records(self.output_dir, records)
            except OSError as exc:
                raise self._write_failed("eval completions", exc) from None
        out = evaluation.eval_metrics(greedy, sampled, ev.samples, ev.pass_k, ev.pass_threshold, len(everything),
                                      per_reward=parts if ev.reward == RUN_REWARDS else None, lengths=lengths)
        if ev.reward == RUN_REWARDS and sampled is not None and lengths is not None and len(lengths):
            out.update(self._eval_batch_metrics(sampled, parts, lengths, cut))
            out.update(eval_log_metrics.eval_means(everyones_logged))
        # with eval.greedy = false the sampled episodes are all there is (the share was left out)
        episodes = [r for r in records if (r["greedy"] or not ev.greedy) and "tool_calls" in r]
        if episodes:  # share of held-out episodes with a well-formed tool call
            out["eval/tool_call_share"] = sum(1 for r in episodes if r["tool_calls"] > 0) / len(episodes)
        out["eval/seconds"] = round(seconds, 4)
        if ev.loss_batch:  # TRL's eval batches, counted as transformers counts its speed's steps
            out["eval/batches"] = math.ceil(len(everything) / ev.loss_batch)
        out.update(loss_metrics)
        if self.rank == 0:
            self._warn_shadowed_eval_log_metrics(out)
            self.tracking.hold_evaluation(evaluation.shown_records(records), self.step)
        return out

    def _evaluate_sets(self, phase: str) -> dict[str, float]:
        """``evaluate`` of each named eval set (``eval_set_sizes``) on its own, as transformers
        evaluates each dataset of a dict (its own batches, advantages, loss and speed), the numbers
        side by side in one line under ``eval/sets/<name>/`` (``step_metrics.named_eval``)."""
        from polyrl.step_metrics import named_eval

        whole, sizes = self.eval_dataset, self.eval_set_sizes
        assert whole is not None  # evaluate() returned before
        if sum(size for _, size in sizes) != len(whole):  # rows dropped (data.drop_overlong): the sets are lost
            raise ConfigError(f"the named eval sets hold {sum(size for _, size in sizes)} rows, {len(whole)} were "
                              "kept (eval.count or data.drop_overlong left rows out)", field="eval_dataset",
                              fix="evaluate every row of the sets (no eval.count below their rows, data.drop_overlong "
                                  "off), or cut each set to the rows to evaluate yourself")
        out: dict[str, float] = {}
        start = 0
        try:
            self.eval_set_sizes = ()
            for name, size in sizes:
                self.eval_dataset = whole.select(list(range(start, start + size)))
                start += size
                out.update(named_eval(name, self.evaluate(phase)))
        finally:
            self.eval_dataset, self.eval_set_sizes = whole, sizes
        return out

    def _eval_batch_metrics(self, scores: np.ndarray, parts: Mapping[str, np.ndarray], lengths: np.ndarray,
                            cut: np.ndarray) -> dict[str, float]:
        """TRL's eval reward and completion-length numbers and ``frac_reward_zero_std`` of the sampled pass
        (every rank's, gathered), each eval batch's of ``eval.loss_batch`` completions averaged
        (``step_metrics.eval_batch_metrics``); the reward std's as a training step computes it
        (the run's ``scale_rewards``; GDPO's weighted sums of rewards normalized in their group)."""
        c, algo = self.config, self.config.algorithm
        matrix = None
        if algo.decouples_rewards:
            shaped = algo.shape_rewards(scores, lengths.astype(np.int64), self._max_completion_tokens)
            matrix = self._reward_matrix(parts, shaped)
        return eval_batch_metrics(lengths, cut, scores, eval_loss.batches(len(scores), c.eval.loss_batch),
                                  c.eval.samples, algo.scale_rewards, matrix,
                                  [weight for _, weight, _ in self.rewards.rewards], parts)

    def _eval_loss(self, completions: list[Completion], scores: np.ndarray,
                   parts: Mapping[str, np.ndarray]) -> dict[str, float]:
        """``eval.loss``: the run's loss on the sampled eval completions (``polyrl.eval_loss``).
        Every rank calls it: the advantages come from every rank's scores, the log-probs from a
        collective ``logprobs`` call (a sharded backend), and each rank computes the same numbers
        from the gathered completions."""
        c, algo = self.config, self.config.algorithm
        if eval_loss.selects_by_entropy(algo, self._max_completion_tokens):
            return {}
        # TRL's eval_loss holds it: not a loss without it. The folder the model loaded from: model.path
        # may be an alias or a Hub id, whose config.json is not at that name
        if eval_loss.needs_router_loss(algo, self.model_path):
            if not self._router_eval_warned:
                self._router_eval_warned = True
                log.warning("eval.loss is not computed: the loss holds the MoE model's router load-balancing term "
                            "(algorithm.router_aux_loss_coef), which the evaluation's log-probs cannot give; set "
                            "router_aux_loss_coef = 0 for an eval loss without it")
            return {}
        seqs = [TokenSequence.of(x) for x in completions]
        mine = (scores, {k: np.asarray(v) for k, v in parts.items()}, [len(x.completion_ids) for x in completions],
                [x.finish_reason for x in completions], [int(s.loss_mask.sum()) for s in seqs],
                step_gather.out_of_loss(step_gather.Shard.of(completions)))
        everyone = self.train_engine.all_gather(mine, self.world_size) if self.world_size > 1 else [mine]
        all_scores = np.concatenate([p[0] for p in everyone])
        shaped = algo.shape_rewards(all_scores, np.concatenate([np.asarray(p[2], dtype=np.int64) for p in everyone]),
                                    self._max_completion_tokens)
        matrix = None
        weights = [weight for _, weight, _ in self.rewards.rewards]
        if algo.decouples_rewards:
            matrix = self._reward_matrix({k: np.concatenate([p[1][k] for p in everyone]) for k in parts}, shaped)
        reasons = [r for p in everyone for r in p[3]]
        untruncated = algo.untruncated_mask(reasons)
        batch_of = eval_loss.batches(len(all_scores), c.eval.loss_batch)
        keep, advantages, counted = eval_loss.kept(algo, all_scores, shaped, untruncated, c.eval.samples, matrix,
                                                   weights, np.concatenate([p[5] for p in everyone]), batch_of)
        counts = eval_loss.divisors(counted, untruncated, [n for p in everyone for n in p[4]], batch_of)
        offset = sum(len(p[0]) for p in everyone[: self.rank])
        idx = np.flatnonzero(keep[offset: offset + len(seqs)])
        kept_seqs = [seqs[i] for i in idx]
        temperature = c.generation.temperature or 1.0
        policy = self.train_engine.logprobs(kept_seqs, temperature) if kept_seqs or self.world_size > 1 else []
        kl_in_loss = algo.beta > 0 and not algo.kl_in_reward
        ref = self._ref_logprobs(kept_seqs, temperature) if kl_in_loss and kept_seqs else []
        # the entropy bonus's token entropies, where the backend gives them (every rank asks: a
        # sharded backend's forward is collective)
        ents = self.train_engine.entropies(kept_seqs, temperature) if algo.entropy_coef > 0 else None
        share = (list(policy or []), list(ref), [float(a) for a in advantages[offset + idx]],
                 [s.mask for s in kept_seqs], [int(b) for b in batch_of[offset + idx]], ents)
        gathered = self.train_engine.all_gather(share, self.world_size) if self.world_size > 1 else [share]
        known = all(g[5] is not None for g in gathered)
        return eval_loss.metrics(algo, self._max_completion_tokens, [x for g in gathered for x in g[0]],
                                 [a for g in gathered for a in g[2]],
                                 [x for g in gathered for x in g[1]] if kl_in_loss else None,
                                 [m for g in gathered for m in g[3]], [b for g in gathered for b in g[4]],
                                 np.bincount(batch_of).tolist(), counts,
                                 [x for g in gathered for x in g[5] or ()] if known else None)

    def _eval_pass(self, rows: list[dict[str, Any]], prompts: list[Any], sampling: Any, phase: str,
                   batch: int = 0) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, np.ndarray], np.ndarray,
                                        list[Completion], list[eval_log_metrics.Sums]]:
        """Generate ``sampling.n`` completions per eval row, score them with ``eval.reward``:
        the totals, the records, each reward's raw scores (by label), the completion lengths, the
        completions and each reward call's ``log_metric`` sums. ``batch``: completions per reward
        call (0: one call), as TRL scores each eval batch on its own (``polyrl.eval_log_metrics``)."""
        ev = self.config.eval
        labels = [r.label for r in self.config.rewards] if ev.reward == RUN_REWARDS else [ev.reward]
        if not rows:  # an eval set smaller than the world leaves this rank none
            if self.world_size > 1:  # a sharded (FSDP) generator gathers its weights collectively: take part
                self._sample(rows, sampling, training=False)
                self._stop_if_environment_raised()  # and in the gather below
            return np.zeros(0), [], {label: np.zeros(0) for label in labels}, np.zeros(0), [], []
        completions = self._sample(rows, sampling, training=False)
        self._stop_if_environment_raised()  # before any reward scores the episodes that did not run
        per_completion = [row for row in rows for _ in range(sampling.n)]
        computer = self._eval_rewards
        assert computer is not None  # an eval pass runs only with an eval set
        options = {r.label: dict(r.options) for r in self.config.rewards} if ev.reward == RUN_REWARDS else \
            {ev.reward: {}}

        def score(asked: list[Any], scored_rows: list[Any], scored: list[Completion]) -> Any:
            return computer(asked, scored, RewardContext(rows=[as_stored(row) for row in scored_rows],
                                                         wanted=tuple(labels), options=options,
                                                         completion_ids=[x.completion_ids for x in scored],
                                                         step=self.step, trainer_state=self._trainer_state(),
                                                         columns=self._columns[1]))

        asked = episode_scoring.prompts_asked(per_completion, completions, self.config.data.prompt_column)
        size = batch if batch > 0 else max(len(completions), 1)
        results = [episode_scoring.score_started(score, asked[i: i + size], per_completion[i: i + size],
                                                 completions[i: i + size]) for i in range(0, len(completions), size)]
        logged = [eval_log_metrics.call_sums(r.metrics, r.metric_counts) for r in results]
        scores = np.concatenate([np.asarray(r.total, dtype=np.float64) for r in results])  # env error: NaN
        records = evaluation.completion_records(phase, self.step, [p for p in prompts], [x.text for x in completions],
                                                scores, sampling.n, greedy=sampling.temperature == 0,
                                                threshold=ev.pass_threshold)
        parts = {label: np.concatenate([np.asarray(r.per_reward[label], dtype=np.float64) for r in results])
                 for label in labels}
        lengths = np.asarray([len(x.completion_ids) for x in completions], dtype=np.float64)
        if ev.reward == RUN_REWARDS:  # each reward's own score beside the weighted total
            for i, record in enumerate(records):
                record["rewards"] = {label: _finite_or_none(parts[label][i]) for label in labels}
        for record, completion in zip(records, completions):
            record["prompt_index"] = self.rank + record["prompt_index"] * self.world_size  # in the whole set
            if completion.mask is not None:  # an episode: its conversation and whether it called a tool
                record["completion"] = completion.messages
                record["tool_calls"] = int(completion.info.get("tool_calls", 0))
        return scores, records, parts, lengths, completions, logged

    # --- checkpoints ---------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        pending = self.rollouts.pending()
        return {
            "step": self.step,
            "sampler": self.sampler.state(),
            **_rng_states(),
            "config_model": self.config.model.path,
            "config": resume_config.snapshot(self.config),
            "pending_rollout": pending.as_state() if pending else None,
            "kl_coef": self.kl_coef,
            "num_tokens": self.num_tokens,
            "updates_applied": self.updates_applied,
            "in_a_row": dict(self._in_a_row),
            "epoch_steps_skipped": self._epoch_steps_skipped,
            "reward_code": self._reward_codes,  # a resume says when the functions' code changed
            "model_files": self._model_files(),  # and when the model folders were changed in place
            "eval_data": self._eval_data_print,  # and the held-out rows
            "train_data": self._train_data_print,  # and the training rows, before any model loads
            # the observers' own (transformers' best_metric and callback states, polyrl.trl_callbacks)
            "observers": self._observers_state(),
        }

    def _observers_state(self) -> dict[str, Any]:
        """The observers' states merged (``RunObserver.checkpoint_state``): what a checkpoint holds
        for them and what ``_restate_last_checkpoint`` compares it with."""
        return {key: value for observer in self.observers for key, value in observer.checkpoint_state().items()}

    def _agree_to_start(self) -> None:
        """Under a launcher, before anything is resumed or set aside: rank 0 takes the output_dir lock,
        and every rank learns whether it got it and whether the ranks loaded the same files (one
        gather), so all refuse together instead of rank 0 leaving while the others wait for it."""
        busy: str | None = None
        try:
            self._own_output_dir()
        except OutputDirBusy as exc:
            busy = exc.message
        try:
            answers = self.train_engine.all_gather((busy, self._fingerprint()))
            refused = next((b for b, _ in answers if b), None)
            if refused is not None:
                raise OutputDirBusy(refused, field="train.output_dir", fix=OUTPUT_DIR_BUSY_FIX)
            check_same([f for _, f in answers])
        except BaseException:
            self.lock.release()
            raise

    def _fingerprint(self) -> dict[str, str]:
        """What every rank must have loaded alike: the config, the reward code, the prompts, the models."""
        ref = self._start_config().model.reference_path
        models = [model_files(self.model_path)]
        if ref:
            models.append(model_files(self.registry.resolve_model(ref, field="model.reference_path")))
        written = {**resume_config.snapshot(self.config), "train.output_dir": self._given_output_dir}
        return fingerprint(written, self._reward_codes, self.dataset, self.eval_dataset, weights=",".join(models))

    def _own_output_dir(self) -> None:
        """Take the output_dir lock (rank 0 writes for everyone under a launcher), delete what a kill
        left of a pruned checkpoint (``ckpt.remove_pruned_leftovers``; an earlier polyrl's unmarked
        ``step-N``, ``ckpt.remove_unmarked_leftovers``) and of a reward model's save
        (``trl_reward_models.remove_stale_staging``), and put back a checkpoint whose same-step
        re-save a kill cut short (``ckpt.finish_interrupted_replacements``)."""
        if self.rank == 0:
            self.lock.acquire()
            ckpt.remove_pruned_leftovers(self.checkpoint_root)
            for restored in ckpt.finish_interrupted_replacements(self.checkpoint_root):
                log.warning("a checkpoint's re-save was cut short: put back", checkpoint=str(restored))
            for removed in ckpt.remove_unmarked_leftovers(self.checkpoint_root):
                log.warning("deleted a checkpoint folder without its COMPLETE marker, older than the newest "
                            "complete checkpoint: what a kill left of an earlier polyrl's pruning; it could "
                            "never be resumed", checkpoint=str(removed))
            for saves in (trl_reward_models.MODELS, trl_reward_models.TOKENIZERS):
                trl_reward_models.remove_stale_staging(self.output_dir / saves)

    def save(self, prune: bool = True) -> Path:
        """Checkpoint. Under a launcher every rank calls the backend (sharded weights are gathered
        collectively) but only rank 0 writes; the others pass a scratch folder that is deleted.
        A failed write leaves every earlier checkpoint as it was (pruning happens after success).
        ``prune`` False: the older checkpoints are pruned later (``_prune_checkpoints``), once the
        evaluation after training has said which one is the best (the one pruning keeps)."""
        self._phase = f"the checkpoint of step {self.step}"
        if self.rank != 0:
            with tempfile.TemporaryDirectory(prefix="polyrl-rank-scratch-") as scratch:
                self.train_engine.save_checkpoint(str(Path(scratch) / ckpt.MODEL_DIR),
                                                  str(Path(scratch) / ckpt.ENGINE_STATE_DIR))
            self._saved_step = self.step
            return ckpt.checkpoint_dir(self.checkpoint_root, self.step)
        self._own_output_dir()
        try:
            path = ckpt.write_checkpoint(self.checkpoint_root, self.step, self._state(),
                                         self._checkpoint_writer())
        except ckpt.CheckpointWriteError as exc:
            if not exc.disk_problem:
                raise
            raise self._write_failed(f"checkpoint of step {self.step}", exc.reason, exc.fix) from None
        self._saved_step = self.step
        # the newest checkpoint holds the start folders' copies (``kept_inputs``): the next ones read
        # a folder that is gone from it, not from the checkpoint a resume read, which prune may remove
        self._kept_from = path
        if prune:
            self._prune_checkpoints()
        else:
            self._prune_deferred = True
        log.info("checkpoint saved", path=str(path), step=self.step)
        self.tracking.saved(path, self.step)  # $HF_MLFLOW_LOG_ARTIFACTS: MLflow logs it, as transformers does
        if self._prune_pending and self.step > 0:  # keep_previous_runs = 0: replaced now
            previous_runs.deferred_prune(self.output_dir, self._set_aside)
            self._prune_pending = False
        return path

    def _prune_checkpoints(self) -> None:
        """Keep ``train.keep_checkpoints`` checkpoints, the newest and those the observers protect
        (``RunObserver.protected_checkpoint``: transformers' ``best_model_checkpoint``)."""
        self._prune_deferred = False
        ckpt.prune(self.checkpoint_root, self.config.train.keep_checkpoints,
                   [kept for observer in self.observers if (kept := observer.protected_checkpoint()) is not None])

    def _checkpoint_writer(self) -> Callable[[str, str], None]:
        """The engine's part, a refreshed reference (``ref_sync``), and copies of the folders the
        run started from (``kept_inputs``): a resume needs none of them where they were."""
        write = self.ref_sync.writer(self.train_engine.save_checkpoint)
        start = self._start_config()

        def write_all(model_dir: str, state_dir: str) -> None:
            write(model_dir, state_dir)
            for folder, refused in kept_inputs.save(start, Path(model_dir).parent):
                if folder not in self._unkept_warned:
                    self._unkept_warned.add(folder)
                    why, fix = kept_inputs.unlinked_reason(refused)
                    log.warning(f"the checkpoints keep no copy of the KL reference: {why} (a full model is not "
                                "copied into each checkpoint); a resume needs it unchanged where it is",
                                reference=str(folder), fix=fix)
        return write_all

    def _write_failed(self, what: str, cause: OSError | str, fix: str | None = None) -> OutputWriteError:
        """One error for a file of the run that could not be written; ``fix``: the cause's own
        (a file-size limit), else free space or make the folder writable."""
        last = ckpt.latest_checkpoint(self.checkpoint_root)
        if last:
            kept = f"the last good checkpoint {last} is kept intact"
        elif not self.output_dir.exists():
            kept = "train.output_dir itself is gone (deleted or unmounted), with the checkpoints in it"
        elif self._saved_step is not None:
            kept = f"the checkpoints this run wrote are gone from {self.checkpoint_root}"
        else:
            kept = "no checkpoint was written yet"
        if isinstance(cause, str):
            reason = cause
        else:  # a file-size limit or a quota is freed by no space: its own reason and fix
            limited = ckpt.limit_problem(cause) or ckpt.in_the_way(cause) or ckpt.too_long(cause)
            reason, fix = (limited[0], fix or limited[1]) if limited else (_os_reason(cause), fix)
        return OutputWriteError(
            f"cannot write the {what} into {self.output_dir}: {reason}; {kept}. "
            f"Fix: {fix or 'free space or make train.output_dir writable'}, then continue with "
            f"{run_plan.resume_command(self.started_by, '`')}")

    def resume(self, path: str | Path | None = None, weights_only: bool = False) -> bool:
        """Restore the newest checkpoint that verifies (or ``path``); False when there is none,
        and then the run starts over (metrics of steps no checkpoint holds are dropped).

        ``weights_only``: load the policy weights alone (the checkpoint's optimizer, RNG or engine
        state may be missing or damaged); the optimizer and RNG start fresh, step and data
        position continue when the checkpoint still has them, and config changes are applied."""
        self._own_output_dir()
        request = (str(path) if path else None, weights_only)
        if self._checked_resume is not None and self._checked_resume[0] == request:
            point = self._checked_resume[1]
        else:
            point = self._resume_point(path, weights_only)
        self._checked_resume = None
        if point is None:
            self._start_over()
            return False
        found, state = point
        earlier = trl_saves.run_key(self.output_dir)  # before newer checkpoints move: the run resumed
        self.train_engine.load_checkpoint(str(found / ckpt.MODEL_DIR), str(found / ckpt.ENGINE_STATE_DIR),
                                          weights_only=weights_only)
        if not weights_only:
            self.ref_sync.load(found)  # a refreshed reference (algorithm.ref_sync_every)
        if "sampler" in state:
            self.sampler.load_state(state["sampler"])
        self.step = int(state.get("step", 0))
        self.kl_coef = float(state.get("kl_coef", self.config.algorithm.beta))
        pending = state.get("pending_rollout")
        if pending:  # sampled ahead by the interrupted run (overlap): train on exactly it
            self.sampler.load_state(pending["sampler_before"])
            if self.config.generation.overlap and not weights_only:
                self.rollouts.put(Rollout.from_state(pending, self._draw()[0]))
            # else: its rows are drawn again and sampled on-policy
        if weights_only:
            log.warning("resumed weights only: optimizer and RNG start fresh", path=str(found), step=self.step)
        else:
            _restore_rng_states(state)
        self._set_aside_newer_checkpoints()
        if self.rank == 0:  # a TRL trainer's saves before train() moved this run's results aside: back
            trl_saves.rejoin_resumed(self.output_dir, self.displaced_results, earlier)
            trl_saves.drop_own_copies(self.output_dir, self.own_run_files)
        self.history = self._rewind_metrics()
        self.num_tokens = self._resumed_num_tokens(state.get("num_tokens"))
        self.updates_applied = 0 if weights_only else self._resumed_updates(state.get("updates_applied"))
        # a full resume continues the streaks (an older checkpoint has none: from 0); weights only is a new run
        saved_row = {} if weights_only else state.get("in_a_row") or {}
        self._in_a_row = {k: int(saved_row.get(k, 0)) for k in IN_A_ROW}
        self._epoch_steps_skipped = 0 if weights_only else int(state.get("epoch_steps_skipped", 0))
        # the observers' state goes on with a full resume, as the streaks do (an older checkpoint has none)
        self.resumed_observer_state = {} if weights_only else dict(state.get("observers") or {})
        self._resumed = True
        # that checkpoint holds this step: re-saving it before training on (weights only, nothing
        # left to train) put a fresh optimizer into it, and a later exact --resume went off the run
        self._saved_step = self.step
        self.engines.generator_version = -1  # the train engine's weights were just replaced
        self.engines.sync_weights(self.step)
        log.info("resumed", path=str(found), step=self.step, weights_only=weights_only)
        if self.step >= self.config.train.steps:
            log.warning(f"the checkpoint is at step {self.step}, at or past train.steps = {self.config.train.steps}: "
                        "nothing is left to train (the final model is written from it)",
                        fix=f"raise train.steps above {self.step} to train further, e.g. --steps {self.step + 10}")
        return True

    def _model_files(self) -> dict[str, str]:
        """The model folders' files as found here (``rank_fingerprint.model_files``), by the config
        field naming each; computed once a run."""
        if self.__dict__.get("_model_prints") is None:  # a resume checks before _load sets it
            c = self._start_config().model
            prints = {"model.path": model_files(self.registry.resolve_model(c.path))}
            if c.reference_path:
                prints["model.reference_path"] = model_files(
                    self.registry.resolve_model(c.reference_path, field="model.reference_path"))
            self._model_prints = {**prints, **reward_files(self.config.rewards)}
        return self.__dict__["_model_prints"]

    def _check_model_files(self, state: Mapping[str, Any], found: Path, weights_only: bool) -> None:
        """A model folder rebuilt or edited in place since the checkpoint (same path, other files)
        gave the resumed run another KL reference, tokenizer or reward model without a word; the dataset was
        already checked so. A checkpoint from before this field has nothing to compare."""
        saved = state.get("model_files")
        if not isinstance(saved, dict):
            return
        now = self._model_files()
        changed = [field for field, value in saved.items() if field in now and now[field] != value]
        if not changed:
            return
        reference = self._start_config().model.reference_path
        if "model.reference_path" in changed and reference and not Path(reference).exists():
            # gone, and the checkpoint holds no copy (``kept_inputs``): even a weights-only resume
            # would fail at the engine load, so it is refused alike, with the ways on
            raise ConfigError(
                f"the KL reference {reference} is gone since {found} was written, and the checkpoint holds no "
                "copy of it (one that cannot be hard-linked into train.output_dir, on another file system or "
                "refused a link, is not copied: a warning said so as the run saved)",
                field="model.reference_path",
                fix=f"put the model back at {reference} as it was, or resume with --resume-weights-only and "
                    "model.reference_path set to a model that exists (another KL reference), or train into a "
                    "new output_dir")
        _refuse_unless_weights_only(
            weights_only, "model files changed since the checkpoint", {"fields": changed, "path": str(found)},
            f"the files of {' and '.join(changed)} changed since {found} was written (same path, other contents), "
            "so the resumed steps would use another reference model, tokenizer or reward model than the "
            "checkpointed run's",
            changed[0], "the folder")

    @property
    def _eval_data_print(self) -> str | None:
        """The held-out rows' content hash as read (``Dataset.fingerprint``, computed once per
        dataset), None without them."""
        held_out = self._source_data[1]
        return None if held_out is None else held_out.fingerprint()

    @property
    def _train_data_print(self) -> str:
        """The training rows' content hash as read (``Dataset.fingerprint``, computed once per
        dataset), before ``data.drop_overlong`` leaves any out: what a resume compares before the
        tokenizer loads."""
        return self._source_data[0].fingerprint()

    def _check_train_data(self, state: Mapping[str, Any]) -> None:
        """Training rows changed since the checkpoint were refused only by the sampler inside
        ``resume()``, after the models had loaded (minutes with a big model): refused here, before,
        with the same error. A checkpoint from before ``train_data`` holds only the sampler's
        fingerprint of the rows kept, which is the rows as read unless ``data.drop_overlong`` left
        some out: then the sampler's own check is the one. (Only where the resume loads a sampler
        state, as that check runs.)"""
        sampler = state.get("sampler")
        if not isinstance(sampler, Mapping):
            return
        saved = state.get("train_data")
        if saved is None and not self.config.data.drop_overlong:
            saved = sampler.get("fingerprint")
        if isinstance(saved, str) and saved != self._train_data_print:
            raise dataset_changed_error()

    def _check_eval_data(self, state: Mapping[str, Any], found: Path, weights_only: bool) -> None:
        """Held-out rows edited since the checkpoint (the same ``data.eval_path``, other rows) put
        another set's scores on the resumed run's eval curve, after the old set's, without a word;
        the training rows were already checked (the sampler's fingerprint). A checkpoint from
        before this field has nothing to compare."""
        saved = state.get("eval_data")
        if not isinstance(saved, str) or saved == self._eval_data_print:
            return
        d = self.config.data
        field = "data.eval_path" if d.eval_path is not None else "data.eval_split" if d.eval_split else "data"
        _refuse_unless_weights_only(
            weights_only, "held-out rows changed since the checkpoint", {"field": field, "path": str(found)},
            f"the held-out rows differ from the ones the run of {found} evaluated on (same {field}, other "
            "contents), so the resumed run's evaluations would not compare with the ones before", field,
            "the held-out data")

    def _check_reward_code(self, state: Mapping[str, Any], found: Path, weights_only: bool) -> None:
        """A ``[[rewards]]`` function whose file or code differs from the one the checkpoint's run
        loaded (same path, edited) scores the resumed steps differently: never silent. A checkpoint
        from before this field has nothing to compare."""
        saved = state.get("reward_code")
        if not isinstance(saved, list) or saved == self._reward_codes:
            return
        names = [r.label for r in self.config.rewards if r.function]
        changed = [n for n, old, new in zip(names, saved, self._reward_codes) if old != new] or names
        _refuse_unless_weights_only(
            weights_only, "reward function code changed since the checkpoint", {"functions": changed, "path": str(found)},
            f"the code of reward function(s) {', '.join(changed)} changed since {found} was written, so the "
            "resumed steps would be scored by other code than the checkpointed run's", "rewards.function", "the file")

    def _set_aside_newer_checkpoints(self) -> None:
        """Checkpoints past the resumed step belong to the run this resume branches from (an older
        checkpoint resumed by path, or another run's): left in checkpoints/ they sort after this
        run's own, so ``prune`` deleted each checkpoint this run wrote and a later ``--resume``
        (the command a stop prints) went back to the abandoned run. They are moved into
        ``previous/<UTC time>/checkpoints/``, nothing deleted; a copy of the run's JSON-lines logs
        and ``run_plan.json`` goes beside them first, since the rewind that follows drops the
        abandoned steps' lines (the curves and completions of the run those checkpoints belong
        to) and this run's start rewrites the plan (how that run ended, for ``polyrl report``)."""
        if self.rank != 0 or not self.checkpoint_root.is_dir():
            return
        resumed = ckpt.checkpoint_dir(self.checkpoint_root, self.step).name
        newer = sorted(p for p in self.checkpoint_root.iterdir()  # by name, the order prune and resume pick by
                       if p.is_dir() and not p.is_symlink() and p.name.startswith("step-") and p.name > resumed)
        if not newer:
            return
        aside = previous_runs.new_aside_dir(self.output_dir / previous_runs.PREVIOUS_DIR)
        logs = [self.output_dir / metrics_file.FILE_NAME, self.output_dir / evaluation.COMPLETIONS_FILE,
                self.tracking.completions_path, self.output_dir / run_plan.FILE_NAME]  # how that run ended
        try:  # before anything moves: a copy that fails leaves the resume to be tried again as it was
            for log_file in logs:
                if log_file.is_file() and not log_file.is_symlink():
                    shutil.copy2(log_file, aside / log_file.name)
        except OSError as exc:
            shutil.rmtree(aside, ignore_errors=True)
            raise self._write_failed(f"copy of the abandoned run's logs into {aside.parent}", exc) from None
        target = aside / "checkpoints"
        target.mkdir()
        previous_runs.move_aside(newer, target)
        log.warning("checkpoints past the resumed step belong to the run this resume branches from; "
                    "moved aside", moved=[p.name for p in newer], moved_to=str(target), step=self.step)

    def _resume_point(self, path: str | Path | None, weights_only: bool) -> tuple[Path, dict[str, Any]] | None:
        where = run_paths.anchored(os.path.expanduser(str(path)), self._start_dir) if path else None
        point = resume_point(self.config, where, weights_only)
        check_backend_files(self.registry, self.config, point, weights_only)  # before any model loads
        if point is not None:
            self._kept_from, self._model_prints = point[0], None  # its start folders, before they are compared
            self._check_train_data(point[1])
            self._check_reward_code(point[1], point[0], weights_only)
            self._check_model_files(point[1], point[0], weights_only)
            self._check_eval_data(point[1], point[0], weights_only)
        return point

    def _start_over(self) -> None:
        """A fresh start in ``output_dir``: metrics of a run that left no checkpoint (killed before
        its first one) are dropped, since this run writes those steps again; the checkpoints and
        final model of an earlier finished run (its logs, curves and a TRL trainer's saved results and
        state too) are moved aside, never mixed with this run's, and
        only the newest ``train.keep_previous_runs`` runs set aside are kept (``previous_runs``)."""
        if self.rank != 0:
            return
        self._own_output_dir()
        keep = self.config.train.keep_previous_runs
        aside = None
        # a TRL trainer's save_metrics()/save_state() files (any split's): left here, this run's
        # save_metrics() merged into the earlier run's all_results.json; its own saves before this
        # train() stay (``own_run_files``)
        results = trl_saves.leftover_run_files(self.output_dir, self.own_run_files)
        earlier = trl_saves.run_key(self.output_dir)  # before it moves: which run the displaced results are of
        # a TRL run's completions parquet files: left here, the earlier run's mixed with this run's (and
        # deleted as steps after 0 when the run rewinds below); the folder is made again for this run's
        tables = self.tracking.parquet_folder
        parquet = [tables] if tables is not None and tables.is_dir() and any(tables.iterdir()) else []
        if previous_runs.earlier_run(self.checkpoint_root, self.final_model_dir, self._loaded_model_paths()):
            aside = previous_runs.set_aside(
                self.output_dir, [self.checkpoint_root, self.final_model_dir, self.output_dir / metrics_file.FILE_NAME,
                                  self.output_dir / evaluation.COMPLETIONS_FILE, self.tracking.completions_path,
                                  # how it ended (run_plan): left here, this run's start overwrote it, and a
                                  # report of the run set aside fell back to its checkpoint's steps alone
                                  self.output_dir / run_plan.FILE_NAME,
                                  # its curves: left here, this run's session start hid them in TensorBoard
                                  self.output_dir / TENSORBOARD_DIR, *results, *parquet],
                keep=keep)
            for folder in parquet:  # where this run writes its own (one it cannot: its writer says so once)
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError:
                    pass
            trl_saves.rejoin(aside, self.displaced_results, earlier)
        elif results:  # a trainer that saved results but never trained: no run to count, but not ours
            previous_runs.set_aside_results(self.output_dir, results)
        trl_saves.restore_own(self.output_dir, self.own_run_files)
        trl_saves.drop_own_copies(self.output_dir, self.own_run_files)
        self._prune_pending, self._set_aside = keep == 0, aside
        self.step = self.num_tokens = self.updates_applied = 0
        self.history = self._rewind_metrics()

    def _resumed_num_tokens(self, saved: Any) -> int:
        """``num_tokens`` at the resumed step: the checkpoint's count (``saved``), or for a
        checkpoint written before it was saved, the last kept step line's (0 when neither has it)."""
        if saved is None and self.history:
            saved = self.history[-1].get("num_tokens")
        return saved if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 0 else 0

    def _resumed_updates(self, saved: Any) -> int:
        """The optimizer updates applied before the resumed step: the checkpoint's count
        (``saved``), or for a checkpoint written before it was saved, the kept step lines' count."""
        if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 0:
            return saved
        return updates_in_history(self.history, self.config.algorithm.updates_per_step)

    def _loaded_model_paths(self) -> list[Path]:
        """The local folders this run's models load from (a fresh start must not move them aside)."""
        paths = [Path(self.model_path)]
        ref = self._start_config().model.reference_path
        if ref:
            paths.append(Path(self.registry.resolve_model(ref, field="model.reference_path")))
        return [p for p in paths if p.exists()]

    def _rewind_metrics(self) -> list[dict[str, Any]]:
        """Keep the metrics.jsonl lines of the ``self.step`` steps taken (and the evaluation before
        them), each step once (a crash wrote later ones, the resumed run writes them again), and
        the completions logs with them; returns the training lines. Atomic rewrites. Files of an
        earlier polyrl, numbered from 0, are renumbered (``metrics_file``): metrics.jsonl first,
        then completions.jsonl, whose own step-0 records still say so if a kill comes between."""
        path = self.output_dir / metrics_file.FILE_NAME
        if self.rank == 0:
            try:
                evaluation.rewind_records(self.output_dir, self.step)  # the same lineage as the metrics
            except OSError as exc:
                raise self._write_failed("rewound eval completions", exc) from None
        try:  # a folder (or an unreadable file) where metrics.jsonl belongs was a traceback
            records = [record for _, record in strict_json.read_lines(path)] if path.exists() else []
        except OSError as exc:
            raise self._write_failed("rewound metrics.jsonl", exc) from None
        unreadable = [n for n, r in enumerate(records, 1) if not metrics_file.has_step(r)]
        if self.rank == 0 and unreadable and unreadable != [len(records)]:  # more than a crash's cut-short last line
            log.warning(f"{len(unreadable)} line(s) of metrics.jsonl are not step records polyrl wrote; dropped",
                        path=str(path), first_line=unreadable[0],
                        fix="keep metrics.jsonl to the lines polyrl writes (copy it first to keep the others)")
        from_zero = metrics_file.counted_from_zero(records)
        if from_zero:
            records = metrics_file.renumbered(records)
            if self.rank == 0 and self.step > 0:
                log.warning("metrics.jsonl numbers steps from 0 (an earlier polyrl wrote it): its lines and "
                            "completions.jsonl are renumbered to count the steps taken, as checkpoints do; "
                            "what the trackers got before keeps the old numbering (one step earlier)",
                            path=str(path), step=self.step)
        kept = metrics_file.rewound(records, self.step)
        if self.rank == 0 and path.exists():  # one writer under a launcher
            try:
                strict_json.rewrite_lines(path, (strict_json.dumps(r) for r in kept))
            except OSError as exc:
                raise self._write_failed("rewound metrics.jsonl", exc) from None
        try:  # a full disk here was a traceback, though the two files before it were one error line
            self.tracking.rewind(self.step, from_zero)
        except OSError as exc:
            raise self._write_failed("rewound completions.jsonl", exc) from None
        self._kept_eval_before = next(({k: v for k, v in r.items() if k.startswith("eval/")}
                                       for r in kept if metrics_file.eval_phase(r) == "before"), None)
        return [r for r in kept if metrics_file.eval_phase(r) is None]

    def _append_metrics(self, metrics: dict[str, Any]) -> None:
        """One strict-JSON line per step (NaN -> null), flushed before the step is checkpointed."""
        try:
            strict_json.append_lines(self.output_dir / metrics_file.FILE_NAME, [metrics])
        except OSError as exc:
            what = f"evaluation {metrics['phase']} training" if metrics_file.eval_phase(metrics) else "metrics"
            raise self._write_failed(f"{what} of step {metrics.get('step')}", exc) from None

    def export_final_model(self, checkpoint: Path) -> Path:
        """``output_dir/model``: the checkpoint's shippable model folder (HF layout, tokenizer, chat
        template; LoRA: merged weights + ``adapter/``), without optimizer or RNG state. Copied into
        a temp folder then renamed, so a crash never leaves a half-written one."""
        src = checkpoint / ckpt.MODEL_DIR
        tmp = self.output_dir / ".tmp-model"
        old = self.output_dir / ".old-model"
        try:
            for stale in (tmp, old):
                if stale.exists():
                    shutil.rmtree(stale)
            shutil.copytree(src, tmp)
            if self.final_model_dir.exists():
                self.final_model_dir.replace(old)
            tmp.replace(self.final_model_dir)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if old.exists() and not self.final_model_dir.exists():
                old.replace(self.final_model_dir)
            raise self._write_failed("final model", exc) from None
        shutil.rmtree(old, ignore_errors=True)
        log.info("final model written", path=str(self.final_model_dir))
        return self.final_model_dir

    # --- driver --------------------------------------------------------------------------------

    @contextmanager
    def _graceful_signals(self, at_once: bool = False) -> Iterator[None]:
        """SIGINT/SIGTERM ask the run to stop after the current step. ``at_once`` (the steps and the
        evaluation before them, in a one-process run): a second Ctrl-C leaves now, raising
        ``StoppedAtOnce`` (a ``KeyboardInterrupt``) from the handler. Why: a step can take minutes
        (long completions on a CPU), and a user who presses Ctrl-C again wants the prompt back, not
        the step; the checkpoints are atomic, so leaving mid-step loses only that step, as a kill
        would. Never under a launcher (one rank leaving would hang its peers' collectives) and
        never during the final save (with checkpoint_every = 0, the run's only checkpoint). Where
        steps trained since the last checkpoint would be lost too (checkpoint_every = 0, or not
        every step), the second Ctrl-C says how many and only a third leaves: a double press lost
        every step of a run that checkpoints at the end (a TRL config's default)."""
        at_once = at_once and self.world_size == 1
        warned = False

        def request_stop(signum: int, _frame: Any) -> None:
            nonlocal warned
            if at_once and signum == signal.SIGINT and self.stop_requested:
                unsaved = self.step - (self._saved_step or 0)
                if unsaved <= 0 or warned:
                    raise StoppedAtOnce(self._phase)
                warned = True
                log_from_signal_handler(log.warning, f"{unsaved} trained step(s) since the last checkpoint would be "
                                        "lost by leaving now; finishing the current step, then checkpointing",
                                        during=self._phase, ctrl_c_again="stops at once without them")
                return
            self.stop_requested = True
            again = {}
            if at_once and signum == signal.SIGINT:  # what a second Ctrl-C would do
                unsaved = self.step - (self._saved_step or 0)
                again["ctrl_c_again"] = "stops at once (this step is not taken)" if unsaved <= 0 else \
                    f"says how many trained steps leaving would lose ({unsaved} now: no checkpoint since)"
            log_from_signal_handler(log.warning, "stop requested; finishing the current step, then checkpointing",
                                    signal=signal.Signals(signum).name, during=self._phase, **again)

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, request_stop)
            except ValueError:  # not in the main thread
                pass
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _agree_to_stop(self) -> bool:
        """Whether any rank was asked to stop: the same answer on every rank.

        Reads the signal handler's flag and never writes it: a signal landing after the gather would be
        overwritten by a write-back, and that rank would train on while its peers left for the final save
        (mismatched collectives: both hang). Such a late signal counts at the next step's gather."""
        return any(self.train_engine.all_gather(self.stop_requested))

    def run(self, progress: bool = True) -> dict[str, Any]:
        """Train until ``train.steps``; returns a summary (final metrics, eval before/after).

        The output_dir is locked for the whole run; a run not resumed starts over there."""
        try:
            return self._run_locked(progress)
        except CollectiveTimeout as exc:  # a peer is stuck elsewhere: say where this rank waited
            raise exc.during(self._phase) from exc.__cause__

    def _run_locked(self, progress: bool) -> dict[str, Any]:
        if self._checked_resume is None and not self._resumed and self.step == 0:
            resume_config.fresh_floor_check(self.config)  # before any model loads or output is touched
        if "engines" not in self.__dict__:  # deferred at construction: loaded before output_dir changes
            self._load_models()
        if self.world_size == 1:
            self._own_output_dir()
        else:
            self._phase = "the start-of-run agreement (what each rank loaded)"
            self._agree_to_start()
        if self._checked_resume is not None:  # Trainer(config, resume=...) then run(): resume as asked
            path, weights_only = self._checked_resume[0]
            self.resume(path, weights_only=weights_only)
        elif not self._resumed and self.step == 0:
            self._start_over()
        summary: dict[str, Any] = {"output_dir": str(self.output_dir)}
        if self.rank == 0:
            # a report of a killed run reads it
            run_plan.write(self.output_dir, self.config.train.steps, started=self.started_by)
            self._say_where()
        failed = True  # until the run returns: an error finishes the trackers' runs as failed
        if self._resumed and self.step > 0:  # a new tracker run: named apart from the one it continues
            self.tracking.name_resumed(self.step)
        try:
            self.tracking.started_by = self.started_by  # a TRL script's run: its trackers' resume advice
            # a resume's kept line of its step: TensorBoard logs it again past the stopped run's points
            self.tracking.open(self.step, self.history[-1] if self._resumed and self.history else None)
            self._run(summary, progress)
            if self.end_metrics is not None:  # before the trackers close (the finally below), as a TRL log
                self.tracking.publish_log(self.end_metrics(self), step=self.step)
            failed = False
        except CallbackError:  # the user's code failed between steps: the steps trained are kept
            if self.step > 0:  # under a launcher every rank raises it at the same point
                self._save_last_good_state(agreed=True)
            raise
        except OutOfMemory as exc:  # the last step trained is kept where it soundly can be, and said
            raise OutOfMemory(exc.what, kept=self._kept_out_of_memory()) from None
        finally:
            if self.rank == 0:  # how the run ended, for polyrl report (a kill leaves it null)
                run_plan.write(self.output_dir, self.config.train.steps, self._ending(sys.exc_info()[1]),
                               started=self.started_by)
            self.tracking.close(failed=failed, stopped=self._stopped_on_request)
            # a rollout sampled ahead finishes first (or was checkpointed); not after a second Ctrl-C
            self.rollouts.close(wait=sys.exc_info()[0] is not StoppedAtOnce)
            self.lock.release()
        summary["steps"] = self.step
        if self.tracking.dropped:
            summary["trackers_dropped"] = {name: {"at_step": step, "error": error}
                                           for name, (step, error) in self.tracking.dropped.items()}
        summary["history"] = self.history
        return summary

    def _ending(self, raised: BaseException | None) -> dict[str, Any]:
        """How the run ended (``run_plan.ending``): ``raised`` is what it raises (None: it returned).
        A second Ctrl-C (``StoppedAtOnce``) is a KeyboardInterrupt: stopped by a signal."""
        if isinstance(raised, KeyboardInterrupt) or (raised is None and self._stopped_on_request):
            return run_plan.ending(run_plan.SIGNAL, self.step)
        if raised is not None:
            return run_plan.ending(run_plan.FAILED, self.step, f"{type(raised).__name__}: {raised}")
        if self._stopped_by_code is not None:
            return run_plan.ending(run_plan.ASKED, self.step, self._stopped_by_code)
        return run_plan.ending(run_plan.FINISHED, self.step)

    def _kept_out_of_memory(self) -> str:
        """After an OutOfMemory mid-run: checkpoint the last step trained when that is sound (its
        prompt sampler set back before the rows of every rollout not trained, one sampled ahead
        dropped: a resume samples them again) and say from which step ``--resume`` continues, or
        why nothing was saved. Why: the run stopped with the steps since the last checkpoint lost
        (all of them with train.checkpoint_every = 0), while the message promised a resume."""
        step = self.step
        checkpointed = (f"step {step} is checkpointed in {ckpt.checkpoint_dir(self.checkpoint_root, step)}: "
                        f"{run_plan.resume_command(self.started_by, '`')} continues with step {step + 1}")
        if self._saved_step == step:
            return checkpointed
        if self._updating:
            return (f"nothing was saved: step {step + 1}'s update was under way, so the weights are neither step "
                    f"{step}'s nor step {step + 1}'s; {self._last_checkpoint_said()}")
        if step == 0:
            return "nothing was trained yet, so nothing was saved: run again from the start"
        if self.world_size > 1:
            return ("nothing was saved: under a launcher one rank cannot checkpoint alone; "
                    f"{self._last_checkpoint_said()}")
        if self._untrained_before is not None:
            self.rollouts.discard()
            self.sampler.load_state(self._untrained_before)
        try:
            self._save_last_good_state()
        except (PolyrlError, MemoryError) as failed:
            return f"the checkpoint of step {step} could not be written ({failed}); {self._last_checkpoint_said()}"
        return checkpointed

    def _last_checkpoint_said(self) -> str:
        """Where ``--resume`` continues from, in words: the newest checkpoint, or none."""
        last = ckpt.latest_checkpoint(self.checkpoint_root)
        if last is None:
            return "no checkpoint was written, so a run again starts from the start"
        return f"{run_plan.resume_command(self.started_by, '`')} continues from the last checkpoint, {last}"

    def _say_where(self) -> None:
        """One line at the start: where this run writes and how often it checkpoints (nothing said
        where metrics, trackers and checkpoints go, or that with checkpoint_every = 0 a kill before
        the end loses every step)."""
        c = self.config.train
        every = (f"every {c.checkpoint_every} steps" if c.checkpoint_every
                 else "only at the end (train.checkpoint_every = 0: a kill before then loses the run)")
        log.info("run", output_dir=str(self.output_dir), first_step=self.step + 1, steps=c.steps,
                 checkpoints=f"{self.checkpoint_root} {every}",
                 trackers=", ".join(self.config.logging.report_to) or "none (metrics.jsonl only)")

    def _evaluate_before(self, summary: dict[str, Any]) -> bool:
        """The evaluation before training, under the same stop handling as the steps (SIGTERM there
        killed the process without a word); False when a stop was asked for: nothing trained, nothing
        to save, the run ends with ``stopped_early``."""
        with self._graceful_signals(at_once=True):
            try:
                summary["eval_before"] = self.evaluate("before")
            except RewardCancelled as exc:  # the eval reward was stuck after the stop request
                log.warning("evaluation before training abandoned on the stop request", reward=str(exc))
            except EnvironmentFailed as exc:  # nothing trained, nothing to save
                raise EnvironmentFailed(f"the evaluation before training (nothing trained): {exc}",
                                        alone=True) from None
            else:
                self._tell_eval("before", summary["eval_before"])
            if not (self._agree_to_stop() if self.world_size > 1 else self.stop_requested):
                return True
        log.warning("stopped on request before the first step: nothing was trained or saved")
        self._stopped_on_request = True
        summary["stopped_early"] = True
        return False

    def _run(self, summary: dict[str, Any], progress: bool) -> None:
        from polyrl.progress import StepClock, bar_shown, step_heartbeat, step_progress

        c = self.config
        for observer in self.observers:  # the run's step and history are set: fresh, or as resumed
            observer.run_begin(self)
        if self.eval_dataset is not None and self.step == 0 and c.eval.before and not self._evaluate_before(summary):
            return
        if self.eval_dataset is not None and self.step > 0 and self._kept_eval_before is not None:
            # a resumed run's: its history holds the steps before the resume too (trl.GRPOTrainer's
            # log_history lacked the eval_on_start entry TRL's resumed trainer_state keeps)
            summary["eval_before"] = self._kept_eval_before
        last_eval = self._evaluated_at_resume()
        cancelled_at = -1  # the step whose evaluation an observer cancelled (``_observe_trained``)
        # under a launcher only a collective decides the stop, so every rank leaves after the same step
        stop_agreed = False
        asked = StepAsk()  # what the observers asked after the last step (``_observe_step``)

        def stopping() -> bool:
            return stop_agreed if self.world_size > 1 else self.stop_requested or asked.stop

        # without the bar, the step lines say how far the run is and how long it has left
        clock = None if bar_shown(progress) else StepClock(c.train.steps, self.step)
        # and a step running long says so, where no bar's clock ticks
        with self._graceful_signals(at_once=True), \
                step_heartbeat(c.train.steps, clock is not None and self.rank == 0) as heartbeat, \
                step_progress(c.train.steps, self.step, enabled=progress) as advance:
            while self.step < c.train.steps and not stopping():
                self._phase = f"step {self.step + 1}"
                if heartbeat is not None:
                    heartbeat.begin(self.step + 1)
                for observer in self.observers:
                    observer.step_begin(self.step + 1)
                metrics = self._take_step()
                if metrics is None:  # a stop request abandoned a reward: every rank raised it
                    stop_agreed = True
                    break
                asked_eval, cancelled = self._observe_trained(metrics)  # before the evaluation: may ask one
                if cancelled:
                    cancelled_at = self.step
                last_eval = self._evaluate_step(metrics, asked_eval, cancelled) or last_eval
                self.history.append(metrics)
                if self.rank == 0:
                    self._append_metrics(metrics)
                    self.tracking.publish(metrics)
                asked = self._observe_step(metrics)
                self._log_step_line(metrics, clock)
                if heartbeat is not None:
                    heartbeat.end()
                advance(metrics)
                if self._sync_failed is not None:  # the step trained; the generator missed its weights
                    push_failed, self._sync_failed = self._sync_failed, None
                    self.save()  # a resume pushes the weights again before sampling
                    raise push_failed
                if self.world_size > 1:  # a signal may reach the ranks on either side of a step
                    stop_agreed, asked = self._agree_after_step(asked)
                if asked.evaluate:  # asked in the step's callbacks, after its line was recorded
                    late = self._evaluate_asked(metrics)
                    asked = attrs.evolve(asked, evaluate=False) | (late[1] if late else StepAsk())
                    last_eval, cancelled_at = (late[0], -1) if late else (last_eval, cancelled_at)
                if asked.epoch_stop:  # before any checkpoint below: a resume starts the next epoch too
                    self._end_epoch()
                self._count_in_a_row()  # before any checkpoint below
                if asked.saves(checkpoint_due(self.step, c.train.checkpoint_every)):
                    last_step = self.step >= c.train.steps or stopping()  # the evaluation after training follows
                    later = self._saved_now(self.save(prune=not (last_step and self._evaluates_after)))
                    if self.world_size == 1:  # under a launcher the next step's gather agrees on it
                        late = self._evaluate_asked(metrics) if later.evaluate else None
                        if late is not None:  # asked after the checkpoint (transformers: on_epoch_end's)
                            later, last_eval, cancelled_at = later | late[1], late[0], -1
                        asked = asked | attrs.evolve(later, evaluate=False)
                        if later.epoch_stop:  # transformers reads it after on_save, in the same step
                            self._end_epoch()
        self._save_final(summary)
        if stopping() and self.step < c.train.steps:  # asked during the final save: nothing was cut short
            self._stopped_early(summary, asked)
        if self._evaluates_after and cancelled_at == self.step:
            log.info("no evaluation after training: an observer cancelled the evaluation of the last step's "
                     "weights (a callback cleared control.should_evaluate)", step=self.step)
        elif self._evaluates_after:
            self._evaluate_after(summary, last_eval)
            self._restate_last_checkpoint()
        if self._prune_deferred:  # the best now known: pruned as transformers prunes after that evaluation
            self._prune_checkpoints()

    @property
    def _evaluates_after(self) -> bool:
        """Whether the run evaluates after training (``_evaluate_after``), which may make its last
        step the best: the last checkpoint's pruning waits for it (``save``). Why: pruned before it,
        the previous best was kept and the step before the last removed, where transformers,
        evaluating the last step before saving it, keeps the newest ``save_total_limit``."""
        return self.eval_dataset is not None and self.evaluate_after

    def _take_step(self) -> dict[str, Any] | None:
        """Train the next step and count it; its metrics, or None when a stop request abandoned a
        reward (the step is not taken). A reward's or environment's error checkpoints the steps
        trained before it, then ends the run."""
        try:
            metrics = self.train_one_step()
        except RewardCancelled as exc:
            log.warning("stop requested while a reward ran; it was abandoned and this step is "
                        "not taken", step=self.step + 1, reward=str(exc))
            return None
        except RewardError:
            self._save_last_good_state(agreed=True)  # every rank raised it at the same point
            raise
        except EnvironmentFailed as exc:  # raised before the step trained: the steps before it are kept
            if self.step > 0:  # every rank raised it at the same point
                self._save_last_good_state(agreed=True)
            kept = (f"the steps trained before it checkpointed in "
                    f"{ckpt.checkpoint_dir(self.checkpoint_root, self.step)}" if self.step else "nothing trained")
            raise EnvironmentFailed(f"an environment stopped the run in step {self.step + 1}, before it "
                                    f"trained ({kept}): {exc}", alone=True) from None
        self.step += 1
        self._updating = False
        self._untrained_before, self._ahead_before = self._ahead_before, None  # its rows are trained
        self.ref_sync.after_step(self.step)
        return metrics

    def _evaluate_step(self, metrics: dict[str, Any], asked: bool,
                       cancelled: bool = False) -> tuple[int, dict[str, Any]] | None:
        """The evaluation after this step when ``eval.every`` makes it due (and no observer
        ``cancelled`` it) or an observer ``asked``, added to the step's line (``metrics``: a resume
        rewinds both); (step, its metrics), or None when none ran or a stop request abandoned it.
        Its error keeps the step, then ends the run."""
        every = self.config.eval.every
        if self.eval_dataset is None or not ((every and self.step % every == 0 and not cancelled) or asked):
            return None
        try:
            evaluated = self.evaluate()
        except RewardCancelled as exc:  # the step trained: keep it, without its evaluation
            log.warning("evaluation abandoned on the stop request", step=self.step, reward=str(exc))
            return None
        except RewardError as exc:  # the step trained: keep its line and a checkpoint, then stop
            self._keep_step_failed_eval(metrics)
            raise RewardError(f"the evaluation after step {self.step} (on the held-out rows): "
                              f"{exc}") from exc
        except EnvironmentFailed as exc:  # the same: the step is kept, the run stops
            self._keep_step_failed_eval(metrics)
            raise EnvironmentFailed(f"the evaluation after step {self.step} (on the held-out rows): "
                                    f"{exc}", alone=True) from None
        metrics.update(evaluated)
        return self.step, evaluated

    def _evaluate_asked(self, metrics: dict[str, Any]) -> tuple[tuple[int, dict[str, Any]], StepAsk] | None:
        """The evaluation an observer asked after the step was recorded (``StepAsk.evaluate``: an
        ``eval_strategy`` "epoch" evaluation that transformers runs after ``on_save`` and
        ``on_epoch_end``, which may cancel it): added to the step's line (``metrics``, its
        metrics.jsonl line rewritten in place) and sent to the trackers at the step, as an
        ``eval.every`` one is, then told to the observers (``step_evaluated``); ((step, its
        metrics), what they ask), or None when a stop request abandoned it or nothing to evaluate.
        Why not evaluated before the checkpoint: the evaluation a callback cancels there must
        never run (no line, no tracker point). Its error keeps the step (checkpointed), then ends the run."""
        if self.eval_dataset is None:
            return None
        try:
            evaluated = self.evaluate()
        except RewardCancelled as exc:  # the step is recorded: keep it, without its evaluation
            log.warning("evaluation abandoned on the stop request", step=self.step, reward=str(exc))
            return None
        except (RewardError, EnvironmentFailed) as exc:  # the step is recorded: checkpoint it, then stop
            self._save_last_good_state(agreed=True)
            message = f"the evaluation after step {self.step} (on the held-out rows): {exc}"
            if isinstance(exc, EnvironmentFailed):
                raise EnvironmentFailed(message, alone=True) from None
            raise RewardError(message) from exc
        metrics.update(evaluated)  # the step's entry in ``history`` too
        if self.rank == 0:
            self._rewrite_step_line(metrics)
            self.tracking.publish_at(evaluated, step=self.step)
        answer = StepAsk()
        for observer in self.observers:
            answer = answer | observer.step_evaluated(metrics)
        return (self.step, evaluated), answer

    def _rewrite_step_line(self, metrics: dict[str, Any]) -> None:
        """metrics.jsonl's line of this step replaced by ``metrics`` (an atomic rewrite), so that
        ``polyrl report`` and a resume read the evaluation there, as on an ``eval.every`` step's."""
        path = self.output_dir / metrics_file.FILE_NAME
        try:
            records = [record for _, record in strict_json.read_lines(path) if isinstance(record, dict)]
            at = next(i for i in range(len(records) - 1, -1, -1)
                      if records[i].get("step") == self.step and metrics_file.eval_phase(records[i]) is None)
            records[at] = metrics
            strict_json.rewrite_lines(path, (strict_json.dumps(r) for r in records))
        except (OSError, StopIteration) as exc:
            cause = exc if isinstance(exc, OSError) else "its line is missing"
            raise self._write_failed(f"the evaluation of step {self.step} into metrics.jsonl", cause) from None

    def _log_step_line(self, metrics: dict[str, Any], clock: StepClock | None) -> None:
        """The step's log line (``logging.step_line``'s fields), with how far the run is and how
        long it has left beside the step number when no progress bar shows it (``clock``)."""
        shown = step_line_fields(metrics, self.config.logging.step_line)
        if clock is not None:  # beside the step number: step=3 of=50 eta_s=120 loss=...
            shown = {"step": shown["step"], **clock.fields(self.step), **shown}
        log.info("step", **({"rank": self.rank} if self.world_size > 1 else {}),
                 **{k: (readable(v) if isinstance(v, float) else v) for k, v in shown.items()})

    def _count_in_a_row(self) -> None:
        """Count the steps in a row that were skipped, had nothing scored or trained on no completion (every
        completion cut), kept in each checkpoint; stop the run, checkpointed, when an environment
        never works or a count reaches ``train.max_consecutive_skips``."""
        c = self.config
        before = self._in_a_row
        skips = before["skips"] + 1 if self._update_refused else 0
        unscored = before["unscored"] + 1 if self._nothing_scored else 0
        cut = before["cut"] + 1 if self._all_cut else 0
        self._in_a_row = dict(zip(IN_A_ROW, (skips, unscored, cut)))
        failed = self._environment_failure()
        if failed is not None:  # an environment that never works: stop, with what it raised
            self.save()
            raise failed
        if skips >= c.train.max_consecutive_skips:
            self.save()
            raise TooManySkippedSteps(
                f"{skips} steps in a row had a non-finite loss or gradient; stopping. "
                "Fix: lower optimizer.lr, set optimizer.max_grad_norm, or check the rewards"
            )
        if unscored >= c.train.max_consecutive_skips:
            self.save()
            raise TooManySkippedSteps(self._unscored_message(unscored))
        if cut >= c.train.max_consecutive_skips:
            raise AllCompletionsCut(
                f"{cut} steps in a row trained on no completion: every completion was cut at the length limit "
                "and algorithm.mask_truncated_completions leaves cut completions out of the loss; "
                f"stopping, the state checkpointed. Fix: {self._cut_fix()}, then continue from the "
                "checkpoint's weights with `polyrl train CONFIG --resume-weights-only` (a plain --resume "
                "refuses a changed generation or algorithm setting)",
                steps=cut, max_new_tokens=c.generation.max_new_tokens, checkpoint=self.save())

    def _save_final(self, summary: dict[str, Any]) -> None:
        """The last step's checkpoint (unless written already) and, on rank 0, the trained model,
        into ``summary``. A signal meanwhile only asks to stop: with checkpoint_every = 0 that save
        is the run's one checkpoint, and SIGTERM there lost the whole run (Ctrl-C too)."""
        with self._graceful_signals():
            self.rollouts.pending()  # under overlap the generator lags one update: leave it on the
            self.engines.sync_weights(self.step)  # trained policy, as without overlap
            last = ckpt.checkpoint_dir(self.checkpoint_root, self.step)
            if self._saved_step != self.step:  # the run's own last checkpoint: none asked it
                last = self.save(prune=not self._evaluates_after)
                self._saved_now(last, asked=False)
            summary["checkpoint"] = str(last)
            if self.rank == 0:
                summary["model"] = str(self.export_final_model(last))

    def _stopped_early(self, summary: dict[str, Any], asked: StepAsk) -> None:
        """The run stopped before train.steps: said, and recorded as who stopped it (``asked``: the
        user's own code, told with no warning; else a signal, whose trackers' runs end as killed)."""
        if asked.stop and not self.stop_requested:  # the user's own code asked: no warning
            log.info("stopped early", step=self.step, asked_by=asked.why)
            self._stopped_by_code = asked.why or "an observer (RunObserver) asked to stop"
        else:
            log.warning("stopped early on request", step=self.step)
            self._stopped_on_request = True  # the trackers' runs end as killed, not finished
        summary["stopped_early"] = True

    def _evaluate_after(self, summary: dict[str, Any], last_eval: tuple[int, dict[str, Any]] | None) -> None:
        """The evaluation after training into ``summary``, unless these weights were just evaluated
        (``last_eval``: the step and metrics of the last evaluation) or a stop request abandons it."""
        if last_eval is not None and last_eval[0] == self.step:  # the same weights were just evaluated
            summary["eval_after"] = last_eval[1]
            return
        try:
            summary["eval_after"] = self.evaluate("after")
        except RewardCancelled as exc:  # a second reward stuck after a stop request
            log.warning("evaluation after training abandoned on the stop request", reward=str(exc))
            return
        except EnvironmentFailed as exc:  # the model is saved: the error says where, then stops the run
            saved = summary.get("model") or summary["checkpoint"]
            raise EnvironmentFailed(f"the evaluation after training (the trained model is saved in {saved}): "
                                    f"{exc}", alone=True) from None
        self._tell_eval("after", summary["eval_after"])

    def _restate_last_checkpoint(self) -> None:
        """The last checkpoint's observer state (``RunObserver.checkpoint_state``) brought up to date
        after the evaluation after training, where that evaluation changed it (``polyrl.trl``: a new
        ``best_metric``, an ``EarlyStoppingCallback``'s count), by an atomic rewrite of its state file
        (``checkpoint.rewrite_state``). Why: transformers evaluates the last step before saving it, so
        its last checkpoint holds them; polyrl's, written before its evaluation after training, held
        the previous best, which a resume (or ``load_best_model_at_end`` after one) compared against.
        A failed rewrite leaves the checkpoint as it was, with a warning: the run itself is done."""
        if self.rank != 0 or not self.observers or self._saved_step != self.step:
            return
        path = ckpt.checkpoint_dir(self.checkpoint_root, self.step)
        if not ckpt.is_complete(path):
            return
        state = ckpt.read_state(path)
        now = json.loads(strict_json.dumps(self._observers_state()))  # as the state file reads back
        if state.get("observers") == now:
            return
        try:
            ckpt.rewrite_state(path, self.step, {**state, "observers": now})
        except ckpt.CheckpointWriteError as exc:
            log.warning("the last checkpoint keeps the observers' state from before the evaluation after "
                        f"training ({exc.reason}); a resume from it compares against the best before it",
                        checkpoint=str(path), fix=exc.fix or "free space in the output_dir")

    def _observe_trained(self, metrics: dict[str, Any]) -> tuple[bool, bool]:
        """The observers told the step trained; (whether one asks for its evaluation now, whether
        one cancels the evaluation the run makes of these weights on its own: ``CANCEL_EVALUATION``),
        the same answers on every rank (one gather, only in a run with observers and held-out rows):
        asked on any rank, cancelled on every one."""
        wanted = cancelled = False
        for observer in self.observers:
            answer = observer.step_trained(metrics)  # every observer hears of the step
            if answer == CANCEL_EVALUATION:
                cancelled = True
            else:
                wanted = bool(answer) or wanted
        if self.world_size > 1 and self.observers and self.eval_dataset is not None:
            answers = self.train_engine.all_gather((wanted, cancelled))
            wanted, cancelled = any(a[0] for a in answers), all(a[1] for a in answers)
        return wanted and self.eval_dataset is not None, cancelled and not wanted

    def _observe_step(self, metrics: dict[str, Any]) -> StepAsk:
        """The observers told of the step just recorded; what they ask, together."""
        asked = StepAsk()
        for observer in self.observers:
            asked = asked | observer.step_end(metrics)
        return asked

    def _agree_after_step(self, asked: StepAsk) -> tuple[bool, StepAsk]:
        """(stop, what the observers asked) as every rank will act on them: a stop asked by a signal or
        an observer on any rank, a checkpoint asked on any (the save is collective: one rank saving
        alone would hang; a due one cancelled only where every rank cancelled it). One gather, where
        ``_agree_to_stop``'s was; reads the signal flag only."""
        answers = self.train_engine.all_gather((self.stop_requested, asked.stop, asked.save, asked.why,
                                                asked.failed, asked.epoch_stop, asked.cancel_save))
        failed = next((a[4] for a in answers if a[4]), "")
        if failed:  # every rank raises it here, together
            raise CallbackError(failed)
        why = "; ".join(dict.fromkeys(a[3] for a in answers if a[3]))
        agreed = StepAsk(save=any(a[2] for a in answers), stop=any(a[1] for a in answers), why=why,
                         epoch_stop=any(a[5] for a in answers), cancel_save=all(a[6] for a in answers))
        return any(a[0] for a in answers) or agreed.stop, agreed

    def _end_epoch(self) -> None:
        """An observer ended the epoch (transformers' ``control.should_epoch_stop``): the next step's
        prompts start the epoch after the one this step's prompts started in. A rollout sampled
        ahead (overlap) drew its prompts from the old place: it is dropped and sampled again."""
        ahead = self.rollouts.drop()
        if ahead is not None:
            self.sampler.load_state(ahead.sampler_before)
        self.sampler.end_epoch(self._step_start[0])
        self._epoch_steps_skipped += epoch_stop_skips(self.step + self._epoch_steps_skipped,
                                                      self.config.train.prompts_per_step, len(self.dataset))

    def _saved_now(self, path: Path, asked: bool = True) -> StepAsk:
        """The checkpoint just written at this step (``path``) told to the observers; what they ask.
        ``asked`` False: the last step's checkpoint the run writes on its own (``RunObserver.saved``)."""
        answer = StepAsk()
        for observer in self.observers:
            answer = answer | observer.saved(self.step, path, asked)
        return answer

    def _reward_matrix(self, per_reward: Mapping[str, np.ndarray], shaped: np.ndarray) -> np.ndarray:
        """Each reward's scores over the step, one column per ``[[rewards]]`` entry in order, with
        the samples the summed reward marks unscorable (NaN: no reward, or an untrainable episode)
        NaN in every column."""
        matrix = np.stack([np.asarray(per_reward[name], dtype=np.float64) for name, _, _ in self.rewards.rewards],
                          axis=1)
        matrix[np.isnan(shaped)] = np.nan
        return matrix

    def _keep_step_failed_eval(self, metrics: dict[str, Any]) -> None:
        """Record and checkpoint a step whose evaluation's reward failed. Why: it trained, but the
        error left it out of metrics.jsonl and every checkpoint, as if it never ran, while a reward
        failing in training keeps the steps before it (``_save_last_good_state``). Every rank gets
        here (``agreed_reward_failure`` in ``evaluate``), so the collective save is safe."""
        self.history.append(metrics)
        if self.rank == 0:
            self._append_metrics(metrics)
            self.tracking.publish(metrics)
        self._save_last_good_state(agreed=True)

    def _evaluated_at_resume(self) -> tuple[int, dict[str, float]] | None:
        """(step, its evaluation) when the resumed step's kept line holds an evaluation of these
        weights (``eval.every``): a run killed after its last checkpoint and resumed evaluated them
        again "after" training, a line and eval completions the uninterrupted run does not have."""
        line = self.history[-1] if self.history and self.step > 0 else None
        if line is None or line.get("step") != self.step:
            return None
        evaluated = {k: v for k, v in line.items() if k.startswith("eval/")}
        return (self.step, evaluated) if evaluated else None

    def _tell_eval(self, phase: str, result: dict[str, float]) -> None:
        """The evaluation before or after training (``phase``), at step 0 or the last step taken:
        logged and published by rank 0, told to every rank's observers."""
        step = self.step if phase == "after" else 0
        if self.rank == 0:
            log.info(f"evaluation {phase} training", **result)
            self._publish_eval(phase, step, result)
        for observer in self.observers:
            observer.evaluated(phase, step, result)

    def _publish_eval(self, phase: str, step: int, result: dict[str, float]) -> None:
        """The evaluation before or after training as a line of metrics.jsonl and to the trackers
        (``metrics_file``): it reached the trackers alone, under other names, and ``polyrl report``
        recomputed it from the completions."""
        line = metrics_file.eval_line(phase, step, result)
        self._append_metrics(line)
        self.tracking.publish_at(result, step=line["step"])


def _os_reason(error: OSError) -> str:
    """An OS error as a reader wants it: ``strerror`` ("No space left on device"), and for
    ``shutil.copytree``'s ``shutil.Error`` (a list of (source, destination, reason) for every file
    that failed, ~2 KB printed as a Python list) the first file's reason and how many failed."""
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list) and error.args[0]:
        failures = error.args[0]
        first = failures[0]
        why = str(first[2]) if isinstance(first, tuple) and len(first) == 3 else str(first)
        match = re.match(r"\[Errno \d+\] ([^:]+)", why)
        return (match.group(1) if match else why[:200]) + (f" ({len(failures)} files failed)" if len(failures) > 1 else "")
    return error.strerror or str(error)
