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

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
)
from polyrl.errors import ConfigError
from polyrl.types import LoraConfig, OptimizerConfig, as_lora_config

grpo, dapo, dr_grpo, rloo, reinforce = "grpo", "dapo", "dr_grpo", "rloo", "reinforce"


@attrs.define(frozen=True)
class Agent:
    """A model and the backend that trains it (the policy) or scores with it (the reference)."""

    model: str
    backend: str = "torch"
    #: polyrl's LoraConfig, or a ``peft.LoraConfig`` (converted; unsupported fields refused)
    lora: LoraConfig | None = attrs.field(default=None, converter=as_lora_config)
    dtype: str = "float32"


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


@attrs.define(frozen=True)
class GRPOConfig:
    """Algorithm knobs plus the few run settings a notebook user changes most."""

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


def prompt_rows(prompts: Any) -> list[dict[str, Any]]:
    """``prompts`` as dataset rows. Why the checks: a ``DatasetDict`` (``load_dataset(...)``
    without ``split``) iterates as its split names and a string as its characters, so either would
    train on prompts such as "train" instead of the data."""
    if isinstance(prompts, Mapping):
        splits = list(prompts)
        raise ConfigError(f"prompts is a {type(prompts).__name__} of splits ({', '.join(map(repr, splits))}), "
                          "not a sequence of prompts", field="prompts",
                          fix=f"pass one split, e.g. prompts=dataset[{(splits or ['train'])[0]!r}]")
    if isinstance(prompts, (str, bytes)):
        raise ConfigError("prompts is one string, which would be read as one prompt per character",
                          field="prompts", fix="pass a list of prompts, e.g. prompts=[\"What is 2 + 3?\"]")
    return [p if isinstance(p, dict) else {"prompt": p} for p in prompts]


def _is_torch_module(value: Any) -> bool:
    """A ``torch.nn.Module`` (a ``PreTrainedModel``), told without importing torch."""
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module" for c in type(value).__mro__)


def reward_entries(rewards: Any, weights: Sequence[float] | None = None) -> tuple[list[RewardSection], list[Any]]:
    """The ``[[rewards]]`` entries and function plugins for ``rewards``, read as TRL reads
    ``reward_funcs``: one reward or a list; a function is named as TRL names it (a partial after
    the function it wraps, a callable object after its class; a repeated name gets ``_2``, ``_3``);
    a string naming a local model folder is a reward model (polyrl's ``reward_model``). A model
    object or a Hub id is one error saying how to pass it; ``weights`` is TRL's ``reward_weights``."""
    from polyrl.rewards.functions import function_reward_plugin

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
    sections: list[RewardSection] = []
    plugins: list[Any] = []
    names: set[str] = set()
    for i, (reward, weight) in enumerate(zip(rewards, weights)):
        if isinstance(reward, str) and (Path(reward) / "config.json").is_file():
            sections.append(RewardSection(name="reward_model", weight=weight, options={"path": reward}))
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
            name, k = plugin.name, 1
            while name in names:
                k += 1
                name = f"{plugin.name}_{k}"
            if name != plugin.name:
                plugin = function_reward_plugin(reward, name=name)
            plugins.append(plugin)
            sections.append(RewardSection(name=name, weight=weight))
        else:
            raise ConfigError(f"rewards[{i}] is {type(reward).__name__}", field=f"rewards[{i}]",
                              fix="pass a reward name, a reward model folder or a callable")
        names.add(sections[-1].name or "")
    return sections, plugins


def run(
    algorithm: str,
    *,
    policy: Agent,
    prompts: Sequence[Any],
    rewards: Sequence[str | Callable[..., Any]] | str | Callable[..., Any] = ("numeric_match",),
    ref_policy: Agent | None = None,
    generation_config: GenerationConfig | None = None,
    grpo_config: GRPOConfig | None = None,
    eval_count: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``policy`` with ``algorithm`` on ``prompts`` (strings, chats, row dicts, or a 🤗
    ``Dataset``) with ``rewards`` (names, functions, reward model folders: ``reward_entries``)."""
    from polyrl.trainer import Trainer

    gen = generation_config or GenerationConfig()
    cfg = grpo_config or GRPOConfig()
    rows = prompt_rows(prompts)
    if not rows:
        raise ConfigError("no prompts given", field="prompts", fix="pass at least one prompt")
    overrides = {k: v for k, v in attrs.asdict(cfg).items()
                 if k in {f.name for f in attrs.fields(AlgorithmConfig)} and v is not None}
    reward_sections, plugins = reward_entries(rewards, cfg.reward_weights)
    config = RunConfig(
        model=ModelSection(path=policy.model, dtype=policy.dtype,
                           reference_path=ref_policy.model if ref_policy else None),
        data=DataSection(rows=rows),
        rewards=reward_sections,
        backends=BackendsSection(train=policy.backend, generate=gen.backend,
                                 reference=ref_policy.backend if ref_policy else None),
        generation=GenerationSection(group_size=gen.group_size, max_new_tokens=gen.max_new_tokens,
                                     temperature=gen.temperature, top_p=gen.top_p, top_k=gen.top_k,
                                     min_p=gen.min_p, repetition_penalty=gen.repetition_penalty,
                                     ignore_eos=gen.ignore_eos, stop=list(gen.stop), max_model_path=gen.max_model_path),
        algorithm=AlgorithmConfig.preset(algorithm, **overrides),
        optimizer=OptimizerConfig(lr=cfg.learning_rate, max_grad_norm=cfg.max_grad_norm),
        lora=policy.lora,
        train=TrainSection(steps=cfg.steps, prompts_per_step=min(cfg.prompts_per_step, len(rows)),
                           seed=cfg.seed, threads=cfg.threads, output_dir=cfg.output_dir),
        eval=EvalSection(count=eval_count),
    )
    return Trainer(config, extra_plugins=tuple(plugins)).run(progress=progress)
