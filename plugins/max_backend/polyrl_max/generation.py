"""The ``generate`` hook on MAX: ``n`` samples per prompt with the sampler's own token ids and
log-probs.

Each sample is one MAX ``TextContext`` row with its own seed (``engine.row_seed(seed, i)``), so a
sample depends on the call's seed and its index only, not on how rows were batched. MAX's fused
sampler picks the token (temperature, top-k, top-p); a :class:`~polyrl_max.runner.LogitsRecorder`
keeps the raw logits row that produced it, and the log-prob is computed from that row at the
sampling temperature before truncation — the contract's distribution (see ``runner``'s docstring
for why MAX's own ``output_logprobs`` cannot be used). Greedy (``temperature == 0``) runs as
``top_k = 1`` and reports temperature-1 log-probs, like the torch backend.

Prompts are encoded by ``MaxEngine.encode_prompt`` with the torch backend's rules; a
``TokenPrompt``'s ids are used verbatim (no template, no BOS), which is how a multi-turn episode
continues from the exact ids of its last turn.

The EOS token ends a row and is kept in ``completion_ids`` (the policy must learn to emit it); a
stop string ends a row after the token that completes it. With ``ignore_eos`` the row's MAX
context tracks no EOS at all and EOS is an ordinary token: the row runs to its token budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from polyrl.backend_kit.samples import completions, token_budgets
from polyrl.backend_kit.stopping import StopStrings
from polyrl.backend_features import refuse_unsupported_sampling
from polyrl.types import Completion, Prompt, SamplingParams

from polyrl_max.engine import MaxEngine
from polyrl_max.plugin import SAMPLING
from polyrl_max.runner import LogitsRecorder, run_rows, token_logprob



def generate(engine: MaxEngine, prompts: Sequence[Prompt], sampling: SamplingParams) -> list[Completion]:
    # MAX's SamplingParams has min_p/repetition_penalty, but only in pipelines built with
    # enable_penalties, and whether our LogitsRecorder sees logits before or after them is not
    # verified: refused (the capability table says so too) rather than risk wrong log-probs
    refuse_unsupported_sampling(sampling, "max", SAMPLING)
    if not prompts:
        return []
    n = sampling.n
    prompt_ids = [engine.encode_prompt(p) for p in prompts]
    budgets = token_budgets(prompt_ids, engine.max_length, sampling.max_new_tokens, n)
    total = len(budgets)
    seed = int(sampling.seed) if sampling.seed is not None else engine.next_seed()
    greedy = sampling.temperature == 0
    temperature = 1.0 if greedy else float(sampling.temperature)
    top_k = 1 if greedy else sampling.top_k
    top_p = 1.0 if greedy else sampling.top_p
    recorders = [LogitsRecorder(engine.logits_width) for _ in range(total)]
    tokens: list[list[int]] = [[] for _ in range(total)]
    logps: list[list[float]] = [[] for _ in range(total)]
    finish = ["length"] * total
    stop = StopStrings(engine.decode, sampling.stop)
    stops = [stop.row() for _ in range(total)]  # each row's text kept as it grows

    def build(s: int):
        return engine.new_context(prompt_ids[s // n], budgets[s], temperature=temperature,
                                  top_k=top_k, top_p=top_p, seed=engine.row_seed(seed, s),
                                  processor=recorders[s], stop_on_eos=not sampling.ignore_eos)

    def on_tokens(s: int, new: list[int]) -> bool:
        if len(new) != 1:  # one decode step = one token without speculative decoding
            raise RuntimeError(f"MAX returned {len(new)} tokens for one step; polyrl-max needs "
                               "one token per step to pair each token with its logits")
        token = int(new[0])
        row = recorders[s].last
        if row is None:
            raise RuntimeError("MAX did not call the logits processor for this step")
        tokens[s].append(token)
        logps[s].append(token_logprob(row, token, temperature))
        if (token in engine.eos_ids and not sampling.ignore_eos) or stops[s].hit(tokens[s]):
            finish[s] = "stop"
            return True
        return len(tokens[s]) >= budgets[s]

    run_rows(engine, build, total, [len(prompt_ids[s // n]) for s in range(total)], on_tokens)
    return completions(engine.decode, prompt_ids, n, tokens, logps, finish)
