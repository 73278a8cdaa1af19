"""Sampler-trainer mismatch: one backend samples, another scores the same tokens.

    python bench/mismatch.py [--model smollm2-135m-instruct] [--generate mlx] [--train torch]
                             [--generate-model DIR] [--prompts 8] [--n 4] [--max-new-tokens 32]
                             [--out FILE]

The generate backend samples completions (temperature 1) and returns its own log-probs; the train
backend scores exactly those token ids on the same weights. The gap is what a hybrid run's first
step logs as ``mismatch_*`` (``polyrl.algorithms.reference.mismatch_metrics``): mean |delta
log-prob|, k3 estimate of KL(sampler || trainer), the share of tokens with |delta| > 0.1 nats,
and the largest |delta|. ``--generate-model`` gives the sampler its own copy of the weights (e.g. a
4-bit MLX folder from ``polyrl convert --quantize-bits 4``) while the trainer scores ``--model``: the
gap of a quantised generator. Writes JSON (default ``bench/results/mismatch_<model>_<gen>_<train>.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from polyrl.bench.machine import cpu_info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--generate", default="mlx")
    parser.add_argument("--train", default="torch")
    parser.add_argument("--generate-model", default=None,
                        help="the sampler's model (default: --model), e.g. a quantised MLX folder")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from polyrl import strict_json
    from polyrl.algorithms.objective import Objective
    from polyrl.algorithms.reference import mismatch_metrics
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, SamplingParams, TokenSequence

    reg = get_registry()
    model = reg.resolve_model(args.model)
    gen_model = reg.resolve_model(args.generate_model) if args.generate_model else model
    t0 = time.perf_counter()
    gen = Engine(reg, args.generate, EngineConfig(model=gen_model, role="generate", threads=1))
    train = Engine(reg, args.train, EngineConfig(model=model, role="train", threads=1))
    load_s = time.perf_counter() - t0
    prompts = [[{"role": "user", "content": f"What is {a} + {b}?"}]
               for a, b in zip(range(11, 11 + args.prompts), range(37, 37 + args.prompts))]
    completions = gen.generate(prompts, SamplingParams(max_new_tokens=args.max_new_tokens, n=args.n,
                                                       temperature=1.0, seed=0))
    seqs = [TokenSequence.of(c) for c in completions]
    trainer_lp = train.logprobs(seqs, 1.0)
    sampler_lp = [c.logprobs for c in completions]
    metrics = mismatch_metrics(trainer_lp, sampler_lp, Objective())
    metrics.pop("mismatch_corrected")
    deltas = np.concatenate([np.asarray(t, np.float64) - s for t, s in zip(trainer_lp, sampler_lp)])
    result = {
        "model": args.model, "generate": args.generate, "train": args.train,
        "generate_model": args.generate_model or args.model, "tokens": int(deltas.size),
        **metrics, "max_abs_delta": float(np.abs(deltas).max()),
        "p99_abs_delta": float(np.quantile(np.abs(deltas), 0.99)),
        "load_s": round(load_s, 1), "cpu": cpu_info(threads=1),
    }
    gen_tag = f"_{Path(args.generate_model).name}" if args.generate_model else ""
    out = Path(args.out or f"bench/results/mismatch_{Path(args.model).name}_{args.generate}{gen_tag}_{args.train}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(strict_json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
