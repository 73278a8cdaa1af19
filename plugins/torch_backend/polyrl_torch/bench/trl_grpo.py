"""TRL's ``GRPOTrainer`` on polyrl's bench workload, for ``polyrl bench --trl`` (a child process).

The anchor users compare against: the same model folder, prompts, group size, completion length,
seed, thread count, optimizer (AdamW, lr, clip 1.0), beta = 0, LoRA settings and precision
(float32 weights; ``bf16=True``, accelerate's autocast, for ``--compute-dtype bfloat16``) as
``polyrl.bench`` uses, one optimizer step per generation round (``num_iterations = 1``, the whole
group batch in one step). TRL is a bench-only dependency (``pip install polyrl-torch[bench]``).
Prints one JSON line: seconds per step and per phase (median over the steps after the first,
which pays for lazy initialisation), tokens/s, peak RSS, one step's prompt/completion lengths and
every completion length seen. ``ignore_eos`` (fixed-length benchmarks) passes
``min_new_tokens = max_completion_length`` through ``GRPOConfig.generation_kwargs``: transformers
then masks the EOS tokens until that length, so no completion ends early.

Phases are timed by wrapping the trainer's own methods (TRL 1.16 names): ``_generate`` (rollouts),
``_generate_and_score_completions`` minus it (rewards, advantages, any old/ref log-probs: "scoring"),
``compute_loss`` (the training forward), ``training_step`` minus those two (backward), and the rest
of the optimizer step (clip, AdamW, zero_grad: "optimizer"). On CUDA (``device``) every clock read
waits for the GPU's queue, as polyrl's own phase clocks do.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any


def run(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
        lora: bool, ignore_eos: bool = False, compute_dtype: str | None = None,
        device: str = "cpu", few_shot: int = 0) -> dict[str, Any]:
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from polyrl.bench.lockstep import wait_for_turn
    from polyrl.bench.workload import bench_prompts
    from polyrl.types import LoraConfig

    from polyrl_torch.devices import resolve_device, wait_for_device

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    where = resolve_device(device)
    if where.type not in ("cpu", "cuda"):
        raise SystemExit(f"error: the TRL bench runs on cpu or cuda, not {device!r}")
    cuda = where.type == "cuda"

    def sync() -> None:  # the GPU runs ahead of Python: read the clock once its queue is done
        wait_for_device(where)

    rows = bench_prompts(prompts, few_shot)
    dataset = Dataset.from_list([{"prompt": p} for p in rows] * (steps + 1))
    completion_tokens: list[int] = []

    def reward(completions: list[Any], completion_ids: list[list[int]], **_: Any) -> list[float]:
        completion_tokens.append(sum(len(ids) for ids in completion_ids))
        return [float(len(ids)) / max_new_tokens for ids in completion_ids]

    class Timer(TrainerCallback):
        """Whole-step seconds, plus the per-phase seconds the wrapped methods add up per step."""

        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.spans: list[list[float]] = []  # every step's wall-clock [start, end], warm-up included
            self.phases: list[dict[str, float]] = []
            self.current: dict[str, float] = {}
            self._t = 0.0

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            wait_for_turn()  # a no-op unless ``polyrl bench --interleave`` runs the sides in lockstep
            self.current = {}
            sync()
            self._t = time.perf_counter()
            self.spans.append([time.time(), float("nan")])

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            sync()
            self.seconds.append(time.perf_counter() - self._t)
            self.spans[-1][1] = time.time()
            self.phases.append(self.current)

        def wrap(self, obj: Any, method: str, phase: str) -> None:
            inner = getattr(obj, method)

            def timed(*args: Any, **kwargs: Any) -> Any:
                sync()
                t = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    sync()
                    self.current[phase] = self.current.get(phase, 0.0) + time.perf_counter() - t
            setattr(obj, method, timed)

    batch = prompts * group_size
    config = GRPOConfig(
        output_dir="/tmp/polyrl-bench-trl", use_cpu=not cuda, bf16=compute_dtype == "bfloat16", fp16=False,
        # float32 weights in both modes (TRL's default today, said explicitly): bf16=True is then
        # accelerate's autocast over float32 masters, the same mixed precision as polyrl's
        model_init_kwargs={"dtype": "float32"},
        gradient_checkpointing=False, per_device_train_batch_size=batch,
        gradient_accumulation_steps=1, num_generations=group_size, max_completion_length=max_new_tokens,
        temperature=1.0, top_p=1.0, beta=0.0, learning_rate=1e-5, max_grad_norm=1.0,
        max_steps=steps, seed=0, logging_steps=1, report_to=[], save_strategy="no",
        dataloader_num_workers=0, shuffle_dataset=False, disable_dropout=True,
        generation_kwargs={"min_new_tokens": max_new_tokens} if ignore_eos else None,
    )
    peft = None
    if lora:
        from peft import LoraConfig as PeftLora

        from polyrl_torch.engine import peft_target_modules

        ours = LoraConfig()
        peft = PeftLora(r=ours.rank, lora_alpha=ours.alpha, lora_dropout=ours.dropout,
                        target_modules=peft_target_modules(ours), task_type="CAUSAL_LM")
    timer = Timer()
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          peft_config=peft, callbacks=[timer])
    load_s = time.perf_counter() - t0
    shapes: list[dict[str, list[int]]] = []
    generate = trainer._generate

    def generate_and_record(prompts_: list[Any]) -> Any:
        out = generate(prompts_)
        prompt_ids, completion_ids = out[0], out[1]
        shapes.append({"prompt_lens": [len(x) for x in prompt_ids],
                       "completion_lens": [len(x) for x in completion_ids],
                       "owners": [i // group_size for i in range(len(prompt_ids))]})
        return out

    trainer._generate = generate_and_record
    for method, phase in (("_generate", "generate"), ("_generate_and_score_completions", "rollout"),
                          ("compute_loss", "forward"), ("training_step", "training_step")):
        timer.wrap(trainer, method, phase)
    trainer.train()
    first = 1 if len(timer.seconds) > 1 else 0
    measured, tokens = timer.seconds[first:], completion_tokens[first:]

    def median(key: str) -> float | None:
        values = [p[key] for p in timer.phases[first:] if key in p]
        return float(np.median(values)) if values else None

    gen_s, rollout_s, fwd_s, ts_s = (median(k) for k in ("generate", "rollout", "forward", "training_step"))
    step_s = float(np.median(measured))
    return {
        "backend": "trl", "load_s": load_s, "step_s": step_s, "generate_s": gen_s,
        "scoring_s": rollout_s - gen_s if rollout_s is not None and gen_s is not None else None,
        "forward_s": fwd_s,
        "backward_s": ts_s - rollout_s - fwd_s if None not in (ts_s, rollout_s, fwd_s) else None,  # type: ignore[operator]
        "optimizer_s": step_s - ts_s if ts_s is not None else None,
        "train_step_s": step_s - gen_s if gen_s is not None else None,
        "tokens_per_step": float(np.median(tokens)),
        "generate_tokens_per_s": float(np.median(tokens)) / gen_s if gen_s else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "shapes": shapes[len(shapes) // 2] if shapes else None,
        "completion_lens_seen": sorted({n for s in shapes for n in s["completion_lens"]}),
        "steps_timed": len(measured), "step_s_each": [float(x) for x in measured],
        "step_spans_epoch": timer.spans, "trl_version": __import__("trl").__version__,
        "param_dtype": str(next(trainer.model.parameters()).dtype).removeprefix("torch."),
        "compute_dtype": compute_dtype or "float32", "device": where.type,
        **({"peak_device_mb": torch.cuda.max_memory_allocated(where) / 2**20} if cuda else {}),
    }


if __name__ == "__main__":
    print(json.dumps(run(*json.loads(sys.argv[1]))))
