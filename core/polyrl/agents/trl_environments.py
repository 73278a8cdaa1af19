"""TRL's ``environment_factory`` (``polyrl.trl.GRPOTrainer(environment_factory=...)``) run as a
polyrl environment.

What TRL 1.16 does, and how each part is done here:

* a pool of instances per factory (a dict of factories: the row's ``environment`` column names
  one), made once and reused: the probe below is the first, and the pool grows only while a
  rollout needs more at once than it holds (all of a rollout's episodes run together, so it ends
  as large as a rollout's episodes of that factory). Each episode's polyrl environment is an
  ``_Episode`` that takes a free instance in ``reset`` and hands it back when the episode is over
  (``episode_over``, called by the runner after the rollout): an instance serves one rollout at a
  time, and each lives on a thread of its own (``polyrl.agents.trl_pool``);
* ``reset(**row)`` before every rollout (the row without ``environment`` when routed by it, and
  without ``prompt`` where polyrl.trl wrote the empty one TRL defaults), the row's own values as
  TRL passes the dataset's row: its prompt column as the dataset holds it, not the chat
  ``data.system_prompt`` builds from it for the model (``polyrl.stored_rows``); what it returns is
  appended to the prompt's last message before generation: a str, or TRL's list of content
  parts, of text only (polyrl's episodes render text);
* the instance's public methods (those its class defines, but ``reset`` and ``get_reward``) are
  the tools of that rollout: the episode's own tools, run on the instance's thread;
* the rollout ends at the model's first answer without a tool call (``step`` says done);
* reward functions get ``environments=``, the instances in completion order: the episode puts its
  instance on its ``Completion`` (``rewarded``, read by ``spec.rewarded_environment``), and
  ``FunctionReward`` hands them over; the step is scored before the next rollout resets them;
* a class defining ``get_reward()`` adds a reward named after the class, weight 1, which scores
  the rollouts of that class only (``environment_rewards``), run on the instance's thread and loop
  as its ``reset`` and tools are; a ``get_reward`` with a ``yield``
  (a generator function, which runs none of its code) is refused at the probe;
* a factory that raises while the pool grows, or a ``reset`` that raises or returns what cannot
  be appended, stops the run as it stops TRL's: the episode raises ``EnvironmentFailed``, and the
  trainer stops at once, before that rollout is scored or trained (the steps before it
  checkpointed; in an evaluation, one after training after the model is saved), with one error
  line naming the class and the method. A call past ``env_timeout_s`` stays an episode's error,
  as for any environment.

Every factory is called once up front (as TRL probes it), so a factory that raises, a result
without ``reset``, or a method the model could not be told about is one ``ConfigError`` naming
``environment_factory`` before any model loads.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.agents.episodes import EnvironmentFailed, as_messages
from polyrl.agents.spec import EnvironmentSpec, GeneratorMethod, Message, Observation
from polyrl.agents.threads import describe
from polyrl.agents.tools import tool_schema
from polyrl.agents.trl_pool import Pool, Pooled, make
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.stored_rows import as_asked, as_stored

#: the registered environment name a run with an ``environment_factory`` sets as ``[environment] name``
ENVIRONMENT_NAME = "trl-environment-factory"
FIELD = "environment_factory"
#: the column that picks a factory of a dict ``environment_factory`` (TRL's name)
ROUTE_COLUMN = "environment"
#: methods that are not tools (TRL's)
NOT_TOOLS = ("reset", "get_reward")
#: the prompt TRL gives a row without one (a ``reset`` writes it), kept out of ``reset``'s arguments
EMPTY_PROMPT: list[Message] = [{"role": "user", "content": ""}]


def tool_methods(instance: Any) -> list[Callable[..., Any]]:
    """The instance's methods the model may call, as TRL lists them: the functions its class
    defines (not properties, not attributes), public, but ``reset`` and ``get_reward``."""
    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in NOT_TOOLS and not name.startswith("_")]


def _defines(instance: Any, name: str) -> bool:
    return any(member == name for member, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction))


def with_observation(messages: list[Message], observation: Any, where: str) -> list[Message]:
    """The prompt's messages with ``reset``'s answer appended to the last one's content (TRL's
    rule); None leaves them as they are. TRL's list of content parts is appended as its text
    when every part is text, and a last message of text parts is its text; another part (an
    image) is refused: polyrl's episodes render text."""
    if observation is None:
        return messages
    if isinstance(observation, list):
        parts = observation
        if not all(isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
                   for p in parts):
            raise TypeError(f"{where}.reset returned content parts that are not all text "
                            "({'type': 'text', 'text': str}); polyrl's episodes render text")
        observation = "".join(p["text"] for p in parts)
    if not isinstance(observation, str):
        raise TypeError(f"{where}.reset returned {type(observation).__name__}; expected None, a str or a list "
                        "of text parts, which is appended to the prompt's last message")
    last = messages[-1]
    return [*messages[:-1], {**last, "content": _text_of(last.get("content", ""), where) + observation}]


def _text_of(content: Any, where: str) -> str:
    """The text of the prompt's last message, which ``reset``'s answer is appended to: a str, or
    TRL's list of content parts when every part is text. Why: the answer was appended to the
    list's Python repr (``"[{'type': 'text', 'text': 'Hi'}] Think."``), which the model read."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    what = "content parts that are not all text" if isinstance(content, list) else type(content).__name__
    raise TypeError(f"the prompt's last message holds {what}, which {where}.reset's answer cannot be appended to; "
                    "polyrl's episodes render text: write the row's prompt as text or text parts")


def _stop(text: str, fix: str = "call it by hand with this row to see why") -> EnvironmentFailed:
    """The error that stops the run (TRL's run stops at such an error too), one line."""
    return EnvironmentFailed(f"{text}; the run stops there, as TRL's does. Fix: {fix}", alone=True)


class _Episode:
    """One rollout's polyrl environment: takes a pooled TRL instance in ``reset`` (the row picks
    its factory) and resets it, offers its methods as ``tools`` and ends the episode at the first
    answer without a tool call. ``rewarded`` is the instance the reward functions get;
    ``episode_over`` hands it back to the pool. It gets the row as stored and as asked
    (``READS_STORED``): ``reset`` gets the row's own values, the model the chat asked."""

    polyrl_reads_stored_row = True  # stored_rows.READS_STORED

    def __init__(self, plugin: TrlEnvironments, prompt_column: str) -> None:
        self._plugin = plugin
        self._prompt_column = prompt_column
        self._pooled: Pooled | None = None
        self.rewarded: Any = None
        self.tools: list[Callable[..., Any]] | None = None

    def reset(self, given: Mapping[str, Any]) -> list[Message]:
        plugin = self._plugin
        row = as_stored(given)
        name = row.get(ROUTE_COLUMN) if plugin.routed else None
        factory = plugin.factories.get(name)
        if factory is None:
            raise ValueError(f"the row's {ROUTE_COLUMN} is {name!r}, not one of environment_factory's "
                             f"({', '.join(map(repr, plugin.factories))})")
        where = FIELD if name is None else f"{FIELD}[{name!r}]"
        try:
            pooled = self._pooled = plugin.pool.take(name)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit too: the user's factory, growing the pool
            raise _stop(f"{where}() raised {describe(exc, run_goes_on=False)} when the pool of its instances "
                        "grew") from None
        instance = pooled.instance
        wrong = _not_an_environment(instance)
        if wrong is not None:  # checked at the probe; a later call may return something else
            pooled.spoiled = True
            raise _stop(f"{where}() returned {wrong} when the pool of its instances grew",
                        fix=f"make {where} return a new environment instance on every call")
        self.rewarded = instance
        kind = type(instance).__name__
        prompt = as_asked(given).get(self._prompt_column)
        kwargs = {k: v for k, v in row.items() if not (plugin.routed and k == ROUTE_COLUMN)
                  and not (k == self._prompt_column and plugin.prompt_defaulted and isinstance(v, list)
                           and v == EMPTY_PROMPT)}
        try:
            observation = pooled.call(lambda: instance.reset(**kwargs))
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit too: the user's reset
            pooled.spoiled = True  # half reset: never handed out again
            raise _stop(f"{kind}.reset (of {where}) raised {describe(exc, run_goes_on=False)}") from None
        try:
            messages = with_observation(as_messages(prompt if prompt is not None else ""), observation, kind)
        except (TypeError, ConfigError) as exc:  # a row's prompt that is not chat-like: as_messages says so
            raise _stop(str(exc)) from None
        self.tools = [pooled.forwarded(method) for method in tool_methods(instance)]
        return messages

    def step(self, assistant_message: Message) -> Observation:
        return Observation(done=True)  # an answer without a tool call ends TRL's rollout

    def episode_over(self) -> None:
        """Hand the instance back to the pool (the runner calls it once the rollout is over)."""
        pooled, self._pooled = self._pooled, None
        if pooled is not None:
            self._plugin.pool.put(pooled)


class TrlEnvironments:
    """A plugin registering the factories as the environment ``ENVIRONMENT_NAME``, with the pool
    of their instances (seeded with the probes, as TRL's is)."""

    __name__ = "polyrl-trl-environments"  # the plugin manager's name for it

    def __init__(self, factories: Mapping[str | None, Callable[[], Any]], rewards: Sequence[Callable[..., Any]],
                 prompt_column: str = "prompt", probes: Sequence[Pooled] = ()) -> None:
        self.factories = dict(factories)
        #: a dict factory: the row's ``environment`` column picks one
        self.routed = None not in self.factories
        #: reward functions for the classes that define ``get_reward`` (``environment_rewards``)
        self.rewards = list(rewards)
        self.prompt_column = prompt_column
        self.pool = Pool(self.factories)
        for pooled in probes:
            self.pool.add(pooled)
        weakref.finalize(self, self.pool.close)  # the instances' threads end with the trainer that holds it
        #: polyrl.trl wrote ``EMPTY_PROMPT`` into rows without a prompt (``default_prompts``): a row
        #: holding it gets no ``prompt`` argument in ``reset``, as TRL's gets none
        self.prompt_defaulted = False

    @hookimpl
    def polyrl_register_environments(self, register: Callable[[EnvironmentSpec], None]) -> None:
        register(EnvironmentSpec(name=ENVIRONMENT_NAME, create=lambda options: _Episode(self, self.prompt_column),
                                 summary="the environment_factory given to polyrl.trl.GRPOTrainer",
                                 distribution="GRPOTrainer(environment_factory=...)"))

    def default_prompts(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` with TRL's empty prompt where a row has no prompt column (its ``reset`` writes
        the prompt), remembered so that ``reset`` does not get it."""
        column = self.prompt_column
        if all(column in row for row in rows):
            return [dict(row) for row in rows]
        self.prompt_defaulted = True
        return [dict(row) if column in row else {**row, column: [dict(m) for m in EMPTY_PROMPT]} for row in rows]

    def check_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """A dict factory needs every row to name one of its keys in ``environment``: an unknown
        name is one ``ConfigError`` now (TRL raises it at the batch that holds the row)."""
        if not self.routed:
            return
        for i, row in enumerate(rows):
            name = row.get(ROUTE_COLUMN)
            if name not in self.factories:
                raise ConfigError(f"train_dataset row {i} has {ROUTE_COLUMN} = {name!r}, which is not a key of "
                                  f"environment_factory ({', '.join(map(repr, self.factories))})", field=FIELD,
                                  fix=f"give every row an {ROUTE_COLUMN!r} column naming one of the dict's keys, "
                                      "or add a factory under that name")


def _probe(key: str | None, factory: Any, where: str, field: str, tool_names: Sequence[str]) -> Pooled:
    """One instance of ``factory`` (made on its own thread: it seeds the pool, as TRL's probe
    does), checked as TRL checks its probe: callable, an instance with ``reset``, methods that
    make tools (type hints, an ``Args:`` docstring) named apart from ``tools``. Every problem is
    one ``ConfigError`` naming ``field``."""
    if not callable(factory):
        raise ConfigError(f"{where} is a {type(factory).__name__}, not a factory", field=field,
                          fix="pass a class or a function returning a new environment instance (or a dict of them)")
    try:
        pooled = make(key, factory)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit too: the user's code: named, no traceback
        raise ConfigError(f"{where}() raised {type(exc).__name__}: {exc}", field=field,
                          fix="call the factory by hand to see why; it is called with no arguments") from None
    try:
        _check_probe(pooled.instance, where, field, tool_names)
    except ConfigError:
        pooled.worker.close()
        raise
    return pooled


def _not_an_environment(instance: Any) -> str | None:
    """What ``instance`` is, said for an error, when it is no environment instance (None, a class,
    an object whose class defines no ``reset``); None when it is one."""
    if instance is None or isinstance(instance, type):
        return f"{instance!r}, not an environment instance"
    if not _defines(instance, "reset"):
        return f"a {type(instance).__name__}, which defines no reset method"
    return None


def _check_probe(instance: Any, where: str, field: str, tool_names: Sequence[str]) -> None:
    """TRL's checks of a probed instance (``_probe``), each one ``ConfigError``."""
    wrong = _not_an_environment(instance)
    if wrong is not None:
        no_reset = instance is not None and not isinstance(instance, type)
        raise ConfigError(f"{where}() returned {wrong}", field=field,
                          fix="define reset(self, **kwargs) on the class (it gets the dataset row; return None or "
                              "text appended to the prompt)" if no_reset else
                              "return a new instance (e.g. environment_factory=MyEnv, or lambda: MyEnv(...))")
    kind = type(instance).__name__
    reward = getattr(type(instance), "get_reward", None)
    if _defines(instance, "get_reward") and (inspect.isgeneratorfunction(reward) or inspect.isasyncgenfunction(reward)):
        # scored as a generator object: the reward got no number, and none of its code ran
        generator = GeneratorMethod(instance, "get_reward")
        raise ConfigError(generator.problem, field=field, fix=generator.fix)
    for method in tool_methods(instance):
        try:
            tool_schema(method)
        except ConfigError as exc:
            raise ConfigError(f"{kind}.{method.__name__} is offered to the model as a tool, but {exc.message}",
                              field=field, fix=f"{exc.fix or 'document it'}; or make it private (_{method.__name__})"
                              ) from None
        if method.__name__ in tool_names:
            raise ConfigError(f"{kind}.{method.__name__} and tools=[...] both offer a tool named "
                              f"{method.__name__!r}; the model calls a tool by its name", field=field,
                              fix="rename one of the two")


def environment_rewards(kind: Any, owner: Callable[[Any], Pooled | None] | None = None) -> Callable[..., Any]:
    """The reward TRL adds for a class defining ``get_reward()``: named after the class, it scores
    each rollout of exactly that class with its instance's ``get_reward()`` (None for the rest).
    ``owner`` (``Pool.owner``) finds an instance's thread: ``get_reward`` runs there (an ``async
    def`` on its loop), as ``reset`` and the tools do. Why: TRL calls it on the thread ``reset``
    ran on, and state made there (an sqlite connection) raised on a reward thread."""
    def pooled(instance: Any) -> Pooled | None:
        return owner(instance) if owner is not None else None

    if inspect.iscoroutinefunction(getattr(kind, "get_reward", None)):
        async def own_async(e: Any) -> Any:
            where = pooled(e)
            return await (where.acall(e.get_reward) if where is not None else e.get_reward())

        async def scored_async(environments: Sequence[Any], **kwargs: Any) -> list[float | None]:
            return [await own_async(e) if type(e) is kind else None for e in environments]
        reward: Callable[..., Any] = scored_async
    else:
        def own(e: Any) -> Any:
            where = pooled(e)
            return where.call(e.get_reward) if where is not None else e.get_reward()

        def scored(environments: Sequence[Any], **kwargs: Any) -> list[float | None]:
            return [own(e) if type(e) is kind else None for e in environments]
        reward = scored
    reward.__name__ = reward.__qualname__ = kind.__name__
    reward.__doc__ = f"{kind.__name__}.get_reward() of each rollout's environment (TRL's environment-owned reward)."
    return reward


def trl_environments(environment_factory: Any, tool_names: Sequence[str] = (),
                     prompt_column: str = "prompt") -> TrlEnvironments:
    """``environment_factory`` (a factory, or a dict name -> factory) checked by probing one
    instance of each (``_probe``), with the ``get_reward`` rewards of their classes."""
    if isinstance(environment_factory, Mapping):
        if not environment_factory:
            raise ConfigError("environment_factory is an empty dict", field=FIELD,
                              fix="map each environment name (the rows' environment column) to a factory")
        named = [(k, f"{FIELD}[{k!r}]", f"{FIELD}[{k!r}]") for k in environment_factory]
        bad = [k for k in environment_factory if not isinstance(k, str)]
        if bad:
            raise ConfigError(f"environment_factory has the key {bad[0]!r}; the rows' environment column names "
                              "a factory by a str", field=FIELD, fix="use str keys")
        factories: dict[str | None, Any] = dict(environment_factory)
    else:
        named = [(None, FIELD, FIELD)]
        factories = {None: environment_factory}
    kinds: list[type] = []
    probes: list[Pooled] = []
    try:
        for key, where, field in named:
            probes.append(_probe(key, factories[key], where, field, tool_names))
    except ConfigError:
        for pooled in probes:
            pooled.worker.close()
        raise
    for pooled in probes:
        instance = pooled.instance
        if _defines(instance, "get_reward") and type(instance) not in kinds:
            kinds.append(type(instance))
    plugin = TrlEnvironments(factories, [], prompt_column, probes)
    plugin.rewards = [environment_rewards(kind, plugin.pool.owner) for kind in kinds]
    return plugin


__all__ = ["ENVIRONMENT_NAME", "TrlEnvironments", "environment_rewards", "tool_methods", "trl_environments"]
