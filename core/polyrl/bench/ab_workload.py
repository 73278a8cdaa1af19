"""What the in-process A/B benches (``bench/*_ab.py``) share: their workload flags, one torch
training engine and one fixed batch sampled from it, the sampling benches' alternating rounds and
how far two ways' samples agree, the report's common fields and its file.

Why in-process A/B at all: on a shared VM a whole step's time drifts between runs by more than a
change of a few percent, so those benches alternate both ways on one engine and one batch.
"""

from __future__ import annotations

import argparse
import statistics
import json
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


def alternating_rounds(args: argparse.Namespace, ways: dict[str, Callable[[SamplingParams], list[Completion]]],
                       sync: Callable[[], None] = lambda: None, digits: int = 2,
                       ) -> tuple[dict[str, list[float]], list[dict[str, list[Completion]]]]:
    """``--rounds`` rounds in which every way samples the same workload (``--group-size``
    completions of exactly ``--max-new-tokens`` per prompt, seed ``round + 1``), who goes first
    alternating; each way's seconds per round (between ``sync`` calls: a device's queue drained)
    and each round's completions per way. A line per round goes to stderr."""
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    outputs: list[dict[str, list[Completion]]] = []
    for round_ in range(args.rounds):
        sampling = SamplingParams(max_new_tokens=args.max_new_tokens, n=args.group_size, seed=round_ + 1,
                                  ignore_eos=True)
        order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
        outputs.append({})
        for way in order:
            sync()
            start = time.perf_counter()
            outputs[-1][way] = ways[way](sampling)
            sync()
            seconds[way].append(time.perf_counter() - start)
        print(f"round {round_}: " + ", ".join(f"{w} {seconds[w][-1]:.{digits}f} s" for w in order), file=sys.stderr)
    return seconds, outputs


def written_out_step(engine: Engine, prompts: list[Any], model: str) -> Any | None:
    """The engine's written-out decode step, after two tokens sampled from ``prompts`` pack its
    generation copy (an A/B of that step times the copy, not its packing); None, with the
    ``error:`` line printed, where ``model``'s sampler has none."""
    engine.generate(prompts, SamplingParams(max_new_tokens=2, seed=0))
    step = engine.raw.generation_copy.decode_step
    if step is None:
        print(f"error: {model}'s sampler has no written-out decode step", file=sys.stderr)
    return step


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def agreement(rounds: Sequence[dict[str, list[Completion]]], first: str, second: str) -> tuple[int, float]:
    """How two ways' completions of the same prompts and seeds agree over ``alternating_rounds``'
    rounds: how many rows parted (a token differs), and the largest log-prob gap over the tokens
    each row's two samples share."""
    parted, gap = 0, 0.0
    for outputs in rounds:
        for a, b in zip(outputs[first], outputs[second]):
            common = _common_prefix(list(a.completion_ids), list(b.completion_ids))
            parted += common < len(a.completion_ids)
            gap = max(gap, *(float(abs(x - y)) for x, y in zip(a.logprobs[:common], b.logprobs[:common])), 0.0)
    return parted, gap


def two_way_report(args: argparse.Namespace, seconds: dict[str, list[float]],
                   rounds: Sequence[dict[str, list[Completion]]], slow: str, fast: str, rows_per_round: int,
                   rounding: float, **fields: Any) -> dict[str, Any] | None:
    """The report of an A/B of two ways of sampling (``alternating_rounds``' output): each round's
    ``slow``/``fast`` ratio and their median, the rows that parted and the largest log-prob gap
    (``agreement``), ``fields`` after the header; printed in short, written to ``--output``.
    None, with the ``error:`` line printed, where the same tokens' log-probs differ by more than
    ``rounding``: the two ways did not compute the same thing."""
    parted, gap = agreement(rounds, slow, fast)
    if gap > rounding:
        print(f"error: the two ways gave different log-probs for the same tokens (largest gap {gap:.3g})",
              file=sys.stderr)
        return None
    pairs = [a / b for a, b in zip(seconds[slow], seconds[fast])]
    ratio = f"{slow}_over_{fast}"
    report = {**report_header(args), **fields, "generate_s": seconds,
              "median_s": {way: statistics.median(v) for way, v in seconds.items()},
              f"{ratio}_each": pairs, f"{ratio}_median": statistics.median(pairs),
              "rows_parted": parted, "rows": args.rounds * rows_per_round, "largest_logprob_gap": gap}
    print(json.dumps({k: report[k] for k in ("median_s", f"{ratio}_each", f"{ratio}_median", "rows_parted",
                                             "largest_logprob_gap")}))
    write_report(args.output, report)
    return report


def report_header(args: argparse.Namespace) -> dict[str, Any]:
    """The machine and workload fields every A/B report starts with."""
    return {"machine": cpu_info(args.threads), "model": args.model, "prompts": args.prompts,
            "group_size": args.group_size, "max_new_tokens": args.max_new_tokens, "rounds": args.rounds}


def write_report(path: Path | None, report: dict[str, Any]) -> None:
    """``report`` as indented strict JSON at ``path`` (``--output``; None: not written)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(strict_json.dumps(report, indent=2) + "\n")
