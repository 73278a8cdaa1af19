"""TRL's ``environment_factory`` (``polyrl.trl.GRPOTrainer(environment_factory=...)``) run as a
polyrl environment.

What TRL 1.16 does, and how each part is done here:

* one instance per rollout, made by the factory (a dict of factories: the row's ``environment``
  column names one): each episode's polyrl environment is an ``_Episode`` that makes its instance
  in ``reset``, on the episode's own thread;
* ``reset(**row)`` (the row without ``environment`` when routed by it); a string it returns is
  appended to the prompt's last message before generation;
* the instance's public methods (those its class defines, but ``reset`` and ``get_reward``) are
  the tools of that rollout: the episode's own tools, run on its thread as polyrl runs an
  environment's tools;
* the rollout ends at the model's first answer without a tool call (``step`` says done);
* reward functions get ``environments=``, the instances in completion order: the episode puts its
  instance on its ``Completion`` (``rewarded``, read by ``spec.rewarded_environment``), which lives
  until the step is scored, and ``FunctionReward`` hands them over;
* a class defining ``get_reward()`` adds a reward named after the class, weight 1, which scores
  the rollouts of that class only (``environment_rewards``).

Every factory is called once up front (as TRL probes it), so a factory that raises, a result
without ``reset``, or a method the model could not be told about is one ``ConfigError`` naming
``environment_factory`` before any model loads.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyrl.agents.episodes import as_messages
from polyrl.agents.spec import EnvironmentSpec, Message, Observation
from polyrl.agents.tools import tool_schema
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl

#: the registered environment name a run with an ``environment_factory`` sets as ``[environment] name``
ENVIRONMENT_NAME = "trl-environment-factory"
FIELD = "environment_factory"
#: the column that picks a factory of a dict ``environment_factory`` (TRL's name)
ROUTE_COLUMN = "environment"
#: methods that are not tools (TRL's)
NOT_TOOLS = ("reset", "get_reward")


def tool_methods(instance: Any) -> list[Callable[..., Any]]:
    """The instance's methods the model may call, as TRL lists them: the functions its class
    defines (not properties, not attributes), public, but ``reset`` and ``get_reward``."""
    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in NOT_TOOLS and not name.startswith("_")]


def _defines(instance: Any, name: str) -> bool:
    return any(member == name for member, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction))


def with_observation(messages: list[Message], observation: Any, where: str) -> list[Message]:
    """The prompt's messages with ``reset``'s answer appended to the last one's content (TRL's
    rule); None leaves them as they are. A non-string answer (TRL's multimodal parts) is refused:
    polyrl's episodes render text."""
    if observation is None:
        return messages
    if not isinstance(observation, str):
        raise TypeError(f"{where}.reset returned {type(observation).__name__}; expected None or a str, which is "
                        "appended to the prompt's last message")
    last = messages[-1]
    return [*messages[:-1], {**last, "content": f"{last.get('content', '')}{observation}"}]


class _Episode:
    """One rollout's polyrl environment: makes the TRL instance in ``reset`` (the row picks its
    factory), offers its methods as ``tools`` and ends the episode at the first answer without a
    tool call. ``rewarded`` is the instance the reward functions get."""

    def __init__(self, plugin: TrlEnvironments, prompt_column: str) -> None:
        self._plugin = plugin
        self._prompt_column = prompt_column
        self.rewarded: Any = None
        self.tools: list[Callable[..., Any]] | None = None

    def reset(self, row: Mapping[str, Any]) -> list[Message]:
        plugin = self._plugin
        name = row.get(ROUTE_COLUMN) if plugin.routed else None
        factory = plugin.factories.get(name)
        if factory is None:
            raise ValueError(f"the row's {ROUTE_COLUMN} is {name!r}, not one of environment_factory's "
                             f"({', '.join(map(repr, plugin.factories))})")
        instance = factory()
        kwargs = {k: v for k, v in row.items() if not (plugin.routed and k == ROUTE_COLUMN)}
        observation = instance.reset(**kwargs)
        self.rewarded = instance
        self.tools = tool_methods(instance)
        prompt = row.get(self._prompt_column)
        messages = as_messages(prompt if prompt is not None else "")
        return with_observation(messages, observation, type(instance).__name__)

    def step(self, assistant_message: Message) -> Observation:
        return Observation(done=True)  # an answer without a tool call ends TRL's rollout


class TrlEnvironments:
    """A plugin registering the factories as the environment ``ENVIRONMENT_NAME``."""

    __name__ = "polyrl-trl-environments"  # the plugin manager's name for it

    def __init__(self, factories: Mapping[str | None, Callable[[], Any]], rewards: Sequence[Callable[..., Any]],
                 prompt_column: str = "prompt") -> None:
        self.factories = dict(factories)
        #: a dict factory: the row's ``environment`` column picks one
        self.routed = None not in self.factories
        #: reward functions for the classes that define ``get_reward`` (``environment_rewards``)
        self.rewards = list(rewards)
        self.prompt_column = prompt_column

    @hookimpl
    def polyrl_register_environments(self, register: Callable[[EnvironmentSpec], None]) -> None:
        register(EnvironmentSpec(name=ENVIRONMENT_NAME, create=lambda options: _Episode(self, self.prompt_column),
                                 summary="the environment_factory given to polyrl.trl.GRPOTrainer",
                                 distribution="GRPOTrainer(environment_factory=...)"))

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


def _probe(factory: Any, where: str, field: str, tool_names: Sequence[str]) -> Any:
    """One instance of ``factory``, checked as TRL checks its probe: callable, an instance with
    ``reset``, methods that make tools (type hints, an ``Args:`` docstring) named apart from
    ``tools``. Every problem is one ``ConfigError`` naming ``field``."""
    if not callable(factory):
        raise ConfigError(f"{where} is a {type(factory).__name__}, not a factory", field=field,
                          fix="pass a class or a function returning a new environment instance (or a dict of them)")
    try:
        instance = factory()
    except Exception as exc:  # noqa: BLE001 - the user's code: named, no traceback
        raise ConfigError(f"{where}() raised {type(exc).__name__}: {exc}", field=field,
                          fix="call the factory by hand to see why; it is called with no arguments") from None
    if instance is None or isinstance(instance, type):
        raise ConfigError(f"{where}() returned {instance!r}, not an environment instance", field=field,
                          fix="return a new instance (e.g. environment_factory=MyEnv, or lambda: MyEnv(...))")
    kind = type(instance).__name__
    if not _defines(instance, "reset"):
        raise ConfigError(f"{where}() returned a {kind}, which defines no reset method", field=field,
                          fix="define reset(self, **kwargs) on the class (it gets the dataset row; return None or "
                              "a str appended to the prompt)")
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
    return instance


def environment_rewards(kind: Any) -> Callable[..., Any]:
    """The reward TRL adds for a class defining ``get_reward()``: named after the class, it scores
    each rollout of exactly that class with its instance's ``get_reward()`` (None for the rest)."""
    if inspect.iscoroutinefunction(getattr(kind, "get_reward", None)):
        async def scored_async(environments: Sequence[Any], **kwargs: Any) -> list[float | None]:
            return [await e.get_reward() if type(e) is kind else None for e in environments]
        reward: Callable[..., Any] = scored_async
    else:
        def scored(environments: Sequence[Any], **kwargs: Any) -> list[float | None]:
            return [e.get_reward() if type(e) is kind else None for e in environments]
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
    rewards: list[Callable[..., Any]] = []
    kinds: list[type] = []
    for key, where, field in named:
        instance = _probe(factories[key], where, field, tool_names)
        if _defines(instance, "get_reward") and type(instance) not in kinds:
            kinds.append(type(instance))
            rewards.append(environment_rewards(type(instance)))
    return TrlEnvironments(factories, rewards, prompt_column)


__all__ = ["ENVIRONMENT_NAME", "TrlEnvironments", "environment_rewards", "tool_methods", "trl_environments"]
