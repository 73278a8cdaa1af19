"""Records exchanged between the core and backends.

Everything that crosses the plugin boundary is an attrs record holding numpy arrays and plain
Python values, so no backend has to import another backend's tensor type. Token ids are int64
arrays, log-probs float32 arrays; ragged batches are lists of 1-D arrays (no padding crosses the
boundary: each backend pads or packs the way its hardware likes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs
import numpy as np

from polyrl.chat_kwargs import checked as checked_chat_kwargs
from polyrl.device_names import declared_names
from polyrl.errors import ConfigError
from polyrl.validators import RULES, shown


def _optional_keys(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else _as_names(value)


def _as_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    """``tuple`` as an attrs converter that mypy can type (the builtin's type variable stays unsolved)."""
    return tuple(value)


def _as_names(value: Iterable[str]) -> tuple[str, ...]:
    """The tuple of names a ``Capabilities`` field or ``BackendSpec.options`` declares (their attrs
    converter), refusing one string. Why: ``dtypes=("bfloat16")`` (a one-name tuple without its
    comma) is the str ``"bfloat16"``, which ``in`` searched as text (``"float16" in "bfloat16"``:
    an undeclared dtype passed the check) and ``tuple()`` split into one-letter names (an
    ``options`` key then refused as the user's typo). The ``ValueError`` is the plugin's register
    hook's, listed as its load error."""
    if isinstance(value, str):
        raise ValueError(f"got the string {value!r} where a tuple of names belongs. Fix: write "
                         f"({value!r},) (a one-name tuple needs its comma)")
    names = tuple(value)
    wrong = next((name for name in names if not isinstance(name, str)), None)
    if wrong is not None:
        raise ValueError(f"a tuple of names holds {type(wrong).__name__} {wrong!r}. Fix: give "
                         f"each name as a str")
    return names


def token_ids_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a 1-D int64 array of token ids; a ``ValueError`` naming ``name`` when a value is
    no integer. Why refuse instead of casting: numpy's cast rounds 3.7 down to 3, reads NaN as an
    arbitrary id and True as 1, so a backend answering floats (an id computed in float, a mask
    passed as ids) trained on ids it never sampled, silently. An integral float (3.0) is its
    integer, as it always was. numpy reads a lone bool among ints ([1, True]) as an int before
    this sees it; an array of bools is refused."""
    arr = np.asarray(value)
    kind = arr.dtype.kind
    flat = arr.reshape(-1)
    if kind in "iu":
        return flat.astype(np.int64, copy=False)
    if kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(flat) | (flat != np.trunc(flat)) | (np.abs(flat) >= 2.0 ** 63)
        if bad.any():
            at = int(np.argmax(bad))
            raise ValueError(f"{name} holds {float(flat[at])!r} at position {at}, not an integer token id "
                             "(a fraction, NaN, infinity or a number past int64 is refused, never rounded)")
        return flat.astype(np.int64)
    if kind == "O":  # mixed Python objects: each must be an integer (rare, so a Python loop)
        for at, v in enumerate(flat):
            if not _integral(v):
                raise ValueError(f"{name} holds {v!r} at position {at}, not an integer token id")
        return flat.astype(np.int64)
    what = "booleans" if kind == "b" else f"an array of dtype {arr.dtype}"
    raise ValueError(f"{name} are {what}, not integer token ids")


def _integral(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer()


# the attrs converters of the token-id fields (named functions: mypy's attrs plugin reads no closure)
def _prompt_ids(value: Any) -> np.ndarray:
    return token_ids_array(value, "prompt_ids")


def _completion_ids(value: Any) -> np.ndarray:
    return token_ids_array(value, "completion_ids")


def _token_prompt_ids(value: Any) -> np.ndarray:
    return token_ids_array(value, "TokenPrompt.ids")


@attrs.define(frozen=True, eq=False)
class TokenPrompt:
    """A prompt given as token ids, used verbatim: no chat template, no BOS added, no decoding.

    How a multi-turn episode continues: turn k+1 is generated from the exact ids of the
    conversation so far (the model's own sampled ids plus the inserted glue), never from
    re-tokenized text. ``Completion.prompt_ids`` of such a prompt equals ``ids``.
    """

    ids: np.ndarray = attrs.field(converter=_token_prompt_ids)

    def __attrs_post_init__(self) -> None:
        if not len(self.ids):
            raise ConfigError("a TokenPrompt needs at least one token id", field="prompt")


#: A prompt is raw text (used verbatim), a chat (list of {"role", "content"} messages, rendered
#: with the model's chat template and a generation prompt by the backend that owns the tokenizer),
#: or a ``TokenPrompt`` (token ids used verbatim).
Prompt = str | Sequence[Mapping[str, str]] | TokenPrompt

FinishReason = Literal["stop", "length"]


def _floats(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float32).reshape(-1)


def _optional_mask(value: Any) -> np.ndarray | None:
    return None if value is None else np.asarray(value, dtype=bool).reshape(-1)


def loss_mask(completion_ids: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The 0/1 loss mask of a completion as a bool array (``None`` = every token is trained)."""
    return np.ones(len(completion_ids), dtype=bool) if mask is None else mask


def _positive(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{attribute.name} must be > 0, got {value!r}", field=attribute.name)


#: The smallest temperature above 0 sampled with (vLLM's greedy threshold): float32 logits divided
#: by less overflow to inf, every probability is NaN, and the sampler returns token 0 each time.
MIN_TEMPERATURE = 1e-5
#: The smallest repetition penalty: it divides a seen token's positive logit as a temperature does,
#: so below this the float32 logit overflows the same way (1e-320 is 0 in float32: token 0 each time)
MIN_REPETITION_PENALTY = MIN_TEMPERATURE


@attrs.define(frozen=True)
class SamplingParams:
    """How to sample. Every backend must honour every field (a silently ignored field is a bug).

    ``temperature == 0`` means greedy decoding. Log-probs returned by ``generate`` are taken from
    the temperature-scaled distribution *before* the sampling-only processors (repetition
    penalty, top-k, top-p, min-p), which is the distribution ``logprobs``/``train_step``
    reproduce when given the same ``temperature``; the token itself is drawn from the processed
    distribution. Processing order (transformers'): repetition penalty on the raw logits, then
    temperature, then top-k, top-p, min-p.
    """

    max_new_tokens: int = attrs.field(default=64, validator=_positive)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    stop: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)
    seed: int | None = None
    n: int = attrs.field(default=1, validator=_positive)  # completions per prompt (group size)
    #: keep tokens whose probability is >= min_p x the top token's (0 disables it)
    min_p: float = 0.0
    #: CTRL-style penalty on tokens already in prompt or completion (1.0 disables it)
    repetition_penalty: float = 1.0
    #: keep sampling after an end-of-sequence token until ``max_new_tokens`` (vLLM's meaning): for
    #: benchmarks that need fixed lengths; the EOS token is an ordinary sampled token then
    ignore_eos: bool = False

    def __attrs_post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError("temperature must be >= 0 (0 = greedy)", field="temperature")
        if 0 < self.temperature < MIN_TEMPERATURE:  # logits / 1e-40 overflow: NaN log-probs, token 0 each time
            raise ConfigError(f"temperature {self.temperature:g} is too small to sample with: it must be 0 "
                              f"(greedy) or at least {MIN_TEMPERATURE:g}", field="temperature",
                              fix="use 0 for greedy decoding, or a temperature such as 0.7 or 1.0")
        if not 0 < self.top_p <= 1:
            raise ConfigError("top_p must be in (0, 1]", field="top_p")
        if self.top_k < 0:
            raise ConfigError("top_k must be >= 0 (0 disables it)", field="top_k")
        if not 0 <= self.min_p <= 1:
            raise ConfigError("min_p must be in [0, 1] (0 disables it)", field="min_p")
        if not self.repetition_penalty > 0:
            raise ConfigError("repetition_penalty must be > 0 (1.0 disables it)", field="repetition_penalty")
        if self.repetition_penalty < MIN_REPETITION_PENALTY:
            raise ConfigError(f"repetition_penalty {self.repetition_penalty:g} is too small to sample with: it "
                              f"must be at least {MIN_REPETITION_PENALTY:g}", field="repetition_penalty",
                              fix="use 1.0 to disable it, or a value such as 1.1 or 1.3")
        empty = next((i for i, s in enumerate(self.stop) if s == ""), None)
        if empty is not None:  # matched nowhere by the backends: a run meant to stop there ran to max_new_tokens
            raise ConfigError("is an empty string, which stops nothing", field=f"stop[{empty}]",
                              fix='remove it, or write the text that ends a completion, e.g. stop = ["\\n\\n"]')


@attrs.define
class Completion:
    """One sampled completion, exactly as the generator produced it.

    ``completion_ids`` are the sampled token ids (never re-tokenized text) and ``logprobs`` the
    sampler's own log-probability of each of them; both have the same length.
    """

    prompt_index: int
    prompt_ids: np.ndarray = attrs.field(converter=_prompt_ids)
    completion_ids: np.ndarray = attrs.field(converter=_completion_ids)
    logprobs: np.ndarray = attrs.field(converter=_floats)
    text: str = ""
    finish_reason: FinishReason = "length"
    #: Multi-turn episodes only (set by the core, never by ``generate``): True where the token was
    #: sampled by the model (trained), False where the core inserted it (chat-template glue, tool
    #: results, observations). ``logprobs`` is 0.0 at inserted positions.
    mask: np.ndarray | None = attrs.field(default=None, converter=_optional_mask)
    #: Episodes only: the conversation after the prompt as chat messages (assistant turns with
    #: their tool calls, tool results, observations), what TRL-style reward functions receive.
    messages: list[dict[str, Any]] | None = None
    #: Episodes with an environment only: the first messages its ``reset`` wrote, which the model
    #: was asked instead of the dataset row's prompt (the prompt rewards and the completions log get).
    prompt_messages: list[dict[str, Any]] | None = None
    #: Episodes only: the environment's reward and the episode's counters (turns, tool calls...).
    info: dict[str, Any] = attrs.field(factory=dict)
    #: Set by the core, never by ``generate``: the prompt ended with the chat template's generation
    #: prompt that opens ``<think>`` (``polyrl.reasoning.think_suffix``), so the text starts inside
    #: the reasoning and, without a ``</think>``, holds no answer (``reasoning.final_part(opened=)``).
    reasoning_open: bool = False
    #: Episodes with an environment only: what reward functions receive for this completion as
    #: ``environments=`` (TRL's ``environment_factory`` instance, its state after the episode), held
    #: in memory until the step is scored. Never checkpointed: a pending rollout comes back without
    #: it, so a run whose rewards read it refuses ``generation.overlap`` (``polyrl.trl``).
    environment: Any = attrs.field(default=None, eq=False, repr=False)
    #: Set by the core while a step is scored, never by ``generate`` (a chat prompt's completion,
    #: not an episode's, where the tokenizer has a ``response_schema``): TRL's parse of its ids
    #: into one assistant message, thinking and tool calls out of ``content``. What TRL hands its
    #: reward functions and reward models as the completion; polyrl's own rewards read ``text``,
    #: as without a schema (``messages`` stays an episode's only).
    response_message: dict[str, Any] | None = None

    def __attrs_post_init__(self) -> None:
        if len(self.completion_ids) != len(self.logprobs):
            raise ValueError(
                f"completion has {len(self.completion_ids)} ids but {len(self.logprobs)} log-probs"
            )
        if self.mask is not None and len(self.mask) != len(self.completion_ids):
            raise ValueError(f"completion has {len(self.completion_ids)} ids but a mask of {len(self.mask)}")


@attrs.define
class TokenSequence:
    """A prompt and a completion, as token ids; the unit ``logprobs`` and ``train_step`` score.

    ``mask`` (multi-turn episodes) marks the completion tokens the loss sees: the model's sampled
    segments (True) as opposed to inserted ones (False: template glue, tool results). ``logprobs``
    still returns one value per completion token; ``train_step`` trains as if the masked-out
    tokens were context only (see ``polyrl.algorithms.reference.policy_loss``'s ``masks``).
    """

    prompt_ids: np.ndarray = attrs.field(converter=_prompt_ids)
    completion_ids: np.ndarray = attrs.field(converter=_completion_ids)
    mask: np.ndarray | None = attrs.field(default=None, converter=_optional_mask)

    def __attrs_post_init__(self) -> None:
        if self.mask is not None and len(self.mask) != len(self.completion_ids):
            raise ValueError(f"mask has {len(self.mask)} entries for {len(self.completion_ids)} completion ids")

    @classmethod
    def of(cls, completion: Completion) -> TokenSequence:
        return cls(completion.prompt_ids, completion.completion_ids, completion.mask)

    @property
    def loss_mask(self) -> np.ndarray:
        """The mask as bools, all True when ``mask`` is None."""
        return loss_mask(self.completion_ids, self.mask)


@attrs.define
class TrainBatch:
    """One optimizer step's worth of scored rollouts.

    ``old_logprobs`` None means "the policy that generated is the one being trained, unchanged":
    the backend then uses its own detached log-probs (ratio 1, gradient intact), saving a pass.
    ``ref_logprobs`` is only needed when the objective's ``beta > 0``. ``sampler_logprobs`` are
    the generator's own log-probs: backends measure the sampler-trainer mismatch against them and
    use them for the objective's ``mismatch_correction``.

    ``normaliser_sequences`` / ``normaliser_tokens``: how many sequences and completion tokens
    the loss aggregation divides by (``loss_counts``), when that is more than the batch holds.
    None (the default) means this batch's own ``len(sequences)`` / ``num_tokens``. The trainer
    sets them to what TRL's GRPOTrainer divides by: TRL keeps a completion cut at the length
    limit under ``mask_truncated_completions`` (its loss mask zeroed) and an unscorable one
    (every reward None; advantage 0) in its batch, while polyrl's policy term trains on neither
    (an unscorable one is trained at advantage 0 where the loss holds a KL term, an entropy bonus
    or a MoE router term, as TRL trains it: ``AlgorithmConfig.loss_selection``). So a
    truncated completion counts as a sequence with 0 tokens, and an unscorable one as a
    sequence with its loss-mask tokens: ``seq_mean_*`` aggregations divide by
    ``normaliser_sequences`` (``seq_mean_token_mean``: ``1 / (normaliser_sequences * |y_i|)`` per
    token of a trained sequence), ``token_mean`` by ``normaliser_tokens``. Groups that dynamic
    sampling drops do not count (DAPO refills its batch with informative groups instead).
    A mini-batch (``algorithm.minibatches`` = M) carries its own rows' sequence count but its
    step's token count / the parts stepped (M, unless dynamic sampling emptied some; fractional,
    and possibly fewer than it holds): TRL's "dapo" divides
    each update by the generation batch's tokens over ``steps_per_generation /
    gradient_accumulation_steps``, not by the update's own tokens, so a part of long completions
    weighs more, as there. Under a launcher each rank's batch carries its own rows' counts and the backend sums them
    over ranks, as it sums ``len(sequences)``. Only the loss's scale changes: metrics (``kl``,
    ``clip_fraction``, ``tokens``) stay means over the tokens trained on. A backend that ignores
    the fields trains at the kept rows' scale (larger by the ratio of the counts; the conformance
    kit's ``test_loss_divides_by_the_batch_normaliser`` checks a backend honours them).
    Not matched: with ``top_entropy_quantile`` < 1 and none of those terms, TRL's unscorable rows
    add their tokens to the entropy quantile; polyrl does not train them, so they are left out.
    Where the loss holds a MoE model's router term, a truncated completion is in the batch as its
    prompt alone (no completion token, advantage 0, empty log-prob arrays; ``polyrl.router_rows``),
    since TRL's router term counts its prompt tokens; it adds no token and no sequence beyond the
    normaliser counts, which already count it.
    """

    sequences: list[TokenSequence]
    advantages: np.ndarray = attrs.field(converter=_floats)
    old_logprobs: list[np.ndarray] | None = None
    ref_logprobs: list[np.ndarray] | None = None
    temperature: float = 1.0
    sampler_logprobs: list[np.ndarray] | None = None
    normaliser_sequences: int | None = None
    normaliser_tokens: float | None = None

    def __attrs_post_init__(self) -> None:
        n = len(self.sequences)
        if len(self.advantages) != n:
            raise ValueError(f"{len(self.advantages)} advantages for {n} sequences")
        if self.normaliser_sequences is not None and self.normaliser_sequences < n:
            raise ValueError(f"normaliser_sequences {self.normaliser_sequences} is fewer than the {n} sequences")
        if self.normaliser_tokens is not None and not (self.normaliser_tokens > 0 or self.num_tokens == 0):
            raise ValueError(f"normaliser_tokens {self.normaliser_tokens} is not a positive count for the batch's "
                             f"{self.num_tokens} tokens")
        for name in ("old_logprobs", "ref_logprobs", "sampler_logprobs"):
            values = getattr(self, name)
            if values is None:
                continue
            if len(values) != n:
                raise ValueError(f"{len(values)} {name} for {n} sequences")
            for seq, lp in zip(self.sequences, values):
                if len(lp) != len(seq.completion_ids):
                    raise ValueError(f"{name} length differs from its completion length")

    @property
    def num_tokens(self) -> int:
        """Completion tokens the loss sees (masked-out tokens of episodes excluded)."""
        return int(sum(int(s.loss_mask.sum()) for s in self.sequences))

    @property
    def loss_counts(self) -> tuple[int, float]:
        """(sequences, tokens) the loss aggregation divides by: ``normaliser_sequences`` and
        ``normaliser_tokens``, each defaulting to this batch's own count (tokens may be fractional:
        a mini-batch's share of its step's tokens)."""
        seqs = len(self.sequences) if self.normaliser_sequences is None else int(self.normaliser_sequences)
        tokens = self.num_tokens if self.normaliser_tokens is None else float(self.normaliser_tokens)
        return seqs, tokens

    @property
    def masks(self) -> list[np.ndarray] | None:
        """Per-sequence loss masks, or None when no sequence has one (single-turn batches)."""
        if all(s.mask is None for s in self.sequences):
            return None
        return [s.loss_mask for s in self.sequences]


@attrs.define
class StepMetrics:
    """What one ``train_step`` reports (means over the batch's completion tokens)."""

    loss: float
    grad_norm: float
    kl: float = 0.0
    clip_fraction: float = 0.0
    tokens: int = 0
    skipped: bool = False  # True when the step was not applied (e.g. non-finite loss)
    extra: dict[str, float] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = attrs.asdict(self, filter=lambda a, v: a.name != "extra")
        out.update(self.extra)
        return out


#: ``LoraConfig.target_modules`` value meaning every linear layer of the decoder blocks.
ALL_LINEAR = "all-linear"


def _target_modules(value: Any) -> tuple[str, ...]:
    out = (value,) if isinstance(value, str) else tuple(value)
    if not out or not all(isinstance(v, str) and v for v in out):
        raise ConfigError(f"must be module names or {ALL_LINEAR!r}, got {value!r}",
                          field="target_modules", fix=f'e.g. target_modules = "{ALL_LINEAR}"')
    if ALL_LINEAR in out and len(out) > 1:
        raise ConfigError(f"{ALL_LINEAR!r} cannot be combined with module names", field="target_modules",
                          fix=f'use "{ALL_LINEAR}" alone, or list the names')
    return out


@attrs.define(frozen=True)
class LoraConfig:
    """Low-rank adapters on the decoder's linear layers.

    The default ``"all-linear"`` adapts every linear layer inside the transformer blocks (peft's
    semantics: ``lm_head`` excluded) under whatever names the family uses, so Phi-3's fused
    ``qkv_proj``/``gate_up_proj`` are covered as well as Llama's ``q_proj``...; a list of names
    adapts only those. ``LoraConfig.from_peft`` converts a ``peft.LoraConfig``.
    """

    #: What a [lora] key written with peft's name (as TRL users do) should be: ``build`` gives it as
    #: the fix instead of a list of valid keys.
    KEY_HINTS: ClassVar[dict[str, str]] = {
        "r": "polyrl names peft's r 'rank': write rank = ...",
        "lora_alpha": "polyrl names peft's lora_alpha 'alpha': write alpha = ...",
        "lora_dropout": "polyrl names peft's lora_dropout 'dropout': write dropout = ...",
        "bias": "remove it: polyrl trains no biases, which is peft's default bias = \"none\"",
        "task_type": "remove it: polyrl's adapters are always a causal LM's (peft's CAUSAL_LM)",
        "modules_to_save": "remove it: polyrl trains the adapters only; leave out [lora] to train every weight",
        **{key: f"remove it: peft's {key} is not supported by polyrl (it would train something else)"
           for key in ("use_rslora", "use_dora", "init_lora_weights", "layers_to_transform", "layers_pattern",
                       "rank_pattern", "alpha_pattern", "fan_in_fan_out", "exclude_modules", "lora_bias")},
    }

    rank: int = attrs.field(default=16, validator=_positive)
    alpha: float = 32.0
    dropout: float = 0.0

    def __attrs_post_init__(self) -> None:
        """The checks a [lora] table gets (``validators.RULES``), for a LoraConfig built in Python
        or converted from peft: a rank of 10**9 or a dropout of 1.5 failed inside torch or MLX,
        and an alpha of NaN made every adapter NaN, silently."""
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 1 <= self.rank <= 4096:
            raise ConfigError(f"rank must be an integer in [1, 4096], got {self.rank!r}", field="lora.rank", fix="e.g. 16")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not (
                math.isfinite(self.alpha) and self.alpha > 0):
            raise ConfigError(f"alpha must be a finite number > 0, got {self.alpha!r}", field="lora.alpha",
                              fix="e.g. 32 (twice the rank)")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}", field="lora.dropout",
                              fix="0.0 or e.g. 0.05")
    target_modules: tuple[str, ...] | str = attrs.field(default=(ALL_LINEAR,), converter=_target_modules)

    @property
    def all_linear(self) -> bool:
        return self.target_modules == (ALL_LINEAR,)

    @classmethod
    def from_peft(cls, config: Any, model: str | None = None) -> LoraConfig:
        """polyrl's settings from a ``peft.LoraConfig``: ``r``, ``lora_alpha``, ``lora_dropout``,
        ``target_modules`` (None: peft's default for ``model``'s family, as peft and TRL apply it,
        e.g. ``q_proj``/``v_proj`` for Llama and Qwen2; ``"all-linear"`` with a warning when the
        family cannot be read). Any other field set away from peft's default is refused: silently
        dropping e.g. ``use_dora`` would train something else than asked."""
        import dataclasses

        defaults = type(config)()
        mapped = {"r", "lora_alpha", "lora_dropout", "target_modules"}
        ignored = {"task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path",
                   "revision", "inference_mode", "runtime_config"}
        unsupported = [f.name for f in dataclasses.fields(config)
                       if f.name not in mapped | ignored
                       and getattr(config, f.name) != getattr(defaults, f.name)]
        task = getattr(config, "task_type", None)
        if task not in (None, "CAUSAL_LM"):
            unsupported.insert(0, "task_type")
        if unsupported:
            raise ConfigError(
                f"peft.LoraConfig field(s) {', '.join(unsupported)} are not supported by polyrl",
                field="lora", fix="leave them at peft's defaults; polyrl takes r, lora_alpha, "
                                  "lora_dropout and target_modules (names or 'all-linear')")
        targets = config.target_modules
        if targets is None:
            targets = _peft_default_targets(model)
        elif isinstance(targets, str) and targets != ALL_LINEAR:
            raise ConfigError(f"a regular-expression target_modules ({targets!r}) is not supported",
                              field="lora.target_modules", fix="list the module names, or 'all-linear'")
        elif not isinstance(targets, str):
            targets = tuple(sorted(targets))
        try:
            return cls(rank=int(config.r), alpha=float(config.lora_alpha),
                       dropout=float(config.lora_dropout), target_modules=targets)
        except ConfigError as exc:
            raise exc.under("lora") from None


def _peft_default_targets(model: str | None) -> tuple[str, ...] | str:
    """What peft adapts for a ``LoraConfig`` without ``target_modules``: its per-family list for the
    model folder's ``model_type``. Why not "all-linear": a TRL user's ``LoraConfig(r=16)`` trained
    q_proj and v_proj under TRL and every linear layer here, silently. A family peft has no list
    for is an error, as in peft; an unreadable folder (a name, no config.json) keeps "all-linear"
    and says so."""
    from polyrl.logs import get_logger
    from polyrl.model_config import model_type_of

    model_type = model_type_of(model)
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
    except ImportError:
        defaults = None
    if isinstance(model_type, str) and defaults is not None:
        if model_type not in defaults:
            raise ConfigError(f"peft has no default target_modules for model type {model_type!r} (peft itself "
                              "refuses this LoraConfig)", field="lora.target_modules",
                              fix='set target_modules, e.g. target_modules="all-linear" or ["q_proj", "v_proj"]')
        return tuple(sorted(defaults[model_type]))
    get_logger("polyrl.types").warning(
        "peft.LoraConfig without target_modules: the model's family could not be read, so every linear "
        "layer is adapted (peft would use its per-family default)", model=model,
        fix='set target_modules (e.g. ["q_proj", "v_proj"] or "all-linear") to choose')
    return ALL_LINEAR


def as_lora_config(value: Any, model: str | None = None) -> LoraConfig | None:
    """``None``, a ``LoraConfig``, or a ``peft.LoraConfig`` (converted for ``model``, whose family
    sets peft's default targets; peft itself is imported only for that default)."""
    if value is None or isinstance(value, LoraConfig):
        return value
    if type(value).__name__ == "LoraConfig" and type(value).__module__.startswith("peft"):
        return LoraConfig.from_peft(value, model)
    raise ConfigError(f"expected polyrl.types.LoraConfig or peft.LoraConfig, got {type(value).__name__}",
                      field="lora", fix="pass LoraConfig(rank=..., alpha=...) or peft.LoraConfig(r=...)")


@attrs.define(frozen=True)
class OptimizerConfig:
    """AdamW with global-norm gradient clipping and gradient accumulation by micro-batches."""

    lr: float = attrs.field(default=1e-5, validator=_positive)
    weight_decay: float = 0.0
    betas: tuple[float, float] = attrs.field(default=(0.9, 0.999), converter=_as_tuple)
    eps: float = 1e-8
    max_grad_norm: float | None = 1.0
    micro_batch_size: int | None = None  # sequences per forward/backward; None = whole batch
    #: lr schedule after warmup: "constant", "linear" or "cosine" (``polyrl.schedules``)
    schedule: str = "constant"
    warmup_steps: int = 0  # optimizer updates over which the lr rises linearly from 0
    min_lr_ratio: float = 0.0  # linear/cosine decay ends at lr * min_lr_ratio
    #: updates the decay spans; None = the run's train.steps x algorithm.num_iterations
    total_steps: int | None = None

    def __attrs_post_init__(self) -> None:
        from polyrl.schedules import SCHEDULES

        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r}", field="schedule",
                              fix=f"use one of {', '.join(SCHEDULES)}")


#: What ``EngineConfig.role`` may be: the engines a run builds.
ENGINE_ROLES = ("generate", "train", "reference")

#: ``EngineConfig`` fields filled from a config key, and that key: both get the key's range rule.
_ENGINE_RULES = {"seed": "train.seed", "threads": "train.threads", "max_length": "model.max_length",
                 "collective_timeout_s": "train.collective_timeout_s"}


@attrs.define(frozen=True)
class EngineConfig:
    """What a backend's ``load`` receives: the model and how to run it.

    ``role`` is "generate", "train" or "reference"; a backend may skip optimizer state for roles
    that never train. ``model`` is a local directory (HF layout) or a GGUF file path. ``dtype``
    names are the backend's to check (MAX also takes "auto"; each backend refuses one it lacks).
    """

    model: str
    role: str = "train"
    dtype: str = "float32"
    #: Mixed precision: forward/backward matmuls (autocast) in this dtype while the weights and
    #: the optimizer state stay in ``dtype`` (e.g. float32 masters, bfloat16 compute, where the
    #: CPU has native bfloat16). None: compute in ``dtype``. Only for backends declaring it in
    #: ``Capabilities.compute_dtypes``.
    compute_dtype: str | None = None
    device: str = "auto"  # the backend's accelerator when there is one, else the CPU
    seed: int = 0
    threads: int | None = None
    lora: LoraConfig | None = None  # or a peft.LoraConfig, converted for ``model`` (as_lora_config)
    optimizer: OptimizerConfig = attrs.field(factory=OptimizerConfig)
    max_length: int = 1024  # prompt + completion tokens
    options: dict[str, Any] = attrs.field(factory=dict)  # backend-specific knobs
    #: Run Python shipped inside a model folder. Off by default: a model is data, not code.
    trust_remote_code: bool = False
    #: Recompute decoder-layer activations during backward (role "train" only).
    gradient_checkpointing: bool = False
    #: Under a launcher: seconds a collective waits for the other ranks (``train.collective_timeout_s``).
    collective_timeout_s: float = 600.0
    #: Extra variables for the model's chat template (``model.chat_template_kwargs``, TRL's
    #: ``chat_template_kwargs``): ``encode_chat`` and ``generate``'s chat prompts render with them.
    chat_template_kwargs: dict[str, Any] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        """The checks the config keys these fields come from get (``validators.RULES``), for an
        EngineConfig built in Python: role="training" loaded a generator that could not train,
        seed=-1 failed inside numpy or MLX (torch wrapped it round), threads=0 inside torch, and
        trust_remote_code="false" (a truthy string) ran the model folder's Python."""
        if not isinstance(self.role, str) or self.role not in ENGINE_ROLES:
            raise ConfigError(f"role must be one of {', '.join(map(repr, ENGINE_ROLES))}, got {shown(self.role)}",
                              field="EngineConfig.role", fix='e.g. role="train" (a policy that trains), "generate" '
                                                             'or "reference" (log-probs only)')
        for name, key in _ENGINE_RULES.items():
            RULES[key].check(getattr(self, name), f"EngineConfig.{name}")
        for name in ("trust_remote_code", "gradient_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {shown(getattr(self, name))}",
                                  field=f"EngineConfig.{name}", fix="pass a bool (any non-empty string, "
                                                                    '"false" included, reads as True)')
        object.__setattr__(self, "lora", as_lora_config(self.lora, self.model))
        object.__setattr__(self, "chat_template_kwargs",
                           checked_chat_kwargs(self.chat_template_kwargs, "EngineConfig.chat_template_kwargs"))


@attrs.define(frozen=True)
class ArchSupport:
    """How one backend runs one model architecture (the HF ``config.json`` ``model_type``).

    Backends declare it so a run is refused up front, naming backend and architecture, instead
    of failing deep inside a model loader; ``logprob_deviation`` tells the user how far this
    backend's log-probs sit from the torch float32 trainer's, when more than float error.
    """

    generate: bool = True
    train: bool = False
    #: the backend's optimised path (e.g. MLX's split-head shared-prompt forward) covers it
    fast_path: bool = False
    #: measured max |log-prob - torch float32 log-prob| on a tiny random model; None = unmeasured
    logprob_deviation: float | None = None
    #: devices this architecture runs on with this backend; empty = every device the backend has
    devices: tuple[str, ...] = attrs.field(default=(), converter=_as_names)
    notes: str = ""


@attrs.define(frozen=True)
class Capabilities:
    """What a backend can do; the registry and ``polyrl backends`` show it."""

    generate: bool = True
    logprobs: bool = True
    train_step: bool = False
    lora: bool = False
    weight_export: bool = False
    weight_import: bool = False
    checkpoint: bool = False
    #: ``generate`` may run on a worker thread while another engine trains (generation.overlap)
    concurrent_generate: bool = False
    #: trains under a multi-process launcher (WORLD_SIZE > 1): implements ``all_gather`` and
    #: normalises its loss by the global batch; without it the core refuses a multi-rank run
    data_parallel: bool = False
    dtypes: tuple[str, ...] = attrs.field(default=("float32",), converter=_as_names)
    #: ``EngineConfig.compute_dtype`` values honoured (mixed precision over ``dtype`` weights);
    #: a run asking for one its backends lack is refused up front
    compute_dtypes: tuple[str, ...] = attrs.field(default=(), converter=_as_names)
    devices: tuple[str, ...] = attrs.field(default=("cpu",), converter=_as_names)
    #: the ``model.device`` names the engine reads (whether this machine has them is ``devices``):
    #: ``"npu"`` for the name alone, ``"npu:N"`` for ``npu:0``, ``npu:1``...; ``auto`` is always read.
    #: A run naming another is refused before any engine loads; None (not declared): not checked,
    #: the engine decides when it loads (``polyrl.device_names``)
    device_names: tuple[str, ...] | None = attrs.field(default=None, converter=declared_names)
    #: optional ``SamplingParams`` features honoured by ``generate`` ("min_p", "repetition_penalty",
    #: "ignore_eos"); a run asking for one the generate backend lacks is refused up front
    sampling: tuple[str, ...] = attrs.field(default=(), converter=_as_names)
    #: ``EngineConfig.gradient_checkpointing`` is honoured by ``train_step``
    gradient_checkpointing: bool = False
    #: ``generate`` accepts ``TokenPrompt`` (ids verbatim) and ``encode_chat`` answers (or, for a
    #: backend without a tokenizer, returns None and the train engine's tokenizer is used):
    #: what multi-turn episodes need from a generator
    token_prompts: bool = False
    #: ``logprobs``/``train_step`` honour ``TokenSequence.mask`` (episodes' inserted tokens)
    loss_mask: bool = False
    #: the Mixture-of-Experts model types whose router load-balancing loss ``train_step`` adds
    #: (``algorithm.router_aux_loss_coef``); another MoE model with a coefficient not 0 is refused
    #: before any model loads. None (not declared): ``train_step`` decides (torch: every MoE model)
    router_aux_types: tuple[str, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(_as_names))
    #: the ``quant_method``s of a pre-quantized transformers folder (config.json's
    #: ``quantization_config``: GPTQ, AWQ, bitsandbytes, fp8...) the backend loads itself; a model
    #: folder quantized another way is refused before any model loads (``polyrl.prequantized``)
    quant_methods: tuple[str, ...] = attrs.field(default=(), converter=_as_names)
    #: ``model_type`` -> ArchSupport. Empty means "not declared": the core then checks nothing
    #: and the backend's own loader decides. A declared table is exhaustive: a model_type
    #: missing from it is refused before any weights load; a ``"*"`` entry covers every
    #: model_type not named (e.g. "whatever transformers can load", untested by polyrl).
    architectures: Mapping[str, ArchSupport] = attrs.field(factory=dict)

    def supports(self, model_type: str, role: str) -> bool | None:
        """True/False for a declared table (role "generate" or "train"), None when undeclared."""
        if not self.architectures:
            return None
        arch = self.architectures.get(model_type, self.architectures.get("*"))
        if arch is None:
            return False
        return arch.train if role == "train" else arch.generate

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


#: Probe: returns None when the backend is usable here, else a human-readable reason.
Probe = Callable[[], "str | None"]


@attrs.define
class BackendSpec:
    """A backend as registered by a plugin through ``polyrl_register_backends``.

    ``load(EngineConfig) -> engine`` builds the engine object the compute hooks receive; only
    the plugin that registered the backend is asked to answer them (see ``polyrl.hookspecs``).
    """

    name: str
    load: Callable[[EngineConfig], Any]
    capabilities: Capabilities = attrs.field(factory=Capabilities)
    probe: Probe = lambda: None
    install_hint: str = ""
    summary: str = ""
    version: str = ""
    distribution: str = ""  # filled in by the registry from the entry point
    #: Optional extra facts for ``polyrl doctor`` (e.g. which BLAS is active), name -> text.
    diagnostics: Callable[[], Mapping[str, str]] | None = None
    #: The ``[backends.options]`` keys this backend reads. Every engine of a run sees the whole
    #: table, so the core refuses a key that no backend of the run declares (a typo would do
    #: nothing); None means "not declared" and turns that check off for runs using this backend.
    options: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_keys)
    #: ``(model_dir, engine_state_dir, weights_only) -> None``: raises a ``ConfigError`` on
    #: ``--resume`` when a checkpoint's backend files this resume reads are missing or damaged.
    #: Called with no engine, before any model loads, so a bad file costs no model load.
    check_checkpoint: Callable[[str, str, bool], Any] | None = None
    #: ``(EngineConfig) -> None``: raises a ``ConfigError`` for what loading that engine would
    #: refuse of the model and its settings (e.g. LoRA ``target_modules`` naming no layer), read
    #: without weights. Called at startup (``check_engines``, ``polyrl launch``) before any model loads.
    check_model: Callable[[EngineConfig], Any] | None = None


@attrs.define
class RewardSpec:
    """A named reward announced through ``polyrl_register_rewards`` (listed by the CLI)."""

    name: str
    summary: str = ""
    distribution: str = ""


class RewardScores(list):
    """A reward's scores (a plain list: one float or None per completion) plus its own metrics.

    A ``reward`` hook may return this instead of a list to report extra per-reward metrics, e.g.
    a judge's ``cache_hit_rate`` and ``failures``; they reach the run log as
    ``reward/<name>/<metric>`` next to the core's mean/std/latency_s/none_count (which win on a
    name clash, but for ``latency_s``: a hook answering several rewards in one call may time each
    one, else each gets the whole call's seconds)::

        return {"llm_judge": RewardScores(scores, metrics={"cache_hit_rate": 0.5, "failures": 1})}

    ``extra`` holds columns of one value per completion for the completions log (what a TRL
    reward function hands ``log_extra``), e.g. ``{"parsed_answer": ["4", None, ...]}``.
    ``metric_counts``: how many values a metric is the mean of (a TRL reward's ``log_metric``
    calls); under a launcher the ranks' means of such a metric are pooled by these counts, as
    TRL's flush sums every process's values over their count, not weighted by samples.
    """

    def __init__(self, scores: Any = (), metrics: Mapping[str, float] | None = None,
                 extra: Mapping[str, Sequence[Any]] | None = None,
                 metric_counts: Mapping[str, int] | None = None) -> None:
        super().__init__(scores)
        self.metrics: dict[str, float] = dict(metrics or {})
        self.extra: dict[str, list[Any]] = {str(k): list(v) for k, v in (extra or {}).items()}
        self.metric_counts: dict[str, int] = {str(k): int(v) for k, v in (metric_counts or {}).items()}

    def __repr__(self) -> str:
        extra = f", extra={self.extra!r}" if self.extra else ""
        return f"RewardScores({list(self)!r}, metrics={self.metrics!r}{extra})"


@attrs.define
class RewardContext:
    """What reward plugins see besides prompts and completions.

    ``rows[i]`` is the dataset row (all its columns) that sample ``i`` came from; ``wanted`` the
    reward names this run asks for (a plugin computes only those); ``options`` per-reward options
    from the config (``options[name]``).
    """

    rows: Sequence[Mapping[str, Any]]
    wanted: tuple[str, ...]
    options: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    completion_ids: list[np.ndarray] | None = None
    #: The steps taken before the one being scored (0 in the first, whose metrics line is step 1),
    #: as TRL's ``global_step`` counts them; an evaluation after N steps sees N.
    step: int = 0
    #: What TRL reward functions get as ``trainer_state`` (``polyrl.rewards.trl_compat.TrainerState``);
    #: None outside a training run (function rewards then see ``global_step = step``).
    trainer_state: Any = None
    #: The dataset's columns: a function reward gets each of them for every sample, None for a row
    #: without it (a JSONL key written on some lines only), as TRL's rows read by 🤗 datasets have
    #: them. None: the keys of ``rows`` alone.
    columns: tuple[str, ...] | None = None


#: Weights cross the boundary as HF-named numpy arrays (float32 unless the backend says otherwise).
NamedWeights = Mapping[str, np.ndarray]
