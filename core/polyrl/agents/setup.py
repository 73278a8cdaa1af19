"""From a run's ``[environment]`` to an ``EpisodeRunner``: checked before any model loads.

Kept out of the trainer so the trainer only asks "episodes or single turns?".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner
from polyrl.agents.glue import EncodeChat
from polyrl.agents.loading import ENVIRONMENT_FIELD, resolve_environment, resolve_tools
from polyrl.agents.parsing import FORMATS, parse_tool_calls
from polyrl.agents.spec import GeneratorMethod, checked_environment, environment_tools
from polyrl.agents.threads import CallRaised, CallTimedOut, Worker, describe
from polyrl.agents.tools import ToolBox
from polyrl import step_gather
from polyrl.errors import ConfigError, PluginError, RewardError
from polyrl.folder_chat import FolderChat
from polyrl.logs import get_logger
from polyrl.reasoning import closes_reasoning

if TYPE_CHECKING:
    from polyrl.backend_kit.eos_rest import EosRest
    from polyrl.config import RunConfig
    from polyrl.control_chars import ControlProbe
    from polyrl.engine import Engine
    from polyrl.registry import Registry


log = get_logger(__name__)


@attrs.define
class EnvironmentPlan:
    """What ``check_environment`` resolved: the run's tool box and the environment factory."""

    toolbox: ToolBox | None
    make_environment: Callable[[], Any] | None
    #: the schemas of the tools the setup check's environment offers (its ``tools``), asked of the
    #: model's tokenizer once its models load (``polyrl.control_setup``)
    own_schemas: list[dict[str, Any]] = attrs.field(factory=list)


def check_environment(config: RunConfig, registry: Registry) -> EnvironmentPlan | None:
    """Resolve ``[environment]`` (None when the run is single-turn); every mistake is a
    ``ConfigError`` naming the key, raised before the models load."""
    env = config.environment
    if not env.enabled:
        return None
    for role, backend, capability, what in (
        ("generate", config.backends.generate_backend, "token_prompts", "generate from token ids"),
        ("train", config.backends.train, "loss_mask", "train on masked episodes"),
    ):
        caps = registry.spec(backend).capabilities
        if not getattr(caps, capability):
            raise ConfigError(
                f"backend {backend!r} cannot {what} (Capabilities.{capability}), which multi-turn "
                "episodes need", field=f"backends.{role}",
                fix="use torch or mlx (or a backend declaring it; `polyrl backends --json` shows capabilities)")
    if env.tool_format not in FORMATS:
        raise ConfigError(f"unknown tool_format {env.tool_format!r}", field="environment.tool_format",
                          fix=f"use one of {', '.join(FORMATS)}")
    # before resolve_tools: the python tool's status (its probe) follows the run's python_isolation
    if isinstance(env.tools, (list, tuple)):
        registered = registry.tools_by_name()
        _check_python_tool([registered[n.strip()].function for n in env.tools
                            if isinstance(n, str) and n.strip() in registered], env.python_isolation)
    tools = resolve_tools(env.tools, registry)
    # built now: a tool's schema (a missing docstring or hint) is an error before models load
    toolbox = ToolBox(tools, timeout_s=env.tool_timeout_s, max_concurrency=env.max_concurrent_tools) \
        if tools else None
    make_environment, own_schemas = None, []
    if env.name is not None:
        spec = resolve_environment(env.name, registry)
        make_environment = functools.partial(spec.create, dict(env.options))
        own_schemas = check_factory(make_environment, env.name, env.env_timeout_s, toolbox)  # its options and tools too
    return EnvironmentPlan(toolbox=toolbox, make_environment=make_environment, own_schemas=own_schemas)


def _check_python_tool(tools: Sequence[Callable[..., Any]], isolation: str) -> None:
    """Build the ``python`` tool's sandbox now when the run offers it: a machine where it cannot
    isolate the model's code is one ``ConfigError`` before the models load (it was built at the
    first tool call, falling back with a warning to levels where the code read ~/.netrc)."""
    from polyrl.agents import builtin
    from polyrl.sandbox.isolation import LEVELS

    field = "environment.python_isolation"
    if isolation not in LEVELS:
        raise ConfigError(f"unknown isolation {isolation!r}", field=field, fix=f"use one of {', '.join(LEVELS)}")
    if not any(getattr(fn, "__wrapped__", fn) is builtin.python for fn in tools):
        if isolation != "auto":
            raise ConfigError("is set, but the python tool is not in environment.tools", field=field,
                              fix='add "python" to tools, or remove python_isolation')
        return
    try:
        builtin.configure_python_tool(isolation)
    except RewardError as exc:
        problem, fix = builtin.python_tool_refusal(str(exc))
        raise ConfigError(problem, field=field, fix=fix) from None


def check_factory(make: Callable[[], Any], name: str, timeout_s: float,
                  toolbox: ToolBox | None = None) -> list[dict[str, Any]]:
    """Call the environment factory twice as the episodes will (on a worker thread, within
    ``env_timeout_s``): what it raises, a slow factory, a result that is no environment instance
    or the same object twice is one ``ConfigError`` now, as are its own ``tools`` whose schemas
    cannot be built or whose names clash with ``toolbox``'s ([environment] tools). Why: otherwise
    every episode ends in an environment error after the models load (or the check blocks for as
    long as the factory does), one object shared by concurrent episodes mixes their games without
    any error, and a bad tool stopped the run after the models loaded, naming environment.tools.
    Returns the schemas of the environment's own tools (none: [])."""
    worker = Worker(name="polyrl-env-check")
    try:
        first, second = (_create(worker, make, name, timeout_s) for _ in range(2))
    finally:
        worker.close()
    if first is second:
        raise ConfigError(f"the factory {name!r} returned the same {type(first).__name__} object twice; "
                          "episodes run concurrently, one environment each", field=ENVIRONMENT_FIELD,
                          fix="return a new instance per call (e.g. return MyEnv(options)); keep an "
                              "episode's state on it, not in module globals or class attributes")
    return _check_own_tools(first, name, toolbox)


def _check_own_tools(env: Any, name: str, toolbox: ToolBox | None) -> list[dict[str, Any]]:
    """The schemas of the tools a new environment offers (its ``tools`` attribute), checked as an
    episode would add them."""
    what = f"the factory {name!r} made a {type(env).__name__} whose"
    try:
        own = environment_tools(env)
        base = toolbox or ToolBox(())
        return base.extended(own).schemas[len(base.schemas):] if own else []
    except TypeError as exc:
        raise ConfigError(f"{what} tools are unusable: {exc}", field=ENVIRONMENT_FIELD,
                          fix="set tools to a list of the environment's methods (or leave it unset)") from None
    except ConfigError as exc:
        raise ConfigError(f"{what} own tools cannot be offered: {exc.message}", field=ENVIRONMENT_FIELD,
                          fix=exc.fix) from None


def _create(worker: Worker, make: Callable[[], Any], name: str, timeout_s: float) -> Any:
    try:
        return worker.call_blocking(lambda: checked_environment(make()), timeout_s)
    except CallRaised as raised:
        if isinstance(raised.cause, ConfigError):  # the environment's own check of its options
            raise raised.cause from None
        if isinstance(raised.cause, GeneratorMethod):  # the factory worked: the class it made is at fault
            raise ConfigError(f"the factory {name!r} made an environment whose {raised.cause.problem}",
                              field=ENVIRONMENT_FIELD, fix=raised.cause.fix) from None
        raise ConfigError(f"the factory {name!r} failed when called with environment.options: "
                          f"{describe(raised.cause, run_goes_on=False)}", field=ENVIRONMENT_FIELD,
                          fix="point at a factory taking the options dict and returning a new environment "
                              "(e.g. def create(options): return MyEnv(options)); call it by hand with "
                              "these options to see why") from None
    except CallTimedOut:
        raise ConfigError(f"the factory {name!r} did not return within {timeout_s:g} s "
                          "(environment.env_timeout_s; it runs once per episode)", field=ENVIRONMENT_FIELD,
                          fix="make the factory faster (do slow setup once, at import), or raise "
                              "environment.env_timeout_s") from None


def _chat_encoder(engines: Sequence[Engine]) -> EncodeChat:
    """The first engine whose backend has a tokenizer (a remote generator has none)."""
    probe = [{"role": "user", "content": "hi"}]
    for engine in engines:
        if engine.encode_chat(probe, None, True) is not None:
            return _never_none(engine)
    raise ConfigError("no engine of this run can apply the chat template (encode_chat)", field="backends",
                      fix="train with torch or mlx, whose tokenizers render the episodes' turns")


def _never_none(engine: Engine) -> EncodeChat:
    def encode(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
               add_generation_prompt: bool) -> np.ndarray:
        ids = engine.encode_chat(messages, tools, add_generation_prompt)
        if ids is None:  # it answered the probe: a None now is the plugin's fault
            raise PluginError(f"backend {engine.backend!r}: encode_chat returned None mid-run")
        return ids
    return encode


def check_template(config: RunConfig, plan: EnvironmentPlan, folder: FolderChat) -> None:
    """How the chat template shows a tool's result (``EpisodeRunner.check_tool_results``), asked
    of the model folder's tokenizer alone, before any weight loads: a template that shows it in no
    role is the same ConfigError in seconds, not after minutes of loading. Skipped (the check when
    the runner is built stands) without [environment] tools, or where the folder's tokenizer cannot
    be loaded here (``FolderChat.chat``)."""
    if plan.toolbox is None or not plan.toolbox.schemas:
        return
    chat = folder.chat()
    if chat is None:
        return
    probe = EpisodeRunner(_samples_nothing, chat[0], EpisodeLimits(), toolbox=plan.toolbox, model_name=config.model.path)
    probe.check_tool_results(plan.toolbox.schemas)


def check_reasoning_context(config: RunConfig, plan: EnvironmentPlan | None, folder: FolderChat) -> str | None:
    """The startup warning of a template that writes earlier turns otherwise than the episodes hold
    them (``EpisodeRunner.check_reasoning_kept``: their ``<think>`` left out, or the closed block of
    the generation prompt), asked of the model folder's tokenizer alone: what ``polyrl launch
    --dry-run`` reports, where the run warns once its models load. The warning, or None (also where
    that tokenizer cannot be loaded here, or the run has no episodes)."""
    if plan is None or (plan.make_environment is None and (plan.toolbox is None or not plan.toolbox.schemas)):
        return None
    chat = folder.chat()
    if chat is None:
        return None
    encode, decode = chat
    runner = EpisodeRunner(_samples_nothing, encode, EpisodeLimits(), make_environment=plan.make_environment,
                           toolbox=plan.toolbox, model_name=config.model.path)
    try:
        closed = closes_reasoning(lambda messages, prompt: encode(messages, None, prompt), decode)
    except Exception:  # noqa: BLE001 - the template is the folder's code; the run's own check stands
        closed = False
    return runner.check_reasoning_kept(closed)


def _samples_nothing(prompts: Sequence[Any], sampling: Any) -> list[Any]:
    raise AssertionError("the template check samples nothing")  # pragma: no cover


def build_runner(config: RunConfig, plan: EnvironmentPlan, gen_engine: Engine, train_engine: Engine,
                 probe: ControlProbe | None = None) -> EpisodeRunner:
    """The run's episode runner; ``probe`` asks the text its episodes insert (observations, tool
    results) for control characters the model's tokenizer misreads (``polyrl.control_chars``)."""
    env = config.environment
    parse = functools.partial(parse_tool_calls, fmt=env.tool_format)
    runner = EpisodeRunner(gen_engine.generate, _chat_encoder([gen_engine, train_engine]),
                           EpisodeLimits(max_turns=env.max_turns, max_episode_tokens=env.max_episode_tokens,
                                         max_tool_calls_per_turn=env.max_tool_calls_per_turn,
                                         max_length=config.model.max_length),
                           make_environment=plan.make_environment, toolbox=plan.toolbox, parse=parse,
                           prompt_column=config.data.prompt_column,
                           tools_prompt_format="json" if env.tool_format == "json" else "hermes",
                           env_timeout_s=env.env_timeout_s, environment_name=env.name,
                           tool_timeout_s=env.tool_timeout_s, max_concurrent_tools=env.max_concurrent_tools,
                           tool_format=env.tool_format, model_name=config.model.path, probe=probe,
                           eos_ids=_eos_ids([gen_engine, train_engine]),
                           eos_rest=_eos_rest([gen_engine, train_engine]))
    # how the template shows a tool's result (an environment's tool messages too): decided (or refused) now
    runner.check_tool_results(plan.toolbox.schemas if plan.toolbox is not None else [])
    if runner.tool_results_role == "user":
        log.info("this model's chat template cannot show 'tool' messages; tool results (and an environment's "
                 "'tool' messages) go back to the model as one 'user' message per turn, each between "
                 "<tool_response> tags", reason=runner.tool_results_reason, model=config.model.path)
    return runner


def _eos_ids(engines: Sequence[Engine]) -> frozenset[int]:
    """The end-of-sequence ids of the first engine that names them (the generator's; the remote
    backend names none, and the train engine's tokenizer renders its episodes)."""
    for engine in engines:
        ids = getattr(getattr(engine, "raw", None), "eos_ids", None)
        if ids:
            return frozenset(int(i) for i in ids)
    return frozenset()


def _eos_rest(engines: Sequence[Engine]) -> EosRest | None:
    """``backend_kit.eos_rest`` on the first engine's tokenizer (the remote backend has none: an end
    marker whose token holds the EOS's text then goes whole after a turn's EOS, as before)."""
    from polyrl.backend_kit.eos_rest import eos_rest

    for engine in engines:
        tokenizer = getattr(getattr(engine, "raw", None), "tokenizer", None)
        if tokenizer is not None:
            return eos_rest(tokenizer)
    return None


def untrainable(completions: Sequence[Any]) -> np.ndarray:
    """Per completion: True for an episode with nothing to train on (``step_gather.untrainable``,
    which the trainer applies to the whole step's gathered shard). That is one with no token
    (its reset failed), and every episode of a step in which all ended in an environment error
    (their rewards say how the environment broke, not how the model did). The trainer drops
    them like unscored samples; a step with nothing left is skipped, never sent to train_step."""
    return step_gather.untrainable(step_gather.Shard.of(completions))


def episode_metrics(completions: Sequence[Any]) -> dict[str, float]:
    """Per-step means over these episodes (empty for single-turn completions)."""
    return step_gather.episode_metrics(step_gather.Shard.of(completions))
