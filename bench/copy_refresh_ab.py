"""The sampler copy's refresh after a LoRA step: every tensor again, or only the changed ones, in one process.

    nice python bench/copy_refresh_ab.py --model smollm2-135m-instruct --threads 1 --rounds 8 \\
        --output bench/results/copy_refresh_ab_smollm2_lora_1thread.json

Why: after each train step ``polyrl_torch.generation_weights.GenerationCopy`` brings the sampler's
packed copy up to date. It reloaded every tensor (the frozen embeddings, the tied head re-packed);
now it recomputes only the values whose sources' stamps moved (under LoRA: the adapted
projections). Both ways refresh the same copy from the same stamps to the same weights: each
round trains one small step (a real fused-AdamW update of the adapters), then times the refresh
both ways, who goes first alternating, the copy's stamps set back between them; the first round is
left out as warm-up. The LoRA step the refresh belongs to (the workload's generate + train step)
is timed too, for the fraction, and the copy is checked against one made afresh at the end.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from polyrl.bench import ab_workload
from polyrl.engine import Engine
from polyrl.types import SamplingParams, TrainBatch

WAYS = ("every_tensor", "changed_only")


def refresh_seconds(engine: Engine, small: TrainBatch, rounds: int) -> dict[str, list[float]]:
    """Per way, the seconds of ``GenerationCopy.current`` after each round's small train step."""
    from polyrl.algorithms.objective import Objective

    raw = engine.raw
    copy = raw.generation_copy
    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    for r in range(rounds + 1):
        engine.train_step(small, Objective())
        before = dict(copy.stamps)
        for way in WAYS if r % 2 == 0 else WAYS[::-1]:
            copy.forget(before if way == "changed_only" else None)  # None: every tensor is new to it
            start = time.perf_counter()
            copy.current(raw)
            if r:
                seconds[way].append(time.perf_counter() - start)
        print(f"round {r}: " + ", ".join(f"{w} {seconds[w][-1]:.3f} s" for w in WAYS if r), file=sys.stderr)
    return seconds


def unchanged_seconds(engine: Engine, rounds: int) -> float:
    """The median cost of the check alone (``current`` when nothing changed: every generate pays it)."""
    raw = engine.raw
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        raw.generation_copy.current(raw)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def step_seconds(engine: Engine, batch: TrainBatch, args: Any) -> dict[str, float]:
    """One LoRA step of the workload: generate (the refresh inside it) and the train step."""
    from polyrl.algorithms.objective import Objective
    from polyrl.bench.workload import bench_prompts

    start = time.perf_counter()
    engine.generate(bench_prompts(args.prompts), SamplingParams(
        max_new_tokens=args.max_new_tokens, n=args.group_size, seed=1, ignore_eos=True))
    middle = time.perf_counter()
    engine.train_step(batch, Objective())
    end = time.perf_counter()
    return {"generate_s": round(middle - start, 3), "train_step_s": round(end - middle, 3),
            "step_s": round(end - start, 3)}


def same_as_fresh(engine: Engine) -> bool:
    """Whether every tensor of the engine's copy equals a copy made afresh (a full refresh)."""
    import torch

    from polyrl_torch.generation_weights import GenerationCopy

    raw = engine.raw
    kept, fresh = raw.generation_copy, GenerationCopy(raw)
    fresh.current(raw)
    theirs = fresh.model.state_dict()
    if any(not torch.equal(value, theirs[name]) for name, value in kept.model.state_dict().items()):
        return False
    return all(torch.equal(_dense(module), _dense(fresh.packed[name])) for name, module in kept.packed.items())


def _dense(module: Any) -> Any:
    """A ``PackedLinear``'s weight in the plain ``[out, in]`` layout again."""
    return module.packed.to_dense()


def summary(seconds: dict[str, list[float]]) -> dict[str, Any]:
    """Medians, the ratio after/before (of the medians, and per round: the load moves both ways of
    a round together), each way's spread (min-max) and the per-round wins."""
    median = {way: round(float(np.median(v)), 4) for way, v in seconds.items()}
    pairs = list(zip(seconds["every_tensor"], seconds["changed_only"]))
    ratios = [after / before for before, after in pairs]
    return {"seconds": {w: [round(s, 4) for s in v] for w, v in seconds.items()}, "median_s": median,
            "spread_s": {w: [round(min(v), 4), round(max(v), 4)] for w, v in seconds.items()},
            "changed_only_vs_every_tensor": round(median["changed_only"] / median["every_tensor"], 3),
            "round_ratio_median": round(float(np.median(ratios)), 3),
            "round_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "changed_only_faster_in": f"{sum(a < b for b, a in pairs)} of {len(pairs)} rounds"}


def main(argv: list[str] | None = None) -> int:
    p = ab_workload.parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2, help="whole LoRA steps timed for the fraction")
    args = p.parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return 2
    engine, batch = ab_workload.engine_and_batch(args, lora=True)
    if engine.raw.generation_copy is None:
        print("error: this engine samples without a copy (no oneDNN packing here): nothing to refresh", file=sys.stderr)
        return 2
    small = TrainBatch(batch.sequences[:2], batch.advantages[:2])
    steps = [step_seconds(engine, batch, args) for _ in range(args.steps)]
    result = summary(refresh_seconds(engine, small, args.rounds))
    result["unchanged_check_s"] = round(unchanged_seconds(engine, 20), 5)
    step = float(np.median([s["step_s"] for s in steps]))
    result.update(lora_steps=steps, refresh_fraction_of_step={
        w: round(result["median_s"][w] / step, 4) for w in WAYS})
    result["same_as_fresh_copy"] = same_as_fresh(engine)
    print(json.dumps(result), flush=True)
    ab_workload.write_report(args.output, {**ab_workload.report_header(args), "lora": "polyrl's default LoraConfig()",
                                           "shared_cpu": "other agents' jobs ran on the same cores", **result})
    return 0 if result["same_as_fresh_copy"] else 1


if __name__ == "__main__":
    sys.exit(main())
