"""Combining reward plugins: validate names up front, call each plugin alone, weigh the answers.

``RewardComputer(pm, [(name, weight, options), ...])`` checks at construction that a plugin
provides every requested name (a typo fails before any model loads). An entry may end with a
``label`` (``(name, weight, options, label)``): scores and metrics are keyed by it, so one
registered reward can run twice with other options (two reward-model folders); each such entry
is its own call of the plugin. Each call then asks each
providing plugin's ``reward`` hook *individually* instead of through ``pm.hook.reward`` so that a
plugin that raises or answers garbage is named in the error, with its distribution.

Combination: ``total_i = sum_k weight_k * score_k,i`` over the rewards that scored sample ``i``;
a None score contributes nothing (a NaN score is read as None, as TRL reads it, with one warning
per reward; inf is an error); a sample that no reward scored gets ``NaN`` (the trainer drops it).
A plugin registering the name of one of polyrl's own rewards overrides it, with a warning naming both;
two third-party plugins registering one name is an error when a run uses it.

Async reward functions (``FunctionReward`` with an ``async def``) and async reward plugins (a
plugin with ``is_async = True`` and a coroutine ``await_reward``, e.g. the LLM judge and the code
sandbox) of one call run concurrently on one event loop, after the synchronous ones; each reward's
latency is the wall time of the call that produced it (a plugin computing several names reports
the same latency for each).

Every call runs on a reward thread (``polyrl.rewards.guard``) with a time limit per reward
(``timeouts``: a label's value is the user's cap; missing or None, ``DEFAULT_TIMEOUT_S``, raised
to what the batch needs when the plugin says so, ``call_time_s``) and gives up on a stop request (``should_stop``), so
a reward that hangs, calls ``sys.exit`` or ``os._exit`` becomes one ``RewardError`` naming it (or
``RewardCancelled`` on a stop) instead of a hung or silently ended trainer. A function reward whose
``isolation`` is ``"process"`` (``polyrl.rewards.isolation``; the default for math-verify rewards)
runs each call in a forked child instead (``polyrl.rewards.forked``), killed at the time limit or
the stop, and never joins the async rewards' event loop. Function rewards'
signatures are checked against the dataset's ``columns`` at construction, and so are the options of
each reward whose plugin defines ``check_options`` (given ``columns`` too when it takes them).

Metrics per reward: ``mean``/``std`` over the scored samples, ``latency_s``, ``none_count`` (samples
the reward skipped; logged), plus whatever the plugin reported through
``polyrl.types.RewardScores.metrics`` (e.g. ``cache_hit_rate``, ``failures``); the trainer logs
each as ``reward/<name>/<metric>``. ``RewardScores.extra`` columns (TRL's ``log_extra``) go to the
completions log. A sample no reward scored is a warning, as in TRL.
"""

from __future__ import annotations

import asyncio
import decimal
import functools
import inspect
import math
import numbers
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from polyrl.errors import ConfigError, PolyrlError, RewardError
from polyrl.logs import get_logger
from polyrl.plugin_calls import shown
from polyrl.plugin_specs import registered_by
from polyrl.plugins import FIRST_PARTY_DISTRIBUTIONS, PolyrlPluginManager
from polyrl.rewards import forked, guard
from polyrl.rewards.own_copies import own_inputs
from polyrl.safe_stats import mean_std
from polyrl.rewards.functions import FunctionReward, run_coroutine
from polyrl.rewards.trl_compat import NotScores, not_scores
from polyrl.types import Completion, Prompt, RewardContext, RewardSpec
from polyrl.validators import MAX_REWARD_WEIGHT, fits_float
from polyrl.validators import shown as shown_value

RewardRequest = tuple[str, float, Mapping[str, Any]] | tuple[str, float, Mapping[str, Any], str]

log = get_logger("polyrl.rewards")

#: Metrics the core computes for every reward; a plugin's own metrics never replace these.
CORE_METRICS = ("mean", "std", "latency_s", "none_count")

#: Seconds one reward call may take unless configured otherwise (``[[rewards]] timeout_s``):
#: generous, because a judge or a test sandbox scores a whole step's completions in one call.
DEFAULT_TIMEOUT_S = 600.0


@attrs.define
class RewardResult:
    """One call's scores: weighted totals, each reward's scores (NaN for None) and metrics."""

    total: np.ndarray
    per_reward: dict[str, np.ndarray]
    #: name -> mean, std, latency_s, none_count, plus the plugin's own (cache_hit_rate, failures...)
    metrics: dict[str, dict[str, float]]
    #: extra completions-log columns the rewards reported (TRL's ``log_extra``), one value per sample
    extra: dict[str, list[Any]] = attrs.field(factory=dict)
    #: name -> metric -> how many values that metric is the mean of (``RewardScores.metric_counts``:
    #: a TRL reward's ``log_metric`` calls), for pooling the ranks' means as TRL does
    metric_counts: dict[str, dict[str, int]] = attrs.field(factory=dict)


@attrs.define
class _Provider:
    plugin: Any
    function: Any  # the plugin's ``reward`` hook implementation
    distribution: str
    names: list[str] = attrs.field(factory=list)  # the registered names the plugin is asked for
    labels: list[str] = attrs.field(factory=list)  # what the config calls each (scores' keys)


#: What a score may be besides None and bools: any real number TRL's ``torch.tensor(scores,
#: dtype=float32)`` reads through ``float()`` (a ``Decimal`` or ``Fraction`` of a reward computing
#: exactly trains under TRL; here it was refused as "not a number"). numpy registers its own.
_NUMBERS = (numbers.Real, decimal.Decimal, np.integer, np.floating)


def _is_nan(value: Any) -> bool:
    """A NaN of a real number (Python's, numpy's, a ``Decimal``'s; a 0-d or 1-d tensor's items arrive as Python floats). Why
    apart: TRL turns None into NaN and sums the functions with ``nansum``, so a function returning
    NaN for "not applicable" trains under TRL as if it had returned None."""
    if not isinstance(value, _NUMBERS) or isinstance(value, numbers.Integral):
        return False
    try:
        return math.isnan(float(value))
    except Exception:  # noqa: BLE001 - a float subclass whose __float__ raises anything: _kind names it
        return False


def _is_score(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, (bool, np.bool_)):
        return True
    if not isinstance(value, _NUMBERS):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int past float's range is as unusable as inf
        return False
    except Exception:  # noqa: BLE001 - a number subclass whose __float__ raises anything: was a traceback
        return False


def _kind(value: Any) -> str:
    """What an error line adds after a value that is no score: its type where that is the problem."""
    if isinstance(value, numbers.Number) and not isinstance(value, _NUMBERS):
        return f" (a {type(value).__name__}, not a real number)"
    if not isinstance(value, _NUMBERS):
        return f" (a {type(value).__name__}, not a number)"
    try:
        float(value)
    except OverflowError:
        return ""
    except Exception as exc:  # noqa: BLE001 - whatever a number subclass's __float__ raises
        return f" (a {type(value).__name__} whose float() raised {type(exc).__name__}: {exc})"
    return ""


def _bool_among_numbers(scores: Sequence[Any]) -> tuple[tuple[int, Any], tuple[int, Any]] | None:
    """The first bool and the first number (index, value) of scores that mix them, else None. Such
    scores are read as TRL reads them (``torch.tensor(scores, dtype=float32)``: True is 1.0, False
    0.0), so a reward that trains under TRL trains here; the mix is still named once (a ``passed``
    flag returned where a score was meant reads as 1.0 without a word otherwise)."""
    first_bool = first_number = None
    for i, value in enumerate(scores):
        if value is None:
            continue
        if isinstance(value, (bool, np.bool_)):
            first_bool = first_bool or (i, value)
        else:
            first_number = first_number or (i, value)
        if first_bool is not None and first_number is not None:
            return first_bool, first_number
    return None


def _shown(value: Any, limit: int = 60) -> str:
    """A score as an error line quotes it: a huge int by its size (its repr may itself raise, past
    4300 digits), anything else cut to ``limit`` characters."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _takes_columns(check_options: Callable[..., Any]) -> bool:
    """Whether a plugin's ``check_options`` takes the dataset's ``columns`` (hookspecs: optional)."""
    try:
        parameters = inspect.signature(check_options).parameters
    except (TypeError, ValueError):  # no signature to read: call it the documented way
        return False
    return "columns" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _own_latency(scores: Any, call_latency: float) -> float:
    """A reward's seconds: its own ``latency_s`` when the plugin timed it (one call answering
    several rewards, as the built-ins', gave each the whole call's time, so a slow one could not
    be told apart), else the call's."""
    own = getattr(scores, "metrics", {}).get("latency_s") if isinstance(getattr(scores, "metrics", None), Mapping) \
        else None
    if isinstance(own, (int, float)) and not isinstance(own, bool) and math.isfinite(own) and 0 <= own <= call_latency:
        return float(own)
    return float(call_latency)


class RewardComputer:
    """Scores completions with the configured rewards; see the module docstring."""

    def __init__(self, pm: PolyrlPluginManager, rewards: Sequence[RewardRequest], *,
                 columns: Collection[str] | None = None, timeouts: Mapping[str, float | None] | None = None,
                 should_stop: Callable[[], bool] | None = None, evaluation: bool = False) -> None:
        if not rewards:
            raise ConfigError("no reward configured", field="rewards",
                              fix='add a [[rewards]] table, e.g. name = "numeric_match"')
        self.pm = pm
        #: (label, weight, options) per entry, and the registered reward each label names
        self.rewards: list[tuple[str, float, dict[str, Any]]] = []
        self._registered: dict[str, str] = {}
        seen: set[str] = set()
        for i, entry in enumerate(rewards):
            name, weight, options = entry[:3]
            label = entry[3] if len(entry) > 3 else name
            if label in seen:
                raise ConfigError(f"reward {label!r} is configured twice", field=f"rewards[{i}]",
                                  fix="merge the entries, give function rewards distinct names, or give one "
                                      'entry a distinct label (label = "...")')
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not fits_float(weight) or \
                    abs(weight) > MAX_REWARD_WEIGHT:  # past it, weight x score overflows float64 (validators)
                raise ConfigError(f"weight of reward {label!r} must be a finite number within "
                                  f"±{MAX_REWARD_WEIGHT:g}, got {shown_value(weight)}", field=f"rewards[{i}].weight")
            seen.add(label)
            self._registered[label] = name
            self.rewards.append((label, float(weight), dict(options or {})))
        self.specs, self._owner, errors = self._discover()
        self._providers = self._providers_for(errors)
        given = {name: limit for name, limit in (timeouts or {}).items() if limit is not None}
        #: labels whose timeout the user set: their cap, never raised (``_timeout``)
        self.capped = {name for name in self.names if name in given}
        self.timeouts = {name: float(given.get(name, DEFAULT_TIMEOUT_S)) for name in self.names}
        for name, limit in self.timeouts.items():
            if not limit > 0:
                raise ConfigError(f"timeout of reward {name!r} must be > 0 seconds, got {limit!r}",
                                  field="rewards.timeout_s", fix="e.g. timeout_s = 600")
        self._raised_limits: set[str] = set()  # rewards whose call limit a batch raised, or would (logged once)
        self._warned_mixed: set[str] = set()  # rewards that returned bools among numbers (logged once)
        self._warned_nan: set[str] = set()  # rewards that returned NaN, read as None (logged once)
        self._warned_extra: set[str] = set()  # log_extra columns two rewards both logged (logged once)
        self._warned_core: set[tuple[str, str]] = set()  # (reward, metric) named as a CORE_METRICS one
        #: Polled while a reward runs; True abandons the call (the trainer's SIGINT/SIGTERM flag).
        self.should_stop: Callable[[], bool] = should_stop or (lambda: False)
        #: scores an evaluation's completions (its log lines say ``after_steps``), not a training step's
        self.evaluation = evaluation
        #: TRL's parse of a chat completion's token ids into one assistant message (its tokenizer's
        #: ``response_schema``: ``polyrl.trl_responses.response_parser``), set by ``polyrl.trl`` here
        #: only (the one owner: each reward function and reward model reads this parse);
        #: None: completions are handed over as their text (``_parsed``)
        self.parse_completion: Callable[[list[int]], dict[str, Any]] | None = None
        if columns is not None:
            for provider in self._providers:
                check = getattr(provider.plugin, "check_binding", None)
                if callable(check):
                    check(columns)
        for i, (label, _, options) in enumerate(self.rewards):
            name = self._registered[label]
            plugin = self._owner[name]
            check_options = getattr(plugin, "check_options", None)  # a plugin that checks up front
            if callable(check_options):
                try:
                    if _takes_columns(check_options):
                        check_options(name, options, columns=columns)
                    else:
                        check_options(name, options)
                except RewardError as exc:
                    problem, _, fix = str(exc).partition(". Fix: ")
                    raise ConfigError(problem, field=f"rewards[{i}].options", fix=fix or None) from None
                except Exception as exc:  # noqa: BLE001 - a bug in the plugin's check: name it, no traceback
                    raise ConfigError(f"reward {name!r} ({self.specs[name].distribution}): its check_options raised "
                                      f"{type(exc).__name__}: {exc}", field=f"rewards[{i}].options",
                                      fix="check the options against the reward's documentation, or report it "
                                          "to the plugin's authors") from None
            if options and callable(getattr(plugin, "check_binding", None)):  # a Python function
                raise ConfigError(
                    f"reward function {name!r} was given options ({', '.join(sorted(options))}), which a "
                    "function does not receive", field=f"rewards[{i}].options",
                    fix="remove the options table and set the values in the function (or a dataset column)")

    # --- discovery ---------------------------------------------------------------------------

    def _discover(self) -> tuple[dict[str, RewardSpec], dict[str, Any], list[str]]:
        """Every registered reward name -> (spec, providing plugin); registration errors (and
        plugins that failed to import). A name two plugins register is kept in ``_claims``."""
        specs: dict[str, RewardSpec] = {}
        owner: dict[str, Any] = {}
        errors: list[str] = [f"{e.name} ({e.distribution or 'unknown dist'}) failed to load: {e.error}"
                             for e in getattr(self.pm, "load_errors", ()) if e.group == "polyrl.rewards"]
        self._claims: dict[str, list[str]] = {}
        for impl in self.pm.hook.polyrl_register_rewards.get_hookimpls():
            dist = self.pm.distribution_of(impl.plugin)
            try:  # as the registry asks it: on a thread, time-limited, its specs checked
                found: list[RewardSpec] = registered_by(impl, "polyrl_register_rewards", RewardSpec, dist)
            except Exception as exc:  # noqa: BLE001 - reported if one of its names is needed
                errors.append(f"{impl.plugin_name} ({dist}) failed to register rewards: "
                              f"{type(shown(exc)).__name__}: {exc}")
                continue
            for spec in found:
                if not spec.distribution:
                    spec.distribution = dist
                if spec.name in owner and owner[spec.name] is not impl.plugin:
                    self._claims.setdefault(spec.name, [specs[spec.name].distribution]).append(spec.distribution)
                specs[spec.name] = spec
                owner[spec.name] = impl.plugin
        return specs, owner, errors

    def _check_claims(self, names: Sequence[str]) -> None:
        """A reward name two distributions register: a plugin overriding one of polyrl's own is
        a warning naming both (the later one scores); two third-party ones are an error, since
        which registers last follows the order entry points are found in, not the user."""
        for name in dict.fromkeys(names):
            dists = self._claims.get(name)
            if not dists or dists[-1].startswith("function "):  # the run's own Python function: asked for here
                continue
            if all(d in FIRST_PARTY_DISTRIBUTIONS for d in dists[:-1]):
                log.warning(f"reward {name!r} of {', '.join(dists[:-1])} is replaced by {dists[-1]}'s, which scores "
                            "this run", fix=f"to keep polyrl's, uninstall {dists[-1]} or disable its entry point "
                                            "with POLYRL_DISABLE_PLUGINS")
                continue
            raise ConfigError(f"reward name {name!r} is registered by {len(dists)} distributions: {', '.join(dists)}; "
                              "polyrl will not guess which one you meant", field="rewards",
                              fix="`pip uninstall` all but one of them, or disable the others' entry points with "
                                  "POLYRL_DISABLE_PLUGINS")

    def _providers_for(self, errors: list[str]) -> list[_Provider]:
        """One provider per plugin for its rewards, and one more per further label of a name it
        already serves (the plugin answers each name once per call)."""
        names = [self._registered[label] for label, _, _ in self.rewards]
        self._check_claims(names)
        unknown = [n for n in names if n not in self._owner]
        if unknown:
            known = ", ".join(sorted(self._owner)) or "none"
            broken = f" (plugins that failed: {'; '.join(errors)})" if errors else ""
            raise ConfigError(
                f"unknown reward {unknown[0]!r}; known rewards: {known}{broken}", field="rewards",
                fix="use a known name, install the plugin that provides it, or give "
                'function = "module:function" for a Python reward',
            )
        impls = {id(i.plugin): i for i in self.pm.hook.reward.get_hookimpls()}
        providers: list[_Provider] = []
        for (label, _, _), name in zip(self.rewards, names):
            plugin = self._owner[name]
            if id(plugin) not in impls:
                raise ConfigError(
                    f"the plugin registering reward {name!r} ({self.specs[name].distribution}) has no "
                    "`reward` hook", field="rewards", fix="report it to the plugin's authors",
                )
            provider = next((p for p in providers if p.plugin is plugin and name not in p.names), None)
            if provider is None:
                provider = _Provider(plugin, impls[id(plugin)].function,
                                     self.specs[name].distribution or "an unknown plugin")
                providers.append(provider)
            provider.names.append(name)
            provider.labels.append(label)
        return providers

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.rewards]

    # --- scoring -----------------------------------------------------------------------------

    def _parsed(self, prompts: Sequence[Prompt], completions: Sequence[Completion]) -> list[Completion]:
        """``completions`` with each chat one (a chat prompt's, not an episode's, which has its
        messages) holding ``parse_completion`` of its ids (``Completion.response_message``; not as
        its ``messages``, which polyrl's own rewards read as an episode's turns: length_penalty's
        "chars" counted the parsed ``content`` alone), parsed once per call for every reward
        function and reward model, as TRL's ``_generate`` parses it once and hands the same ``completions`` to every reward function and reward
        model. Why: a reward model scored the decoded text, ``<think>`` and tool-call markup in
        its ``content``, where TRL's renders ``prompt + [parsed message]`` with its chat
        template; each reward function parsed the ids again. A function reward still gets its
        own copy (``FunctionReward``), so one that edits it changes nothing another reads."""
        from polyrl.rewards.trl_compat import is_conversational

        parse = self.parse_completion
        if parse is None:
            return list(completions)
        return [attrs.evolve(c, response_message=parse([int(t) for t in c.completion_ids]))
                if isinstance(c, Completion) and c.messages is None and is_conversational(p) else c
                for p, c in zip(prompts, completions, strict=True)]

    def _context(self, provider: _Provider, context: RewardContext, completions: Sequence[Any]) -> RewardContext:
        configured = {label: opts for label, _, opts in self.rewards}
        options = {
            name: {**configured[label], **dict(context.options.get(label, {}) or {})}
            for name, label in zip(provider.names, provider.labels)
        }
        ids = context.completion_ids
        if ids is None and all(isinstance(c, Completion) for c in completions):
            ids = [c.completion_ids for c in completions]
        return attrs.evolve(context, wanted=tuple(provider.names), options=options, completion_ids=ids)

    def _fail(self, provider: _Provider, name: str, problem: str, fix: str) -> RewardError:
        return RewardError(f"reward {name!r} from {provider.distribution} {problem}. Fix: {fix}")

    @staticmethod
    def _label(provider: _Provider) -> str:
        return provider.labels[0] if len(provider.labels) == 1 else "/".join(provider.labels)

    def _timeout(self, provider: _Provider, args: tuple[Any, ...]) -> float:
        """The call's limit: the configured one, or more when the plugin says the call's work needs
        more (``call_time_s``) and the user set no ``timeout_s`` of their own. Why: ``code_tests``
        runs the whole batch in one call, each looping sample costing its own ``timeout_s``; 256 of
        them at 5 s on 2 workers passed the 600 s default, and ordinary early-policy loops stopped
        the run. A stuck call is still caught, at the larger limit. A user's ``timeout_s`` is their
        cap (a budget for the step): it is kept, with one warning naming what the batch may need."""
        configured = min(self.timeouts[label] for label in provider.labels)
        need = self._need(provider, args)
        if need is None or need <= configured:
            return configured
        caps = [self.timeouts[label] for label in provider.labels if label in self.capped]
        limit = min([need, *caps])
        name = self._label(provider)
        if name not in self._raised_limits:
            self._raised_limits.add(name)
            if limit < need:
                log.warning("reward call limit kept at your timeout_s, below what its batch needs when every "
                            "sample runs to its own timeout: such a batch stops the run", reward=name,
                            timeout_s=limit, needed_s=math.ceil(need), completions=len(args[1]),
                            fix=f"raise timeout_s in its [[rewards]] entry to at least {math.ceil(need)}, or "
                                "remove it to let polyrl size the limit")
            if limit > configured:
                log.info("reward call limit raised to fit its batch", reward=name, configured_s=configured,
                         limit_s=round(limit, 1), completions=len(args[1]))
        return limit

    def _need(self, provider: _Provider, args: tuple[Any, ...]) -> float | None:
        """The most seconds the plugin says this call can need (``call_time_s``), or None."""
        declare = getattr(provider.plugin, "call_time_s", None)
        if not callable(declare):
            return None
        context: RewardContext = args[2]
        most: float | None = None
        for name, label in zip(provider.names, provider.labels):
            try:
                need = declare(name, context.options.get(name, {}), len(args[1]))
            except Exception as exc:  # noqa: BLE001 - the configured limit holds; the call itself reports bad options
                log.debug("a reward's call_time_s raised; its configured timeout holds", reward=label,
                          error=f"{type(exc).__name__}: {exc}")
                continue
            if isinstance(need, (int, float)) and not isinstance(need, bool) and math.isfinite(need):
                most = float(need) if most is None else max(most, float(need))
        return most

    @staticmethod
    def _in_process(provider: _Provider) -> bool:
        """A function reward configured (or resolved) to ``isolation = "process"``."""
        return isinstance(provider.plugin, FunctionReward) and provider.plugin.isolation == "process"

    def _call_sync(self, provider: _Provider, args: tuple[Any, ...]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        call: Callable[..., Any] = guard.call_guarded
        if self._in_process(provider):
            # the child lets go of the trainer's pipes and sockets (a sandboxed sample's stdin another
            # thread holds, a collective's or a server's connection); the reward's own files stay open
            call = functools.partial(forked.call_forked, keep_fds=(), keep_files=True)
        try:
            answer = call(
                lambda: provider.function(prompts=args[0], completions=args[1], context=args[2]),
                label=self._label(provider), timeout_s=self._timeout(provider, args), should_stop=self.should_stop)
        except guard.RewardCallFailed as failed:
            raise self._raised(provider, failed.cause) from failed.cause
        except guard.RewardTimedOut:
            raise self._timed_out(provider, args) from None
        return answer, time.perf_counter() - t0

    def _raised(self, provider: _Provider, exc: BaseException) -> RewardError:
        name = self._label(provider)
        if isinstance(exc, guard.RewardExit):
            return self._fail(provider, name, f"called os._exit({exc.code}), which would have ended the "
                              "trainer at once without a checkpoint",
                              "return scores (None for a sample without reward) or raise an exception")
        if isinstance(exc, SystemExit):
            return self._fail(provider, name, f"raised SystemExit({exc.code!r}) (sys.exit)",
                              "return scores (None for a sample without reward) or raise an exception")
        if isinstance(exc, RewardError) and ". Fix: " in str(exc):  # it says how already: one Fix
            problem, _, fix = str(exc).partition(". Fix: ")
            return self._fail(provider, name, f"raised {type(exc).__name__}: {problem}", fix)
        if self._needs_main_thread(provider, exc):
            return self._fail(provider, name, f"raised {type(exc).__name__}: {exc}",
                              'set isolation = "process" in its [[rewards]] entry: each call then runs on a '
                              "forked child's main thread, where signal handlers work (as under TRL)")
        return self._fail(provider, name, f"raised {type(exc).__name__}: {exc}",
                          "fix the reward function (or its options / dataset columns), or remove it "
                          "from the config")

    @staticmethod
    def _needs_main_thread(provider: _Provider, exc: BaseException) -> bool:
        """A function reward on a reward thread that failed because signals (math-verify's
        ``signal.alarm`` time limit, ``signal.signal``) work on the main thread only. Why: TRL
        calls rewards on the main thread, so a TRL user's reward fails only here, and the fix is
        the one setting, not the function."""
        text = str(exc)
        return (isinstance(provider.plugin, FunctionReward) and provider.plugin.isolation == "thread"
                and forked.FORK_AVAILABLE and isinstance(exc, ValueError) and "signal" in text
                and "thread" in text)

    def _timed_out(self, provider: _Provider, args: tuple[Any, ...]) -> RewardError:
        fate = ("its process was killed" if self._in_process(provider) else "was abandoned (a thread cannot "
                "be killed: its work may go on in the background until the trainer exits)")
        limit, need = self._timeout(provider, args), self._need(provider, args)
        if need is not None and need > limit:  # the user's cap, below what the batch may need
            fix = (f"raise timeout_s in its [[rewards]] entry to at least {math.ceil(need)} (what {len(args[1])} "
                   "completions need when each runs to its own timeout), or remove it to let polyrl size the limit")
        else:
            fix = "find why it hangs (a loop, a request without a timeout), or raise timeout_s in its [[rewards]] entry"
        return self._fail(provider, self._label(provider), f"did not answer within {limit:g} s and {fate}", fix)

    async def _call_async(self, provider: _Provider, args: tuple[Any, ...], finished: set[int]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        deadline = asyncio.timeout(self._timeout(provider, args))  # type: ignore[attr-defined]  # FIXME: Python 3.11+
        try:
            async with deadline:
                answer = await provider.plugin.await_reward(*args)
        except TimeoutError as exc:
            if deadline.expired():
                raise self._timed_out(provider, args) from None
            raise self._raised(provider, exc) from exc
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit/os._exit in a reward are its errors
            raise self._raised(provider, exc) from exc
        finally:
            finished.add(id(provider))
        return answer, time.perf_counter() - t0

    async def _gather(self, calls: list[tuple[_Provider, tuple[Any, ...]]], finished: set[int]
                      ) -> list[tuple[Any, float]]:
        return list(await asyncio.gather(*(self._call_async(p, a, finished) for p, a in calls)))

    def _call_async_all(self, pending: list[tuple[_Provider, tuple[Any, ...]]]) -> list[tuple[Any, float]]:
        """Every async reward of the call on one event loop on one reward thread; each has its own
        time limit (``asyncio.timeout``), and the thread as a whole the longest of them plus a second
        for a reward that blocks the loop (then the rewards that had not finished are named)."""
        finished: set[int] = set()
        limit = max(self._timeout(p, a) for p, a in pending) + 1.0
        try:
            return guard.call_guarded(lambda: run_coroutine(self._gather(pending, finished)),
                                      label="/".join(self._label(p) for p, _ in pending), timeout_s=limit,
                                      should_stop=self.should_stop)
        except guard.RewardCallFailed as failed:
            if isinstance(failed.cause, PolyrlError):
                raise failed.cause from None
            raise self._raised(pending[0][0], failed.cause) from failed.cause
        except guard.RewardTimedOut:
            stuck = [(p, a) for p, a in pending if id(p) not in finished] or [pending[0]]
            raise self._timed_out(*stuck[0]) from None

    def _check(self, provider: _Provider, name: str, answer: Any, n: int) -> np.ndarray:
        if not isinstance(answer, Mapping) or name not in answer:
            raise self._fail(provider, name, f"returned no scores for it (got {type(answer).__name__})",
                             f"return {{{name!r}: [one score per completion]}} from the reward hook")
        scores = answer[name]
        if isinstance(scores, NotScores):  # a function reward's (trl_compat.as_score_list could not read it)
            raise self._fail(provider, name, f"returned {scores.what}, not a list of scores",
                             f"return a list of {n} floats in the completions' order (None to skip a sample)")
        if isinstance(scores, np.ndarray) and scores.ndim:
            scores = scores.tolist()
        if isinstance(scores, (str, bytes, bytearray, memoryview, Mapping, np.ndarray)) or \
                not isinstance(scores, Sequence):
            raise self._fail(provider, name, f"returned {not_scores(scores) or type(scores).__name__}, not a list "
                             "of scores", f"return a list of {n} floats (None to skip a sample)")
        if len(scores) != n:
            raise self._fail(provider, name, f"returned {len(scores)} scores: expected {n} got {len(scores)}",
                             "return one score per completion (None to skip a sample)")
        scores = self._nan_as_none(name, scores)
        for i, value in enumerate(scores):
            if not _is_score(value):
                raise self._fail(provider, name, f"returned {_shown(value)} for sample {i}{_kind(value)}",
                                 "return finite floats, or None for a sample without reward")
        mixed = _bool_among_numbers(scores)
        if mixed is not None and name not in self._warned_mixed:
            self._warned_mixed.add(name)
            (b, flag), (k, number) = mixed
            log.warning(f"reward {name!r} returned a mix of bools and numbers ({flag!r} for sample {b}, "
                        f"{_shown(number)} for sample {k}); read as TRL reads them, True = 1.0 and False = 0.0 "
                        "(said once per reward)", reward=name,
                        fix="return floats for every sample if a bool was not meant as a score")
        return np.array([np.nan if v is None else float(v) for v in scores], dtype=np.float64)

    def _nan_as_none(self, name: str, scores: Sequence[Any]) -> list[Any]:
        """``scores`` with each NaN read as None ("no reward from this function for this sample"), as
        TRL reads it, and one warning per reward the first time, naming it: a NaN from a bug looks
        the same, and would otherwise leave samples out of training without a word. inf stays an
        error (TRL would train on it)."""
        nan_at = [_is_nan(value) for value in scores]
        nans = [i for i, nan in enumerate(nan_at) if nan]
        if nans and name not in self._warned_nan:
            self._warned_nan.add(name)
            log.warning(f"reward {name!r} returned NaN for {len(nans)} of {len(scores)} samples (first: sample "
                        f"{nans[0]}); NaN is read as None, no reward from it for those samples, as TRL reads it "
                        "(said once per reward)", reward=name,
                        fix="return None for a sample the reward does not apply to; if the NaN is a bug, fix "
                            "the reward")
        return [None if nan else value for value, nan in zip(scores, nan_at, strict=True)]

    def _extra_metrics(self, provider: _Provider, name: str, answer: Any) -> dict[str, float]:
        extra = getattr(answer[name], "metrics", None)
        if not isinstance(extra, Mapping):
            return {}
        out: dict[str, float] = {}
        logged = getattr(answer[name], "metric_counts", None) or {}  # a function's log_metric names
        for key, value in extra.items():
            if key in CORE_METRICS:
                if key in logged:  # a plugin's own latency_s is meant (the built-ins time theirs)
                    self._warn_core_metric(str(key), name)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise self._fail(provider, name, f"reported metric {key!r} = {value!r}",
                                 "report metrics as numbers in RewardScores(metrics={...})")
            out[str(key)] = float(value)
        return out

    def _extra_columns(self, provider: _Provider, name: str, answer: Any, n: int) -> dict[str, list[Any]]:
        extra = getattr(answer[name], "extra", None)
        if not isinstance(extra, Mapping):
            return {}
        for column, values in extra.items():
            if len(values) != n:
                raise self._fail(provider, name, f"logged {len(values)} values for the extra column {column!r}, "
                                 f"expected {n}", "pass log_extra one value per completion")
        return {str(k): list(v) for k, v in extra.items()}

    def _warn_core_metric(self, key: str, reward: str) -> None:
        """Say once per reward and name that a metric it logged with ``log_metric`` is named as one
        the core computes for every reward (``CORE_METRICS``): ``reward/<reward>/<key>`` keeps the core's value and the reward's is
        dropped. Why: it vanished without a word (TRL logs ``log_metric("mean", ...)`` as ``mean``)."""
        if (reward, key) in self._warned_core:
            return
        self._warned_core.add((reward, key))
        log.warning(f"reward {reward!r} called log_metric({key!r}, ...), a name polyrl computes itself for every "
                    f"reward (reward/{reward}/{key}): the reward's value is dropped (said once)",
                    fix=f"give the metric a name of its own, e.g. log_metric({reward + '_' + key!r}, ...)")

    def _warn_shared_column(self, column: str, earlier: str | None, label: str) -> None:
        """Say once that two rewards logged one ``log_extra`` column: the table keeps the later
        reward's values. Why: one silently replaced the other's; TRL appends both lists, which
        misaligns its table with the completions, so neither way is a record of both."""
        if earlier is None or earlier == label or column in self._warned_extra:
            return
        self._warned_extra.add(column)
        log.warning("two rewards logged the same log_extra column; the completions table keeps the later one's "
                    "values (said once per column)", column=column, rewards=[earlier, label],
                    fix="give each reward's log_extra column a name of its own")

    def _when(self, context: RewardContext) -> dict[str, int]:
        """Which step a log line is about, in the numbering of metrics.jsonl and every other log
        line: ``step`` N+1 while training step N+1 (``context.step`` counts the steps before it, as
        TRL's ``global_step``), ``after_steps`` N for an evaluation after N steps. Why: these lines
        said ``step=0`` in the first step, whose metrics line and step log line are step 1."""
        return {"after_steps": context.step} if self.evaluation else {"step": context.step + 1}

    def _warn_unscored(self, scored: np.ndarray, prompts: Sequence[Prompt], when: Mapping[str, int]) -> None:
        """TRL warns when every reward function returned None for a sample; so does polyrl, since
        such a sample has no advantage: it is left out of training (trained at advantage 0 where
        the loss holds a KL term, an entropy bonus or a MoE model's router term, as TRL trains it).
        An evaluation's warning says what such a sample does there instead: it trains nothing, and
        "left out of training" under an evaluation's ``after_steps`` misread what its numbers mean."""
        missing = np.flatnonzero(~scored)
        if missing.size:
            first = repr(prompts[int(missing[0])])
            if self.evaluation:
                what = ("no reward scored some samples of the evaluation (every reward returned None for them); "
                        "they are left out of its reward means (eval/accuracy, eval/sampled_reward_mean: null when "
                        "none is scored) and count as not correct for pass@k")
                fix = "make the evaluation's reward (eval.reward) return a number for every sample"
            else:
                what = ("no reward scored some samples (every reward returned None for them); they are left out of "
                        "training, or trained at advantage 0 for a KL term, entropy bonus or MoE router term in the loss")
                fix = "make at least one reward return a number for every sample"
            log.warning(what, samples=int(missing.size), of=int(scored.size), **when,
                        first_prompt=first if len(first) <= 120 else first[:117] + "...", fix=fix)

    def __call__(
        self, prompts: Sequence[Prompt], completions: Sequence[Completion], context: RewardContext
    ) -> RewardResult:
        """Score ``completions`` (aligned with ``prompts`` and ``context.rows``)."""
        n = len(completions)
        if len(prompts) != n or len(context.rows) != n:
            raise RewardError(
                f"{n} completions but {len(prompts)} prompts and {len(context.rows)} dataset rows. "
                "Fix: pass one prompt and one row per completion (repeat each row group_size times)"
            )
        completions = self._parsed(prompts, completions)
        answers: dict[int, tuple[Any, float]] = {}
        pending: list[tuple[_Provider, tuple[Any, ...]]] = []
        for provider in self._providers:
            args = (list(prompts), list(completions), self._context(provider, context, completions))
            if not isinstance(provider.plugin, FunctionReward):  # a function reward copies what it passes on
                args = own_inputs(*args)
            if (getattr(provider.plugin, "is_async", False) and hasattr(provider.plugin, "await_reward")
                    and not self._in_process(provider)):
                pending.append((provider, args))
            else:
                answers[id(provider)] = self._call_sync(provider, args)
        if pending:
            for (provider, _), result in zip(pending, self._call_async_all(pending)):
                answers[id(provider)] = result
        per_reward: dict[str, np.ndarray] = {}
        metrics: dict[str, dict[str, float]] = {}
        counts: dict[str, dict[str, int]] = {}
        extra: dict[str, list[Any]] = {}
        extra_from: dict[str, str] = {}  # each extra column's reward, by label
        for provider in self._providers:
            answer, latency = answers[id(provider)]
            for name, label in zip(provider.names, provider.labels):
                scores = self._check(provider, name, answer, n)
                per_reward[label] = scores
                mean, std = mean_std(scores)
                skipped = int(np.isnan(scores).sum())
                metrics[label] = {
                    "mean": mean,
                    "std": std,
                    "latency_s": _own_latency(answer[name], latency),
                    "none_count": skipped,
                }
                own = self._extra_metrics(provider, name, answer)
                metrics[label].update(own)
                counted = getattr(answer[name], "metric_counts", None)
                if isinstance(counted, Mapping) and counted:
                    counts[label] = {k: int(v) for k, v in counted.items() if k in own}
                for column, values in self._extra_columns(provider, name, answer, n).items():
                    self._warn_shared_column(column, extra_from.get(column), label)
                    extra[column], extra_from[column] = values, label
                if skipped:
                    log.info("reward skipped samples", reward=label, skipped=skipped, of=n, **self._when(context))
        total = np.zeros(n, dtype=np.float64)
        scored = np.zeros(n, dtype=bool)
        for name, weight, _ in self.rewards:
            scores = per_reward[name]
            ok = ~np.isnan(scores)
            with np.errstate(over="ignore"):  # a total past float64 is inf: the trainer refuses it, naming the fix
                total[ok] += weight * scores[ok]
            scored |= ok
        total[~scored] = np.nan
        self._warn_unscored(scored, prompts, self._when(context))
        ordered = {name: per_reward[name] for name in self.names}
        return RewardResult(total=total, per_reward=ordered, metrics=metrics, extra=extra, metric_counts=counts)
