"""Per-token log-probs of given completions (old/reference policy, and the training forward).

Memory is what limits this on CPU: a full ``[batch, length, vocab]`` logits tensor for SmolLM2
(vocab 49152) is 200 KB per position. So the backbone's hidden states are first reduced to the
completion positions, and ``lm_head`` + log-softmax run over chunks of those rows; under autograd
each chunk is recomputed in backward (activation checkpointing) instead of keeping its logits.
Sequences are right-padded: with causal attention a real token never sees the padding after it,
so no attention mask is needed and position ids are the plain ``arange`` the sampler also used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from polyrl.types import TokenSequence
from polyrl_torch.engine import TorchEngine

#: Logit elements per chunk (64 MB in float32).
CHUNK_ELEMENTS = 1 << 24
#: Tokens per no-grad forward when scoring many sequences (option ``score_batch_tokens``).
SCORE_BATCH_TOKENS = 8192


def _chunk_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    temperature: float, softcap: float | None) -> torch.Tensor:
    logits = head(hidden).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, targets[:, None])[:, 0]


def token_logprobs(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float) -> list[torch.Tensor]:
    """Log-probs (float32 tensors, differentiable when grad is enabled) of each completion token.

    One forward for all ``sequences``: the caller decides the (micro-)batch size.
    """
    if not sequences:
        return []
    if any(len(s.prompt_ids) == 0 for s in sequences):
        raise ValueError("every sequence needs at least one prompt token to predict its first completion token")
    device = engine.device
    lm = engine.causal_lm
    rows = [np.concatenate([s.prompt_ids, s.completion_ids[:-1]]) for s in sequences]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), engine.pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.from_numpy(np.asarray(r, dtype=np.int64))
    hidden = lm.get_decoder()(input_ids=ids.to(device), use_cache=False).last_hidden_state

    # completion token j of sequence i is predicted at position len(prompt_i) - 1 + j
    batch_idx, pos_idx, targets, lengths = [], [], [], []
    for i, s in enumerate(sequences):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        batch_idx.append(np.full(c, i))
        pos_idx.append(np.arange(p - 1, p - 1 + c))
        targets.append(s.completion_ids)
        lengths.append(c)
    b = torch.from_numpy(np.concatenate(batch_idx).astype(np.int64)).to(device)
    t = torch.from_numpy(np.concatenate(pos_idx).astype(np.int64)).to(device)
    target = torch.from_numpy(np.concatenate(targets).astype(np.int64)).to(device)
    selected = hidden[b, t]

    head = lm.get_output_embeddings()
    softcap = getattr(lm.config, "final_logit_softcapping", None)
    chunk = max(1, CHUNK_ELEMENTS // head.weight.shape[0])
    recompute = torch.is_grad_enabled() and selected.shape[0] > chunk
    pieces = []
    for start in range(0, selected.shape[0], chunk):
        args = (head, selected[start:start + chunk], target[start:start + chunk], temperature, softcap)
        if recompute:
            pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(*args))
    flat = torch.cat(pieces) if pieces else selected.new_zeros(0, dtype=torch.float32)
    return list(torch.split(flat, lengths))


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


def logprobs(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float,
             reference: bool) -> list[np.ndarray] | None:
    """The ``logprobs`` hook: current policy, or (LoRA only) the base with adapters disabled."""
    if reference and engine.lora is None:
        return None  # the core then loads a separate reference engine
    temperature = float(temperature) or 1.0
    budget = int(engine.config.options.get("score_batch_tokens", SCORE_BATCH_TOKENS))
    out: list[np.ndarray | None] = [None] * len(sequences)
    was_training = engine.model.training
    engine.model.eval()
    try:
        with torch.inference_mode():
            context = engine.model.disable_adapter() if reference else contextlib.nullcontext()
            with context:
                for group in _batches(sequences, budget):
                    lps = token_logprobs(engine, [sequences[i] for i in group], temperature)
                    for i, lp in zip(group, lps):
                        out[i] = lp.cpu().numpy().astype(np.float32, copy=False)
    finally:
        engine.model.train(was_training)
    return out  # type: ignore[return-value]
