"""Memory saved by ``train.gradient_checkpointing`` at a long completion length (torch and MLX).

    python bench/grad_checkpointing.py [--backends torch mlx] [--completion 2048] [--layers 8]
                                       [--hidden 256] [--batch 2] [--out FILE]

Each (backend, checkpointing on/off) runs in its own fresh process, so one configuration's peak
cannot hide another's: the process builds (once, cached) a random Llama of the given size, loads
it for training, and runs one ``train_step`` on a fixed batch of ``batch`` sequences of a 32-token
prompt and ``completion`` completion tokens. It reports the peak RSS growth during the step
(``ru_maxrss`` after minus the RSS before: activations, gradients and optimizer state), the
backend's own peak where it has one (MLX ``mx.get_peak_memory``), and the step time. A memory
benchmark, not a timed test; the machine is shared, so times are noisy. Writes JSON (default
``bench/results/grad_checkpointing.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def worker(backend: str, checkpointing: bool, model: str, completion: int, batch: int) -> dict:
    """One process, one configuration: one train step, its memory and time."""
    import numpy as np

    from polyrl.algorithms.presets import AlgorithmConfig
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence, TrainBatch

    engine = Engine(get_registry(), backend, EngineConfig(
        model=model, role="train", threads=1, seed=0, max_length=32 + completion + 1,
        gradient_checkpointing=checkpointing, optimizer=OptimizerConfig(lr=1e-5)))
    rng = np.random.default_rng(0)
    seqs = [TokenSequence(rng.integers(5, 500, size=32), rng.integers(5, 500, size=completion))
            for _ in range(batch)]
    objective = AlgorithmConfig.preset("grpo").objective(completion)
    train_batch = TrainBatch(seqs, np.linspace(-1, 1, batch))
    if backend == "mlx":
        from polyrl_mlx._mx import mx

        mx.reset_peak_memory()
    before = _rss_bytes()
    t0 = time.perf_counter()
    metrics = engine.train_step(train_batch, objective)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"backend": backend, "gradient_checkpointing": checkpointing, "step_s": round(seconds, 3),
           "rss_before_mb": round(before / 2**20, 1), "peak_rss_growth_mb": round((peak - before) / 2**20, 1),
           "grad_norm": metrics.grad_norm}
    if backend == "mlx":
        out["mlx_peak_memory_mb"] = round(mx.get_peak_memory() / 2**20, 1)
    return out


def _cpu() -> dict:
    info = {"machine": platform.machine()}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Model name", "CPU(s)"):
            info[key.strip()] = value.strip()
        if key.strip() == "Flags":
            info["avx512_bf16"] = "avx512_bf16" in value.split()
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["torch", "mlx"])
    parser.add_argument("--completion", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--out", default="bench/results/grad_checkpointing.json")
    parser.add_argument("--worker", nargs=3, metavar=("BACKEND", "ON", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        backend, on, model = args.worker
        print(json.dumps(worker(backend, on == "1", model, args.completion, args.batch)))
        return

    from polyrl import strict_json
    from polyrl.testing.tiny_model import build_tiny_llama

    folder = Path(tempfile.gettempdir()) / f"polyrl-bench-gc-{args.layers}x{args.hidden}"
    model = build_tiny_llama(folder, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                             num_kv_heads=2, intermediate_size=4 * args.hidden, vocab_size=512,
                             max_position_embeddings=32 + args.completion + 8)
    rows = []
    for backend in args.backends:
        for on in (False, True):
            cmd = [sys.executable, __file__, "--completion", str(args.completion), "--batch", str(args.batch),
                   "--worker", backend, "1" if on else "0", model]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{backend} checkpointing={on}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(rows[-1])
    result = {"model": {"layers": args.layers, "hidden": args.hidden, "intermediate": 4 * args.hidden},
              "completion_tokens": args.completion, "prompt_tokens": 32, "batch": args.batch,
              "threads": 1, "cpu": _cpu(), "runs": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(strict_json.dumps(result, indent=2) + "\n")
    print(f"{'backend':8} {'ckpt':5} {'peak RSS growth MB':>19} {'step s':>8}")
    for r in rows:
        print(f"{r['backend']:8} {str(r['gradient_checkpointing']):5} {r['peak_rss_growth_mb']:>19} {r['step_s']:>8}")


if __name__ == "__main__":
    main()
