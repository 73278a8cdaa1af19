"""What the in-process A/B benches (``bench/*_ab.py``) share: their workload flags, one torch
training engine and one fixed batch sampled from it, and the report's common fields.

Why in-process A/B at all: on a shared VM a whole step's time drifts between runs by more than a
change of a few percent, so those benches alternate both ways on one engine and one batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.bench.machine import cpu_info
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import Completion, EngineConfig, LoraConfig, SamplingParams, TokenSequence, TrainBatch


def parser(description: str) -> argparse.ArgumentParser:
    """The flags every A/B bench takes (model, threads, workload, rounds, output)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--output", type=Path)
    return p


def workload_error(args: argparse.Namespace) -> str | None:
    """An ``error:`` line for a workload with nothing to time, else None."""
    if min(args.rounds, args.prompts, args.group_size, args.threads, args.max_new_tokens) < 1:
        return "error: --rounds, --prompts, --group-size, --max-new-tokens and --threads must be >= 1"
    return None


def engine_and_batch(args: argparse.Namespace, lora: bool) -> tuple[Engine, TrainBatch]:
    """A CPU torch training engine (polyrl's default LoRA when ``lora``) and a batch it sampled
    (``--prompts`` x ``--group-size`` completions of exactly ``--max-new-tokens``, fixed advantages)."""
    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads,
        lora=LoraConfig() if lora else None, device="cpu", max_length=args.max_new_tokens + 256))
    out = engine.generate(bench_prompts(args.prompts), SamplingParams(
        max_new_tokens=args.max_new_tokens, n=args.group_size, seed=0, ignore_eos=True))
    seqs = [TokenSequence.of(c) for c in out]
    return engine, TrainBatch(seqs, np.random.default_rng(0).standard_normal(len(seqs)).astype(np.float32))


def report_header(args: argparse.Namespace) -> dict[str, Any]:
    """The machine and workload fields every A/B report starts with."""
    return {"machine": cpu_info(args.threads), "model": args.model, "prompts": args.prompts,
            "group_size": args.group_size, "max_new_tokens": args.max_new_tokens, "rounds": args.rounds}


def alternate_sampling(engine: Engine, prompts: Sequence[str], args: argparse.Namespace,
                       ways: dict[str, Callable[[], None]]) -> dict[str, Any]:
    """Sample ``prompts`` ``args.rounds`` times each way (``ways``: name -> what switches the
    engine to it), taking turns and alternating who goes first; every round's seconds per way,
    each round's ratio of the first way's time to the second's, their median, and whether every
    way sampled the same tokens with the same log-probs bit for bit."""
    first, second = ways
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    identical = True
    for round_ in range(args.rounds):
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, n=args.group_size, seed=round_ + 1,
                                  ignore_eos=True)
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        outputs: dict[str, list[Completion]] = {}
        for name in order:
            ways[name]()
            start = time.perf_counter()
            outputs[name] = engine.generate(prompts, sampling)
            seconds[name].append(time.perf_counter() - start)
        identical &= all(list(a.completion_ids) == list(b.completion_ids) and list(a.logprobs) == list(b.logprobs)
                         for a, b in zip(outputs[first], outputs[second]))
        print(f"round {round_}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in order), file=sys.stderr)
    pairs = [a / b for a, b in zip(seconds[first], seconds[second])]
    return {"generate_s": seconds, "median_s": {n: statistics.median(v) for n, v in seconds.items()},
            f"{first}_over_{second}_each": pairs, f"{first}_over_{second}_median": statistics.median(pairs),
            "bit_identical": identical}


def sampling_engine(args: argparse.Namespace, compute_dtype: str | None = None) -> tuple[Engine, list[str]]:
    """A CPU torch training engine and the bench prompts, sampled from once (so the sampler's
    copy exists, packed, before anything is timed)."""
    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads, device="cpu",
        compute_dtype=compute_dtype, max_length=args.max_new_tokens + 256))
    prompts = bench_prompts(args.prompts)
    engine.generate(prompts, SamplingParams(max_new_tokens=2, seed=0))
    return engine, prompts


def write_report(args: argparse.Namespace, report: dict[str, Any], summary: Sequence[str]) -> None:
    """Print the ``summary`` fields as one JSON line; the whole report to ``--output`` when given."""
    print(json.dumps({k: report[k] for k in summary}))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(strict_json.dumps(report, indent=2) + "\n")
