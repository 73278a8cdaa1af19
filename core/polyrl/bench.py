"""``polyrl bench``: the same rollout + update workload on each backend, side by side, one run.

Measures per backend: generation tokens/s, log-prob scoring time, train-step time (where the
backend trains), and the ratio of each to the first backend listed. Threads are fixed for every
backend (``torch.set_num_threads`` and friends through ``EngineConfig.threads``) so the numbers
compare; the machine and thread settings are recorded in the JSON output.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, SamplingParams, TokenSequence, TrainBatch


def _prompts(count: int) -> list[Any]:
    rng = np.random.default_rng(0)
    return [[{"role": "user", "content": f"What is {a} + {b}? Answer with the number only."}]
            for a, b in rng.integers(10, 99, size=(count, 2))]


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def bench_backend(name: str, model: str, prompts: int, group_size: int, max_new_tokens: int,
                  threads: int, steps: int, lora: bool, generate_only: bool = False) -> dict[str, Any]:
    """Time one backend; returns seconds per phase (medians over ``steps``) and tokens/s."""
    from polyrl.algorithms.objective import Objective

    reg = get_registry()
    t0 = time.perf_counter()
    caps = reg.spec(name).capabilities
    engine = Engine(reg, name, EngineConfig(model=model, role="train" if caps.train_step else "generate",
                                            threads=threads, lora=LoraConfig() if lora and caps.lora else None))
    out: dict[str, Any] = {"backend": name, "load_s": time.perf_counter() - t0}
    gen_s, lp_s, train_s, tokens = [], [], [], []
    batch_prompts = _prompts(prompts)
    for step in range(steps):
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, n=group_size, seed=step)
        t = time.perf_counter()
        completions = engine.generate(batch_prompts, sampling)
        gen_s.append(time.perf_counter() - t)
        tokens.append(sum(len(c.completion_ids) for c in completions))
        if generate_only:
            continue
        seqs = [TokenSequence.of(c) for c in completions]
        t = time.perf_counter()
        engine.logprobs(seqs, 1.0)
        lp_s.append(time.perf_counter() - t)
        if caps.train_step:
            adv = np.random.default_rng(step).standard_normal(len(seqs)).astype(np.float32)
            t = time.perf_counter()
            engine.train_step(TrainBatch(seqs, adv), Objective())
            train_s.append(time.perf_counter() - t)
    out.update(
        generate_s=_median(gen_s), logprobs_s=_median(lp_s), train_step_s=_median(train_s),
        tokens_per_step=_median([float(t) for t in tokens]),
        generate_tokens_per_s=_median([t / s for t, s in zip(tokens, gen_s)]),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    out["step_s"] = out["generate_s"] + (out["train_step_s"] if train_s else 0.0)
    return out


def _isolated(name: str, model: str, prompts: int, group_size: int, max_new_tokens: int,
              threads: int, steps: int, lora: bool, generate_only: bool) -> dict[str, Any]:
    """``bench_backend`` in a child process: its own peak RSS, no thread pools or caches left
    behind by the previous backend (the backends still run one after another, never together)."""
    import subprocess
    import sys

    args = json.dumps([name, model, prompts, group_size, max_new_tokens, threads, steps, lora,
                       generate_only])
    done = subprocess.run([sys.executable, "-m", "polyrl.bench", args], capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        return {"backend": name, "error": " | ".join(tail) or f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _trl(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
         lora: bool) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same workload, in a child process (``polyrl_torch.bench_trl``)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("trl") is None or importlib.util.find_spec("polyrl_torch") is None:
        return {"backend": "trl", "error": "trl is not installed: pip install 'polyrl-torch[bench]'"}
    args = json.dumps([model, prompts, group_size, max_new_tokens, threads, steps, lora])
    done = subprocess.run([sys.executable, "-m", "polyrl_torch.bench_trl", args], capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-5:]
        return {"backend": "trl", "error": " | ".join(tail) or f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_bench(model: str = "tiny-llama", backends: list[str] | None = None, prompts: int = 8,
              group_size: int = 4, max_new_tokens: int = 32, threads: int = 1, steps: int = 3,
              lora: bool = False, output: str | None = "bench/results.json",
              generate_only: bool = False, trl: bool = False) -> dict[str, Any]:
    reg = get_registry()
    names = backends or reg.available()
    resolved = reg.resolve_model(model)
    results = [_isolated(n, resolved, prompts, group_size, max_new_tokens, threads, steps, lora,
                         generate_only) for n in names]
    if trl:  # the anchor: whole-step time only (TRL does not expose its phases)
        results.append(_trl(resolved, prompts, group_size, max_new_tokens, threads, steps, lora))
        for r in results[:-1]:
            if results[-1].get("step_s") and r.get("step_s"):
                r["speedup_vs_trl"] = results[-1]["step_s"] / r["step_s"]
    base = results[0] if results else {}
    for r in results:
        for key in ("generate_s", "logprobs_s", "train_step_s"):
            if base.get(key) and r.get(key) is not None and r[key] == r[key]:
                r[f"{key}_vs_{base['backend']}"] = r[key] / base[key]
    report = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "threads": threads},
        "workload": {"model": model, "prompts": prompts, "group_size": group_size,
                     "max_new_tokens": max_new_tokens, "steps": steps, "lora": lora,
                     "generate_only": generate_only, "trl": trl},
        "results": results,
    }
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":  # one backend, in a child process of run_bench
    import sys

    print(json.dumps(bench_backend(*json.loads(sys.argv[1]))))
