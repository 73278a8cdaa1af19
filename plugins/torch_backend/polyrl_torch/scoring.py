"""Per-token log-probs of given completions (old/reference policy, and the training forward).

Memory is what limits this on CPU: a full ``[batch, length, vocab]`` logits tensor for SmolLM2
(vocab 49152) is 200 KB per position. So the backbone's hidden states are first reduced to the
completion positions, and ``lm_head`` + log-softmax run over chunks of those rows; under autograd,
when the batch's logits would pass ``logits_memory_mb``, each chunk is recomputed in backward
(activation checkpointing) instead of keeping its logits.
Sequences are right-padded: with causal attention a real token never sees the padding after it,
so no attention mask is needed and position ids are the plain ``arange`` the sampler also used.

GRPO scores ``n`` completions of each prompt. When prompts repeat in a batch, each distinct prompt
runs through the backbone once and its KV cache is shared by the rows of its group (indexed per
row, so under autograd the gradients of all rows flow back into the one prompt computation); only
the completion tokens run per row. Same log-probs to float tolerance, ~(n-1)/n fewer prompt FLOPs,
but the completions then attend with a mask (no causal block skipping): where that costs more than
the prompts save (long completions after short prompts, ``shared_prompt_pays``) rows run whole.
The completion tokens are run in length buckets (``polyrl.backend_kit.batching.length_buckets``):
when some rows stopped early, one right-padded call would spend its time on padding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from polyrl.backend_kit.batching import (
    in_length_batches,
    length_buckets,
    prompt_groups,
    shared_prompt_pays,
)
from polyrl.types import TokenSequence
from polyrl_torch.engine import TorchEngine
from polyrl_torch.output_head import head_transform
from polyrl_torch.router_aux import load_balancing_loss
from polyrl_torch.target_logprobs import target_logprobs

#: Logit elements per chunk (64 MB in float32) where a chunk's logits are transient (no autograd,
#: or recomputed in backward).
CHUNK_ELEMENTS = 1 << 24
#: Logit elements per chunk where autograd keeps every chunk's logits anyway (under the
#: ``logits_memory_mb`` cap): the output head's matmuls run well below the CPU's peak at a few
#: hundred rows, so fewer, taller chunks; the cost is one chunk's gradient (256 MB in float32)
#: alive during backward.
KEPT_CHUNK_ELEMENTS = 1 << 26


def _one_step(softcap: float | None, entropy: str) -> bool:
    """Whether a chunk's log-probs take ``polyrl_torch.target_logprobs`` (everything but a logit
    softcap or an entropy that needs its own gradient, which keep the composite path)."""
    return not softcap and entropy != "grad"


def _chunk_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    temperature: float, softcap: float | None, entropy: str = "none", scale: float = 1.0):
    """The targets' log-probs; with ``entropy`` "metric" (detached) or "grad" also each row's
    entropy of the whole next-token distribution. ``scale`` and ``softcap``: the family's own
    transform of the head's logits (``polyrl_torch.output_head``), applied before the temperature."""
    logits = head(hidden)
    if _one_step(softcap, entropy):  # a scale alone is a temperature: (x * s) / t = x / (t / s)
        picked, ent = target_logprobs(logits, targets, temperature / scale, with_entropy=entropy == "metric")
        return picked if entropy == "none" else (picked, ent)
    logits = logits.float()
    if scale != 1.0:
        logits = logits * scale
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    # dividing by 1.0 would still write (and, under autograd, back-propagate) a whole logits copy
    logp = torch.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
    picked = logp.gather(-1, targets[:, None])[:, 0]
    if entropy == "none":
        return picked
    full = logp if entropy == "grad" else logp.detach()
    return picked, -(full.exp() * full).sum(-1)


def shared_prompt_forward_allowed(engine: TorchEngine) -> bool:
    """Off for sliding-window attention (its cache drops old keys) or when the user says so, and
    in a checkpointed training forward (transformers drops the KV cache there, so the tails
    would not see their prompt)."""
    if not engine.options.shared_prompt_forward:
        return False
    if engine.config.gradient_checkpointing and engine.model.training:
        return False
    config = engine.causal_lm.config
    return not (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))


def _costs_per_token(engine: TorchEngine) -> tuple[float, float] | None:
    """(FLOPs per token through the decoder's weights, attention FLOPs per (query, key) pair over all
    layers), from the model itself; None when its config does not say (then prompts are shared)."""
    if "_forward_costs" in vars(engine):  # measured once per engine: the model's shape is fixed
        known: tuple[float, float] | None = vars(engine)["_forward_costs"]
        return known
    config = engine.causal_lm.config
    heads, layers = getattr(config, "num_attention_heads", None), getattr(config, "num_hidden_layers", None)
    hidden = getattr(config, "hidden_size", None)
    costs = None
    if heads and layers and hidden:
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        decoder = engine.causal_lm.get_decoder()
        embed = decoder.get_input_embeddings()
        weights = sum(p.numel() for p in decoder.parameters()) - (embed.weight.numel() if embed is not None else 0)
        costs = (2.0 * weights, 4.0 * heads * head_dim * layers)
    engine._forward_costs = costs  # type: ignore[attr-defined]
    return costs


def sharing_pays(engine: TorchEngine, sequences: Sequence[TokenSequence], owners: list[int]) -> bool:
    """``shared_prompt_pays`` for this batch on this model (the option ``shared_prompt_forward``
    and the cases it cannot run are ``shared_prompt_forward_allowed``'s)."""
    costs = _costs_per_token(engine)
    if costs is None:
        return True
    return shared_prompt_pays([len(s.prompt_ids) for s in sequences], [len(s.completion_ids) for s in sequences],
                              owners, *costs)


def _right_padded(rows: Sequence[np.ndarray], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids ``[len(rows), width]`` right-padded with ``pad_id``, mask of the real tokens)."""
    width = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.from_numpy(np.asarray(r, dtype=np.int64))
        mask[i, : len(r)] = 1
    return ids, mask


def _take(values: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor | None = None) -> torch.Tensor:
    """``values[rows]`` (or ``values[rows, cols]``) through ``index_select``, because the backward
    must be deterministic: advanced indexing's backward (``index_put_`` with accumulate) adds the
    rows that share an index with atomic float adds across threads on CPU, so two identical runs
    differed in the last bits of the prompt's gradient and then drifted apart (the demo, issue 19);
    ``index_select``'s backward (``index_add_``) adds them in a fixed order."""
    if cols is None:
        return values.index_select(0, rows)
    return values.flatten(0, 1).index_select(0, rows * values.shape[1] + cols)


def _full_hidden(engine: TorchEngine, sequences: Sequence[TokenSequence],
                 router: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Backbone states that predict each completion token, every row run whole (no sharing); with
    ``router`` also the MoE load-balancing loss over every real token of the rows (the last
    completion token too, as TRL's forward: one more position per row), else None."""
    rows = [np.concatenate([s.prompt_ids, s.completion_ids if router else s.completion_ids[:-1]]) for s in sequences]
    ids, real = _right_padded(rows, engine.pad_id)
    extra = {"output_router_logits": True} if router else {}
    out = engine.causal_lm.get_decoder()(input_ids=ids.to(engine.device), use_cache=False, **extra)
    hidden = out.last_hidden_state
    aux = load_balancing_loss(engine.causal_lm.config, out.router_logits, real) if router else None
    # completion token j of sequence i is predicted at position len(prompt_i) - 1 + j
    b = np.concatenate([np.full(len(s.completion_ids), i) for i, s in enumerate(sequences)])
    t = np.concatenate([np.arange(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.completion_ids))
                        for s in sequences])
    return _take(hidden, torch.from_numpy(b.astype(np.int64)).to(engine.device),
                 torch.from_numpy(t.astype(np.int64)).to(engine.device)), aux


def _shared_prompt_hidden(engine: TorchEngine, sequences: Sequence[TokenSequence], owners: list[int],
                          prompts: list[np.ndarray]) -> torch.Tensor:
    """Same rows as ``_full_hidden``, each distinct prompt through the backbone once.

    Pass 1 runs the distinct prompts (right-padded, masked) and keeps their KV cache; its state at
    a prompt's last token predicts completion token 0. Pass 2 runs each row's completion tokens
    after its prompt's cache (rows index the cache by owner), at positions ``len(prompt) + j``,
    with the prompts' padding masked out, one call per length bucket.
    """
    from transformers import DynamicCache

    device = engine.device
    config = engine.causal_lm.config
    decoder = engine.causal_lm.get_decoder()
    prompt_ids, prompt_mask = _right_padded(prompts, engine.pad_id)
    cache = DynamicCache(config=config)
    first = decoder(input_ids=prompt_ids.to(device), attention_mask=prompt_mask.to(device),
                    past_key_values=cache, use_cache=True).last_hidden_state
    owner = torch.tensor(owners, dtype=torch.long)
    prompt_len = prompt_mask.sum(dim=1)
    # the state at each row's last prompt token predicts its first completion token
    heads = _take(first, owner.to(device), (prompt_len[owner] - 1).to(device))

    tails = [np.asarray(s.completion_ids[:-1], dtype=np.int64) for s in sequences]
    rest: list[torch.Tensor | None] = [None] * len(sequences)  # row i's states after token 0
    call_tokens = engine.options.bucket_call_tokens
    for bucket in length_buckets([len(t) for t in tails], call_tokens):
        if max(len(tails[i]) for i in bucket) == 0:
            continue  # one-token (or empty) completions: their head state is all they need
        rows = torch.tensor(bucket, dtype=torch.long)
        row_owner = owner[rows]
        index = row_owner.to(device)
        bucket_cache = DynamicCache(config=config, ddp_cache_data=[
            (_take(layer.keys, index), _take(layer.values, index)) for layer in cache.layers])
        tail_ids, tail_mask = _right_padded([tails[i] for i in bucket], engine.pad_id)
        positions = prompt_len[row_owner][:, None] + torch.arange(tail_ids.shape[1])[None, :]
        mask = torch.cat([prompt_mask[row_owner], tail_mask], dim=1)
        states = decoder(input_ids=tail_ids.to(device), attention_mask=mask.to(device),
                         position_ids=positions.to(device), past_key_values=bucket_cache,
                         use_cache=True).last_hidden_state
        for j, i in enumerate(bucket):
            rest[i] = states[j, : len(tails[i])]
    pieces = []
    for i, s in enumerate(sequences):
        if len(s.completion_ids):  # an empty completion has nothing to score
            pieces.append(heads[i: i + 1])
            tail = rest[i]
            if tail is not None:
                pieces.append(tail)
    return torch.cat(pieces)


def token_logprobs(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float,
                   share_prompts: bool = True) -> list[torch.Tensor]:
    """Log-probs (float32 tensors, differentiable when grad is enabled) of each completion token.

    One forward for all ``sequences``: the caller decides the (micro-)batch size.
    ``share_prompts=False`` forces one backbone call (FSDP's training forward needs a fixed count).
    """
    return _score(engine, sequences, temperature, share_prompts, "none")[0]


def token_logprobs_with_entropy(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float,
                                differentiable: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """``token_logprobs`` and each completion position's entropy of the trainer's distribution,
    from the logits that forward already computes (detached unless ``differentiable``)."""
    logps, entropies, _ = _score(engine, sequences, temperature, True, "grad" if differentiable else "metric")
    return logps, entropies  # type: ignore[return-value]


def token_logprobs_with_router_loss(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float,
                                    differentiable: bool = False
                                    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """``token_logprobs_with_entropy`` and the MoE load-balancing loss of the same forward over the
    rows' real tokens (``polyrl_torch.router_aux``): every row is run whole (prompt and completion),
    as TRL's forward sees it, so a prompt shared by a group counts once per row."""
    logps, entropies, aux = _score(engine, sequences, temperature, False, "grad" if differentiable else "metric",
                                   router=True)
    return logps, entropies, aux  # type: ignore[return-value]


def _score(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float, share_prompts: bool,
           entropy: str, router: bool = False
           ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None, torch.Tensor | None]:
    if not sequences:
        return [], ([] if entropy != "none" else None), None
    if any(len(s.prompt_ids) == 0 for s in sequences):
        raise ValueError("every sequence needs at least one prompt token to predict its first completion token")
    device = engine.device
    lm = engine.causal_lm
    owners, prompts = prompt_groups(sequences)
    aux = None
    if (share_prompts and len(prompts) < len(sequences) and shared_prompt_forward_allowed(engine)
            and sharing_pays(engine, sequences, owners)):
        selected = _shared_prompt_hidden(engine, sequences, owners, prompts)
    else:
        selected, aux = _full_hidden(engine, sequences, router)
    target = torch.from_numpy(np.concatenate([s.completion_ids for s in sequences]).astype(np.int64)).to(device)
    lengths = [len(s.completion_ids) for s in sequences]

    head = lm.get_output_embeddings()
    transform = head_transform(lm.config)
    softcap = transform.softcap
    # under autograd each chunk keeps its logits for backward (as computed: 2 bytes each under
    # bfloat16 mixed precision; the softcap / entropy-gradient path keeps float32 logits and
    # log-softmax, 8) unless recomputed; recompute (one more lm_head matmul) only above the cap
    per_logit = torch.finfo(engine.compute_dtype or engine.dtype).bits // 8 if _one_step(softcap, entropy) else 8
    kept_mb = selected.shape[0] * head.weight.shape[0] * per_logit / 2**20
    cap_mb = engine.options.logits_memory_mb
    recompute = torch.is_grad_enabled() and kept_mb > cap_mb
    kept = torch.is_grad_enabled() and not recompute
    chunk = max(1, (KEPT_CHUNK_ELEMENTS if kept else CHUNK_ELEMENTS) // head.weight.shape[0])
    pieces, ent_pieces = [], []
    for start in range(0, selected.shape[0], chunk):
        args = (head, selected[start:start + chunk], target[start:start + chunk], temperature, softcap, entropy,
                transform.scale)
        out = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if recompute else _chunk_logprobs(*args)
        if entropy == "none":
            pieces.append(out)
        else:
            pieces.append(out[0])
            ent_pieces.append(out[1])
    empty = selected.new_zeros(0, dtype=torch.float32)
    flat = torch.cat(pieces) if pieces else empty
    if entropy == "none":
        return list(torch.split(flat, lengths)), None, aux
    ent = torch.cat(ent_pieces) if ent_pieces else empty
    return list(torch.split(flat, lengths)), list(torch.split(ent, lengths)), aux


def logprobs(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float,
             reference: bool) -> list[np.ndarray] | None:
    """The ``logprobs`` hook: current policy, or (LoRA only) the base with adapters disabled."""
    if reference and engine.lora is None:
        return None  # the core then loads a separate reference engine
    temperature = float(temperature) or 1.0

    def score(batch: list[TokenSequence]) -> list[np.ndarray]:
        return [lp.cpu().numpy().astype(np.float32, copy=False) for lp in token_logprobs(engine, batch, temperature)]

    return _scored(engine, sequences, reference, score)


def entropies(engine: TorchEngine, sequences: Sequence[TokenSequence], temperature: float) -> list[np.ndarray]:
    """The ``entropies`` hook: the current policy's, from the forward ``train_step``'s metric uses."""
    temperature = float(temperature) or 1.0

    def score(batch: list[TokenSequence]) -> list[np.ndarray]:
        return [e.float().cpu().numpy().astype(np.float32, copy=False)
                for e in token_logprobs_with_entropy(engine, batch, temperature)[1]]

    return _scored(engine, sequences, False, score)


def _scored(engine: TorchEngine, sequences: Sequence[TokenSequence], reference: bool,
            score: Callable[[list[TokenSequence]], list[np.ndarray]]) -> list[np.ndarray]:
    """``score`` over ``sequences`` in length batches, in eval mode without gradients (the base
    with adapters disabled for ``reference``, else the merged adapters)."""
    was_training = engine.model.training
    engine.model.eval()
    try:
        context = engine.model.disable_adapter() if reference else engine.adapters_merged()
        with engine.full_weights(), context, torch.inference_mode(), engine.autocast():
            return in_length_batches(sequences, engine.options.score_batch_tokens, score)
    finally:
        engine.model.train(was_training)
