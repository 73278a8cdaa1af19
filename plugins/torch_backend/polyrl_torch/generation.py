"""Batched sampling written by hand, so the returned log-probs are exactly the sampler's.

Why not ``model.generate``: its scores are post-processed (top-p/top-k masks) and it repeats every
prompt ``n`` times. Here each distinct prompt is prefilled once and its KV cache either kept once
for the rows of its group (``polyrl_torch.shared_prompt_cache``, under the written-out float32
decode step) or copied to each of them (``DynamicCache.batch_select_indices`` with a repeating
index: the same as ``batch_repeat_interleave`` but also shares a prompt given twice), and finished rows are dropped
from the batch (``batch_select_indices`` again) so the remaining rows decode faster.

Randomness: one uniform number per sample and step, drawn up front as a ``[samples,
max_new_tokens]`` table from the call's generator; each step picks the token where the kept
distribution's cumulative probability first exceeds the sample's number (inverse-CDF sampling, in
two levels, see ``sample_probs``: one draw per token instead of a noise value per vocabulary
entry, a measurable share of generation time with a large vocabulary). Sample ``s``'s tokens therefore depend only on the seed, ``s`` and its
prompt: not on which other rows happen to have finished, nor on how many prompts share the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from polyrl.backend_kit.samples import completions, token_budgets
from polyrl.backend_kit.stopping import StopStrings
from polyrl.types import Completion, Prompt, SamplingParams
from polyrl_torch.attention import attends_bf16_natively
from polyrl_torch import fixed_decode
from polyrl_torch.decode_step import LlamaDecodeStep
from polyrl_torch.fixed_decode import FixedShapeDecoder
from polyrl_torch.engine import TorchEngine
from polyrl_torch.kv_cache import preallocate
from polyrl_torch.shared_prompt_cache import share_prompts
from polyrl_torch.generation_weights import GenerationCopy, uses_generation_copy


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' ``RepetitionPenaltyLogitsProcessor``: every token already in the row (``seen``,
    a ``[rows, vocab]`` bool mask of prompt + completion so far) has its logit divided by
    ``penalty`` when positive, multiplied when negative; 1.0 leaves the logits as they are."""
    if penalty == 1.0:
        return logits
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def filter_logits(scaled: torch.Tensor, top_k: int, top_p: float, min_p: float = 0.0) -> torch.Tensor:
    """Mask (to -inf) tokens outside top-k, then outside the top-p nucleus, then below
    ``min_p`` x the top token's probability (HF order).

    The top token always survives, so ``top_k=1`` or a tiny ``top_p`` reduce to greedy.
    """
    out = scaled
    if top_k > 0 and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    if min_p > 0.0:  # p_i < min_p * p_max  <=>  logit_i < logit_max + log(min_p)
        top = out.max(dim=-1, keepdim=True).values
        out = out.masked_fill(out < top + torch.log(torch.tensor(min_p, dtype=out.dtype)), float("-inf"))
    return out



#: Vocabulary entries per block of the two-level inverse CDF (``sample_probs``).
CDF_BLOCK = 256


def sample_kept(kept: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Per row, the token whose cumulative probability first exceeds ``draw`` x the total mass.

    ``kept`` holds logits with excluded tokens at -inf (probability 0, never chosen); ``draws``
    are uniform in [0, 1).
    """
    return sample_probs(torch.softmax(kept, dim=-1), draws)


def sample_probs(probs: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling from ``probs`` (``[rows, vocab]``, zeros never chosen), in two levels.

    A flat float64 cumulative sum over a 49k vocabulary costs more than the rest of a sampling
    step; so the draw first picks a block of ``CDF_BLOCK`` entries from the blocks' masses, then
    the entry inside that block from a float64 cumulative sum of its ``CDF_BLOCK`` values. Inside a
    block every entry keeps float64 resolution, so however unlikely a kept token is, it stays
    reachable; the blocks' masses are float32 sums (relative error ~1e-7 in the block's chance).
    """
    rows, vocab = probs.shape
    pad = (-vocab) % CDF_BLOCK
    padded = torch.nn.functional.pad(probs, (0, pad)) if pad else probs.contiguous()  # pad copies
    blocks = padded.view(rows, -1, CDF_BLOCK)
    block_cdf = blocks.sum(dim=-1).double().cumsum(dim=-1)
    total = block_cdf[:, -1]
    target = draws * total
    block = torch.searchsorted(block_cdf, target[:, None], right=True)[:, 0]
    last_block = (block_cdf < total[:, None]).sum(dim=-1)  # a draw rounding up to the total lands here
    block = torch.minimum(block, last_block)
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp(min=0)[:, None])[:, 0],
                         torch.zeros_like(total))
    inner = blocks[torch.arange(rows, device=probs.device), block].double().cumsum(dim=-1) + before[:, None]
    picked = torch.searchsorted(inner, target[:, None], right=True)[:, 0]
    last_kept = (inner < inner[:, -1:]).sum(dim=-1)  # the block's last entry with mass
    return block * CDF_BLOCK + torch.minimum(picked, last_kept)


def _left_pad(rows: list[list[int]], pad_id: int, device: torch.device):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def _seen_tokens(prompt_ids: list[list[int]], n: int, vocab: int, device: torch.device) -> torch.Tensor:
    """``[samples, vocab]`` mask of each sample's prompt tokens (the repetition penalty's history)."""
    seen = torch.zeros((len(prompt_ids) * n, vocab), dtype=torch.bool, device=device)
    for i, ids in enumerate(prompt_ids):
        seen[i * n:(i + 1) * n, torch.tensor(ids, dtype=torch.long, device=device).clamp(max=vocab - 1)] = True
    return seen


#: From this many new tokens a 16-bit sampler's KV cache is held in float32 on the CPU
#: (``polyrl_torch.kv_cache``): attention converts a 16-bit cache whole at every decode step, a
#: cost that grows with the length; below it the wider cache's extra memory traffic costs more.
FLOAT32_CACHE_FROM_TOKENS = 256


def widens_cache(device: torch.device, new_tokens: int, model: Any = None) -> bool:
    """Whether a 16-bit sampler's cache is held in float32 (CPU attention is float32; long runs),
    never for a ``model`` that attends bfloat16 natively (``polyrl_torch.attention``)."""
    native = model is not None and attends_bf16_natively(model)
    return device.type == "cpu" and new_tokens >= FLOAT32_CACHE_FROM_TOKENS and not native


def _next_logits(model, **inputs) -> torch.Tensor:
    out = model(**inputs, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :].float()


def generate(engine: TorchEngine, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
    """Sample ``sampling.n`` completions per prompt; see the module docstring for the method."""
    from transformers import DynamicCache

    engine.use_configured_threads()
    model_was_training = engine.model.training
    engine.model.eval()
    try:
        if uses_generation_copy(engine):  # packed weights / mixed precision: see generation_weights
            if engine.generation_copy is None:
                engine.generation_copy = GenerationCopy(engine)
            copy = engine.generation_copy
            with torch.inference_mode():
                return _generate(engine, copy.current(engine), prompts, sampling, DynamicCache, copy.decode_step)
        # gather (FSDP) and fold LoRA outside inference mode
        with engine.full_weights(), engine.adapters_merged(), torch.inference_mode(), engine.autocast():
            return _generate(engine, engine.model, prompts, sampling, DynamicCache)
    finally:
        engine.model.train(model_was_training)


def _generate(engine: TorchEngine, model, prompts, sampling: SamplingParams, cache_cls,
              decode_step: LlamaDecodeStep | None = None) -> list[Completion]:
    """``model`` samples (the engine's own, or its packed / mixed-precision copy); ``decode_step``,
    when given, computes its single-token steps (``polyrl_torch.decode_step``)."""
    if not prompts:
        return []
    n, device = sampling.n, engine.device
    prompt_ids = [engine.encode_prompt(p) for p in prompts]
    budgets = token_budgets(prompt_ids, engine.config.max_length, sampling.max_new_tokens, n)
    total = len(budgets)

    generator = engine.generator
    if sampling.seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(int(sampling.seed))
    greedy = sampling.temperature == 0
    temperature = 1.0 if greedy else float(sampling.temperature)
    stop = StopStrings(engine.decode, sampling.stop)

    # prefill each distinct prompt once, then copy its cache to every row that uses it
    unique: dict[tuple[int, ...], int] = {}
    for ids in prompt_ids:
        unique.setdefault(tuple(ids), len(unique))
    input_ids, attention = _left_pad([list(u) for u in unique], engine.pad_id, device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    cache = preallocate(cache_cls(config=engine.causal_lm.config), input_ids.shape[1] + max(budgets),
                        widen_16bit=widens_cache(device, max(budgets), model))
    logits = _next_logits(model, input_ids=input_ids, attention_mask=attention,
                          position_ids=positions, past_key_values=cache)
    rows = [unique[tuple(ids)] for ids in prompt_ids for _ in range(n)]
    if decode_step is not None and not decode_step.usable(cache):
        decode_step = None
    causal = engine.causal_lm if model is engine.model else model
    fixed_shapes = (engine.fsdp is None and fixed_decode.wanted(engine.config.options, device)
                    and fixed_decode.usable(causal, cache))
    if rows != list(range(len(unique))):
        expand = torch.tensor(rows, device=device)
        if not fixed_shapes and decode_step is not None and decode_step.shares_prompts():  # one copy per group
            share_prompts(cache, attention, expand, max(budgets), decode_step.native)
        else:
            cache.batch_select_indices(expand)
        logits, attention, positions = logits[expand], attention[expand], positions[expand]
    next_pos = positions[:, -1] + 1
    fixed = FixedShapeDecoder(causal, cache, attention, next_pos, capture=device.type == "cuda") if fixed_shapes else None

    tokens: list[list[int]] = [[] for _ in range(total)]
    stops = [stop.row() for _ in range(total)]  # each row's text kept as it grows
    logps: list[list[float]] = [[] for _ in range(total)]
    finish = ["length"] * total
    active = torch.arange(total, device=device)  # sample index of each batch row

    if not greedy:  # row s, column t: sample s's draw at step t (see module docstring)
        draws = torch.rand((total, sampling.max_new_tokens), generator=generator, device=device,
                           dtype=torch.float64)
    penalty = float(sampling.repetition_penalty)
    seen = _seen_tokens(prompt_ids, n, logits.shape[-1], device) if penalty != 1.0 else None

    def ends(sample: int, tok: int, lp: float) -> bool:
        """Record sample ``sample``'s next token; whether that ended it (a stop, or its budget)."""
        tokens[sample].append(tok)
        logps[sample].append(lp)
        if (tok in engine.eos_ids and not sampling.ignore_eos) or stops[sample].hit(tokens[sample]):
            finish[sample] = "stop"
            return True
        return len(tokens[sample]) >= budgets[sample]

    def pick(logits: torch.Tensor, samples: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token and its log-prob for the batch's rows, sample ``samples[row]`` each."""
        return _pick(logits, None if seen is None else seen[samples], None if greedy else draws[samples, step],
                     sampling, temperature, penalty)

    if fixed is not None:  # every row decodes to the end: see polyrl_torch.fixed_decode
        _decode_fixed(fixed, logits, pick, ends, seen, max(budgets))
        return completions(engine.decode, prompt_ids, n, tokens, logps, finish)

    for step in range(max(budgets)):
        chosen, chosen_lp = pick(logits, active, step)
        if seen is not None:
            seen[active, chosen] = True

        keep_rows = [row for row, (sample, tok, lp) in enumerate(zip(active.tolist(), chosen.tolist(),
                                                                       chosen_lp.tolist()))
                     if not ends(sample, tok, lp)]
        if not keep_rows:
            break
        if len(keep_rows) < len(active):
            index = torch.tensor(keep_rows, device=device)
            cache.batch_select_indices(index)
            active, chosen = active[index], chosen[index]
            attention, next_pos = attention[index], next_pos[index]
        attention = torch.cat([attention, attention.new_ones((len(active), 1))], dim=-1)
        if decode_step is not None:
            logits = decode_step(chosen[:, None], attention, next_pos[:, None], cache)
        else:
            logits = _next_logits(model, input_ids=chosen[:, None], attention_mask=attention,
                                  position_ids=next_pos[:, None], past_key_values=cache)
        next_pos = next_pos + 1
    return completions(engine.decode, prompt_ids, n, tokens, logps, finish)


def _pick(logits: torch.Tensor, seen: torch.Tensor | None, draws: torch.Tensor | None, sampling: SamplingParams,
          temperature: float, penalty: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's next token (greedy when ``draws`` is None) and its log-prob. The log-probs are the
    model's own (temperature-scaled) distribution's; the token is drawn from the processed one
    (SamplingParams docstring)."""
    scaled = logits if temperature == 1.0 else logits / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    processed = logits if seen is None else penalize_repeats(logits, seen, penalty)
    if draws is None:
        chosen = processed.argmax(dim=-1)
    else:  # without a repetition penalty the processed logits are the scaled ones: no second division
        kept = filter_logits(scaled if seen is None else processed / temperature, sampling.top_k,
                             sampling.top_p, sampling.min_p)
        if kept is scaled:  # nothing filtered: the log-probs' own distribution, one exp pass away
            chosen = sample_probs(logp_all.exp(), draws)
        else:
            chosen = sample_kept(kept, draws)
    return chosen, logp_all.gather(-1, chosen[:, None])[:, 0]


#: Steps between the fixed-shape loop's reads of the sampled tokens (each read waits for the
#: device; a row's stop is noticed up to this many steps late, the extra tokens discarded).
READ_BACK_EVERY = 8


def _decode_fixed(decoder: FixedShapeDecoder, logits: torch.Tensor, pick: Any, ends: Any,
                  seen: torch.Tensor | None, steps: int) -> None:
    """Sample every row for ``steps`` steps with ``decoder``, reading tokens back every
    ``READ_BACK_EVERY`` steps: a row's tokens after it ended are dropped, and the loop stops once
    every row has ended. ``pick`` and ``ends`` are the row-dropping loop's own."""
    rows = torch.arange(decoder.rows, device=logits.device)
    sampled = torch.empty((decoder.rows, steps), dtype=torch.long, device=logits.device)
    sampled_lp = torch.empty((decoder.rows, steps), dtype=torch.float32, device=logits.device)
    open_rows, read = set(range(decoder.rows)), 0
    for step in range(steps):
        chosen, chosen_lp = pick(logits, rows, step)
        sampled[:, step], sampled_lp[:, step] = chosen, chosen_lp
        if seen is not None:
            seen[rows, chosen] = True
        if step == steps - 1 or (step + 1 - read) == READ_BACK_EVERY:
            new_tokens, new_lps = sampled[:, read:step + 1].tolist(), sampled_lp[:, read:step + 1].tolist()
            for row in sorted(open_rows):
                for tok, lp in zip(new_tokens[row], new_lps[row]):
                    if ends(row, tok, lp):
                        open_rows.discard(row)
                        break
            read = step + 1
            if not open_rows:
                return
        logits = decoder.step(chosen)
