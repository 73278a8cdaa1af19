"""A bfloat16 sampler's KV cache held in bfloat16 or in float32: which is faster, by completion length.

    python bench/kv_cache_dtype.py --model smollm2-135m-instruct --threads 1 --lengths 32,128,256 \\
        --output bench/results/kv_cache_dtype_smollm2_1thread.json

Why: CPU attention runs in float32 (``polyrl_torch.attention``), so a bfloat16 cache is widened
whole at every decode step, a cost growing with the length, while a float32 cache is widened once
per position but moves twice the bytes. ``polyrl_torch.generation.FLOAT32_CACHE_FROM_TOKENS`` picks
by length; this measures both ways in one process (the rule forced each way), alternating which
goes first, same seed both ways (the tokens must be equal: the values are the same), the first
round left out as warm-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from polyrl import strict_json
from polyrl.bench.machine import cpu_info
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, SamplingParams

ALWAYS, NEVER = 0, 10**9


def measure(engine: Engine, length: int, prompts: int, group: int, rounds: int) -> dict[str, list[float]]:
    import polyrl_torch.generation as generation

    batch = bench_prompts(prompts)
    seconds: dict[str, list[float]] = {"bfloat16": [], "float32": []}
    for r in range(rounds + 1):
        order = [("bfloat16", NEVER), ("float32", ALWAYS)]
        tokens = {}
        for name, threshold in order if r % 2 == 0 else order[::-1]:
            generation.FLOAT32_CACHE_FROM_TOKENS = threshold
            start = time.perf_counter()
            out = engine.generate(batch, SamplingParams(max_new_tokens=length, n=group, seed=r, ignore_eos=True))
            if r:
                seconds[name].append(round(time.perf_counter() - start, 3))
            tokens[name] = [c.completion_ids.tolist() for c in out]
        if tokens["bfloat16"] != tokens["float32"]:
            raise SystemExit(f"error: length {length}: the two caches sampled different tokens")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lengths", default="32,128,256")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    if min(lengths) < 1 or args.rounds < 1 or args.prompts < 1 or args.group_size < 1 or args.threads < 1:
        print("error: --lengths, --rounds, --prompts, --group-size and --threads must be >= 1", file=sys.stderr)
        return 2
    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="generate", threads=args.threads,
        compute_dtype="bfloat16", device="cpu", max_length=max(lengths) + 256))
    rows = []
    for length in lengths:
        seconds = measure(engine, length, args.prompts, args.group_size, args.rounds)
        median = {k: sorted(v)[len(v) // 2] for k, v in seconds.items()}
        rows.append({"length": length, "seconds": seconds, "median_s": median,
                     "float32_vs_bfloat16": round(median["float32"] / median["bfloat16"], 3)})
        print(json.dumps(rows[-1]), flush=True)
    if args.output:
        report = {"machine": cpu_info(args.threads), "model": args.model, "prompts": args.prompts,
                  "group_size": args.group_size, "rounds": args.rounds, "rows": rows}
        args.output.write_text(strict_json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
