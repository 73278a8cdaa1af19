"""Where one decode step's time goes as the KV cache grows: polyrl's sampler against transformers'
``generate`` (what TRL's ``GRPOTrainer`` samples with), per token, by kind of op.

    python bench/decode_cost_by_length.py --model smollm2-135m-instruct --threads 1 \\
        --lengths 64,512,1024 --rows 4 --tokens 16 --rounds 3 \\
        --output bench/results/decode_cost_by_length_smollm2_1thread.json

Why: the scaling sweep (``bench/scaling.py``) gives whole steps at each completion length; this
says why the ratio moves with the length. A decode step at cache length ``L`` is timed as the
difference between sampling ``1 + tokens`` and ``1`` token after a prompt of ``L`` token ids (the
prefill and the call's setup cancel), divided by ``tokens``: the prompt stands in for the
completion so far, since a decode step attends over both alike. Each side samples ``--rows``
sequences from that one prompt, float32, temperature 1, no truncation, every token forced (EOS
masked). Wall-clock per token comes from unprofiled calls, the sides taking turns (who goes first
alternates), medians over ``--rounds``; the split by kind from ``torch.profiler`` passes (ops'
self CPU time, the same difference, medians over the rounds): matmuls, attention, concatenations
(``cat``: transformers' cache appends, both sides' rotary halves), other copies, and everything
else (norms, activations, sampling, Python).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polyrl import strict_json
from polyrl.bench import ab_workload
from polyrl.bench.machine import cpu_info
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams, TokenPrompt

KINDS = ("matmul", "attention", "concat", "copies", "other")


def op_kind(name: str) -> str:
    """The kind of a profiled op (``aten::...``/``mkldnn::...`` name). ``concat`` holds
    transformers' cache appends (``DynamicLayer`` concatenates each step's keys and values onto the
    whole cache) and both sides' rotary halves (one position each, cheap): the profiler records no
    shapes for ``cat``'s tensor list to tell them apart."""
    if "linear" in name or name in ("aten::addmm", "aten::mm", "aten::matmul", "aten::bmm"):
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if name == "aten::cat":
        return "concat"
    if name in ("aten::copy_", "aten::clone", "aten::index_select", "aten::index_copy_", "aten::contiguous"):
        return "copies"
    return "other"


def profiled_ms(call: Callable[[], Any]) -> dict[str, float]:
    """Self CPU milliseconds of one ``call()``, summed by ``op_kind``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    by_kind = dict.fromkeys(KINDS, 0.0)
    for event in prof.key_averages():
        by_kind[op_kind(event.key)] += event.self_cpu_time_total / 1000
    return by_kind


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lengths", default="64,512,1024", help="cache lengths (prompt tokens), comma-separated")
    p.add_argument("--rows", type=int, default=4, help="sequences sampled from the prompt")
    p.add_argument("--tokens", type=int, default=16, help="decode steps timed per call")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--output", type=Path)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        print(f"error: --lengths {args.lengths!r} is not comma-separated integers (e.g. 64,512,1024)", file=sys.stderr)
        return 2
    if min(args.threads, args.rows, args.tokens, args.rounds, *lengths) < 1:
        print("error: --threads, --rows, --tokens, --rounds and every --lengths entry must be >= 1", file=sys.stderr)
        return 2

    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    registry = get_registry()
    path = registry.resolve_model(args.model)
    # per-row caches, as transformers keeps them: the split by op finds attention in SDPA's kernel
    # (a shared prompt cache attends with plain matmuls; bench/shared_prompt_ab.py times it)
    engine = Engine(registry, "torch", EngineConfig(model=path, role="train", threads=args.threads, device="cpu",
                                                    max_length=max(lengths) + args.tokens + 8,
                                                    options={"shared_prompt_attention": False}))
    hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    vocab = hf_model.config.vocab_size
    pad_id = hf_model.generation_config.eos_token_id
    pad_id = pad_id[0] if isinstance(pad_id, list) else pad_id

    def polyrl(ids: list[int], new: int) -> None:
        engine.generate([TokenPrompt(ids)], SamplingParams(max_new_tokens=new, n=args.rows, seed=new,
                                                           ignore_eos=True))

    def hf(ids: list[int], new: int) -> None:
        with torch.inference_mode():
            hf_model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                              do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=args.rows,
                              max_new_tokens=new, min_new_tokens=new, pad_token_id=pad_id)

    sides: dict[str, Callable[[list[int], int], None]] = {"polyrl": polyrl, "transformers": hf}
    points = []
    for length in lengths:
        ids = [int(i) for i in torch.randint(100, vocab, (length,), generator=torch.Generator().manual_seed(length))]
        for side in sides.values():
            side(ids, 2)  # warm-up: packs the sampler's copy, first-call allocations
        per_token: dict[str, list[float]] = {name: [] for name in sides}
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                start = time.perf_counter()
                sides[name](ids, 1)
                one = time.perf_counter() - start
                start = time.perf_counter()
                sides[name](ids, 1 + args.tokens)
                more = time.perf_counter() - start
                per_token[name].append((more - one) / args.tokens * 1000)
        kinds = {}
        for name, side in sides.items():
            diffs = []
            for _ in range(args.rounds):
                short = profiled_ms(functools.partial(side, ids, 1))
                long = profiled_ms(functools.partial(side, ids, 1 + args.tokens))
                diffs.append({k: (long[k] - short[k]) / args.tokens for k in KINDS})
            kinds[name] = {k: round(statistics.median(d[k] for d in diffs), 2) for k in KINDS}
        median = {name: round(statistics.median(v), 2) for name, v in per_token.items()}
        point = {"cache_length": length, "ms_per_token": median,
                 "ms_per_token_each": {n: [round(x, 2) for x in v] for n, v in per_token.items()},
                 "transformers_over_polyrl": round(median["transformers"] / median["polyrl"], 3),
                 "profiled_ms_per_token_by_kind": kinds}
        points.append(point)
        print(f"L={length}: polyrl {median['polyrl']:.1f} ms/token {kinds['polyrl']}, transformers "
              f"{median['transformers']:.1f} {kinds['transformers']}, x{point['transformers_over_polyrl']:.2f}",
              file=sys.stderr, flush=True)
    report = {"machine": cpu_info(args.threads), "model": args.model, "rows": args.rows, "tokens": args.tokens,
              "rounds": args.rounds, "torch_version": torch.__version__,
              "command": ["bench/decode_cost_by_length.py", *(sys.argv[1:] if argv is None else argv)], "points": points}
    print(strict_json.dumps({"points": [{k: p[k] for k in ("cache_length", "ms_per_token", "transformers_over_polyrl")}
                                        for p in points]}))
    ab_workload.write_report(args.output, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
