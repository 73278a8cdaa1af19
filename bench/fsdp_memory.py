"""Per-rank memory of data-parallel vs FSDP2 training, side by side in one run.

    python bench/fsdp_memory.py [--model smollm2-135m-instruct] [--ranks 2] [--out FILE]

Runs the same training step (AdamW, full fine-tune, fixed batch) under ``torchrun`` twice: plain
data parallelism (every rank holds everything) and ``fsdp = true``. Each rank reports the bytes it
holds in weights, gradients and optimizer state (counted from the tensors' local shards, right
after the optimizer step, before gradients are dropped), its peak RSS, and the step time.
Writes JSON (default ``bench/results/fsdp_vs_ddp_<model>_<ranks>ranks.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path


def _local_bytes(tensors) -> int:
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def rank_main(model: str, fsdp: bool, out: str) -> None:
    """One rank: load, run one train step, report what this rank holds."""
    import numpy as np
    import torch

    from polyrl.algorithms.presets import AlgorithmConfig
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence, TrainBatch

    registry = get_registry()
    engine = Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(model), role="train", threads=1, seed=0, options={"fsdp": fsdp},
        optimizer=OptimizerConfig(lr=1e-5)))
    raw = engine.raw
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    rng = np.random.default_rng(rank)
    seqs = [TokenSequence(rng.integers(5, 1000, size=48), rng.integers(5, 1000, size=32)) for _ in range(4)]
    objective = AlgorithmConfig.preset("grpo").objective(32)
    holdings: dict[str, int] = {}

    step_fn = raw.optimizer.step

    def step_and_count(*args, **kwargs):  # count right after the step, while grads still exist
        result = step_fn(*args, **kwargs)
        params = list(raw.model.parameters())
        holdings["weights"] = _local_bytes(params)
        holdings["gradients"] = _local_bytes(p.grad for p in params)
        holdings["optimizer"] = _local_bytes(
            v for s in raw.optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
        return result

    raw.optimizer.step = step_and_count
    t0 = time.perf_counter()
    engine.train_step(TrainBatch(seqs, rng.normal(size=4), temperature=1.0), objective)
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {"rank": rank, "world": world, "fsdp": fsdp, "step_s": round(seconds, 2),
              "peak_rss_mb": round(peak_mb), **{f"{k}_mb": round(v / 2**20, 1) for k, v in holdings.items()}}
    gathered = engine.all_gather(report)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out")
    parser.add_argument("--rank-main", nargs=3, metavar=("MODEL", "FSDP", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        model, fsdp, out = args.rank_main
        rank_main(model, fsdp == "1", out)
        return
    out = Path(args.out or f"bench/results/fsdp_vs_ddp_{args.model}_{args.ranks}ranks.json")
    runs = {}
    for mode, flag in (("data_parallel", "0"), ("fsdp", "1")):
        tmp = out.with_suffix(f".{mode}.tmp")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(args.ranks), __file__, "--rank-main", args.model, flag, str(tmp)]
        subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        runs[mode] = json.loads(tmp.read_text())
        tmp.unlink()
    result = {"model": args.model, "ranks": args.ranks, "threads_per_rank": 1,
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "runs": runs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'mode':<14}{'rank':>5}{'weights MB':>12}{'grads MB':>10}{'AdamW MB':>10}{'peak RSS MB':>13}{'step s':>8}")
    for mode, ranks in runs.items():
        for r in ranks:
            print(f"{mode:<14}{r['rank']:>5}{r['weights_mb']:>12}{r['gradients_mb']:>10}{r['optimizer_mb']:>10}"
                  f"{r['peak_rss_mb']:>13}{r['step_s']:>8}")
    print(out)


if __name__ == "__main__":
    main()
