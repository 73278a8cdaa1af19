"""What an environment or tool plugin provides, and the status ``polyrl environments`` shows.

An *environment* drives one multi-turn episode: ``reset(row)`` turns a dataset row into the first
messages, then each assistant turn goes to ``step`` and comes back as an ``Observation`` (messages
the model reads next, an optional per-turn reward, ``done``). A *tool* is a plain function the
model may call; its JSON schema comes from its type hints and docstring (``polyrl.agents.tools``).

Both are announced through the same register hooks (``polyrl_register_environments``,
``polyrl_register_tools``) by the core's built-ins and by third-party distributions alike, so the
core never special-cases its own.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from polyrl import strict_json
from polyrl.data_arrow import CHAT_ROLES
from polyrl.agents.sizes import content_chars

Message = dict[str, Any]


@attrs.define
class Observation:
    """What the environment answers to one assistant turn.

    ``messages`` are appended to the conversation (``user`` or ``tool`` roles, ``OBSERVATION_ROLES``; each
    ``content`` a str, a subclass such as ``markupsafe.Markup`` read as the plain str it spells)
    and the model continues from them unless ``done`` (a bool; no messages end the episode too,
    with a warning, as the model would have nothing to answer; a ``done`` step's messages close
    the conversation the rewards read, never shown to the model). ``reward`` is
    this turn's reward, a finite number (None: none given); the episode's reward combines them
    with the configured reward functions (see hookspecs). Any other value ends the episode as an
    environment error: it is never read as something else.
    """

    messages: list[Message] = attrs.field(factory=list)
    reward: float | None = None
    done: bool = False


@runtime_checkable
class Environment(Protocol):
    """One episode's state. ``reset`` and ``step`` may each be plain or ``async def`` (never a
    generator: refused, as calling one runs none of its code). They run on
    a thread of the episode's own (an ``async def`` on that thread's own event loop, the same for
    every call) within ``[environment] env_timeout_s``; the episodes of a step run concurrently.

    An environment may also carry ``tools: list[Callable]``: functions (plain or ``async def``,
    usually its bound methods) offered to the model for this episode on top of ``[environment]
    tools`` (read with ``environment_tools``). They run on that same thread and loop, one call at
    a time, so state ``reset`` made there (an sqlite connection, an async client) works in them,
    each call within ``[environment] tool_timeout_s``. A call past it leaves the thread busy: the
    environment's next call waits for it (within its own time limit).

    An environment may also define ``episode_over()`` (plain or ``async def``), called once after
    the rollout, whatever ended its episode (``end_episode``): where an adapter hands back what its
    ``reset`` took (the TRL adapter's pooled instance). Every environment's runs at once, each on a
    thread of its own within ``env_timeout_s``. What it raises (``sys.exit`` included) is a warning;
    the run and the other episodes' calls go on. One past the limit is abandoned, and its episode
    ends as an environment error (unscored: the rewards would read an environment still busy).
    """

    def reset(self, row: Mapping[str, Any]) -> list[Message] | Awaitable[list[Message]]:
        """The first messages of the episode (system/user), built from the dataset ``row``."""

    def step(self, assistant_message: Message) -> Observation | Awaitable[Observation]:
        """React to the model's turn (``{"role": "assistant", "content": ...}``, plus
        ``tool_calls`` when it called tools)."""


def _always_usable() -> str | None:
    return None


@attrs.define
class EnvironmentSpec:
    """An environment as ``[environment] name`` names it and ``polyrl environments`` lists it.

    ``create(options)`` is called once per episode with the run's ``[environment] options`` (and
    twice before any model loads, as a check) and returns a fresh ``Environment``: episodes of a
    step run concurrently, so they share no state unless the plugin means them to. ``probe`` answers (cheaply) why it cannot run here, or None.
    """

    name: str
    create: Callable[[Mapping[str, Any]], Environment]
    summary: str = ""
    probe: Callable[[], str | None] = _always_usable
    install_hint: str = ""
    distribution: str = ""


@attrs.define
class ToolSpec:
    """A tool as ``[environment] tools`` names it: ``name`` is what the model calls (the schema
    takes it over from the function's ``__name__``)."""

    name: str
    function: Callable[..., Any]
    summary: str = ""
    probe: Callable[[], str | None] = _always_usable
    install_hint: str = ""
    distribution: str = ""


@attrs.define(frozen=True)
class EnvironmentStatus:
    """An environment or tool (``kind``) as ``polyrl environments [--json]`` shows it."""

    kind: str  # "environment" or "tool"
    name: str
    available: bool
    reason: str | None
    summary: str
    install_hint: str
    distribution: str

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def probe_status(kind: str, spec: EnvironmentSpec | ToolSpec) -> EnvironmentStatus:
    """Ask ``spec.probe``; a probe that raises means "unusable", with what it raised."""
    from polyrl.plugin_calls import probe_reason

    reason = probe_reason(spec.probe, f"{kind} {spec.name!r}")
    if reason is None and isinstance(spec, ToolSpec):
        reason = _schema_problem(spec)
    return EnvironmentStatus(kind=kind, name=spec.name, available=reason is None, reason=reason,
                             summary=spec.summary, install_hint=spec.install_hint,
                             distribution=spec.distribution)


def _schema_problem(spec: ToolSpec) -> str | None:
    """Why the model could not be told how to call this tool (no docstring, an argument without a
    type hint or an Args: line), or None. Why in the listing: a tool listed as usable then failed
    the run that named it."""
    from polyrl.agents.tools import tool_schema
    from polyrl.errors import ConfigError

    try:
        tool_schema(spec.function, spec.name)
    except ConfigError as exc:
        return f"its schema cannot be built: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - a plugin's function is the plugin author's code
        return f"its schema cannot be built: {type(exc).__name__}: {exc}"
    return None


def environment_tools(env: Any) -> list[Callable[..., Any]]:
    """The tools an environment instance offers (its optional ``tools`` attribute), checked."""
    tools = getattr(env, "tools", None)
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)) or not all(callable(t) for t in tools):
        raise TypeError(f"{type(env).__name__}.tools must be a list of functions, got {tools!r}")
    return list(tools)


def rewarded_environment(env: Any) -> Any:
    """What a reward function receives as an episode's environment (``environments=``, the
    ``Completion.environment`` field): the object an adapter wraps (its ``rewarded`` attribute:
    the TRL environment instance ``polyrl.agents.trl_environments`` drives), else the environment
    itself; None without one."""
    return getattr(env, "rewarded", env) if env is not None else None


def end_episode(env: Any) -> Any:
    """Tell an adapter its episode is over (its ``episode_over()``: the TRL environment adapter,
    ``polyrl.agents.trl_environments``, hands its pooled instance back there), once, whatever
    ended the episode; other environments have nothing to hand back. Why the runner calls it after
    the rollout rather than at the episode's last turn: reward functions still read the instance.
    What it returns (a coroutine of an ``async def episode_over``) is for the caller to await."""
    over = getattr(env, "episode_over", None)
    if not callable(over):
        return None
    return not_a_generator(env, "episode_over", over())


def not_a_generator(env: Any, method: str, value: Any) -> Any:
    """``value``, what ``env.<method>()`` returned, unless it is a generator (sync or async); then
    TypeError saying so. Why: a ``yield`` anywhere in the method makes calling it run none of its
    code, and a generator is neither awaited nor iterated: an ``episode_over`` so written never
    handed anything back, without a word."""
    if inspect.isgenerator(value) or inspect.isasyncgen(value):
        if inspect.isgenerator(value):
            value.close()  # never started: closing it runs none of its code
        raise GeneratorMethod(env, method)
    return value


class GeneratorMethod(TypeError):
    """An environment's ``method`` is a generator function (``not_a_generator``): the problem and
    the fix, apart for the setup's ``ConfigError``."""

    def __init__(self, env: Any, method: str) -> None:
        self.problem = (f"{type(env).__name__}.{method} is a generator function (its body has a yield), so "
                        "calling it runs none of its code")
        self.fix = "make it a plain function or an async def without yield (return its answer)"
        super().__init__(f"{self.problem}. Fix: {self.fix}")


def checked_environment(env: Any) -> Any:
    """What a factory returned, if it is an environment instance (``reset`` and ``step`` callable,
    neither they nor ``episode_over`` a generator function); else TypeError. Why: None, a class or any other object would only fail at its first call, as
    an error in every episode, far from the factory that made it."""
    if isinstance(env, type):
        raise TypeError(f"the factory returned the class {env.__name__}, not an instance of it "
                        f"(return {env.__name__}(options))")
    if inspect.iscoroutine(env):  # closed unrun: Python's "never awaited" warning would say nothing more
        env.close()
        raise TypeError("the factory returned a coroutine (it is an async def), which polyrl does not await; "
                        "make the factory a plain def and do async setup in reset, which may be async def")
    missing = [m for m in ("reset", "step") if not callable(getattr(env, m, None))]
    if missing:
        raise TypeError(f"the factory returned {_shown(env)}, which has no {' or '.join(missing)} method; "
                        "expected an environment (reset(row) and step(message))")
    for method in ("reset", "step", "episode_over"):  # each would run none of its code (``not_a_generator``)
        fn = getattr(env, method, None)
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            raise GeneratorMethod(env, method)
    return env


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def reset_environment(env: Any, row: Mapping[str, Any]) -> list[Message]:
    """``env.reset(row)`` (awaited when async), checked to be a non-empty list of messages.

    Raises TypeError naming the environment class on a malformed answer (the episode runner
    calls ``checked_reset`` on its own thread and ends that episode with it, never the run)."""
    return checked_reset(env, await _maybe_await(env.reset(row)))


async def step_environment(env: Any, assistant_message: Message) -> Observation:
    """``env.step(message)`` (awaited when async), checked to be an ``Observation``."""
    return checked_step(env, await _maybe_await(env.step(assistant_message)))


def plain_text(value: Any) -> Any:
    """``value`` with every ``str`` subclass in it (``markupsafe.Markup``, what jinja2 and HTML
    helpers return) made a plain ``str``, through the dicts, lists and tuples holding it.

    Why: the chat template joins a message's content to its own control strings with ``+``, and a
    subclass's ``+`` runs first: ``Markup`` HTML-escaped ``<|im_start|>`` into ``&lt;|im_start|&gt;``,
    so every later turn was sampled and trained on a context without its turn structure, silently.
    Applied wherever tool results, environment messages and prompts enter an episode."""
    if isinstance(value, str):
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, Mapping):
        return {plain_text(k): plain_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_text(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain_text(v) for v in value)
    return value


def checked_reset(env: Any, messages: Any, budget: int | None = None) -> list[Message]:
    """What ``reset`` returned, if it is a non-empty list of renderable messages (as plain
    ``str``s, ``plain_text``); else TypeError. ``budget``: see ``_check_messages``."""
    not_a_generator(env, "reset", messages)
    over = _check_messages(env, "reset", messages, budget, FIRST_ROLES)
    if not messages:
        raise TypeError(f"{type(env).__name__}.reset returned no messages; the model needs a prompt")
    return list(messages) if over else [plain_text(m) for m in messages]


def checked_step(env: Any, obs: Any, budget: int | None = None) -> Observation:
    """What ``step`` returned, if it is an ``Observation`` the episode can use as it is: renderable
    messages, a finite real ``reward`` (or None) and a bool ``done``. A bad value is a TypeError
    naming the field, never read as something else (``done="no"`` is not True). The messages come
    back as plain ``str``s (``plain_text``), the reward a plain ``float``. ``budget``: see
    ``_check_messages``."""
    name = type(env).__name__
    not_a_generator(env, "step", obs)
    if not isinstance(obs, Observation):
        raise TypeError(f"{name}.step returned {type(obs).__name__}, expected "
                        "polyrl.agents.Observation(messages=..., reward=..., done=...)")
    over = _check_messages(env, "step", obs.messages, budget, OBSERVATION_ROLES)
    value: float | None = None
    if obs.reward is not None:
        reward = obs.reward
        try:
            if isinstance(reward, numbers.Real) and not isinstance(reward, (bool, np.bool_)):
                value = float(reward)  # read once: a subclass's __float__ is the environment's code
        except (OverflowError, ValueError, TypeError):
            value = None
        if value is None or not math.isfinite(value):
            raise TypeError(f"{name}.step gave reward {_shown(reward)}; expected a finite real number "
                            "(int, float, a numpy number; float(x) of a Decimal) or None")
    if not isinstance(obs.done, (bool, np.bool_)):
        raise TypeError(f"{name}.step gave done {_shown(obs.done)}; expected True or False")
    # a plain Observation, float and bool, made here: a subclass's methods are the environment's
    # code, which the runner must not run again outside the call's time limit
    messages = list(obs.messages) if over else [plain_text(m) for m in obs.messages]
    return Observation(messages=messages, done=bool(obs.done), reward=value)


def _shown(value: Any) -> str:
    try:
        text = f"{type(value).__name__} {value!r}"
    except Exception:  # noqa: BLE001 - e.g. an int past the digit limit
        text = f"{type(value).__name__} (cannot be shown)"
    return text if len(text) <= 120 else text[:120] + "..."


#: The roles of an environment's first messages (``reset``): a prompt's (few-shot turns included),
#: as a dataset's prompt may take them.
FIRST_ROLES = CHAT_ROLES
#: The roles of an environment's later messages (``step``'s, a ``done`` step's too). Why not
#: ``assistant`` or ``system``: an ``assistant`` message there passed as the model's own turn in
#: the conversation the rewards read (a final one as its answer, ``length_penalty`` counted it as
#: written), and a ``system`` one mid-episode is refused or dropped by many templates; a role no
#: template knows (a typo, ``"usr"``) was rendered as given or dropped, silently.
OBSERVATION_ROLES = ("user", "tool")


def _check_messages(env: Any, method: str, messages: Any, budget: int | None = None,
                    roles: tuple[str, ...] | None = None) -> bool:
    """Each message a mapping with a str role (one of ``roles``, None: any) and content, encodable,
    its other keys JSON; True when the messages are past ``budget`` (the characters the episode
    could ever keep, ``content_chars``): then they are checked no further than their types (nor
    made plain text by the callers), as the runner refuses them by size, unrendered and unkept.
    Why the size first: a full ``json.dumps`` of a 200 MB value, or the UTF-8 encoding of a 200 MB
    role or content (the surrogate check), only took the environment's thread seconds first."""
    name = type(env).__name__
    if not isinstance(messages, list):
        raise TypeError(f"{name}.{method} returned {type(messages).__name__}, expected a list "
                        "of {'role': ..., 'content': ...} messages")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or "content" not in m:
            raise TypeError(f"{name}.{method} message {i} is {_shown(m)}; expected "
                            "{'role': str, 'content': str}")
        if not isinstance(m["content"], str):
            raise TypeError(f"{name}.{method} message {i} has content {_shown(m['content'])}; expected a str "
                            "(the chat template renders text)")
    if budget is not None and content_chars(messages, budget) > budget:
        return True
    for i, m in enumerate(messages):
        if roles is not None and m["role"] not in roles:
            raise TypeError(f"{name}.{method} message {i} has role {_shown(m['role'])}; expected one of "
                            f"{', '.join(map(repr, roles))}{_did_you_mean(m['role'], roles)}"
                            + _ROLE_WHY.get(method, ""))
        for key in ("role", "content"):
            if not _encodable(m[key]):
                raise TypeError(f"{name}.{method} message {i} {key} holds a lone surrogate, which no tokenizer "
                                "can encode (decode bytes with errors='replace')")
    for i, m in enumerate(messages):
        _check_extra_keys(f"{name}.{method} message {i}", m)
    return False


def _did_you_mean(role: str, roles: tuple[str, ...]) -> str:
    """`` (did you mean 'user'?)`` for a short role close to one of ``roles`` (a typo), else ''."""
    close = difflib.get_close_matches(role.lower(), roles, n=1, cutoff=0.5) if len(role) <= 40 else []
    return f" (did you mean {close[0]!r}?)" if close and close[0] != role else ""


_ROLE_WHY = {"step": " (an observation is what the model reads next: the model's own turns are its 'assistant' "
                     "messages, never the environment's; say instructions in a 'user' message)"}


def _check_extra_keys(where: str, message: Mapping[str, Any]) -> None:
    """A message's keys besides role and content (``name``, ``tool_call_id``, the environment's own)
    must be strings with values JSON can hold. Why: the episode keeps its messages as given, and
    the checkpoint of a pending rollout (overlap) writes them as JSON: a set or bytes in an
    observation made every checkpoint of the run fail. Such a message is the environment's bad
    answer, ending its episode like any other."""
    for key, value in message.items():
        if key in ("role", "content"):
            continue
        if not isinstance(key, str):
            raise TypeError(f"{where} has a key {_shown(key)}; a message's keys are strings, as JSON's are")
        try:
            strict_json.dumps(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"{where} key {key!r} holds {_shown(value)}, which JSON cannot hold ({exc}); "
                            "keep a message's values to str, numbers, bool, None, lists and dicts") from None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
