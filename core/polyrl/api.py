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

It builds the same ``RunConfig`` a TOML file would and runs the same ``Trainer``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def run(
    algorithm: str,
    *,
    policy: Agent,
    prompts: Sequence[Any],
    rewards: Sequence[str | Callable[..., Any]] = ("numeric_match",),
    ref_policy: Agent | None = None,
    generation_config: GenerationConfig | None = None,
    grpo_config: GRPOConfig | None = None,
    eval_count: int = 0,
    progress: bool = True,
) -> dict[str, Any]:
    """Train ``policy`` with ``algorithm`` on ``prompts`` (strings, chats, or row dicts)."""
    from polyrl.rewards.functions import function_reward_plugin
    from polyrl.trainer import Trainer

    gen = generation_config or GenerationConfig()
    cfg = grpo_config or GRPOConfig()
    rows = [p if isinstance(p, dict) else {"prompt": p} for p in prompts]
    if not rows:
        raise ConfigError("no prompts given", field="prompts", fix="pass at least one prompt")
    overrides = {k: v for k, v in attrs.asdict(cfg).items()
                 if k in {f.name for f in attrs.fields(AlgorithmConfig)} and v is not None}
    reward_sections, plugins = [], []
    for i, reward in enumerate(rewards):
        if isinstance(reward, str):
            reward_sections.append(RewardSection(name=reward))
        elif callable(reward):
            name = getattr(reward, "__name__", f"reward_{i}")
            plugins.append(function_reward_plugin(reward, name=name))
            reward_sections.append(RewardSection(name=name))
        else:
            raise ConfigError(f"rewards[{i}] is {type(reward).__name__}", field=f"rewards[{i}]",
                              fix="pass a reward name or a callable")
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
