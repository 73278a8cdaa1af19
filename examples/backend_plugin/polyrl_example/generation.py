"""``generate``: a sampling loop written out, because the contract needs what ``model.generate``
hides: the sampler's own log-probs (before top-k/top-p), EOS kept in the completion, stop strings
checked after every token, and ``max_length`` counting prompt plus completion.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from polyrl.backend_features import refuse_unsupported_sampling
from polyrl.backend_kit.stopping import StopStrings
from polyrl.errors import ConfigError
from polyrl.types import Completion, Prompt, SamplingParams

from polyrl_example.engine import ExampleEngine


@torch.no_grad()
def generate(engine: ExampleEngine, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
    """``sampling.n`` completions per prompt, all of prompt 0 first."""
    refuse_unsupported_sampling(sampling, "example")  # min_p, repetition_penalty, ignore_eos: not here
    rng = engine.rng if sampling.seed is None else torch.Generator().manual_seed(sampling.seed)
    out: list[Completion] = []
    for index, prompt in enumerate(prompts):
        ids = engine.prompt_ids(prompt)
        room = engine.config.max_length - len(ids)
        if room < 1:
            raise ConfigError(f"a prompt of {len(ids)} tokens leaves no room under max_length "
                              f"{engine.config.max_length}", field="model.max_length",
                              fix="raise model.max_length or shorten the prompt")
        out += _sample(engine, index, ids, sampling, min(sampling.max_new_tokens, room), rng)
    return out


def _sample(engine: ExampleEngine, index: int, prompt_ids: list[int], sampling: SamplingParams, budget: int,
            rng: torch.Generator) -> list[Completion]:
    """One prompt's ``n`` rows as one batch (same length, so no padding) through a KV cache."""
    n, temperature = sampling.n, sampling.temperature
    stop = StopStrings(engine.decode, sampling.stop)
    stops = [stop.row() for _ in range(n)]  # each row's text kept as it grows
    rows: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] = [[] for _ in range(n)]
    stopped = [False] * n
    inputs, cache = torch.tensor([prompt_ids] * n), None
    for _ in range(budget):
        output = engine.model(inputs, past_key_values=cache, use_cache=True)
        cache = output.past_key_values
        # the log-probs returned: softmax(logits / T), or the plain softmax when greedy (T = 0)
        logp = torch.log_softmax(output.logits[:, -1] / (temperature or 1.0), dim=-1)
        if temperature == 0:
            tokens = logp.argmax(-1)
        else:
            probs = _top_p(_top_k(logp.exp(), sampling.top_k), sampling.top_p)
            tokens = torch.multinomial(probs, 1, generator=rng)[:, 0]
        chosen = logp.gather(-1, tokens[:, None])[:, 0]
        for r in range(n):
            if stopped[r]:
                continue  # the row's batch slot keeps running; its output is ignored
            rows[r].append(int(tokens[r]))
            logprobs[r].append(float(chosen[r]))
            stopped[r] = rows[r][-1] in engine.eos_ids or stops[r].hit(rows[r])
        if all(stopped):
            break
        inputs = tokens[:, None]
    return [Completion(index, prompt_ids, ids, lps, text=engine.decode(ids),
                       finish_reason="stop" if done else "length")
            for ids, lps, done in zip(rows, logprobs, stopped)]


def _top_k(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Zero every probability below the k-th largest (0 keeps all)."""
    if k <= 0 or k >= probs.shape[-1]:
        return probs
    kth = probs.topk(k, dim=-1).values[:, -1:]
    return probs.where(probs >= kth, 0.0)


def _top_p(probs: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens until their mass reaches ``p`` of what is left (the top one
    always survives). ``multinomial`` renormalises, so nothing is divided here."""
    if p >= 1.0:
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    mass_before = ordered.cumsum(-1) - ordered
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before < p * probs.sum(-1, keepdim=True))
    return probs.where(keep, 0.0)
