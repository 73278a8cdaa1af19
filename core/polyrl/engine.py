"""A typed handle on a loaded engine: calls the hooks and checks what plugins return.

The trainer never calls ``pm.hook.*`` directly; it goes through ``Engine`` so a plugin that
answers with the wrong type or length is reported by name instead of failing far away.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np

from polyrl.algorithms.objective import Objective
from polyrl.errors import ConfigError, NonFiniteModel, OutOfMemory, PluginError, PolyrlError
from polyrl.model_config import config_tables, first_positive_int
from polyrl.registry import Registry
from polyrl.text_validity import check_prompt
from polyrl.types import (
    Capabilities,
    Completion,
    EngineConfig,
    NamedWeights,
    Prompt,
    SamplingParams,
    StepMetrics,
    TokenPrompt,
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
        self._hook_callers: dict[str, Any] = {}
        #: the embedding table's rows when config.json says (a sampled id past it is the plugin's fault)
        self.vocab_size = first_positive_int(config_tables(config.model), ("vocab_size",))
        try:
            self.raw: Any = registry.load(backend, config)
        except PolyrlError:
            raise  # unusable here, or the user's setting at fault: already one clear line
        except Exception as exc:  # the plugin's load failed: name it, never a bare traceback
            raise self._fail("load", f"raised {type(exc).__name__}: {exc}") from exc
        except SystemExit as exc:  # sys.exit() in load ended the run with its code and no word
            raise self._fail("load", f"called sys.exit({exc.code!r}); load must raise an exception, never exit "
                                     "the process") from exc

    @property
    def capabilities(self) -> Capabilities:
        """What this engine's backend declared (the conformance kit's episode checks read it)."""
        return self.registry.spec(self.backend).capabilities

    def _fail(self, hook: str, problem: str) -> PluginError:
        return PluginError(
            f"backend {self.backend!r} ({self.distribution or 'unknown distribution'}) "
            f"hook {hook}: {problem}"
        )

    def _owner_hook(self, hook: str) -> Any:
        """The hook restricted to the plugin that registered this backend.

        Why: a compute hook answered by whichever plugin speaks first lets a third-party plugin
        hijack (or break) another backend's engines, and an error would blame the wrong backend.
        A plugin that wants to change one hook of another backend registers its own backend name.
        """
        if hook not in self._hook_callers:
            pm, owner = self.registry.pm, self.registry.owner(self.backend)
            others = [p for p in pm.get_plugins() if p is not owner]
            self._hook_callers[hook] = pm.subset_hook_caller(hook, remove_plugins=others)
        return self._hook_callers[hook]

    def _call(self, hook: str, **kwargs: Any) -> Any:
        try:
            return self._owner_hook(hook)(engine=self.raw, **kwargs)
        except (PluginError, ConfigError, OutOfMemory):
            raise  # already names the plugin, the user's setting at fault, or the memory that ran short
        except MemoryError:  # the process's memory, not the plugin: blaming it sent the user to the wrong fix
            raise OutOfMemory(f"backend {self.backend!r} ran its {hook} hook") from None
        except Exception as exc:
            raise self._fail(hook, f"raised {type(exc).__name__}: {exc}") from exc
        except SystemExit as exc:  # sys.exit() in a plugin ended the run with its code and no word
            raise self._fail(hook, f"called sys.exit({exc.code!r}); a hook must raise an exception, never exit "
                                   "the process") from exc

    def _returned_none(self, hook: str) -> PluginError:
        """A firstresult hook answered None: the owning plugin has no implementation of ``hook``,
        or its implementation returned None (two faults an author fixes differently)."""
        if self.registry.implements(self.backend, hook):
            return self._fail(hook, "returned None; the hook must return its answer (None means \"not this "
                                    "backend's engine\", and this is its engine)")
        return self._fail(hook, "its plugin does not implement it (hooks are answered only by the plugin that "
                                "registered the backend)")

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
        for i, given in enumerate(prompts):  # the caller's text, not the plugin, is at fault
            if not isinstance(given, TokenPrompt):
                check_prompt(given, f"prompt {i}")
        out = self._call("generate", prompts=list(prompts), sampling=sampling)
        if out is None:
            raise self._returned_none("generate")
        if not isinstance(out, list) or not all(isinstance(c, Completion) for c in out):
            raise self._fail("generate", f"returned {type(out).__name__}, expected list[Completion]")
        if len(out) != len(prompts) * sampling.n:
            raise self._fail(
                "generate", f"returned {len(out)} completions for {len(prompts)} prompts x n={sampling.n}"
            )
        for i, c in enumerate(out):  # a float index passed the order check below, then was a TypeError traceback
            if isinstance(c.prompt_index, (bool, np.bool_)) or not isinstance(c.prompt_index, (int, np.integer)):
                raise self._fail("generate", f"completion {i} has prompt_index {c.prompt_index!r:.40} "
                                             f"({type(c.prompt_index).__name__}), expected an int")
            c.prompt_index = int(c.prompt_index)
        # the trainer pairs completions with rows by position: prompt 0's n, then prompt 1's, ...
        order = [c.prompt_index for c in out]
        if order != [i for i in range(len(prompts)) for _ in range(sampling.n)]:
            raise self._fail("generate", f"returned completions for prompt indices {order[:12]}"
                                         f"{'...' if len(order) > 12 else ''}; expected each prompt's "
                                         f"n={sampling.n} in prompt order (a sample credited to another "
                                         "prompt is scored against that prompt's row)")
        for i, c in enumerate(out):  # mask=... made a sample read as an episode, info={"env_reward": ...} scored it
            core_set = [name for name, default in CORE_FIELDS.items() if getattr(c, name) is not default
                        and not (name == "info" and c.info == {})]
            if core_set:
                raise self._fail("generate", f"completion {i} sets {', '.join(core_set)}, which only the core sets "
                                             "(multi-turn episodes); generate must leave them at their defaults")
        for c in out:
            if not isinstance(c.text, str) or c.finish_reason not in ("stop", "length"):
                raise self._fail("generate", f"returned a completion with text {_describe(c.text)} and finish_reason "
                                             f"{c.finish_reason!r}; expected a str and 'stop' or 'length'")
        for i, c in enumerate(out):
            problem = self._sampled_problem(c, sampling.max_new_tokens)
            if problem is not None:
                raise self._fail("generate", f"completion {i} {problem}")
            self._refuse_non_finite("generate", np.asarray(c.logprobs))
        for c in out:  # token prompts are used verbatim: anything else would train on other ids
            prompt = prompts[c.prompt_index] if 0 <= c.prompt_index < len(prompts) else None
            if isinstance(prompt, TokenPrompt) and not np.array_equal(c.prompt_ids, prompt.ids):
                raise self._fail("generate", "changed a TokenPrompt's ids (a token prompt must be used "
                                             "verbatim: no chat template, no BOS)")
        return out

    def _refuse_non_finite(self, hook: str, logprobs: np.ndarray) -> None:
        value = non_finite(logprobs)
        if value is not None:
            raise NonFiniteModel(
                f"backend {self.backend!r} hook {hook} answered a non-finite log-prob ({value}): the model's "
                "weights are no longer finite, or the backend is faulty; stopping before it is sampled or "
                "trained on. Fix: lower optimizer.lr, set optimizer.max_grad_norm, or resume from an earlier "
                "checkpoint (a third-party backend: run its conformance tests)")

    def _sampled_problem(self, c: Completion, max_new_tokens: int) -> str | None:
        """What is wrong with one sampled completion's ids and log-probs, or None. Why here: ids
        past the vocabulary failed later inside train_step (blaming the trainer's backend), and
        log-probs above 0 or non-finite changed the gradient through mismatch correction, or
        skipped every step, silently. Ids that are no integers (3.7, NaN, bools) never get here:
        ``Completion`` refuses them when the plugin builds it (``types.token_ids_array``), and
        ``_call`` reports that ``ValueError`` as this hook's ``PluginError``. More ids than
        ``max_new_tokens``: a backend ignoring the limit was trained on all of them (the remote
        backend refused that for its servers; every backend's answer is checked here)."""
        prompt = np.asarray(c.prompt_ids)
        if prompt.size == 0:  # logprobs and train_step then had no position to score the first token from
            return ("has no prompt_ids; generate must return the ids of the prompt as the model read them (an "
                    "empty text prompt too gets one: backend_kit.tokens.given_a_start)")
        ids = np.asarray(c.completion_ids)
        if ids.size > max_new_tokens:
            return (f"has {ids.size} tokens, more than sampling.max_new_tokens = {max_new_tokens}; a backend "
                    "must stop sampling there")
        for what, seq in (("token id", ids), ("prompt token id", prompt)):  # a prompt's too: it is trained after
            low, high = (int(seq.min()), int(seq.max())) if seq.size else (0, 0)
            if low < 0 or (self.vocab_size is not None and high >= self.vocab_size):
                return (f"has {what} {low if low < 0 else high}, outside the model's vocabulary (0 to "
                        f"{'...' if self.vocab_size is None else self.vocab_size - 1})")
        lp = np.asarray(c.logprobs)
        if lp.ndim != 1 or len(lp) != ids.size:
            return (f"has log-probs of shape {lp.shape} for {ids.size} tokens; expected one log-prob per "
                    "completion token")
        return logprob_problem(lp)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                    add_generation_prompt: bool = False) -> np.ndarray | None:
        """The chat template's token ids for ``messages``; None when the backend has no tokenizer."""
        out = self._call("encode_chat", messages=list(messages), tools=None if tools is None else list(tools),
                         add_generation_prompt=add_generation_prompt)
        if out is None:
            return None
        ids = token_ids(out)
        if ids is None:
            raise self._fail("encode_chat", f"returned {_describe(out)}, expected a 1-D array of int token ids "
                                            "(a tokenizer's BatchEncoding or text is not ids)")
        return ids

    def generation_phase(self) -> contextlib.AbstractContextManager[Any]:
        """The backend's context for one rollout's ``generate`` calls (``hookspecs.generation_phase``):
        entered once per rollout on every rank, however many calls its episodes make inside."""
        out = self._call("generation_phase")
        if out is None:
            return contextlib.nullcontext()
        if not (hasattr(out, "__enter__") and hasattr(out, "__exit__")):
            raise self._fail("generation_phase", f"returned {type(out).__name__}, expected a context manager or None")
        return _Phase(out, self._fail)

    def _token_arrays(self, hook: str, sequences: Sequence[TokenSequence], out: Any, what: str) -> list[np.ndarray]:
        """A per-token hook's answer as float32 arrays, one per sequence and one value per completion
        token, else the plugin's fault named (the values' own checks are the caller's)."""
        if not isinstance(out, (list, tuple, np.ndarray)):
            raise self._fail(hook, f"returned {_describe(out)}, expected a list of float arrays")
        if len(out) != len(sequences):
            raise self._fail(hook, f"returned {len(out)} arrays for {len(sequences)} sequences")
        arrays = []
        for i, (seq, given) in enumerate(zip(sequences, out)):
            try:
                values = np.asarray(given, dtype=np.float32)
            except (TypeError, ValueError, RuntimeError):
                raise self._fail(hook, f"array {i} is {_describe(given)}, expected floats") from None
            if values.ndim != 1 or len(values) != len(seq.completion_ids):
                raise self._fail(hook, f"array {i} has shape {values.shape}, expected "
                                       f"({len(seq.completion_ids)},): one {what} per completion token")
            arrays.append(values)
        return arrays

    def logprobs(
        self, sequences: Sequence[TokenSequence], temperature: float = 1.0, reference: bool = False
    ) -> list[np.ndarray] | None:
        out = self._call(
            "logprobs", sequences=list(sequences), temperature=temperature, reference=reference
        )
        if out is None:
            if reference:
                return None
            raise self._returned_none("logprobs")
        result = []
        for i, lp in enumerate(self._token_arrays("logprobs", sequences, out, "log-prob")):
            problem = logprob_problem(lp)
            if problem is not None:
                raise self._fail("logprobs", f"array {i} {problem}")
            self._refuse_non_finite("logprobs" + (" (reference)" if reference else ""), lp)
            result.append(lp)
        return result

    def entropies(self, sequences: Sequence[TokenSequence], temperature: float = 1.0) -> list[np.ndarray] | None:
        """Each completion position's policy entropy (``hookspecs.entropies``); None when the
        backend does not give them."""
        out = self._call("entropies", sequences=list(sequences), temperature=temperature)
        if out is None:
            return None
        result = []
        for i, ent in enumerate(self._token_arrays("entropies", sequences, out, "entropy")):
            # a float32 entropy of a near-certain token can come out a rounding below 0
            if not np.isfinite(ent).all() or (ent < -1e-3).any():
                raise self._fail("entropies", f"array {i} holds {ent[~np.isfinite(ent) | (ent < -1e-3)][0]}, "
                                              "expected finite entropies >= 0")
            result.append(np.maximum(ent, 0.0))
        return result

    def train_step(self, batch: TrainBatch, objective: Objective) -> StepMetrics:
        out = self._call("train_step", batch=batch, objective=objective)
        if out is None:
            raise self._returned_none("train_step")
        if not isinstance(out, StepMetrics):
            raise self._fail("train_step", f"returned {type(out).__name__}, expected StepMetrics")
        for name in ("loss", "grad_norm", "kl", "clip_fraction"):  # logged, compared, written as JSON
            value = getattr(out, name)
            try:
                number = None if isinstance(value, (bool, str, bytes)) else float(value)
            except (TypeError, ValueError, RuntimeError):
                number = None
            if number is None:
                raise self._fail("train_step", f"StepMetrics.{name} is {_describe(value)}, expected a float")
            setattr(out, name, number)
        self._check_step_fields(out)
        if not out.skipped and not (np.isfinite(out.loss) and np.isfinite(out.grad_norm)):
            raise self._fail("train_step", f"reported loss {out.loss} and grad_norm {out.grad_norm} with "
                                           "skipped=False; a non-finite step must leave the weights untouched "
                                           "and return skipped=True")
        return out

    def _check_step_fields(self, out: StepMetrics) -> None:
        """``skipped``, ``tokens`` and ``extra`` of a ``train_step`` answer, as the trainer reads them.
        Why: ``skipped="no"`` (a truthy str) made the trainer count an applied update as refused,
        ``tokens="many"`` was logged as the step's token count, and ``extra=None`` (or a list)
        ended the run in a ``TypeError`` traceback from ``StepMetrics.as_dict``."""
        if not isinstance(out.skipped, (bool, np.bool_)):
            raise self._fail("train_step", f"StepMetrics.skipped is {_describe(out.skipped)} {out.skipped!r:.40}, "
                                           "expected a bool (True only when the step left the weights untouched)")
        out.skipped = bool(out.skipped)
        whole = isinstance(out.tokens, (int, np.integer)) or (isinstance(out.tokens, (float, np.floating))
                                                              and float(out.tokens).is_integer())
        if isinstance(out.tokens, (bool, np.bool_)) or not whole or out.tokens < 0:
            raise self._fail("train_step", f"StepMetrics.tokens is {_describe(out.tokens)} {out.tokens!r:.40}, "
                                           "expected the int count of completion tokens the loss saw (>= 0)")
        out.tokens = int(out.tokens)
        if not isinstance(out.extra, Mapping) or not all(isinstance(k, str) for k in out.extra):
            raise self._fail("train_step", f"StepMetrics.extra is {_describe(out.extra)}, expected a dict of "
                                           "metric names (str) to values")
        out.extra = dict(out.extra)
        taken = sorted(set(out.extra) & STEP_FIELDS)
        if taken:  # as_dict lets extra win: {"loss": 0.0} replaced the checked loss in every log, silently
            raise self._fail("train_step", f"StepMetrics.extra holds {', '.join(repr(k) for k in taken)}, a field of "
                                           "StepMetrics itself; it would replace the checked value in the logged "
                                           "metrics. Fix: set the field, or give the extra metric another name")

    def all_gather(self, value: Any, world_size: int = 1) -> list[Any]:
        """``value`` from every rank of a data-parallel run (``[value]`` when running alone)."""
        out = self._call("all_gather", value=value)
        if out is None and world_size > 1:
            raise self._fail("all_gather", f"returned None under WORLD_SIZE={world_size}: each rank would "
                                           "train on its own shard with per-rank advantages")
        if out is not None and not isinstance(out, (list, tuple)):  # list(5) raised; list("ab") split a value
            raise self._fail("all_gather", f"returned {_describe(out)}, expected a list of every rank's value in rank "
                                           "order (or None when running alone)")
        result = [value] if out is None else list(out)
        if world_size > 1 and len(result) != world_size:
            raise self._fail("all_gather", f"returned {len(result)} values for WORLD_SIZE={world_size}")
        return result

    def export_weights(self) -> NamedWeights:
        out = self._call("export_weights")
        if out is None:
            raise self._fail("export_weights", "this backend cannot export weights")
        if not isinstance(out, Mapping) or not all(isinstance(k, str) for k in out):
            raise self._fail("export_weights", f"returned {_describe(out)}, expected a dict of HF names to arrays")
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


#: ``Completion`` fields the core sets after ``generate`` (episodes), with the default ``generate`` leaves.
CORE_FIELDS: dict[str, Any] = {"mask": None, "messages": None, "prompt_messages": None, "info": None,
                               "reasoning_open": False, "environment": None,
                               "response_message": None}

#: ``StepMetrics``' own fields, which no ``extra`` key may name (``as_dict`` would let it replace them).
STEP_FIELDS = frozenset(a.name for a in attrs.fields(StepMetrics)) - {"extra"}

#: How far above 0 a log-prob may round: log_softmax is <= 0 by construction, so anything past a
#: rounding error is a wrong answer (a probability above 1).
LOGPROB_SLACK = 1e-3


def logprob_problem(logprobs: np.ndarray) -> str | None:
    """Why these per-token log-probs cannot be any distribution's (above 0), or None. Non-finite
    ones are not judged here: ``non_finite`` tells them apart, since weights a too-high learning
    rate made non-finite give them from a correct backend."""
    if logprobs.size == 0 or not np.isfinite(logprobs).all():
        return None
    if float(logprobs.max()) > LOGPROB_SLACK:
        return f"has log-prob {float(logprobs.max()):.4g} > 0 (a probability above 1); each must be <= 0"
    return None


def non_finite(logprobs: np.ndarray) -> float | None:
    """The first non-finite log-prob in ``logprobs``, or None when all are finite."""
    bad = logprobs[~np.isfinite(logprobs)]
    return float(bad[0]) if bad.size else None


def _describe(value: Any) -> str:
    """A plugin's wrong answer, short: its type, and its shape/dtype when it has them."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{type(value).__name__} of shape {tuple(shape)} and dtype {dtype}"
    return type(value).__name__


def token_ids(value: Any) -> np.ndarray | None:
    """``value`` as a 1-D int64 array of token ids (one row of a 2-D array too), or None when it is
    not one: text, a mapping, floats or negative numbers are never silently read as ids."""
    if isinstance(value, (str, bytes, Mapping)):
        return None
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or (arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0)):
        return None
    return arr.astype(np.int64)


class _Phase(contextlib.AbstractContextManager[Any]):
    """A backend's ``generation_phase`` context as the core holds it: an exception its
    ``__enter__``/``__exit__`` raises names the plugin, and one raised inside the rollout always
    propagates (a phase that swallowed it would hand the trainer no completions)."""

    def __init__(self, inner: Any, fail: Any) -> None:
        self.inner, self.fail = inner, fail

    def __enter__(self) -> Any:
        try:
            return self.inner.__enter__()
        except PolyrlError:
            raise
        except Exception as exc:
            raise self.fail("generation_phase", f"entering its context raised {type(exc).__name__}: {exc}") from exc

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        try:
            self.inner.__exit__(exc_type, exc, tb)
        except PolyrlError:
            raise
        except Exception as failure:
            if failure is exc:
                return False
            raise self.fail("generation_phase",
                            f"leaving its context raised {type(failure).__name__}: {failure}") from failure
        return False
