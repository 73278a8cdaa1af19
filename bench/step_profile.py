"""Where a torch training step's time goes: generate and train_step under torch's profiler, each
op's self CPU time grouped by what it computes, with the matmuls' GFLOP/s from their shapes.

    python bench/step_profile.py --threads 1 --rounds 3 [--lora] \\
        --output bench/results/step_profile_smollm2_lora_1thread.json

Why: ``polyrl bench`` gives each phase's MFU, one number for hundreds of kernels. Whether the rest
of the way to the matmul peak is in the large GEMMs (nothing left to win there but a better
kernel), in the output head, in LoRA's rank-r products, in attention or in the elementwise ops
and dispatch around them decides what is worth changing. Groups: ``weights`` (the decoder's
linear layers, the sampler's packed oneDNN ones and polyrl's decode kernel's calls included),
``output head`` (a dimension equal to the vocabulary), ``adapters`` (a dimension equal to the LoRA rank), ``attention`` (batched matmuls and
SDPA) and ``other`` (everything else, with its largest ops listed). Each round profiles one
generate (after a train step, so a LoRA sampler's refresh is in it) and one train step on the same
engine and batch; medians over rounds. ``wall_s`` is unprofiled: the round's steps run once
without the profiler first.
"""

from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from polyrl.bench import ab_workload
from polyrl.engine import Engine
from polyrl.types import SamplingParams, TrainBatch

#: profiler op names that are matrix products, by how their input shapes give the FLOPs
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise")
ATTENTION_OPS = ("aten::bmm", "aten::baddbmm")


#: polyrl's own decode kernel (``polyrl_torch.decode_kernel``), named "polyrl::decode_linear ROWSxINxOUT".
KERNEL_NAME = "polyrl::decode_linear"


def kernel_dims(name: str) -> tuple[int, int, int] | None:
    """(rows, in, out) of a decode-kernel call from its profiler name, or None (another op)."""
    prefix, _, dims = name.partition(" ")
    parts = dims.split("x")
    if prefix != KERNEL_NAME or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    rows, k, n = (int(p) for p in parts)
    return rows, k, n


def matmul_flops(name: str, shapes: Sequence[Sequence[int]]) -> float:
    """FLOPs of one matmul op from its recorded input shapes, or a decode-kernel call from its
    name (0 when they do not say)."""
    if (dims := kernel_dims(name)) is not None:
        return 2.0 * dims[0] * dims[1] * dims[2]
    try:
        if name == "aten::mm":
            (m, k), (_, n) = shapes[0], shapes[1]
            return 2.0 * m * k * n
        if name in ("aten::addmm", "aten::addmm_"):
            (m, k), (_, n) = shapes[1], shapes[2]
            return 2.0 * m * k * n
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = shapes[0], shapes[1]
            return 2.0 * b * m * k * n
        if name == "aten::baddbmm":
            (b, m, k), (_, _, n) = shapes[1], shapes[2]
            return 2.0 * b * m * k * n
        if name == "mkldnn::_linear_pointwise":  # input [..., k], weight [n, k] (before packing)
            rows = math.prod(shapes[0][:-1])
            n, k = shapes[1]
            return 2.0 * rows * k * n
    except (ValueError, IndexError, TypeError):
        return 0.0
    return 0.0


def group_of(name: str, shapes: Sequence[Sequence[int]], vocab: int, rank: int | None) -> str:
    """Which group an op's time belongs to (module docstring)."""
    if "scaled_dot_product" in name or name in ATTENTION_OPS:
        return "attention"
    kernel = kernel_dims(name)
    if name not in MATMUL_OPS and kernel is None:
        return "other"
    dims = set(kernel[1:]) if kernel else {d for shape in shapes for d in shape if isinstance(shape, (list, tuple))}
    if vocab in dims:
        return "output head"
    if rank is not None and rank in dims:
        return "adapters"
    return "weights"


def profile_phase(run: Callable[[], Any], vocab: int, rank: int | None) -> dict[str, Any]:
    """One profiled call of ``run``: per group self CPU seconds, GFLOP and GFLOP/s, and the
    largest ``other`` ops."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    seconds: dict[str, float] = defaultdict(float)
    flops: dict[str, float] = defaultdict(float)
    other: dict[str, float] = defaultdict(float)
    for event in prof.key_averages(group_by_input_shape=True):
        shapes = event.input_shapes or []
        group = group_of(event.key, shapes, vocab, rank)
        self_s = event.self_cpu_time_total / 1e6
        seconds[group] += self_s
        if event.key in MATMUL_OPS or kernel_dims(event.key) is not None:
            flops[group] += matmul_flops(event.key, shapes) * event.count
        if group == "other":
            other[event.key] += self_s
    total = sum(seconds.values())
    groups = {g: {"self_s": round(s, 4), "share": round(s / total, 4) if total else 0.0,
                  "gflop": round(flops[g] / 1e9, 2),
                  "gflops": round(flops[g] / 1e9 / s, 1) if flops[g] and s else None}
              for g, s in sorted(seconds.items(), key=lambda item: -item[1])}
    top = sorted(other.items(), key=lambda item: -item[1])[:12]
    return {"profiled_wall_s": round(wall, 4), "self_cpu_s": round(total, 4), "groups": groups,
            "largest_other_ops_s": {name: round(s, 4) for name, s in top}}


def median_report(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per group, the median over rounds of self seconds, share and GFLOP/s."""
    names = sorted({g for r in rounds for g in r["groups"]})
    out = {}
    for g in names:
        rows = [r["groups"][g] for r in rounds if g in r["groups"]]
        rates = [row["gflops"] for row in rows if row["gflops"]]
        out[g] = {"self_s": round(float(np.median([row["self_s"] for row in rows])), 4),
                  "share": round(float(np.median([row["share"] for row in rows])), 4),
                  "gflop": rows[0]["gflop"],
                  "gflops": round(float(np.median(rates)), 1) if rates else None}
    return out


def measure(engine: Engine, batch: TrainBatch, args: Any) -> dict[str, Any]:
    from polyrl.algorithms.objective import Objective
    from polyrl.bench.workload import bench_prompts

    lm = engine.raw.causal_lm
    vocab = int(lm.get_output_embeddings().weight.shape[0])
    lora = engine.raw.lora  # polyrl's LoraConfig, None for full training
    rank = int(lora.rank) if lora is not None else None
    prompts = bench_prompts(args.prompts)
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, n=args.group_size, seed=1, ignore_eos=True)
    phases: dict[str, Callable[[], Any]] = {
        "generate": lambda: engine.generate(prompts, sampling),
        "train_step": lambda: engine.train_step(batch, Objective()),
    }
    for _ in range(2):  # warm-up: the heap, the sampler's copy, the optimizer's state
        for run in phases.values():
            run()
    walls: dict[str, list[float]] = {p: [] for p in phases}
    profiled: dict[str, list[dict[str, Any]]] = {p: [] for p in phases}
    for round_ in range(args.rounds):
        for phase, run in phases.items():
            start = time.perf_counter()
            run()
            walls[phase].append(time.perf_counter() - start)
        for phase, run in phases.items():
            profiled[phase].append(profile_phase(run, vocab, rank))
        print(f"round {round_}: " + ", ".join(f"{p} {walls[p][-1]:.2f} s" for p in phases), file=sys.stderr)
    return {phase: {"wall_s": [round(w, 3) for w in walls[phase]],
                    "wall_s_median": round(float(np.median(walls[phase])), 3),
                    "median": median_report(profiled[phase]),
                    "rounds": profiled[phase]} for phase in phases}


def main(argv: list[str] | None = None) -> int:
    parser = ab_workload.parser(__doc__.splitlines()[0])
    parser.add_argument("--lora", action="store_true", help="polyrl's default LoRA instead of full training")
    parser.set_defaults(rounds=3)
    args = parser.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    engine, batch = ab_workload.engine_and_batch(args, lora=args.lora)
    result = measure(engine, batch, args)
    for phase, report in result.items():
        print(f"{phase}: {report['wall_s_median']:.2f} s unprofiled (median)")
        for group, row in report["median"].items():
            rate = f"{row['gflops']:.1f} GFLOP/s" if row["gflops"] else "-"
            print(f"  {group:12s} {row['self_s']:7.3f} s  {100 * row['share']:5.1f} %  {rate}")
    ab_workload.write_report(args.output, {**ab_workload.report_header(args),
                                           "training": "LoRA (polyrl's default LoraConfig())" if args.lora else "full",
                                           **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
