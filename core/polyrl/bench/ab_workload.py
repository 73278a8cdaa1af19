"""What the in-process A/B benches (``bench/*_ab.py``) share: their workload flags, one torch
training engine and one fixed batch sampled from it, the report's common fields and its file.

Why in-process A/B at all: on a shared VM a whole step's time drifts between runs by more than a
change of a few percent, so those benches alternate both ways on one engine and one batch.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.bench.machine import cpu_info
from polyrl.bench.workload import bench_prompts
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, SamplingParams, TokenSequence, TrainBatch


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


def write_report(path: Path | None, report: dict[str, Any]) -> None:
    """``report`` as indented strict JSON at ``path`` (``--output``; None: not written)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(strict_json.dumps(report, indent=2) + "\n")
