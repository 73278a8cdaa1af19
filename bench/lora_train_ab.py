"""A LoRA training step through peft's own layers or through polyrl's fused ones, in one process.

    python bench/lora_train_ab.py --model smollm2-135m-instruct --threads 1 --rounds 6 \\
        --output bench/results/lora_train_ab_smollm2_1thread.json

Why: ``polyrl_torch.lora_linear`` replaces peft's LoRA forward (full-width scaling and add passes)
and ``polyrl_torch.scoring`` takes taller output-head chunks where autograd keeps the logits
anyway. On a machine whose speed drifts between runs (a shared VM) two separate benches say little
about a change of a few percent; here both ways alternate step by step on the same engine and
batch (which goes first alternates too), the first round left out as warm-up, and the same losses
are required both ways.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from polyrl import strict_json
from polyrl.bench import ab_workload
from polyrl.engine import Engine
from polyrl.types import TrainBatch

#: logit elements per chunk of the "before" side (the chunk every pass used before)
SMALL_CHUNK_ELEMENTS = 1 << 24


def set_way(model: Any, fused: bool, kept_chunk: int) -> None:
    """peft's forward on every LoRA layer (``fused=False``, small chunks) or polyrl's (fused, tall)."""
    from peft.tuners.lora import Linear as LoraLinear

    import polyrl_torch.scoring as scoring
    from polyrl_torch.engine import ADAPTER
    from polyrl_torch.lora_linear import fuse_lora_layers

    for module in model.modules():
        if type(module) is LoraLinear:
            module.__dict__.pop("forward", None)  # the class's (peft's) forward again
    if fused:
        fuse_lora_layers(model, ADAPTER)
    scoring.KEPT_CHUNK_ELEMENTS = kept_chunk if fused else SMALL_CHUNK_ELEMENTS


def measure(engine: Engine, batch: TrainBatch, rounds: int, kept_chunk: int) -> dict[str, Any]:
    from polyrl.algorithms.objective import Objective

    seconds: dict[str, list[float]] = {"peft": [], "fused": []}
    losses: dict[str, list[float]] = {"peft": [], "fused": []}
    state = {k: v.clone() for k, v in engine.raw.model.state_dict().items() if "lora_" in k}
    for r in range(rounds + 1):
        order = ["peft", "fused"] if r % 2 == 0 else ["fused", "peft"]
        for name in order:
            engine.raw.model.load_state_dict(state, strict=False)  # both ways step from the same adapters
            set_way(engine.raw.model, name == "fused", kept_chunk)
            start = time.perf_counter()
            metrics = engine.train_step(batch, Objective())
            if r:
                seconds[name].append(round(time.perf_counter() - start, 3))
                losses[name].append(float(metrics.loss))
    if not np.allclose(losses["peft"], losses["fused"], rtol=1e-4, atol=1e-6):
        raise SystemExit(f"error: the two ways gave different losses: {losses}")
    median = {k: float(np.median(v)) for k, v in seconds.items()}
    pairs = list(zip(seconds["peft"], seconds["fused"]))
    return {"seconds": seconds, "median_s": median, "fused_vs_peft": round(median["fused"] / median["peft"], 3),
            "fused_faster_in": f"{sum(f < p for p, f in pairs)} of {len(pairs)} rounds"}


def main(argv: list[str] | None = None) -> int:
    import polyrl_torch.scoring as scoring

    args = ab_workload.parser(__doc__.splitlines()[0]).parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    engine, batch = ab_workload.engine_and_batch(args, lora=True)
    result = measure(engine, batch, args.rounds, scoring.KEPT_CHUNK_ELEMENTS)
    print(json.dumps(result), flush=True)
    if args.output:
        report = {**ab_workload.report_header(args), "lora": "polyrl's default LoraConfig()", **result}
        args.output.write_text(strict_json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
