"""``polyrl bench``: the same rollout + update workload on each backend (and TRL), side by side.

One run, one process tree: each backend (and TRL's ``GRPOTrainer`` with ``--trl``, mlx-lm-lora's
GRPO with ``--mlx-lm-lora``) runs in its own child process, one after another, on the same model, prompts, group size, completion length and
thread count. Reported per backend: seconds per phase (generate, log-probs, forward, backward,
optimizer), tokens/s, peak RSS, ratios to the first backend and to TRL, and each phase's achieved
FLOP/s as a fraction of the machine's matmul peak measured in the same run, in the precision the
matmuls ran in (``--compute-dtype bfloat16``: the bfloat16 peak; ``polyrl.bench.flops`` counts
the workload's FLOPs). Output: JSON, a PNG chart, a table.
"""

from __future__ import annotations

import platform
import resource
import time
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from polyrl import strict_json
from polyrl.bench import speed_records
from polyrl.bench.args import bench_backends, check_interleave, check_output, check_workload, resolve_bench_model
from polyrl.bench.children import _child, child_argv, run_child
from polyrl.bench.lockstep import wait_for_turn
from polyrl.bench.machine import cpu_info
from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, LoraConfig, SamplingParams, TokenSequence, TrainBatch

#: Tokens ``max_length`` leaves for a bench prompt beyond the completion (they are ~50 long).
BENCH_PROMPT_ROOM = 256
#: ``EngineConfig``'s own default, kept when the completions fit in it.
DEFAULT_MAX_LENGTH: int = attrs.fields(EngineConfig).max_length.default  # type: ignore[assignment]

#: Train-step phases a backend may report in ``StepMetrics.extra`` (seconds).
TRAIN_PHASES = ("forward", "backward", "grad_sync", "optimizer")


#: Tokens one solved example of ``few_shot_preamble`` takes at most (SmolLM2's tokenizer: ~15).
FEW_SHOT_EXAMPLE_TOKENS = 16


def few_shot_preamble(examples: int) -> str:
    """``examples`` solved sums (seeded, the same for every prompt) to put before a bench question:
    how GRPO prompts grow long in practice (few-shot examples, a long system prompt), so a long-prompt
    workload is still a real chat prompt on every side."""
    if examples == 0:
        return ""
    rng = np.random.default_rng(1)
    solved = [f"What is {a} + {b}? {a + b}" for a, b in rng.integers(10, 99, size=(examples, 2))]
    return "Examples:\n" + "\n".join(solved) + "\n\n"


def bench_prompts(count: int, few_shot: int = 0) -> list[Any]:
    """The bench's chat prompts (seeded): every backend and baseline gets the same ones; each
    after ``few_shot`` solved examples (``few_shot_preamble``)."""
    rng = np.random.default_rng(0)
    preamble = few_shot_preamble(few_shot)
    return [[{"role": "user", "content": f"{preamble}What is {a} + {b}? Answer with the number only."}]
            for a, b in rng.integers(10, 99, size=(count, 2))]


def prompt_room(few_shot: int) -> int:
    """Tokens ``max_length`` leaves for a bench prompt with ``few_shot`` examples."""
    return BENCH_PROMPT_ROOM + FEW_SHOT_EXAMPLE_TOKENS * few_shot


def engine_device(raw: Any) -> str:
    """Where a loaded backend engine runs, as it says (torch ``cuda:0``, MLX ``Device(gpu, 0)``,
    MAX ``gpu:0``): ``device = "auto"`` is resolved by the backend, so ask it."""
    for attr in ("device", "device_spec"):
        value = getattr(raw, attr, None)
        if value is not None:
            return str(value)
    return "unknown"


def on_cpu(device: str) -> bool:
    """Whether a device as ``engine_device`` or the matmul peak names it is the CPU."""
    return "cpu" in device.lower()


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def bench_backend(name: str, model: str, prompts: int, group_size: int, max_new_tokens: int,
                  threads: int, steps: int, lora: bool, generate_only: bool = False,
                  ignore_eos: bool = False, warmup_steps: int = 0,
                  compute_dtype: str | None = None, device: str = "auto", few_shot: int = 0) -> dict[str, Any]:
    """Time one backend; seconds per phase (medians over ``steps``), tokens/s, the shapes.
    ``ignore_eos``: every completion is ``max_new_tokens`` long (fixed-length benchmarks).
    ``warmup_steps``: the first steps run but are left out of the medians (as TRL's bench leaves
    out its first step, which pays for lazy initialisation); never all of them.
    ``compute_dtype``: mixed precision (float32 weights, matmuls in this dtype). ``device``: the
    engine's (``auto``: the backend's accelerator when there is one). ``few_shot``: solved examples
    before each prompt's question (``bench_prompts``)."""
    from polyrl.algorithms.objective import Objective

    reg = get_registry()
    t0 = time.perf_counter()
    caps = reg.spec(name).capabilities
    if compute_dtype is not None and compute_dtype not in caps.compute_dtypes:
        return {"backend": name, "error": f"backend {name!r} does not offer compute_dtype {compute_dtype!r}"}
    engine = Engine(reg, name, EngineConfig(model=model, role="train" if caps.train_step else "generate",
                                            threads=threads, lora=LoraConfig() if lora and caps.lora else None,
                                            compute_dtype=compute_dtype, device=device,
                                            # room for the bench prompts plus every requested token
                                            max_length=max(DEFAULT_MAX_LENGTH, max_new_tokens + prompt_room(few_shot))))
    out: dict[str, Any] = {"backend": name, "load_s": time.perf_counter() - t0,
                           "compute_dtype": compute_dtype or "float32", "device": engine_device(engine.raw)}
    device_peak_mb: list[float] = []
    gen_s, lp_s, train_s, tokens = [], [], [], []
    spans: list[list[float]] = []  # every step's wall-clock [start, end], warm-up included
    phases: dict[str, list[float]] = {p: [] for p in TRAIN_PHASES}
    shapes = []
    batch_prompts = bench_prompts(prompts, few_shot)
    for step in range(steps):
        wait_for_turn()  # a no-op unless ``polyrl bench --interleave`` runs the sides in lockstep
        spans.append([time.time(), float("nan")])
        sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, n=group_size, seed=step,
                                  ignore_eos=ignore_eos)
        t = time.perf_counter()
        completions = engine.generate(batch_prompts, sampling)
        gen_s.append(time.perf_counter() - t)
        tokens.append(sum(len(c.completion_ids) for c in completions))
        shapes.append({"prompt_lens": [len(c.prompt_ids) for c in completions],
                       "completion_lens": [len(c.completion_ids) for c in completions],
                       "owners": [c.prompt_index for c in completions]})
        spans[-1][1] = time.time()
        if generate_only:
            continue
        seqs = [TokenSequence.of(c) for c in completions]
        t = time.perf_counter()
        engine.logprobs(seqs, 1.0)
        lp_s.append(time.perf_counter() - t)
        if caps.train_step:
            adv = np.random.default_rng(step).standard_normal(len(seqs)).astype(np.float32)
            t = time.perf_counter()
            metrics = engine.train_step(TrainBatch(seqs, adv), Objective())
            train_s.append(time.perf_counter() - t)
            spans[-1][1] = time.time()
            for p in TRAIN_PHASES:
                if f"time/{p}" in metrics.extra:
                    phases[p].append(float(metrics.extra[f"time/{p}"]))
            if "memory/device_peak_mb" in metrics.extra:  # an accelerator's high-water mark
                device_peak_mb.append(float(metrics.extra["memory/device_peak_mb"]))
    skip = min(warmup_steps, steps - 1)
    gen_s, lp_s, train_s, tokens = gen_s[skip:], lp_s[skip:], train_s[skip:], tokens[skip:]
    phases = {p: v[skip:] for p, v in phases.items()}
    out.update(
        generate_s=_median(gen_s), logprobs_s=_median(lp_s), train_step_s=_median(train_s),
        tokens_per_step=_median([float(t) for t in tokens]),
        generate_tokens_per_s=_median([t / s for t, s in zip(tokens, gen_s)]),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        shapes=shapes[len(shapes) // 2],  # a representative step (the median one by index)
        completion_lens_seen=sorted({n for s in shapes for n in s["completion_lens"]}),  # every step's
        steps_timed=len(gen_s),
        step_spans_epoch=spans,
    )
    out.update({f"{p}_s": _median(v) for p, v in phases.items() if v})
    if device_peak_mb:
        out["peak_device_mb"] = max(device_peak_mb)
    # a GRPO step: generate, then update (the old-log-prob pass equals the current policy with one
    # update per batch and is skipped, as TRL skips it)
    out["step_s"] = out["generate_s"] + (out["train_step_s"] if train_s else 0.0)
    # every timed step, not only the median: the spread within one run (a noisy machine shows here)
    out["step_s_each"] = [g + t for g, t in zip(gen_s, train_s)] if train_s else list(gen_s)
    return out


def backend_argv(name: str, model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int,
                 steps: int, lora: bool, *, generate_only: bool = False, ignore_eos: bool = False,
                 compute_dtype: str | None = None, device: str = "auto", few_shot: int = 0) -> list[str]:
    """The child running ``bench_backend`` for one polyrl backend (``python -m polyrl.bench``), its
    first step left out of the medians when there are more (as TRL's child leaves out its own)."""
    return child_argv("polyrl.bench", [name, model, prompts, group_size, max_new_tokens, threads, steps, lora,
                                       generate_only, ignore_eos, 1, compute_dtype, device, few_shot])


def backend_child(name: str, model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int,
                  steps: int, lora: bool, *, generate_only: bool = False, ignore_eos: bool = False,
                  compute_dtype: str | None = None, timeout: float | None = None,
                  device: str = "auto", few_shot: int = 0) -> dict[str, Any]:
    """``bench_backend`` for one polyrl backend in a child process (``backend_argv``)."""
    return run_child(backend_argv(name, model, prompts, group_size, max_new_tokens, threads, steps, lora,
                                  generate_only=generate_only, ignore_eos=ignore_eos, compute_dtype=compute_dtype,
                                  device=device, few_shot=few_shot), name, timeout)


def trl_missing() -> dict[str, Any] | None:
    """The TRL side's ``error`` result when TRL (or the torch backend it runs beside) is not installed."""
    import importlib.util

    if importlib.util.find_spec("trl") is None or importlib.util.find_spec("polyrl_torch") is None:
        return {"backend": "trl", "error": "trl is not installed: pip install 'polyrl-torch[bench]'"}
    return None


def trl_argv(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
             lora: bool, ignore_eos: bool = False, compute_dtype: str | None = None,
             device: str = "auto", few_shot: int = 0) -> list[str]:
    """The child running TRL's GRPOTrainer on the same workload (``polyrl_torch.bench.trl_grpo``)."""
    return child_argv("polyrl_torch.bench.trl_grpo", [model, prompts, group_size, max_new_tokens, threads, steps,
                                                      lora, ignore_eos, compute_dtype, device, few_shot])


def _trl(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
         lora: bool, ignore_eos: bool = False, timeout: float | None = None,
         compute_dtype: str | None = None, device: str = "auto", few_shot: int = 0) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same workload, in a child process (``trl_argv``)."""
    if missing := trl_missing():
        return missing
    return run_child(trl_argv(model, prompts, group_size, max_new_tokens, threads, steps, lora, ignore_eos,
                              compute_dtype, device, few_shot), "trl", timeout)


def _mlx_lm_lora(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
                 lora: bool, ignore_eos: bool = False, device: str = "auto", few_shot: int = 0) -> dict[str, Any]:
    """mlx-lm-lora's GRPO on the same workload, in a child process (``polyrl_mlx.bench.mlx_lm_lora_grpo``)."""
    import importlib.util

    if importlib.util.find_spec("polyrl_mlx") is None:
        return {"backend": "mlx-lm-lora", "error": "needs the MLX backend: pip install 'polyrl-mlx[bench]'"}
    if importlib.util.find_spec("mlx_lm_lora") is None:
        return {"backend": "mlx-lm-lora", "error": "mlx-lm-lora missing: pip install 'polyrl-mlx[bench]'"}
    return _child("polyrl_mlx.bench.mlx_lm_lora_grpo",
                  [model, prompts, group_size, max_new_tokens, threads, steps, lora, ignore_eos, device, few_shot],
                  "mlx-lm-lora")


def _hf_generate(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int,
                 steps: int, ignore_eos: bool = False, compute_dtype: str | None = None,
                 device: str = "auto", few_shot: int = 0) -> dict[str, Any]:
    """transformers' ``generate`` on the same prompts, in a child process (the generation baseline)."""
    import importlib.util

    if importlib.util.find_spec("polyrl_torch") is None:
        return {"backend": "hf-generate", "error": "needs the torch backend: pip install 'polyrl[torch]'"}
    return _child("polyrl_torch.bench.hf_generate",
                  [model, prompts, group_size, max_new_tokens, threads, steps, ignore_eos, compute_dtype, device,
                   few_shot],
                  "hf-generate")


def matmul_peak(threads: int, dtype: str = "float32", device: str = "auto") -> dict[str, Any]:
    """The ``dtype`` matmul peak at ``threads`` on ``device`` (``auto``: CUDA when torch sees a GPU):
    torch's in a child process, else numpy's float32 one on this CPU (its ``dtype`` and ``device``
    fields say which was measured)."""
    import importlib.util

    if importlib.util.find_spec("polyrl_torch") is not None:
        found = _child("polyrl_torch.bench.matmul_peak", [threads, dtype, device], "matmul_peak")
        if "error" not in found:
            return found
        if device not in ("auto", "cpu"):  # a CPU peak would misstate every MFU of an accelerator run
            raise ConfigError(f"cannot measure the matmul peak on device {device!r}: {found['error']}",
                              field="--device", fix="name a device this machine has (cpu, cuda, cuda:N) or auto")
    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    a @ a
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < 1.0:
        a @ a
        reps += 1
    return {"peak_gflops": 2.0 * 1024**3 * reps / (time.perf_counter() - start) / 1e9,
            "threads": "numpy default", "dtype": "float32", "library": "numpy " + np.__version__, "device": "cpu"}


def memory_read(threads: int) -> dict[str, Any]:
    """GB/s the bench's threads read from memory on this CPU: torch's in a child process, else
    numpy's on one thread (``library`` and ``threads`` say which was measured)."""
    import importlib.util

    if importlib.util.find_spec("polyrl_torch") is not None:
        found = _child("polyrl_torch.bench.memory_read", threads, "memory_read")
        if "error" not in found:
            return found
    from polyrl.bench.memory_floor import read_rate

    buffer = np.ones(512 * 2**20 // 4, dtype=np.float32)
    return {"read_gb_per_s": read_rate(buffer.sum, buffer.nbytes), "threads": 1, "buffer_mb": 512,
            "library": "numpy " + np.__version__}


def add_utilisation(result: dict[str, Any], model_dir: str, peak_gflops: float, lora: bool,
                    read_gb_per_s: float | None = None) -> None:
    """Each timed phase's workload FLOP/s and its fraction of the measured matmul peak; with the
    CPU's read rate, generation's floor from streaming the weights too (``generate_floor``)."""
    from polyrl.bench.flops import ModelShape, step_flops

    shapes = result.get("shapes")
    if not shapes or not (Path(model_dir) / "config.json").exists():
        return
    work = step_flops(ModelShape.from_config(model_dir), shapes["prompt_lens"], shapes["completion_lens"],
                      shapes["owners"], lora=lora)
    train_compute = (sum(result.get(f"{p}_s") or 0.0 for p in ("forward", "backward", "forward_backward"))
                     or result.get("train_step_s"))
    timed = {"generate": result.get("generate_s"), "logprobs": result.get("logprobs_s"), "train": train_compute}
    for phase, seconds in timed.items():
        if seconds and seconds == seconds and seconds > 0:
            result[f"{phase}_gflops"] = work[phase] / seconds / 1e9
            result[f"{phase}_mfu"] = result[f"{phase}_gflops"] / peak_gflops
    result["workload_gflop"] = {k: v / 1e9 for k, v in work.items()}
    # the step's FLOPs at the measured peak: no framework's step can be shorter on this machine
    result["flop_floor_s"] = (work["generate"] + work["train"]) / 1e9 / peak_gflops
    if read_gb_per_s and shapes.get("completion_lens"):
        from polyrl.bench.memory_floor import generation_floor

        result["generate_floor"] = generation_floor(
            ModelShape.from_config(model_dir), shapes["completion_lens"], work["generate"] / 1e9, peak_gflops,
            read_gb_per_s, str(result.get("compute_dtype") or "float32"))


def add_utilisations(results: list[dict[str, Any]], peaks: dict[str, dict[str, Any]], model_dir: str,
                     lora: bool, read_gb_per_s: float | None = None) -> None:
    """``add_utilisation`` for each result that ran where the peaks were measured, against the peak of
    the precision its matmuls ran in; a side on another device (MLX on Metal beside a CPU peak) gets
    an ``mfu_note`` instead of a utilisation against the wrong device's peak."""
    base = peaks["float32"]
    for r in results:
        if "error" in r:
            continue
        if on_cpu(str(r.get("device", "cpu"))) != on_cpu(str(base.get("device", "cpu"))):
            r["mfu_note"] = f"no matmul peak measured on {r.get('device')} (the peak ran on {base.get('device')})"
            continue
        used = peaks.get(r.get("compute_dtype", "float32"), base)
        r["mfu_peak_dtype"] = used.get("dtype", "float32")
        add_utilisation(r, model_dir, used["peak_gflops"], lora, read_gb_per_s if on_cpu(str(r.get("device", "cpu"))) else None)


def add_flop_floor_lead(results: list[dict[str, Any]], trl: dict[str, Any]) -> None:
    """How far ahead of TRL the arithmetic lets a backend get: TRL's step over the FLOP floor
    (``max_speedup_vs_trl``), and the share of the peak a whole step needs for 3x TRL."""
    for r in results:
        floor, trl_step = r.get("flop_floor_s"), trl.get("step_s")
        if floor and trl_step:
            r["max_speedup_vs_trl"] = trl_step / floor
            r["peak_share_for_3x_trl"] = floor / (trl_step / 3.0)


def run_interleaved(names: list[str], model: str, prompts: int, group_size: int, max_new_tokens: int,
                    threads: int, steps: int, lora: bool, ignore_eos: bool, compute_dtype: str | None = None,
                    device: str = "auto", timeout: float | None = None,
                    trl_timeout: float | None = None, few_shot: int = 0) -> list[dict[str, Any]]:
    """The backends' results and TRL's (last), every side run at once in lockstep; ``timeout``
    (each backend) and ``trl_timeout``: seconds each side may keep the others waiting."""
    from polyrl.bench.lockstep import run_in_lockstep

    children = [(n, backend_argv(n, model, prompts, group_size, max_new_tokens, threads, steps, lora,
                                 ignore_eos=ignore_eos, compute_dtype=compute_dtype, device=device,
                                 few_shot=few_shot)) for n in names]
    timeouts = [timeout] * len(names)
    missing = trl_missing()
    if missing is None:
        children.append(("trl", trl_argv(model, prompts, group_size, max_new_tokens, threads, steps, lora,
                                         ignore_eos, compute_dtype, device, few_shot)))
        timeouts.append(trl_timeout)
    results = run_in_lockstep(children, steps, timeouts)
    return results + [missing] if missing is not None else results


def step_pair_ratios(trl: dict[str, Any], ours: dict[str, Any]) -> list[float]:
    """TRL's step time over ours for each step pair of sides run in lockstep (step i of each back to back)."""
    return [t / o for t, o in zip(trl.get("step_s_each") or [], ours.get("step_s_each") or []) if o > 0]


def add_trl_ratios(results: list[dict[str, Any]], trl: dict[str, Any], paired: bool = False) -> None:
    """Each result's ``speedup_vs_trl`` (TRL's median step over its own) and memory ratio; with
    ``paired`` (lockstep sides: step i of each ran back to back) also the ratio of every step pair,
    ``speedup_vs_trl_each``."""
    for r in results:
        if trl.get("step_s") and r.get("step_s"):
            r["speedup_vs_trl"] = trl["step_s"] / r["step_s"]
            if trl.get("peak_rss_mb"):
                r["rss_vs_trl"] = r["peak_rss_mb"] / trl["peak_rss_mb"]
        if paired and trl.get("step_s_each") and r.get("step_s_each"):
            r["speedup_vs_trl_each"] = step_pair_ratios(trl, r)


def run_bench(model: str = "tiny-llama", backends: list[str] | None = None, prompts: int = 8,
              group_size: int = 4, max_new_tokens: int = 32, threads: int = 1, steps: int = 3,
              lora: bool = False, output: str | None = "bench/results.json",
              generate_only: bool = False, trl: bool = False, hf_generate: bool = False,
              mlx_lm_lora: bool = False, chart: bool = True, ignore_eos: bool = False,
              compute_dtype: str | None = None, device: str = "auto", interleave: bool = False,
              few_shot: int = 0) -> dict[str, Any]:
    """Bench ``backends`` (default: every usable one but ``remote``), then TRL (``trl``), mlx-lm-lora's GRPO
    (``mlx_lm_lora``: each MLX result's ``speedup_vs_mlx_lm_lora``) and transformers' ``generate``
    (``hf_generate``: each backend's ``generate_speedup_vs_hf``) on the same workload.
    ``ignore_eos``: every side samples exactly ``max_new_tokens`` per completion;
    ``compute_dtype`` (e.g. bfloat16) runs polyrl's engines and TRL in that mixed precision (and
    ``generate`` on weights of that dtype); ``device`` is every side's (``auto``: CUDA, a GPU or Metal
    when the machine has one, else the CPU; the matmul peak is measured on the same device).
    ``interleave``: the backends and TRL run at once, stepping in turn (``polyrl.bench.lockstep``),
    and each backend's ``speedup_vs_trl_each`` pairs its steps with TRL's. ``few_shot``: solved
    examples before every side's prompts (long prompts; ``bench_prompts``).
    The arguments are checked first (``polyrl.bench.args``): a bad one is a ``ConfigError``
    before anything is measured or written."""
    check_workload(prompts, group_size, max_new_tokens, threads, steps, generate_only,
                   trains_baseline=trl or mlx_lm_lora, few_shot=few_shot)
    check_interleave(interleave, trl, generate_only)
    reg = get_registry()
    names = bench_backends(reg, backends)
    check_output(output)
    speed_records.check_writable()  # a bad POLYRL_CACHE: one error line now, not after the measuring
    resolved = resolve_bench_model(reg, model)
    peak = matmul_peak(threads, device=device)
    peaks = {"float32": peak}
    if compute_dtype is not None and compute_dtype != "float32":
        peaks[compute_dtype] = matmul_peak(threads, compute_dtype, device)
    if interleave:
        results = run_interleaved(names, resolved, prompts, group_size, max_new_tokens, threads, steps, lora,
                                  ignore_eos, compute_dtype, device, few_shot=few_shot)
    else:
        results = [backend_child(n, resolved, prompts, group_size, max_new_tokens, threads, steps, lora,
                                 generate_only=generate_only, ignore_eos=ignore_eos, compute_dtype=compute_dtype,
                                 device=device, few_shot=few_shot)
                   for n in names]
        if trl:
            results.append(_trl(resolved, prompts, group_size, max_new_tokens, threads, steps, lora, ignore_eos,
                                compute_dtype=compute_dtype, device=device, few_shot=few_shot))
    if trl:
        add_trl_ratios(results[:-1], results[-1], paired=interleave)
    if mlx_lm_lora:
        peer = _mlx_lm_lora(resolved, prompts, group_size, max_new_tokens, threads, steps, lora, ignore_eos,
                            device, few_shot)
        for r in results:  # the peer is an MLX trainer: it is the anchor of the MLX backend only
            if r["backend"] == "mlx" and peer.get("step_s") and r.get("step_s"):
                r["speedup_vs_mlx_lm_lora"] = peer["step_s"] / r["step_s"]
                if peer.get("peak_rss_mb") and r.get("peak_rss_mb"):
                    r["rss_vs_mlx_lm_lora"] = r["peak_rss_mb"] / peer["peak_rss_mb"]
        results.append(peer)
    if hf_generate:
        hf = _hf_generate(resolved, prompts, group_size, max_new_tokens, threads, steps, ignore_eos,
                          compute_dtype, device, few_shot)
        for r in results:
            if hf.get("generate_s") and r.get("generate_s"):
                r["generate_speedup_vs_hf"] = hf["generate_s"] / r["generate_s"]
        results.append(hf)
    # the read rate only bounds measured sides' generation (add_utilisation): when every side failed,
    # its torch child (seconds, a 512 MB buffer) would measure nothing the report uses
    measured = any("error" not in r for r in results)
    read = memory_read(threads) if measured and peak.get("device", "cpu") == "cpu" else None
    add_utilisations(results, peaks, resolved, lora, (read or {}).get("read_gb_per_s"))
    if trl and "error" not in results[len(names)]:
        add_flop_floor_lead(results[:len(names)], results[len(names)])
    base = results[0] if results else {}
    for r in results:
        for key in ("generate_s", "logprobs_s", "train_step_s"):
            if base.get(key) and r.get(key) is not None and r[key] == r[key]:
                r[f"{key}_vs_{base['backend']}"] = r[key] / base[key]
    report: dict[str, Any] = {
        "machine": {**cpu_info(threads), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(), "matmul_peak": peak,
                    "matmul_peaks": peaks, **({"memory_read": read} if read else {}),
                    # where the peak (and so every side, on the same device spec) ran: "cpu", or a GPU's name
                    "device": peak.get("device_name") or peak.get("device", "cpu")},
        "workload": {"model": model, "prompts": prompts, "group_size": group_size, "interleave": interleave,
                     "max_new_tokens": max_new_tokens, "steps": steps, "lora": lora,
                     "generate_only": generate_only, "trl": trl, "hf_generate": hf_generate,
                     "mlx_lm_lora": mlx_lm_lora, "ignore_eos": ignore_eos,
                     "compute_dtype": compute_dtype or "float32", "device": device, "few_shot": few_shot},
        "results": results,
    }
    # what `generate = "auto"` chooses from: polyrl's own backends only, measured on the CPU (the
    # device a recorded speed is keyed by is this machine's CPU, so accelerator runs stay out)
    if peak.get("device", "cpu") == "cpu":
        speed_records.record(resolved, [r for r in results if r["backend"] in names], threads)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        if chart:
            from polyrl.bench.report import write_chart

            report["chart"] = write_chart(report, Path(output).with_suffix(".png"))
        Path(output).write_text(strict_json.dumps(report, indent=2))  # NaN -> null: strict JSON
    return report

