"""Where one polyrl step's time goes on a device: ``torch.profiler`` over one generate and one train step.

Why: the first GPU run (README "On a GPU") left two questions a table of seconds cannot answer:
is generation waiting on the host (kernel launches, token read-backs) rather than on the GPU, and
why is the train step slower than TRL's there. The answer is in how busy the device is while a
phase runs, how many kernels it launches, and which ops take the time, per phase.

    python bench/gpu_profile.py --model .gpu/models/smollm2-1.7b-shape --device cuda --out DIR

Writes ``DIR/profile.json`` (per phase: wall seconds, device-kernel seconds and their share of the
wall, kernel launches, host-device copies and synchronizations) and ``DIR/{generate,train}_ops.txt``
(the profiler's table of ops, top 40). On the CPU it runs too (there is no device-kernel time):
``tests/test_gpu_suite.py`` rehearses it on a tiny model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

#: Host-side CUDA runtime calls that make the host wait for the device, or move data across.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")
#: A captured CUDA graph's replay: one host call for all its kernels (``polyrl_torch.fixed_decode``).
GRAPH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")


def _device_kernel_us(events: Any) -> float:
    """Microseconds of device kernels (their own time) in a profiler's event list."""
    total = 0.0
    for e in events:
        kind = str(getattr(e, "device_type", "")).lower()
        if "cuda" in kind:
            total += float(getattr(e, "self_device_time_total", 0.0) or 0.0)
    return total


def phase_summary(prof: Any, wall_s: float, on_device: bool) -> dict[str, Any]:
    """One profiled phase in numbers: how busy the device was and what the host did to feed it
    (on the CPU there is no device: its two fields are None)."""
    averages = prof.key_averages()
    counts = {e.key: int(e.count) for e in averages}
    kernel_s = _device_kernel_us(prof.events()) / 1e6 if on_device else None
    return {
        "wall_s": wall_s,
        "device_kernel_s": kernel_s,
        "device_busy": kernel_s / wall_s if kernel_s is not None and wall_s > 0 else None,
        "kernel_launches": sum(counts.get(k, 0) for k in LAUNCH_CALLS),
        "graph_launches": sum(counts.get(k, 0) for k in GRAPH_CALLS),
        "host_syncs": sum(counts.get(k, 0) for k in SYNC_CALLS),
        "host_device_copies": sum(counts.get(k, 0) for k in COPY_CALLS),
        "ops": len(averages),
    }


def _table(prof: Any, on_device: bool) -> str:
    key = "self_cuda_time_total" if on_device else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=40)


def profile(model: str, device: str, prompts: int, group_size: int, max_new_tokens: int, lora: bool,
            compute_dtype: str | None, out: Path) -> dict[str, Any]:
    """Load ``model`` on the torch backend, run one unprofiled step (warm-up), then one profiled
    generate and one profiled train step; write the report under ``out`` and return it."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from polyrl.algorithms.objective import Objective
    from polyrl.bench.workload import BENCH_PROMPT_ROOM, DEFAULT_MAX_LENGTH, bench_prompts, engine_device
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, LoraConfig, SamplingParams, TokenSequence, TrainBatch

    engine = Engine(get_registry(), "torch", EngineConfig(
        model=model, role="train", device=device, compute_dtype=compute_dtype,
        lora=LoraConfig() if lora else None, max_length=max(DEFAULT_MAX_LENGTH, max_new_tokens + BENCH_PROMPT_ROOM)))
    where = engine_device(engine.raw)
    on_device = where.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_device else [])
    batch_prompts = bench_prompts(prompts)

    def sync() -> None:
        if on_device:
            torch.cuda.synchronize()

    def step(seed: int, profiled: bool) -> dict[str, Any]:
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, n=group_size, seed=seed,
                                  ignore_eos=True)
        report: dict[str, Any] = {}
        with torch_profile(activities=activities) if profiled else nullcontext() as prof:
            sync()
            t = time.perf_counter()
            completions = engine.generate(batch_prompts, sampling)
            sync()
            wall = time.perf_counter() - t
        if profiled:
            report["generate"] = phase_summary(prof, wall, on_device)
            report["generate"]["tokens"] = sum(len(c.completion_ids) for c in completions)
            (out / "generate_ops.txt").write_text(_table(prof, on_device))
        seqs = [TokenSequence.of(c) for c in completions]
        advantages = np.random.default_rng(seed).standard_normal(len(seqs)).astype(np.float32)
        with torch_profile(activities=activities) if profiled else nullcontext() as prof:
            sync()
            t = time.perf_counter()
            engine.train_step(TrainBatch(seqs, advantages), Objective())
            sync()
            wall = time.perf_counter() - t
        if profiled:
            report["train"] = phase_summary(prof, wall, on_device)
            (out / "train_ops.txt").write_text(_table(prof, on_device))
        return report

    out.mkdir(parents=True, exist_ok=True)
    step(0, profiled=False)  # lazy initialisation, allocator growth, kernel selection
    report = {"model": model, "device": where, "prompts": prompts, "group_size": group_size,
              "max_new_tokens": max_new_tokens, "lora": lora, "compute_dtype": compute_dtype or "float32",
              "torch": torch.__version__, **step(1, profiled=True)}
    (out / "profile.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def render(report: dict[str, Any]) -> str:
    """The report as a few lines (the device call's output ends with them)."""
    lines = [f"profile: {report['model']} on {report['device']}, {report['prompts']}x{report['group_size']}x"
             f"{report['max_new_tokens']}{' LoRA' if report['lora'] else ''} {report['compute_dtype']}"]
    for phase in ("generate", "train"):
        p = report[phase]
        busy = ("no device" if p["device_kernel_s"] is None
                else f"device kernels {p['device_kernel_s']:.3f} s (busy {p['device_busy']:.0%})")
        lines.append(f"  {phase:8s} wall {p['wall_s']:.3f} s  {busy}  launches {p['kernel_launches']} "
                     f"(+{p.get('graph_launches', 0)} graphs)  syncs {p['host_syncs']}  copies {p['host_device_copies']}  ops {p['ops']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--compute-dtype", choices=["bfloat16"], default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    report = profile(args.model, args.device, args.prompts, args.group_size, args.max_new_tokens, args.lora,
                     args.compute_dtype, args.out)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
