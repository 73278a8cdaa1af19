"""Batched sampling with a hand-written KV-cache loop, so the log-probs are exactly the sampler's.

Why not ``mlx_lm.batch_generate`` (checked against mlx-lm 0.32.2):

* its ``return_logprobs`` values are ``log_softmax(logits)`` at temperature 1 whatever the
  sampler's temperature, while the contract needs ``log_softmax(logits / T)``;
* it drops the EOS token from the returned ids (the policy must be trained on it, or it never
  learns to stop) and has no stop *strings*, only stop token sequences;
* randomness comes from the global MLX generator, so there is no per-call seed, and its
  ``make_sampler`` applies top-p before top-k (HF and our torch backend: top-k, then top-p).

What is reused from mlx-lm: the model, its cache classes and their batching API
(``KVCache.merge`` -> ``BatchKVCache``, ``prepare(right_padding=...)``/``finalize()`` and
``filter(indices)``), so every architecture mlx-lm can batch works here too.

Method: each prompt is prefilled once (right-padded, then rolled to left padding by
``finalize``, which also gives each row its own RoPE offset, so positions are exact), the cache is
expanded to the ``n`` samples of its group with ``filter`` (repeated indices), and finished rows
are dropped from the batch. Sampling is Gumbel-max, ``argmax(kept_logits + noise)``, with its own
PRNG key per *sample* (``SeedSequence([seed, sample_index])``, split once per step, vectorised with
``mx.vmap``): a sample's tokens depend only on the seed and its index, not on how many prompts
share the call or which rows finished. ``temperature == 0`` is greedy; its log-probs are then
taken at temperature 1 (as the torch backend does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from polyrl.backend_kit.samples import completions, token_budgets
from polyrl.backend_kit.stopping import StopStrings
from polyrl.types import Completion, Prompt, SamplingParams

from polyrl_mlx._mx import mx
from polyrl_mlx.engine import MLXEngine


def penalize_repeats(logits: mx.array, seen: mx.array, penalty: float) -> mx.array:
    """transformers' ``RepetitionPenaltyLogitsProcessor``: tokens already in the row (``seen``, a
    ``[rows, vocab]`` bool mask of prompt + completion so far) have positive logits divided by
    ``penalty`` and negative ones multiplied; 1.0 leaves the logits as they are."""
    if penalty == 1.0:
        return logits
    penalized = mx.where(logits < 0, logits * penalty, logits / penalty)
    return mx.where(seen, penalized, logits)


def _seen_tokens(prompt_ids: list[list[int]], n: int, vocab: int) -> np.ndarray:
    """``[samples, vocab]`` mask of each sample's prompt tokens (the repetition penalty's history)."""
    seen = np.zeros((len(prompt_ids) * n, vocab), dtype=bool)
    for i, ids in enumerate(prompt_ids):
        seen[i * n:(i + 1) * n, np.minimum(np.asarray(ids, dtype=np.int64), vocab - 1)] = True
    return seen


def filter_logits(scaled: mx.array, top_k: int, top_p: float, min_p: float = 0.0) -> mx.array:
    """Mask (to -inf) tokens outside top-k, then outside the top-p nucleus of what is left, then
    below ``min_p`` x the top token's probability (transformers' order).

    The most likely token always survives, so ``top_k=1`` or a tiny ``top_p`` are greedy.
    """
    out = scaled
    vocab = out.shape[-1]
    neg_inf = mx.array(-float("inf"), dtype=out.dtype)
    candidates = out
    if 0 < top_k < vocab:
        candidates = mx.topk(out, top_k, axis=-1)  # the k largest (any order)
        out = mx.where(out < candidates.min(axis=-1, keepdims=True), neg_inf, out)
    if top_p < 1.0:
        desc = -mx.sort(-candidates, axis=-1)  # only the top-k survivors need sorting
        probs = mx.softmax(desc, axis=-1)
        mass_before = mx.cumsum(probs, axis=-1) - probs
        keep = mx.maximum((mass_before < top_p).sum(axis=-1, keepdims=True), 1)
        threshold = mx.take_along_axis(desc, keep - 1, axis=-1)
        out = mx.where(out < threshold, neg_inf, out)
    if min_p > 0.0:  # p_i < min_p * p_max  <=>  logit_i < logit_max + log(min_p)
        top = out.max(axis=-1, keepdims=True)
        out = mx.where(out < top + math.log(min_p), neg_inf, out)
    return out


def sample_keys(seed: int, count: int) -> mx.array:
    """One independent threefry key per sample: ``[count, 2]`` uint32."""
    state = np.stack([np.random.SeedSequence([seed & 0xFFFFFFFFFFFFFFFF, i]).generate_state(2)
                      for i in range(count)])
    return mx.array(state.astype(np.uint32))


_split = mx.vmap(lambda key: mx.random.split(key, 2))


def _gumbel(vocab: int):
    return mx.vmap(lambda key: mx.random.gumbel((vocab,), key=key))



def _prefill(engine: MLXEngine, prompt_ids: list[list[int]]) -> tuple[list, mx.array]:
    """Batch cache holding every prompt, and the float32 logits after each prompt's last token."""
    from mlx_lm.models.cache import make_prompt_cache

    model = engine.model
    per_prompt = [make_prompt_cache(model) for _ in prompt_ids]
    cache = [per_prompt[0][i].merge([c[i] for c in per_prompt]) for i in range(len(per_prompt[0]))]
    lengths = [len(p) for p in prompt_ids]
    width = max(lengths)
    padding = [width - n for n in lengths]
    rows = np.full((len(prompt_ids), width), engine.pad_id, dtype=np.int32)
    for i, ids in enumerate(prompt_ids):
        rows[i, : len(ids)] = ids
    if max(padding) > 0:
        for c in cache:
            c.prepare(lengths=lengths, right_padding=padding)
    last = mx.array(np.asarray(lengths, dtype=np.int32) - 1)
    first = mx.arange(len(prompt_ids))
    parts = engine.head_parts()
    if parts is not None:  # project only each prompt's last position onto the vocabulary
        backbone, head = parts
        logits = head(backbone(mx.array(rows), cache=cache)[first, last])
    else:
        logits = model(mx.array(rows), cache=cache)[first, last]
    logits = logits.astype(mx.float32)
    if max(padding) > 0:
        for c in cache:
            c.finalize()
    mx.eval(logits, [c.state for c in cache])
    return cache, logits


def _prefill_rows(engine: MLXEngine, prompt_ids: list[list[int]], n: int) -> tuple[list, mx.array]:
    """The prompts prefilled once, then the cache and last logits expanded to ``n`` rows per prompt
    (row ``i * n + j`` continues prompt ``i``): a group shares its prompt's prefill."""
    cache, logits = _prefill(engine, prompt_ids)
    if n > 1:
        group = mx.array(np.repeat(np.arange(len(prompt_ids)), n).astype(np.int32))
        for c in cache:
            c.filter(group)
        logits = logits[group]
    return cache, logits


def forced_logprobs(engine: MLXEngine, prompt_ids: list[list[int]], completions: list[list[int]],
                    n: int = 1) -> list[np.ndarray]:
    """The sampler's float32 log-probs (temperature 1) of given completions, teacher-forced.

    Runs exactly the sampling path (batched prefill of every prompt, the cache expanded to ``n``
    rows per prompt with ``filter``, then one cached step per token) but feeds the given tokens
    instead of drawing them; row ``i * n + j`` follows ``completions[i * n + j]``. All completions
    must have one length. Why: the load-time check of an untested family (``family_check``)
    compares it with the scorer's full forward.
    """
    steps = {len(c) for c in completions}
    if len(steps) != 1 or len(completions) != len(prompt_ids) * n:
        raise ValueError("forced_logprobs needs n completions per prompt, all of one length")
    cache, logits = _prefill_rows(engine, prompt_ids, n)
    forced = mx.array(np.asarray(completions, dtype=np.int32))
    out, length = [], steps.pop()
    for t in range(length):
        logp_all = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        out.append(mx.take_along_axis(logp_all, forced[:, t, None], axis=-1)[:, 0])
        if t + 1 < length:
            logits = engine.model(forced[:, t, None], cache=cache)[:, -1, :].astype(mx.float32)
    values = np.array(mx.stack(out, axis=1), dtype=np.float32)
    return list(values)


def generate(engine: MLXEngine, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
    """Sample ``sampling.n`` completions per prompt, grouped by prompt (see module docstring)."""
    with mx.stream(engine.device):
        return _generate(engine, prompts, sampling)


def _generate(engine: MLXEngine, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
    if not prompts:
        return []
    n = sampling.n
    prompt_ids = [engine.encode_prompt(p) for p in prompts]
    budgets = token_budgets(prompt_ids, engine.config.max_length, sampling.max_new_tokens, n)
    total = len(budgets)

    seed = int(sampling.seed) if sampling.seed is not None else engine.next_seed()
    row_keys = sample_keys(seed, total)
    greedy = sampling.temperature == 0
    temperature = 1.0 if greedy else float(sampling.temperature)
    stop = StopStrings(engine.decode, sampling.stop)

    cache, logits = _prefill_rows(engine, prompt_ids, n)

    tokens: list[list[int]] = [[] for _ in range(total)]
    stops = [stop.row() for _ in range(total)]  # each row's text kept as it grows
    logps: list[list[float]] = [[] for _ in range(total)]
    finish = ["length"] * total
    active = np.arange(total)  # sample index of each batch row
    vocab = logits.shape[-1]
    penalty = float(sampling.repetition_penalty)
    seen = _seen_tokens(prompt_ids, n, vocab) if penalty != 1.0 else None

    for _ in range(max(budgets)):
        # log-probs of the model's own (temperature-scaled) distribution; the token is drawn
        # from the processed one (SamplingParams docstring)
        scaled = logits / temperature
        logp_all = scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)
        processed = logits if seen is None else penalize_repeats(logits, mx.array(seen[active]), penalty)
        if greedy:
            chosen = mx.argmax(processed, axis=-1)
        else:
            pairs = _split(row_keys)
            row_keys = pairs[:, 0]
            noise = _gumbel(vocab)(pairs[:, 1])
            kept = filter_logits(processed / temperature, sampling.top_k, sampling.top_p, sampling.min_p)
            chosen = mx.argmax(kept + noise, axis=-1)
        chosen_lp = mx.take_along_axis(logp_all, chosen[:, None], axis=-1)[:, 0]
        mx.eval(chosen, chosen_lp)
        if seen is not None:
            seen[active, np.asarray(chosen.tolist(), dtype=np.int64)] = True

        keep_rows: list[int] = []
        for row, (sample, tok, lp) in enumerate(zip(active.tolist(), chosen.tolist(), chosen_lp.tolist())):
            tokens[sample].append(int(tok))
            logps[sample].append(float(lp))
            if (tok in engine.eos_ids and not sampling.ignore_eos) or stops[sample].hit(tokens[sample]):
                finish[sample] = "stop"
            elif len(tokens[sample]) < budgets[sample]:
                keep_rows.append(row)
        if not keep_rows:
            break
        if len(keep_rows) < len(active):
            index = mx.array(np.asarray(keep_rows, dtype=np.int32))
            for c in cache:
                c.filter(index)
            active = active[keep_rows]
            chosen = chosen[index]
            row_keys = row_keys[index]
        logits = engine.model(chosen[:, None], cache=cache)[:, -1, :].astype(mx.float32)

    return completions(engine.decode, prompt_ids, n, tokens, logps, finish)


__all__ = ["filter_logits", "forced_logprobs", "generate", "penalize_repeats"]
