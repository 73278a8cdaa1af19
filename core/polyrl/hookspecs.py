"""The backend contract: everything a polyrl plugin author needs to read.

A plugin is a module (or object) with functions marked ``@hookimpl`` whose names match the specs
below; it is found through an entry point in group ``polyrl.backends`` (or ``polyrl.rewards``,
``polyrl.trackers``, ``polyrl.environments``)::

    # pyproject.toml of your distribution
    [build-system]
    requires = ["setuptools>=68", "wheel"]   # without wheel, `pip install -e .` fails on older
    build-backend = "setuptools.build_meta"  # setuptools ("invalid command 'bdist_wheel'")

    [project.entry-points."polyrl.backends"]
    mybackend = "my_package.plugin"

    # my_package/plugin.py
    from polyrl.hookspecs import hookimpl
    from polyrl.types import BackendSpec, Capabilities

    @hookimpl
    def polyrl_register_backends(register):
        register(BackendSpec(name="mine", load=MyEngine.load,
                             capabilities=Capabilities(generate=True, logprobs=True),
                             probe=lambda: None if have_device() else "no device"))

    @hookimpl
    def generate(engine, prompts, sampling):
        return [...]             # list[Completion]

A complete installable example (pyproject, hooks, conformance tests): ``examples/backend_plugin/``.

How dispatch works
    The compute hooks (``generate``, ``generation_phase``, ``logprobs``, ``train_step``,
    ``encode_chat``, ``all_gather``, weight and checkpoint hooks) are answered only by the plugin
    that registered the engine's backend: another plugin is never asked, so it can neither hijack
    nor break your engines, and a hook you do not implement is reported as yours ("its plugin
    does not implement it"). To change one hook of another backend, register a backend of your
    own name. ``reward`` is the exception: every reward plugin answers, and the core combines the
    answers with the configured weights. ``polyrl_resolve_model`` asks each plugin in turn; one
    that raises, or returns something other than an existing path or None, is named in the error.

What None means
    Most specs below are pluggy ``firstresult`` hooks, where None usually means "not mine, ask the
    next plugin". That holds only for ``polyrl_resolve_model`` and ``polyrl_convert_model``
    (every plugin is asked in turn). A compute hook is asked of your plugin alone, so None is your
    answer, and an error unless the hook's own text below gives it a meaning: ``generation_phase``
    (hold nothing), ``logprobs`` with ``reference=True`` (this engine keeps no initial weights),
    ``encode_chat`` (no tokenizer), ``all_gather`` (running alone). A ``generate``, ``logprobs``
    or ``train_step`` that returns None is reported as having "returned None" (with the type
    expected), naming backend and distribution; a weight or checkpoint hook's None (or False)
    as "this backend cannot ...". Not implementing a hook is reported as "its plugin does not
    implement it". ``reward`` answers None for "none of the wanted names are mine", and a None
    *score* inside its answer leaves that sample unscored.

Plugin names and collisions (the same name registered twice; all four kinds, as the code does it)
    * Backends: two distributions registering one backend name make that name unusable, for
      both, with an error naming both distributions (never "last one wins"); polyrl's own
      ``torch``/``mlx``/``max`` are no exception: a plugin registering ``torch`` makes ``torch``
      unusable until one of them is uninstalled or disabled (``POLYRL_DISABLE_PLUGINS``).
    * Environments and tools: the same rule: the name is unusable for both (``polyrl
      environments`` says so, and a run naming it is a ``ConfigError``), built-ins included.
    * Trackers: the first registration keeps the name, and polyrl's own (``tensorboard``,
      ``wandb``, ``mlflow``, ``trackio``) register first, so they are never replaced; a later
      registration of a taken name is ignored and listed as a load error naming both.
    * Rewards: a plugin may register a name polyrl's own distributions register (``polyrl``,
      ``polyrl-torch``, ``polyrl-mlx``, ``polyrl-max``) when it registers after them: its reward
      scores instead, and a run using the name logs a warning naming both. Two third-party
      distributions registering one name (or a third-party one registered before polyrl's) make
      every run naming it a ``ConfigError`` naming both, and ``polyrl rewards`` lists the clash.
      A run's own Python reward (``[[rewards]] function = "module:name"``) is never a clash: the
      run asked for it.
    One plugin registering a name twice keeps its last registration. Pick names unlikely to
    clash (your package's name as a prefix).

What the core does with a faulty plugin
    * An ``@hookimpl`` whose name is no hook here (a misspelling) drops that whole plugin: it is
      listed by ``polyrl backends``/``polyrl doctor`` with its entry point and the fix, and
      every other plugin keeps working. So does a plugin that fails to import.
    * A register hook that raises (or outlasts ``POLYRL_PLUGIN_TIMEOUT_S``) is a load error
      naming the plugin, its distribution and what it raised, in ``polyrl backends``, ``rewards``,
      ``trackers`` and ``environments`` (text and ``--json``); the other plugins keep working.
      A hook that raises registers nothing, not even what it passed to ``register`` before
      raising: no half-installed plugin. So does one handing ``register`` a spec with a wrong
      field (a ``name`` that is no non-empty string, ``capabilities`` that is no
      ``Capabilities``, a ``summary`` that is no string, a ``load``/``create``/``probe`` that is
      not callable): a load error naming the field. And so does one returning anything but None
      (``return [BackendSpec(...)]``: what a register hook returns is not read).
    * An entry point whose object implements no hook (the package ``mypkg`` where the hooks are
      in ``mypkg.plugin``, or ``None``) is a load error saying so, not a plugin adding nothing.
    * A ``probe`` (of a backend, tracker, environment or tool) returns None when usable here or a
      non-empty reason string when not. One that raises, outlasts ``POLYRL_PLUGIN_TIMEOUT_S``,
      or answers anything else (``42``, ``False``, ``""``) makes that entry unusable, with the
      reason ("probe returned int, expected None or a reason string"); the others are unaffected.
    * A name registered twice: see "Plugin names and collisions" above.
    * Under a launcher (``WORLD_SIZE`` > 1) only a backend declaring
      ``Capabilities.data_parallel`` may train; the others are refused before any work.

Answers to what an author would otherwise guess
    * Errors: raise ``polyrl.errors.ConfigError(message, field=..., fix=...)`` for anything the
      user can fix (``field`` is the dotted config key, e.g. ``"model.max_length"``); it is shown
      as one ``error:`` line. Any other exception, from a hook or from ``BackendSpec.load``, is
      reported as your plugin's fault (``PluginError`` naming backend, distribution and hook):
      ``SystemExit`` (``sys.exit()`` in a compute hook) included, which becomes a ``PluginError``
      and never ends the run with your exit code. So is a hook returning None where None has no
      meaning (reported as "returned None", see "What None means"), and an answer of the wrong
      type, shape or value, checked on every call:

      - ``generate``: each ``Completion``'s ``logprobs`` one finite float <= 0 per token of
        ``completion_ids`` (1-D), and its ``completion_ids`` within the model's vocabulary
        (``0 <= id < vocab_size``), besides the count and ``prompt_index`` order of completions;
        token ids are integers of any integer dtype (or integral floats: 3.0 is 3), and building a
        ``Completion``/``TokenSequence``/``TokenPrompt`` with a fraction (3.7), NaN, infinity, bools
        or text as ids raises ``ValueError`` (never rounded to an id the model did not sample);
      - ``logprobs``: one finite float <= 0 per completion token for each sequence;
      - ``train_step``: a ``StepMetrics`` whose fields are numbers; a non-finite ``loss`` with
        ``skipped=False`` is an error (return ``skipped=True`` and leave the weights untouched);
      - ``encode_chat``: 1-D int ids; ``export_weights``: a dict.
    * A hook your ``Capabilities`` declares must be implemented by your plugin (``generate``,
      ``logprobs``, ``train_step``, ``export_weights``/``import_weights``, ``save_checkpoint``
      with ``load_checkpoint`` for ``checkpoint``, ``all_gather`` for ``data_parallel``); the
      conformance kit checks it, else the run fails when it first calls the hook.
    * Temperature 0 means greedy (argmax); the log-probs returned are then under the plain
      ``softmax(logits)``, i.e. temperature 1. ``top_k``/``top_p`` filter what is sampled, not
      the log-probs returned.
    * An EOS token that ends a completion is part of ``completion_ids`` (with its log-prob):
      training must see the decision to stop. ``finish_reason`` is then "stop".
    * ``text`` is the decoded ``completion_ids`` and keeps the stop string that ended it (the
      last token is the one that completed it); the core trims nothing.
    * ``EngineConfig.max_length`` caps prompt + completion tokens: the completion gets
      ``min(max_new_tokens, max_length - len(prompt_ids))`` tokens, and a prompt of
      ``max_length`` tokens or more is a ``ConfigError`` on ``model.max_length``.
    * ``EngineConfig.device`` defaults to ``"auto"``: run on your accelerator when this machine
      has one your library can use, else on the CPU; a named device you cannot use is a
      ``ConfigError`` on ``device`` with the fix. Expose the resolved one as ``engine.device``
      (``polyrl bench`` reads it to compare each side against the peak of the same device).
      Declare the names your engine reads in ``Capabilities.device_names`` (``"npu"`` for the
      name alone, ``"npu:N"`` for ``npu:0``, ``npu:1``...; ``"auto"`` is always read, and case
      does not matter: a run hands your engine the name lower-cased): a run naming another is refused
      before any engine loads, ``polyrl launch --dry-run`` included, naming ``model.device``, your
      backend and your names. Undeclared (None, the default), the core checks no name for your
      backend and your engine decides when it loads. ``Capabilities.devices`` is another thing:
      the devices this machine has for you.
    * ``EngineConfig.threads`` is the number of CPU threads your compute may use in this
      process (e.g. ``torch.set_num_threads``); None leaves the library's default. Per-thread
      settings must be applied inside each call (see ``generate``).
    * ``optimizer`` is AdamW as ``OptimizerConfig`` describes it (global-norm clipping by
      ``max_grad_norm``, None for none); ``StepMetrics.grad_norm`` is the norm before clipping.

Rules every backend follows (the conformance kit in ``polyrl.testing`` checks them)
    * Token ids and log-probs come from the generator itself; text is for humans only.
    * ``generate`` log-probs are under ``softmax(logits / temperature)`` before the sampling-only
      processors (repetition penalty, top-k, top-p, min-p); ``logprobs``/``train_step`` with the
      same temperature reproduce them (within float error). The token is drawn from the
      processed distribution. ``min_p``/``repetition_penalty``/``ignore_eos`` are optional
      features: declare them in ``Capabilities.sampling`` and honour them, or leave them out and
      refuse them (the core refuses a run asking a backend for an undeclared one before anything
      loads; ``polyrl.backend_features.refuse_unsupported_sampling`` inside ``generate``).
    * ``train_step`` sets the learning rate for each update from ``polyrl.schedules.lr_at`` and
      the optimizer's own count of applied updates (so a resumed run continues the schedule
      exactly), reports it as ``StepMetrics.extra["lr"]``, and honours
      ``EngineConfig.gradient_checkpointing`` when ``Capabilities.gradient_checkpointing``.
    * ``EngineConfig.compute_dtype`` (mixed precision: compute in it, keep weights and optimizer
      state in ``dtype``) only reaches a backend listing it in ``Capabilities.compute_dtypes``;
      its log-probs then agree with a ``dtype`` run to that precision only.
    * ``train_step`` loss equals ``polyrl.algorithms.reference.policy_loss`` on the same inputs,
      for every objective, and its gradient is that loss's (``policy_loss_grad`` chained through
      your log-probs); one call is one optimizer step (micro-batches accumulate inside and
      change nothing but memory); a non-finite step returns ``skipped=True`` and leaves weights
      and optimizer state untouched.
    * The loss aggregation divides by ``TrainBatch.loss_counts`` (``normaliser_sequences`` /
      ``normaliser_tokens``, None = the batch's own counts), not by the rows it holds: the
      trainer leaves out rows TRL keeps with nothing to train (truncated; unscorable without a KL
      term in the loss, with one they come at advantage 0) yet counts
      them there, as the reference's ``num_sequences``/``num_tokens`` do; metrics stay means over
      the tokens trained on. Under a launcher sum them over ranks, as ``len(sequences)``. The
      token count may be fractional and below the batch's own (a mini-batch's share of its
      step's tokens): divide by it as a float, never ``int()`` it. The
      ``TrainBatch`` docstring says exactly what they count.
    * Checkpoints resume exactly: after ``load_checkpoint`` the next step equals the one the
      saving engine would take (weights *and* optimizer state).
    * Weights cross backends as HF-named numpy arrays (``export_weights``/``import_weights``).
    * Declare the model architectures you run in ``Capabilities.architectures``: a dict from
      the HF ``config.json`` ``model_type`` (``"llama"``, ``"qwen2"``, ``"qwen3"``,
      ``"gemma3_text"``, ``"mistral"``, ``"phi3"``...) to ``ArchSupport(generate=, train=,
      fast_path=, logprob_deviation=, notes=)``. A declared table is exhaustive: the core refuses
      a run whose model_type is missing (or lacks the role) before loading anything, with an
      ``error:`` naming backend and architecture; a ``"*"`` key stands for every model_type
      not named (e.g. "anything transformers loads", untested). ``logprob_deviation`` is the measured max
      |log-prob - torch float32| when it exceeds float error (tests/test_architectures.py
      measures it). Leave it empty to opt out of the check.
    * Weight names are the HF checkpoint's (``model.layers.0.self_attn.q_proj.weight``...).
      Tied-embedding models (``tie_word_embeddings``) export no ``lm_head.weight``; importers
      accept the tied table with or without it (when present it equals the embedding).
    * Never import another backend; never import anything heavy at module import time if it
      can fail: do it in ``load`` and report problems through the ``probe``.

Multi-turn episodes (agents, tools, environments)
    An episode is one token sequence: the first prompt, then segments the model sampled (its own
    ids and log-probs, trained) and segments the core inserted (chat-template glue between turns,
    tool results, observations; never trained). Three things make that exact, and each backend
    that trains or generates for episodes provides them:

    * ``generate`` accepts ``polyrl.types.TokenPrompt``: token ids used verbatim (no template, no
      BOS added); ``prompt_ids`` of the completion is exactly those ids. Turn k+1 continues from
      the ids of turn k, so a sampled token is never decoded and re-encoded.
    * ``logprobs`` and ``train_step`` honour ``TokenSequence.mask``: one log-prob per completion
      token as always, and a loss that sees only the True tokens, equal to
      ``policy_loss(..., masks=batch.masks)`` of the numpy reference.
    * ``encode_chat`` renders messages with the model's chat template (``tools=`` included) and
      tokenizes them; the core builds the inserted segments from differences of such renderings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # pragma: no cover - for readers and type checkers only
    import numpy as np

    from polyrl.algorithms.objective import Objective
    from polyrl.types import (
        BackendSpec,
        Completion,
        NamedWeights,
        Prompt,
        RewardContext,
        RewardSpec,
        SamplingParams,
        StepMetrics,
        TokenSequence,
        TrainBatch,
    )
    from polyrl.agents.spec import EnvironmentSpec, ToolSpec
    from polyrl.tracking.spec import TrackerSpec

PROJECT_NAME = "polyrl"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --- discovery ----------------------------------------------------------------------------------


@hookspec
def polyrl_register_backends(register: Callable[[BackendSpec], None]) -> None:
    """Announce each backend this plugin offers by calling ``register(BackendSpec(...))``.

    Called once when the registry loads. Keep it cheap: no model loading, no heavy imports;
    availability is answered by ``BackendSpec.probe``: None when usable here, a non-empty reason
    string when not (anything else marks the backend unusable with "probe returned <type>").
    A plugin's import, its register hooks and its probes each run under a time limit
    (``POLYRL_PLUGIN_TIMEOUT_S``, default 120 s, ``polyrl.plugin_calls``): past it the plugin is
    listed as not loaded or unusable, and every command goes on without it.
    """


@hookspec
def polyrl_register_rewards(register: Callable[[RewardSpec], None]) -> None:
    """Announce the reward names this plugin computes in ``reward`` by calling
    ``register(RewardSpec(name=..., summary=...))`` (``polyrl rewards`` lists them; a run's
    ``[[rewards]] name`` must be one of them, checked before any model loads).

    Found through entry-point group ``polyrl.rewards``. Each ``RewardSpec.name`` is a key your
    ``reward`` hook returns, scores included, for every completion, when that name is in
    ``context.wanted``; ``reward`` returns None (or leaves the name out) for names it does not
    register, since every reward plugin is asked on every call. A register hook that raises is
    listed as a load error and its names are unknown to runs ("plugins that failed: ..." in the
    error). Registering a name polyrl's own distributions register replaces theirs, with a
    warning when a run uses it; two third-party distributions registering one name make a run
    naming it an error (see "Plugin names and collisions" at the top of this module). Rewards with
    options may define ``check_options`` (see ``reward``).
    """


@hookspec
def polyrl_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    """Announce experiment trackers by calling ``register(TrackerSpec(name=..., create=...))``.

    Found through entry-point group ``polyrl.trackers``; a run uses the ones its ``[logging]
    report_to`` names. ``create(TrackerContext)`` returns an object with ``log_metrics(metrics,
    step)``, ``log_completions(records, step)`` and ``close()`` (``polyrl.tracking.Tracker``);
    import the tracking library there, not at module import, and answer ``probe()`` with a reason
    string when it is missing (None when usable; anything else marks it unusable). ``create`` and every later call run on a thread of the tracker's
    own, in order, each within ``[logging] tracker_timeout_s``: a tracker that raises mid-run
    (``SystemExit`` included) or outlasts the limit is reported once and dropped; the run goes on.
    A name is the first registration's: registering a taken one (a built-in's) is a load error
    (see "Plugin names and collisions" at the top of this module).
    """


@hookspec
def polyrl_register_environments(register: Callable[[EnvironmentSpec], None]) -> None:
    """Announce multi-turn environments by calling ``register(EnvironmentSpec(name=..., create=...))``.

    Found through entry-point group ``polyrl.environments``; a run uses the one its ``[environment]
    name`` names. ``create(options)`` is called once per episode and returns an object with
    ``reset(row) -> list[message]`` (the first observation: the prompt messages, from the dataset
    row) and ``step(assistant_message) -> polyrl.agents.Observation(messages, reward, done)``,
    either of them may be ``async def`` (``polyrl.agents.Environment``). It may also list
    ``tools`` (plain or async functions, usually its bound methods) the model can call during the
    episode. A turn with tool calls is answered by the tools; a turn without is handed to ``step``.
    The episode's calls (``reset``, ``step``, its tools) run on a thread of its own, with one event
    loop for its async code, within ``[environment] env_timeout_s`` (``tool_timeout_s`` for a
    tool; an optional ``episode_over()``, called once after the rollout, on that same thread and
    loop within ``env_timeout_s``: what it raises is a warning, past the limit its episode fails). An environment that raises (``sys.exit``
    included), runs past that limit or answers with a malformed ``Observation`` ends that episode
    (reported in the run's metrics, ``episode/env_error_share``, and its ``info["env_error"]``),
    never the run. Such an episode is unscored, whether it failed in ``reset`` or in a later
    ``step``: no reward is asked about it (the built-in ``environment`` reward answers None for
    it), so it is out of the loss and out of its group's baseline, trained neither for nor against
    what the model did.
    To penalise a bad move, answer it with a reward (``Observation(reward=-1.0, done=True)``);
    raise only for your own failures. A step in which every episode failed is not trained, and a
    few such steps in a row stop the run naming the environment; so do 32 of its calls abandoned
    past the limit and still running (each holds a thread Python cannot stop). A ``tool`` message
    it answers reaches a template without a tool role as tool results do (one ``user`` message
    between ``<tool_response>`` tags). The episodes of one group
    get the same row: an environment that draws a task at random should seed it from the row (as
    the built-in ``guess_number`` does) so that the group's episodes are comparable. ``probe()``
    answers cheaply why it cannot run here (a missing package, as a non-empty string), or None;
    two distributions registering one name make it unusable until one is removed, a built-in's
    name included (``polyrl environments`` says so; "Plugin names and collisions" above).
    """


@hookspec
def polyrl_register_tools(register: Callable[[ToolSpec], None]) -> None:
    """Announce tools by calling ``register(ToolSpec(name=..., function=...))``.

    A tool is a plain Python function with type hints and a docstring (its JSON schema for the
    chat template's ``tools=`` comes from them); ``[environment] tools = [...]`` names the ones a
    run offers the model. Found through entry-point group ``polyrl.environments`` too. A tool that
    raises or runs past its timeout becomes an error message the model reads, never a crash.
    """


@hookspec(firstresult=True)
def polyrl_resolve_model(name: str) -> str | None:
    """Turn a model alias (e.g. ``"smollm2-135m-instruct"``) into a local path, or return None.

    Lets a plugin ship or build models (the embedded default) without the core knowing how.
    """


@hookspec(firstresult=True)
def polyrl_convert_model(src: str, dst: str, to: str, quantize_bits: int | None) -> str | None:
    """Convert the model at ``src`` into format ``to`` (e.g. "mlx", "hf") under ``dst``.

    Return the written path when this plugin handles ``to``, else None (``polyrl convert``).
    A source it cannot read is a ``ConfigError`` on ``src`` saying what it must be, a destination
    it cannot write one on ``dst`` (``polyrl.backend_kit.convert_paths``): anything else raised is
    reported as this plugin's fault. The core has refused a missing ``src`` and a ``dst`` that
    exists and is not an empty folder before asking.
    """


# --- compute --------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def generate(engine: Any, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion] | None:
    """Sample ``sampling.n`` completions for each prompt.

    Returns ``len(prompts) * n`` completions grouped by prompt (all of prompt 0 first), each with
    ``prompt_index``, the prompt's token ids as the model saw them (chat template applied for
    chat prompts), the sampled token ids, the sampler's per-token log-probs, the decoded text and
    the finish reason ("stop" for EOS or a stop string, "length" for ``max_new_tokens``). A stop
    string ends the completion after the token that completed it. ``seed`` makes it repeatable.
    The core checks each answer: one finite log-prob <= 0 per sampled token, every id an integer
    within the model's vocabulary; anything else is a ``PluginError`` naming this hook, not a later
    failure.

    A backend whose ``Capabilities.concurrent_generate`` is True may be called on a worker thread
    while another engine trains (``generation.overlap``): settings that are per thread (an OpenMP
    team size, a default stream) must be applied inside the call.
    """


@hookspec(firstresult=True)
def generation_phase(engine: Any) -> AbstractContextManager[None] | None:
    """A context the core holds around all ``generate`` calls of one rollout (a step's, every turn
    of its episodes included, or one evaluation pass); optional: None holds nothing.

    Under a launcher every rank enters it exactly once per rollout, while the number of
    ``generate`` calls inside differs by rank: an episode may end after one turn on one rank and
    after four on another, and a rank may have no prompt at all. A backend whose ``generate`` needs
    collectives (gathering sharded weights) runs them on entering and leaving, never per call.

    Return a fresh context on each call (one ``@contextlib.contextmanager`` object is spent after
    one ``with``). ``generate`` samples the same inside as outside (evaluation and direct calls
    hold no phase), and leaving restores what entering changed. An exception raised inside (a
    failed rollout) propagates whatever ``__exit__`` answers; one raised by ``__enter__`` or
    ``__exit__`` is reported as your plugin's fault. The conformance kit checks all of this.
    """


@hookspec(firstresult=True)
def logprobs(
    engine: Any, sequences: Sequence[TokenSequence], temperature: float, reference: bool
) -> list[np.ndarray] | None:
    """Log-probs of each completion token given its prompt, one float32 array per sequence.

    ``reference=True`` asks for the frozen initial policy (e.g. a LoRA engine with adapters
    disabled), which must not move when ``train_step`` does. Return None for it unless the engine
    keeps those initial weights: the core asks once at load, and an answer makes this engine the
    KL term's reference for the whole run (the current policy there would make the KL 0). On None
    the core loads a separate reference engine. The conformance kit checks it after an update.
    Each array must hold one finite log-prob <= 0 per completion token, checked on every call.
    """


@hookspec(firstresult=True)
def entropies(engine: Any, sequences: Sequence[TokenSequence], temperature: float) -> list[np.ndarray] | None:
    """Optional: the entropy (nats) of the current policy's next-token distribution at each
    completion position, at ``temperature``, one float32 array per sequence: what ``train_step``'s
    ``entropy`` metric averages. Why: the eval loss with an entropy bonus needs them
    (``eval/entropy``, and ``eval/loss`` with the bonus); a backend without this hook (None) gets
    ``eval/policy_loss`` alone there. The core asks it of the train engine only (``train_step``
    computes its own entropies for the loss), so a backend that does not train has no use for it.
    Each array holds one finite value >= 0 per completion token, checked on every call; the
    conformance kit also checks each is <= log(vocab) and equals the entropy of the distribution
    your ``logprobs`` give over every next token.
    """


@hookspec(firstresult=True)
def train_step(engine: Any, batch: TrainBatch, objective: Objective) -> StepMetrics | None:
    """Take one optimizer step on ``batch`` under ``objective``; return its metrics.

    The loss must equal ``polyrl.algorithms.reference.policy_loss(...)`` on the same inputs
    (loss aggregation over the *whole* batch even when micro-batching, divided by
    ``batch.loss_counts``: ``num_sequences``/``num_tokens`` of the reference), including
    ``batch.sampler_logprobs`` when the objective corrects the sampler-trainer mismatch. Report the
    reference's ``clip_low_fraction``/``clip_high_fraction``, ``clip_low_min``/``clip_high_max``
    (each sequence's clipped shares, their extremes over every rank's sequences: TRL's
    ``clip_ratio/low_min`` and ``high_max``, left out of the step when absent) and ``mismatch_*`` metrics (and
    ``entropy`` when the loss sees token entropies; with ``entropy_coef`` > 0 ``policy_loss``, TRL's
    loss without the entropy bonus and the router term) in ``StepMetrics.extra``. With sampler log-probs
    those are ``reference.mismatch_metrics``' keys: the means over the tokens, abs/kl/over over the
    ones the sampler scored (a NaN sampler log-prob is counted in ``mismatch_unscored`` and left out
    of the gap, never turned into a NaN metric), ``mismatch_abs_max`` and, with a correction on,
    ``mismatch_ratio_min``/``_mean``/``_max`` over every rank's tokens (or sequences): the core logs
    them. For TRL's ``sampling/...`` keys (per-process values, then their mean: ``step_metrics.trl_process_sampling``)
    also report this rank's own gap before any sum over ranks, ``backend_kit.gap_metrics.rank_gap``'s
    ``RANK_KEYS`` (without them TRL's keys alias the global ones); an objective the backend cannot compute (e.g. ``entropy_coef`` without
    entropies) must raise, never be silently ignored. A Mixture-of-Experts model's router
    load-balancing term (``objective.router_aux_loss_coef``, resolved by ``backend_kit.router_aux``)
    comes on top of the reference's loss, reported as ``aux_loss`` in ``StepMetrics.extra``; a backend
    without it calls ``refuse_router_aux``, and one with it for some model types only declares them
    (``Capabilities.router_aux_types``) so the core refuses the others before a model loads. Where the
    term is on, a batch may hold rows with no completion token (``polyrl.router_rows``: a completion cut
    under ``mask_truncated_completions``, its prompt alone): they carry no policy, KL or entropy token, their
    prompt counts in the router term of their micro-batch, and a batch of such rows alone still trains the
    term (it is no empty step). A non-finite loss or gradient must not touch
    the weights: return ``StepMetrics(..., skipped=True)``; a non-finite ``loss`` reported with
    ``skipped=False`` is a ``PluginError`` (the core would believe the weights were updated).
    """


@hookspec(firstresult=True)
def encode_chat(
    engine: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
    add_generation_prompt: bool,
) -> np.ndarray | None:
    """``messages`` rendered with the model's chat template and tokenized: int64 token ids.

    Exactly what ``generate`` does to a chat prompt (same template, same special tokens, no BOS
    beyond what the template writes), with ``tools`` (JSON schemas, as transformers'
    ``apply_chat_template(tools=...)``) passed to the template, and
    ``EngineConfig.chat_template_kwargs`` (``model.chat_template_kwargs``: ``enable_thinking``...)
    as template variables, here and in ``generate``'s rendering of a chat prompt alike
    (``encode_chat_literal(template_kwargs=...)``). The core asks the generate engine first and the
    train engine when the generate backend has no tokenizer (a remote server); the startup checks
    (every chat prompt below ``model.max_length``, in roles the template renders) ask it too when
    the engine object has no ``encode_prompt`` method (``polyrl.hook_prompts``).
    Only the template's own markers are markers (its special tokens, and the added tokens it writes
    around messages that the vocabulary does not mark special: ``backend_kit.turn_markers``): a
    message's text (a tool result, an observation) spelling ``<|im_end|>`` is encoded as those
    characters, so it cannot end its turn and forge the next (``polyrl.backend_kit.literal_chat.encode_chat_literal`` does both, for an
    HF tokenizer). ``generate`` renders a chat prompt the same way. Return the ids as a 1-D int
    array or list (not a tokenizer's ``BatchEncoding``); None when this engine has no tokenizer.
    The conformance kit checks both renderings against the model's declared special tokens.
    """


# --- weights and state ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def export_weights(engine: Any) -> NamedWeights | None:
    """The policy's full weights as HF-named numpy arrays (LoRA merged), for syncing to another
    engine (trainer -> generator) or another backend."""


@hookspec(firstresult=True)
def import_weights(engine: Any, weights: NamedWeights) -> bool | None:
    """Replace the engine's weights with ``weights`` (HF names); return True when done.

    Generation must never run concurrently with an import."""


@hookspec(firstresult=True)
def save_checkpoint(engine: Any, path: str, state_path: str | None) -> bool | None:
    """Write the policy as a shippable model under ``path`` and the rest under ``state_path``.

    ``path`` gets a plain HF folder (config, tokenizer with its chat template, merged
    ``model.safetensors``; for LoRA also the adapter in ``path/adapter/``): the user ships it, so
    it must never hold optimizer state. ``state_path`` (a sibling folder) gets what exact
    resumption needs besides: optimizer state, RNG state, LoRA base weights. ``state_path`` None
    (a direct engine call) means "inside ``path``".

    The core makes the checkpoint atomic and checksummed (temp dir, fsync, manifest, rename). Under
    a multi-process launcher every rank calls it at the same point (a backend that shards weights
    gathers them here); only rank 0's folders are kept, the others get scratch folders that are
    deleted afterwards, so a backend may skip writing on ranks other than 0."""


@hookspec(firstresult=True)
def load_checkpoint(engine: Any, path: str, state_path: str | None, weights_only: bool) -> bool | None:
    """Restore what ``save_checkpoint`` wrote so a resumed run continues exactly.

    A piece exact resumption needs (optimizer or RNG state) that is missing is an error (raise
    ``polyrl.errors.ConfigError`` naming it), unless ``weights_only``: then load the weights alone
    and leave optimizer and RNG fresh. Hyper-parameters (learning rate, betas, weight decay) come
    from the engine's current config, not from the saved optimizer state: a resumed run may change
    them on purpose. A damaged file is one ``ConfigError(field="--resume")`` naming it
    (``polyrl.backend_kit.engine_state`` has the checks); what can be told from the files alone
    (presence, sizes, headers) goes in the optional ``BackendSpec.check_checkpoint``, which the
    trainer calls before any model loads."""


# --- data parallelism ----------------------------------------------------------------------------


@hookspec(firstresult=True)
def all_gather(engine: Any, value: Any) -> list[Any] | None:
    """Under a multi-process launcher (``torchrun``): ``value`` from every rank, in rank order.

    The trainer shards each step's prompts over the ranks (``RANK``/``WORLD_SIZE`` from the
    environment) and gathers the shaped rewards with this hook, so advantages and reward metrics
    are computed on the global batch. A backend that trains data-parallel implements it (the torch
    backend with ``torch.distributed``), normalises its loss by the global batch in
    ``train_step`` and declares ``Capabilities.data_parallel``; return None when this process
    runs alone (None under ``WORLD_SIZE`` > 1 is an error naming the backend).
    """


# --- rewards ------------------------------------------------------------------------------------


@hookspec
def reward(
    prompts: Sequence[Prompt], completions: Sequence[Completion], context: RewardContext
) -> Mapping[str, Sequence[float | None]] | None:
    """Score completions. Every reward plugin answers.

    Return ``{name: scores}`` for each name in ``context.wanted`` that this plugin provides (one
    score per completion: numbers or bools, read as 1.0 / 0.0; None skips a sample, and so does NaN, as
    TRL reads it, with one warning per reward; inf is an error), or None when it provides
    none of them. ``prompts``
    is aligned with ``completions`` (one entry per completion); ``context.rows[i]`` holds the
    dataset columns of sample ``i``. Return ``polyrl.types.RewardScores(scores, metrics={...})``
    instead of a list to add per-reward metrics (logged as ``reward/<name>/<metric>``).

    A reward plugin may also define ``check_options(name, options)``, called once when the run is
    set up for each configured reward it provides: raise ``RewardError("... . Fix: ...")`` for bad
    options, so the user hears of them before any model loads, not after the first rollout. One
    that also takes a ``columns`` argument gets the dataset's column names (None when unknown), to
    check options that name columns (the LLM judge's rubric placeholders).

    A reward plugin whose work is I/O bound may also define ``is_async = True`` and a coroutine
    ``await_reward(prompts, completions, context)`` answering like ``reward``: the core then
    awaits it concurrently with the other async rewards of the step.

    A reward plugin whose call's work grows with the batch may define ``call_time_s(name,
    options, n)``: the most seconds a call scoring ``n`` completions can need (``code_tests``:
    every sample running to its own timeout). The call's limit is then the larger of that and the
    default (600 s), so a big batch of slow samples is not mistaken for a stuck reward; a
    ``[[rewards]] timeout_s`` the user sets is their cap, never raised (a warning names the need).

    The core calls this hook on a reward thread, not the main thread (so ``signal.alarm`` is not
    available: use the call's own timeouts), with a time limit per reward (``[[rewards]]
    timeout_s``) and a stop request honoured after a short grace: a call past either is abandoned
    and the run stops with a checkpoint. ``sys.exit``/``os._exit`` in the hook are reported as the
    reward's errors. ``context.trainer_state`` carries the run's progress (TRL's ``TrainerState``
    fields) during training. Plain Python reward functions are wrapped by
    ``polyrl.rewards.functions.FunctionReward``, which calls them exactly as TRL's GRPOTrainer does.
    """
