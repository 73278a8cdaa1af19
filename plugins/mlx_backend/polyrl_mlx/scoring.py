"""Per-token log-probs of given completions (old/reference policy, and the training forward).

mlx-lm's Llama takes no attention mask, so sequences are right-padded: with causal attention a
real token never sees the padding after it, and positions are the plain ``arange`` the sampler
used. Only completion positions matter, so for the usual decoder types (``SPLIT_HEAD_TYPES``)
the backbone's hidden states are first gathered at those positions and only they go through
``lm_head`` (a ``[tokens, vocab]`` matrix instead of ``[batch, length, vocab]``: SmolLM2's
vocabulary is 49152). Other architectures fall back to the model's full ``__call__``.

``reference=True`` on a LoRA engine computes the frozen base: every ``LoRALinear``'s scale is
set to 0 for the call (``y = W x + 0 * B A x`` is exactly ``W x``) and restored afterwards.
Without LoRA there is no frozen copy here, so the hook answers None and the core loads a
reference engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np
from polyrl.types import TokenSequence

from polyrl_mlx._mx import mx
from polyrl_mlx.engine import MLXEngine

#: Tokens (padded rows x width) per no-grad forward when scoring many sequences
#: (``EngineConfig.options["score_batch_tokens"]``).
SCORE_BATCH_TOKENS = 8192


def layout(sequences: Sequence[TokenSequence], pad_id: int):
    """Right-padded input ids and the (row, position, target) of every completion token.

    Completion token ``j`` of sequence ``i`` is predicted at position ``len(prompt_i) - 1 + j``.
    """
    if any(len(s.prompt_ids) == 0 for s in sequences):
        raise ValueError("every sequence needs at least one prompt token to predict its first "
                         "completion token")
    rows = [np.concatenate([s.prompt_ids, s.completion_ids[:-1]]) for s in sequences]
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    lengths = [len(s.completion_ids) for s in sequences]
    row = np.concatenate([np.full(c, i) for i, c in enumerate(lengths)]).astype(np.int32)
    pos = np.concatenate([np.arange(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + c)
                          for s, c in zip(sequences, lengths)]).astype(np.int32)
    target = np.concatenate([s.completion_ids for s in sequences]).astype(np.int32)
    return ids, row, pos, target, lengths


def flat_logprobs(engine: MLXEngine, sequences: Sequence[TokenSequence],
                  temperature: float) -> tuple[mx.array, list[int]]:
    """float32 log-probs of all completion tokens, concatenated, and each sequence's length.

    Differentiable (call it inside ``nn.value_and_grad``); one forward for all ``sequences``.
    """
    ids, row, pos, target, lengths = layout(sequences, engine.pad_id)
    ids, row, pos, target = mx.array(ids), mx.array(row), mx.array(pos), mx.array(target)
    parts = engine.head_parts()
    if parts is not None:
        backbone, head = parts
        hidden = backbone(ids)[row, pos]  # [tokens, hidden]
        logits = head(hidden).astype(mx.float32)
    else:
        logits = engine.model(ids)[row, pos].astype(mx.float32)
    if temperature != 1.0:
        logits = logits / temperature
    picked = mx.take_along_axis(logits, target[:, None], axis=-1)[:, 0]
    return picked - mx.logsumexp(logits, axis=-1), lengths


def _batches(sequences: Sequence[TokenSequence], budget: int) -> list[list[int]]:
    """Indices grouped by similar length (less padding), each group under ``budget`` tokens."""
    order = sorted(range(len(sequences)),
                   key=lambda i: len(sequences[i].prompt_ids) + len(sequences[i].completion_ids))
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = len(sequences[i].prompt_ids) + len(sequences[i].completion_ids)
        if current and width * (len(current) + 1) > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


@contextlib.contextmanager
def adapters_disabled(engine: MLXEngine) -> Iterator[None]:
    """Within the block the LoRA engine computes its frozen base model."""
    modules = list(engine.lora_modules().values())
    scales = [m.scale for m in modules]
    try:
        for m in modules:
            m.scale = 0.0
        yield
    finally:
        for m, s in zip(modules, scales):
            m.scale = s


def logprobs(engine: MLXEngine, sequences: Sequence[TokenSequence], temperature: float,
             reference: bool) -> list[np.ndarray] | None:
    """The ``logprobs`` hook: current policy, or (LoRA only) the base with adapters disabled."""
    if reference and engine.lora is None:
        return None  # the core then loads a separate reference engine
    temperature = float(temperature) or 1.0
    budget = int(engine.config.options.get("score_batch_tokens", SCORE_BATCH_TOKENS))
    out: list[np.ndarray | None] = [None] * len(sequences)
    context = adapters_disabled(engine) if reference else contextlib.nullcontext()
    with mx.stream(engine.device), context:
        for group in _batches(sequences, budget):
            flat, lengths = flat_logprobs(engine, [sequences[i] for i in group], temperature)
            values = np.array(flat, dtype=np.float32)
            for i, piece in zip(group, np.split(values, np.cumsum(lengths)[:-1])):
                out[i] = piece
    return out  # type: ignore[return-value]


__all__ = ["adapters_disabled", "flat_logprobs", "layout", "logprobs"]
