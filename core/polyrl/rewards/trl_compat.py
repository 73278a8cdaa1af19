"""What TRL's ``GRPOTrainer`` hands a reward function, rebuilt without TRL or torch.

A reward function written for TRL 1.16 is called by keyword (``GRPOTrainer._calculate_rewards``)::

    fn(prompts=..., completions=..., completion_ids=..., <every dataset column>=...,
       trainer_state=..., log_extra=..., log_metric=...)

This module holds the pieces polyrl needs to make the same call: the argument names, which
dataset columns are passed, the conversational completion format, a ``TrainerState`` look-alike,
and the check that every parameter of a function can be filled before any model loads.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import math
from collections.abc import Callable, Collection, ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import attrs
import numpy as np

from polyrl.errors import ConfigError
from polyrl.step_gather import LOG_METRIC_PREFIX
from polyrl.step_metrics import trl_aliases, trl_epoch, trl_logged

#: Keyword arguments TRL passes besides the dataset columns (``environments`` too, only in a run
#: with TRL's ``environment_factory``: ``FunctionReward.environments``).
TRL_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")

#: Dataset columns TRL does not pass as keywords (the trainer passes its own values instead).
NOT_PASSED_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})

#: Columns that would collide with an argument TRL passes: in TRL they raise TypeError (prompts,
#: completions) or are silently replaced (trainer_state, log_*); polyrl refuses them up front.
COLLIDING_COLUMNS = frozenset(TRL_ARGUMENTS) - NOT_PASSED_COLUMNS


def is_conversational(prompt: Any) -> bool:
    """True for a chat prompt (a list of ``{"role", "content"}`` messages), as TRL decides it."""
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence) or not prompt:
        return False
    first = prompt[0]
    return isinstance(first, Mapping) and "role" in first and "content" in first


def trl_completion(prompt: Any, text: str, messages: list[dict[str, Any]] | None = None) -> Any:
    """The completion as TRL hands it over: one assistant message for a chat prompt, else text.

    A multi-turn episode (``messages`` given) is its whole conversation after the prompt, as TRL
    hands tool-using completions over: assistant turns (with ``tool_calls``), tool results and
    observations. Its ``text`` is the last assistant turn (the answer), never a tool's output."""
    if messages is not None:  # an episode is a chat even when its dataset prompt was text
        return [private_copy(dict(m)) for m in messages]
    return [{"role": "assistant", "content": text}] if is_conversational(prompt) else text


def callable_name(fn: Any) -> str:
    """A reward's name as TRL derives it: a ``functools.partial`` is named after the function it
    wraps, a callable object without ``__name__`` after its class."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name else type(fn).__name__


def is_async_callable(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def``, a partial of one, or an object
    whose ``__call__`` is one."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004 - a callable object's method, checked for async


def private_copy(value: Any) -> Any:
    """A deep copy of ``value`` for one reward call. Why: the trainer repeats one row object per
    completion and JSON rows live in memory for the whole run, so a reward that edits its
    arguments in place (``prompts[i].append(...)``) would change the other rewards' inputs, the
    completions log and every later step's prompts. A value that cannot be copied is passed as is."""
    if value is None or isinstance(value, (str, bytes, int, float, bool)):
        return value
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an uncopyable object (a lock, a handle) from the Python API
        return value


def as_score_list(result: Any, most: int | None = None) -> Any:
    """A reward's return value read as TRL reads it (it iterates the value and converts the items
    with ``torch.tensor``): a numpy array or a torch tensor becomes a list, a generator or any other
    ordered iterable (``dict.values()``, a ``deque``, a pandas Series) is drawn, and the items
    ``torch.tensor`` takes as numbers become numbers (``as_number``). What has no order for the
    completions (a set), gives TRL something else than its scores (a dict's keys, a text's
    characters, a ``bytearray``'s bytes) or is one number (a 0-d array) is returned unchanged for
    the scores check to name (``not_scores``). ``most``: the most items drawn from an iterator (one
    more than the completions is enough to name a wrong count). Why: an endless one
    (``itertools.count()``, ``map`` over one) filled memory until the call's time limit, and then
    went on in the abandoned thread until the trainer ran out of memory."""
    if isinstance(result, (list, tuple)):
        return [as_number(x) for x in result]
    ndim = getattr(result, "ndim", None)
    if callable(getattr(result, "tolist", None)) and isinstance(ndim, int) and ndim >= 1:
        if ndim == 1:
            return result.tolist()  # numpy arrays and torch tensors (on any device) alike
        return [as_number(x) for x in result]  # TRL iterates the rows: a reward model's logits, shape (n, 1)
    if isinstance(result, Iterator) or (ndim is None and not_scores(result) is None):
        return [as_number(x) for x in (result if most is None else itertools.islice(result, most))]
    return result


def not_scores(value: Any) -> str | None:
    """Why a reward's return value is no list of scores, as an error line says it after
    "returned" (``"set (a set has no order...)"``), or None for an ordered iterable. Why: a set's
    order is its hashes' (TRL would score the completions in that order, silently wrong); a
    dict is read by TRL as its keys; a ``bytearray`` as its bytes."""
    kind = type(value).__name__
    if isinstance(value, (KeysView, ItemsView)):
        return f"{kind} (a dict's keys or items, not its values in the completions' order)"
    if isinstance(value, AbstractSet):
        return f"{kind} (a set has no order: its scores cannot be matched to the completions)"
    if isinstance(value, Mapping):
        return f"{kind} (TRL would read its keys as the scores)"
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return f"{kind} (text or bytes, not scores)"
    if getattr(value, "ndim", None) == 0 or isinstance(value, (int, float, np.generic)):
        return f"{kind} (one number for the whole batch, not one score per completion)"
    if value is None or not isinstance(value, Iterable):
        return kind
    return None


class NotScores:
    """A function reward's return value that is no list of scores, by ``not_scores``'s words: what
    the scores check names (the same words from a reward thread and from a forked child, which
    sends this, not the value)."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"NotScores({self.what!r})"


def as_number(value: Any) -> Any:
    """A score item as the Python number ``torch.tensor`` reads it as, in TRL's
    ``torch.tensor(scores, dtype=float32)``: a tensor or array of one element (``torch.tensor(1.0)``,
    a reward model's ``logits[i]`` of shape ``[1]``) is the number it holds, and a number of
    another type (``fractions.Fraction``, ``decimal.Decimal``, a sympy ``Integer`` or ``Rational``
    from a math checker) its ``float()``. Why: both train under TRL, and polyrl refused them as
    "not a number". Anything else (a str, a bool, a longer array) is returned unchanged: the scores
    check names it, or reads it as TRL does."""
    if callable(getattr(value, "item", None)) and _one_element(value):
        try:
            return value.item()
        except Exception:  # noqa: BLE001 - an item() that raises: left for the scores check to name
            return value
    if (value is None or isinstance(value, (str, bytes, bool, int, float, np.generic))
            or not callable(getattr(type(value), "__float__", None))):
        return value
    try:
        return float(value)
    except Exception:  # noqa: BLE001 - a __float__ that raises (sympy's zoo): the scores check names the value
        return value


def _one_element(value: Any) -> bool:
    """Whether ``value`` is a tensor or array holding exactly one element (any number of dims)."""
    if getattr(value, "ndim", None) == 0:
        return True
    size = getattr(value, "size", None)  # numpy: an int; torch: a method (numel() is the count)
    numel = getattr(value, "numel", None)
    count = numel() if callable(numel) else size
    return isinstance(count, int) and count == 1 and getattr(value, "ndim", None) is not None


@attrs.define
class TrainerState:
    """The attributes of ``transformers.TrainerState`` a reward function reads, filled by polyrl.

    ``global_step`` counts the optimizer updates before the step being scored and ``max_steps``
    the run's updates, as TRL counts them (with N = ``num_iterations`` x ``minibatches`` > 1, TRL's
    clock runs 0, N, 2N over the rollout batches); ``epoch`` the passes over the training prompts so far (fractional,
    as in transformers; transformers' int 0 before the first update), ``log_history`` the metrics
    of the finished steps (``with_trl_names``). Fields without a polyrl meaning keep transformers'
    defaults. A run passes one object to every reward call, moved on in place (``advance``), as TRL
    passes its trainer's own state.
    """

    epoch: float = 0  # transformers' default: the int 0, a float once an update counted part of an epoch
    global_step: int = 0
    max_steps: int = 0
    logging_steps: int = 1
    eval_steps: int = 0
    save_steps: int = 0
    train_batch_size: int | None = None
    num_train_epochs: int = 0
    num_input_tokens_seen: int = 0
    total_flos: float = 0.0
    log_history: list[dict[str, Any]] = attrs.field(factory=list)
    best_metric: float | None = None
    best_global_step: int | None = None
    best_model_checkpoint: str | None = None
    is_local_process_zero: bool = True
    is_world_process_zero: bool = True
    is_hyper_param_search: bool = False
    trial_name: str | None = None
    trial_params: dict[str, Any] | None = None
    stateful_callbacks: dict[str, Any] = attrs.field(factory=dict)

    @classmethod
    def for_run(cls, *, step: int, max_steps: int, prompts_per_step: int, group_size: int,
                dataset_size: int, history: list[dict[str, Any]], save_steps: int = 0,
                eval_steps: int = 0, rank: int = 0, updates_per_step: int = 1, minibatches: int = 1,
                names: Mapping[str, str] | None = None,
                trl_steps: Mapping[str, Any] | None = None, train_batch_size: int | None = None) -> TrainerState:
        """The state a run is in while it scores step ``step``; ``updates_per_step`` is
        ``num_iterations`` x ``minibatches``, which turns polyrl's step counts into TRL's update
        counts; ``train_batch_size`` is one mini-batch's completions (TRL's batch per update);
        ``names``: the rewards' TRL names (``with_trl_names``). ``trl_steps``: a TRL GRPOConfig's
        ``logging_steps``/``eval_steps``/``save_steps``, shown as transformers' ``compute_steps``
        sets them (``trl_callbacks.compute_steps``) in place of polyrl's ``save_steps``/``eval_steps``
        intervals, so a reward reads the numbers TRL's trainer (and ``polyrl.trl.GRPOTrainer``) gives.
        ``train_batch_size``: a TRL GRPOConfig's (transformers writes ``args.train_batch_size``, one
        process's micro-batch of ``per_device_train_batch_size``), in place of polyrl's mini-batch,
        which is that times ``gradient_accumulation_steps`` x processes."""
        size = max(dataset_size, 1)
        n = updates_per_step
        state = cls(  # epoch as TRL counts it (whole batches), the step lines' ``epoch`` too
            epoch=trl_epoch(step, prompts_per_step, size) if step else 0, global_step=step * n, max_steps=max_steps * n,
            save_steps=save_steps * n, eval_steps=eval_steps * n,
            train_batch_size=train_batch_size or prompts_per_step * group_size // minibatches,
            num_train_epochs=math.ceil(trl_epoch(max_steps, prompts_per_step, size)),  # TRL's: whole batches
            log_history=[with_trl_names(m, names) for m in history],
            is_local_process_zero=rank == 0, is_world_process_zero=rank == 0,
        )
        if trl_steps is not None:
            from types import SimpleNamespace

            from polyrl.trl_callbacks import STEPS_DEFAULT, compute_steps

            state.logging_steps = state.eval_steps = state.save_steps = STEPS_DEFAULT  # transformers' own
            compute_steps(state, SimpleNamespace(**trl_steps), state.max_steps)
        return state

    def advance(self, now: TrainerState) -> TrainerState:
        """Take ``now``'s fields in place and return this same object. Why: TRL passes every reward
        call its trainer's one ``TrainerState``, so a reward that keeps it (or its ``log_history``
        list) sees the run advance; a fresh object per call froze it at the step it was kept."""
        for field in attrs.fields(type(self)):
            value = getattr(now, field.name)
            if field.name == "log_history":
                self.log_history[:] = value
            else:
                setattr(self, field.name, value)
        return self

    def save_to_json(self, json_path: str) -> None:
        """Write the fields as JSON to ``json_path``, as ``transformers.TrainerState.save_to_json`` does."""
        import json

        with open(json_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(attrs.asdict(self), indent=2, sort_keys=True) + "\n")


def with_trl_names(metrics: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One step's metrics for ``trainer_state.log_history``: polyrl's names plus TRL's for the same
    values (``step_metrics.trl_aliases``: ``reward``, ``rewards/<function>/mean`` and ``/std``,
    ``learning_rate``; lines of an older metrics.jsonl lack them) and a reward's own
    ``log_metric(name, value)`` under its bare name, as TRL logs it (the mean of every reward's
    values under that name, ``step_gather.log_metric_means``; a line without it: the first
    reward's). Why: a curriculum written for
    TRL reads ``log_history[-1]["reward"]``. ``names``: a reward label's TRL name where it differs
    (``step_metrics.trl_reward_names``): the labels TRL names alike share one key, as in TRL. A
    NaN (a mean of nothing: the reward statistics of a step no reward scored) is None, as TRL's
    ``log`` writes a GRPOTrainer metric with no valid value, except under the names transformers'
    Trainer logs itself (``step_metrics.TRANSFORMERS_KEYS``: ``loss``, ``grad_norm``...), which TRL
    leaves a NaN float, and an evaluation's (``step_metrics.trl_logged``)."""
    from polyrl.rewards.combine import CORE_METRICS  # here: combine imports this module's users

    out = _run_keys(metrics, names)
    for key, value in metrics.items():  # every reward's values of a name (step_gather)
        if key.startswith(LOG_METRIC_PREFIX):
            out.setdefault(key[len(LOG_METRIC_PREFIX):], value)
    for key, value in metrics.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "reward" and parts[2] not in ("mean", "std", *CORE_METRICS):
            out.setdefault(parts[2], value)  # polyrl's own per-reward stats are not; a log_metric(name, value) is
    return trl_logged(out)


def _run_keys(metrics: Mapping[str, Any], names: Mapping[str, str] | None) -> dict[str, Any]:
    """The keys of a ``log_history`` entry the run logs itself (polyrl's names and TRL's for the
    same values), before any reward's ``log_metric`` name: those keep the run's value."""
    out = {k: v for k, v in metrics.items() if not _renamed(k, names or {})}
    for name, value in trl_aliases(metrics, names).items():
        out.setdefault(name, value)
    if "completion_len_mean" in metrics:
        out.setdefault("completions/mean_length", metrics["completion_len_mean"])
    return out


def shadowed_log_metrics(metrics: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Each ``log_metric(name, ...)`` name of a step's ``metrics`` that is also a key the run logs
    itself (``loss``, ``reward``, ``kl``, ``completions/mean_length``, ``rewards/<f>/mean``...),
    with the rewards that logged it. ``with_trl_names`` keeps the run's own value under that key,
    so the reward's is only under ``log_metric/<name>``. Why: TRL 1.16 has no such guard (a
    transformers key such as ``loss`` is replaced by the reward's value, one of GRPOTrainer's own
    is averaged with it), so a script that reads ``log_history[-1][name]`` reads another number
    than it logged, with no word: the trainer warns once per name (``Trainer``)."""
    own = _run_keys({k: v for k, v in metrics.items() if not k.startswith(LOG_METRIC_PREFIX)}, names)
    logged_by: dict[str, list[str]] = {}
    for key in metrics:
        parts = key.split("/", 2)
        if len(parts) == 3 and parts[0] == "reward":
            logged_by.setdefault(parts[2], []).append(parts[1])
    return {name: logged_by.get(name, []) for name in (k[len(LOG_METRIC_PREFIX):] for k in metrics
                                                       if k.startswith(LOG_METRIC_PREFIX)) if name in own}


def shadowed_eval_log_metrics(metrics: Mapping[str, Any], names: Mapping[str, str] | None = None) -> list[str]:
    """Each ``log_metric(name, ...)`` name of an evaluation's ``metrics`` (``eval/log_metric/<name>``)
    whose ``eval_<name>`` is a key the evaluation logs itself (``eval_runtime``, ``eval_reward``,
    ``eval_loss``...: ``step_metrics.trl_eval_names``), which keeps the run's value there. Why: a name
    clashing only there (``runtime``) lost the reward's value with no word, where a training clash warns."""
    from polyrl.eval_log_metrics import PREFIX
    from polyrl.step_metrics import trl_eval_names

    own = trl_eval_names({k: v for k, v in metrics.items() if not k.startswith(PREFIX)}, names)
    return [key[len(PREFIX):] for key in metrics if key.startswith(PREFIX) and f"eval_{key[len(PREFIX):]}" in own]


def _renamed(key: str, names: Mapping[str, str]) -> bool:
    """Whether ``key`` is ``rewards/<label>/...`` for a label TRL names otherwise (a line written
    without ``names``): left out, as TRL logs no such key."""
    parts = key.split("/")
    return len(parts) == 3 and parts[0] == "rewards" and parts[1] in names


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """The parameters of ``fn`` (a callable object's ``__call__`` without ``self``); None when
    Python cannot tell (some builtins): then every argument is passed."""
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def accepted_arguments(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword names ``fn`` takes, or None when it takes ``**kwargs`` (or cannot be inspected)."""
    params = _parameters(fn)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY)


def _fix_for(name: str) -> str:
    if name in ("prompt", "completion"):
        return f"name it {name}s (plural), as TRL's GRPOTrainer passes it"
    if name == "environments":
        return ("TRL passes environments only with an environment_factory: pass it to polyrl.trl.GRPOTrainer, or "
                "give the parameter a default")
    if name == "step":
        return "read trainer_state.global_step instead (TRL's count of optimizer updates before the step being scored)"
    return (f"rename it to one of those arguments or columns, give it a default, or add a {name!r} "
            "column to the dataset")


def check_binding(fn: Callable[..., Any], origin: str, columns: Collection[str],
                  arguments: Collection[str] = TRL_ARGUMENTS) -> None:
    """Raise ConfigError unless every parameter of ``fn`` is filled by a TRL argument (those of
    ``arguments``), a dataset column or its default: a parameter left over would be a TypeError at
    the first step, and a positional call would bind the wrong values silently, so both are
    refused at load. A column named like one of ``arguments`` is refused too: the argument would
    replace its values in the call (``environments`` in a run with an environment_factory)."""
    passed = [c for c in columns if c not in NOT_PASSED_COLUMNS]
    clash = sorted(set(passed) & (COLLIDING_COLUMNS | (set(arguments) - NOT_PASSED_COLUMNS)))
    if clash:
        raise ConfigError(
            f"the dataset has a column {clash[0]!r}, which is also the name of an argument TRL passes to "
            f"reward functions ({origin})", field="data",
            fix=f"rename the {clash[0]!r} column in the dataset")
    params = _parameters(fn)
    if params is None:
        return
    available = set(arguments) | set(passed)
    for p in params:
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.default is not inspect.Parameter.empty:
            continue
        called = ("reward functions are called by keyword, exactly as TRL's GRPOTrainer calls them, with "
                  f"{', '.join(arguments)} and the dataset columns ({', '.join(sorted(passed)) or 'none'})")
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:  # the name may be right: the '/' is what is wrong
            raise ConfigError(f"reward function {origin} has the positional-only parameter {p.name!r} (before a "
                              f"'/'), which a keyword cannot fill: {called}", field="rewards.function",
                              fix=f"remove the '/' from the signature so {p.name!r} can be passed by name")
        where = f"reward function {origin} has parameter {p.name!r}, which nothing fills: {called}"
        if p.name not in available:
            fix = _fix_for(p.name)
            if not _reads_any(params, available):
                fix += f"; or, if it makes the reward function, pass what it returns ({_factory_fix(fn)})"
            raise ConfigError(where, field="rewards.function", fix=fix)
    if not _reads_any(params, available):  # TRL's call is a TypeError; polyrl's would pass it nothing
        raise ConfigError(
            f"reward function {origin} takes none of the arguments TRL's GRPOTrainer passes reward functions "
            f"({', '.join(arguments)} and the dataset columns: {', '.join(sorted(passed)) or 'none'}) and no "
            "**kwargs: called with nothing, it cannot see the completions it scores (TRL's call is a TypeError); "
            "a factory such as trl.rewards.get_repetition_penalty_reward makes the reward function",
            field="rewards.function",
            fix=f"pass what it returns ({_factory_fix(fn)}), or add the arguments it scores (completions, **kwargs)")
    made = fn
    while isinstance(made, functools.partial):  # partial(MyReward, weight=2): the call builds one too
        made = made.func
    if inspect.isclass(made) and not hasattr(made, "__iter__"):  # its __init__ takes the arguments: the call builds one
        raise ConfigError(
            f"reward function {origin} is a class, not an instance: TRL's GRPOTrainer calls it with the "
            "completions, which builds an object instead of scores (TRL's own call fails iterating it); its "
            "__init__ takes the arguments, so no signature check catches it", field="rewards.function",
            fix=f"pass an instance ({_factory_fix(made)})")


def _factory_fix(fn: Callable[..., Any]) -> str:
    """How the reward a factory ``fn`` makes is given, in Python and in a TOML."""
    name = getattr(fn, "__name__", "make_reward")
    return (f"reward_funcs=[{name}(...)] in Python; in a TOML, point function at a module variable holding it: "
            f"my_reward = {name}(...) in rewards.py, function = \"rewards.py:my_reward\"")


def _reads_any(params: list[inspect.Parameter], available: Collection[str]) -> bool:
    """Whether a keyword call with ``available`` passes ``params`` anything (``**kwargs`` takes all)."""
    return any(p.kind is inspect.Parameter.VAR_KEYWORD
               or (p.name in available and p.kind is not inspect.Parameter.POSITIONAL_ONLY
                   and p.kind is not inspect.Parameter.VAR_POSITIONAL) for p in params)
