"""A typed handle on a loaded engine: calls the hooks and checks what plugins return.

The trainer never calls ``pm.hook.*`` directly; it goes through ``Engine`` so a plugin that
answers with the wrong type or length is reported by name instead of failing far away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from polyrl.algorithms.objective import Objective
from polyrl.errors import ConfigError, PluginError
from polyrl.registry import Registry
from polyrl.types import (
    Completion,
    EngineConfig,
    NamedWeights,
    Prompt,
    SamplingParams,
    StepMetrics,
    TokenSequence,
    TrainBatch,
)


class Engine:
    """A backend engine plus the hooks that drive it."""

    def __init__(self, registry: Registry, backend: str, config: EngineConfig) -> None:
        self.registry = registry
        self.backend = backend
        self.config = config
        self.distribution = registry.spec(backend).distribution
        self.raw: Any = registry.load(backend, config)
        self._hook_callers: dict[str, tuple[Any, Any]] = {}

    def _fail(self, hook: str, problem: str) -> PluginError:
        return PluginError(
            f"backend {self.backend!r} ({self.distribution or 'unknown distribution'}) "
            f"hook {hook}: {problem}"
        )

    def _callers(self, hook: str) -> tuple[Any, Any]:
        """(the hook restricted to the plugin that registered this backend, the hook without it).

        Why: hooks are firstresult, so with a plain call a third-party plugin that raises (or
        answers) for engines that are not its own would break every other backend. The owner
        answers first; only when it returns None do the other plugins get the call (a plugin may
        extend another backend's engines), and the owner is not asked twice.
        """
        if hook not in self._hook_callers:
            pm, owner = self.registry.pm, self.registry.owner(self.backend)
            if owner is None:
                self._hook_callers[hook] = (None, getattr(pm.hook, hook))
            else:
                others = [p for p in pm.get_plugins() if p is not owner]
                self._hook_callers[hook] = (pm.subset_hook_caller(hook, remove_plugins=others),
                                            pm.subset_hook_caller(hook, remove_plugins=[owner]))
        return self._hook_callers[hook]

    def _call(self, hook: str, **kwargs: Any) -> Any:
        try:
            owner, rest = self._callers(hook)
            if owner is not None:
                out = owner(engine=self.raw, **kwargs)
                if out is not None:
                    return out
            return rest(engine=self.raw, **kwargs)
        except (PluginError, ConfigError):
            raise  # already names the plugin, or the user's setting at fault
        except Exception as exc:
            raise self._fail(hook, f"raised {type(exc).__name__}: {exc}") from exc

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
        out = self._call("generate", prompts=list(prompts), sampling=sampling)
        if out is None:
            raise self._fail("generate", "no plugin implements it for this engine")
        if not isinstance(out, list) or not all(isinstance(c, Completion) for c in out):
            raise self._fail("generate", f"returned {type(out).__name__}, expected list[Completion]")
        if len(out) != len(prompts) * sampling.n:
            raise self._fail(
                "generate", f"returned {len(out)} completions for {len(prompts)} prompts x n={sampling.n}"
            )
        return out

    def logprobs(
        self, sequences: Sequence[TokenSequence], temperature: float = 1.0, reference: bool = False
    ) -> list[np.ndarray] | None:
        out = self._call(
            "logprobs", sequences=list(sequences), temperature=temperature, reference=reference
        )
        if out is None:
            if reference:
                return None
            raise self._fail("logprobs", "no plugin implements it for this engine")
        if len(out) != len(sequences):
            raise self._fail("logprobs", f"returned {len(out)} arrays for {len(sequences)} sequences")
        result = []
        for seq, lp in zip(sequences, out):
            lp = np.asarray(lp, dtype=np.float32).reshape(-1)
            if len(lp) != len(seq.completion_ids):
                raise self._fail("logprobs", "an array's length differs from its completion's")
            result.append(lp)
        return result

    def train_step(self, batch: TrainBatch, objective: Objective) -> StepMetrics:
        out = self._call("train_step", batch=batch, objective=objective)
        if not isinstance(out, StepMetrics):
            raise self._fail("train_step", f"returned {type(out).__name__}, expected StepMetrics")
        return out

    def all_gather(self, value: Any) -> list[Any]:
        """``value`` from every rank of a data-parallel run (``[value]`` when running alone)."""
        out = self._call("all_gather", value=value)
        return [value] if out is None else list(out)

    def export_weights(self) -> NamedWeights:
        out = self._call("export_weights")
        if out is None:
            raise self._fail("export_weights", "this backend cannot export weights")
        return out

    def import_weights(self, weights: NamedWeights) -> None:
        if not self._call("import_weights", weights=weights):
            raise self._fail("import_weights", "this backend cannot import weights")

    def save_checkpoint(self, path: str, state_path: str | None = None) -> None:
        """The shippable model into ``path``; optimizer/RNG state into ``state_path`` (beside it)."""
        if not self._call("save_checkpoint", path=path, state_path=state_path):
            raise self._fail("save_checkpoint", "this backend cannot save checkpoints")

    def load_checkpoint(self, path: str, state_path: str | None = None, weights_only: bool = False) -> None:
        if not self._call("load_checkpoint", path=path, state_path=state_path, weights_only=weights_only):
            raise self._fail("load_checkpoint", "this backend cannot load checkpoints")
