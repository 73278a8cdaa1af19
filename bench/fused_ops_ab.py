"""A training step with transformers' RMSNorm and torch's flash attention, or with polyrl's fused
RMSNorm and matmul attention for short calls, in one process, alternating.

    python bench/fused_ops_ab.py --threads 1 --rounds 6 [--lora] \\
        --output bench/results/fused_ops_ab_smollm2_full_1thread.json

Why: ``polyrl_torch.rms_norm`` and ``polyrl_torch.attention.matmul_attention`` each take a few
percent off a step, less than a shared VM's step time drifts between runs (and between rounds of
one run). So besides each way's wall time, every timed step runs under torch's profiler and the
report splits its CPU time into the matmul kernels (``mm``, ``addmm``, ``bmm``: the arithmetic,
which both ways share) and everything else: the changed work is in the second part, whose drift is
smaller than the whole step's. Both ways start each step from the same weights and must give the
same loss and (to float rounding) the same gradient norm.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.bench import ab_workload
from polyrl.engine import Engine
from polyrl.types import TrainBatch

#: profiler event names counted as the step's matmul arithmetic
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm"})
WAYS = ("transformers", "fused")


def set_way(model: Any, fused: bool, fits: Callable[..., bool]) -> None:
    """transformers' norms and flash attention everywhere (``fused=False``), or polyrl's;
    ``fits``: polyrl's own ``matmul_attention_fits``."""
    import polyrl_torch.attention as attention
    from polyrl_torch.rms_norm import FUSED_MARK, fuse_rms_norms

    for module in model.modules():
        if hasattr(module.forward, FUSED_MARK):
            del module.forward  # the class's own forward again
    if fused:
        fuse_rms_norms(model)
    attention.matmul_attention_fits = fits if fused else (lambda *args: False)


def profiled_step(engine: Engine, batch: TrainBatch) -> tuple[float, Any, float, float]:
    """(wall seconds, metrics, matmul CPU seconds, other CPU seconds) of one profiled step."""
    from torch.profiler import ProfilerActivity, profile

    from polyrl.algorithms.objective import Objective

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        metrics = engine.train_step(batch, Objective())
        wall = time.perf_counter() - start
    events = prof.key_averages()
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS) / 1e6
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    return wall, metrics, matmul, total - matmul


def measure(engine: Engine, batch: TrainBatch, rounds: int, lora: bool) -> dict[str, Any]:
    import polyrl_torch.attention as attention

    fits = attention.matmul_attention_fits
    try:
        return _alternate(engine, batch, rounds, lora, fits)
    finally:
        set_way(engine.raw.model, True, fits)  # the engine as it loaded


def _alternate(engine: Engine, batch: TrainBatch, rounds: int, lora: bool, fits: Callable[..., bool]) -> dict[str, Any]:
    model = engine.raw.model
    start_state = {k: v.clone() for k, v in model.state_dict().items() if not lora or "lora_" in k}
    optimizer = engine.raw.require_optimizer()
    rows: dict[str, dict[str, list[float]]] = {w: {"wall_s": [], "matmul_s": [], "other_s": [], "loss": [],
                                                   "grad_norm": []} for w in WAYS}
    for r in range(rounds + 1):
        for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
            model.load_state_dict(start_state, strict=False)  # both ways step from the same weights
            optimizer.state.clear()
            set_way(model, way == "fused", fits)
            wall, metrics, matmul, other = profiled_step(engine, batch)
            if r:  # round 0 warms both ways up
                for key, value in (("wall_s", wall), ("matmul_s", matmul), ("other_s", other),
                                   ("loss", float(metrics.loss)), ("grad_norm", float(metrics.grad_norm))):
                    rows[way][key].append(round(value, 6 if key in ("loss", "grad_norm") else 3))
    a, b = rows["transformers"], rows["fused"]
    if not (np.allclose(a["loss"], b["loss"], rtol=1e-4, atol=1e-6)
            and np.allclose(a["grad_norm"], b["grad_norm"], rtol=1e-3)):
        raise SystemExit(f"error: the two ways trained differently: {rows}")
    median = {w: {k: float(np.median(v)) for k, v in rows[w].items() if k.endswith("_s")} for w in WAYS}
    return {"rounds": rows, "median": median,
            "other_s_change": round(median["fused"]["other_s"] - median["transformers"]["other_s"], 3),
            "matmul_s_change": round(median["fused"]["matmul_s"] - median["transformers"]["matmul_s"], 3),
            "wall_ratio": round(median["fused"]["wall_s"] / median["transformers"]["wall_s"], 3)}


def main(argv: list[str] | None = None) -> int:
    parser = ab_workload.parser(__doc__.splitlines()[0])
    parser.add_argument("--lora", action="store_true", help="polyrl's default LoRA instead of full training")
    args = parser.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    engine, batch = ab_workload.engine_and_batch(args, lora=args.lora)
    result = measure(engine, batch, args.rounds, args.lora)
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}), flush=True)
    if args.output:
        report = {**ab_workload.report_header(args),
                  "training": "LoRA (polyrl's default LoraConfig())" if args.lora else "full", **result}
        args.output.write_text(strict_json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
