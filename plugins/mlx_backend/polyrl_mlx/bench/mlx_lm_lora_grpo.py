"""mlx-lm-lora's GRPO on polyrl's bench workload, for ``polyrl bench --mlx-lm-lora`` (a child process).

The peer MLX users pick: its own loader (``mlx_lm_lora.utils.from_pretrained``, which adds mlx-lm's
LoRA layers) and its own training loop (``mlx_lm_lora.trainer.grpo_trainer.train_grpo``) on the
same model folder, prompts, group size, completion length, seed, thread count and LoRA settings
as ``polyrl.bench`` uses; beta = 0 (it then scores no reference model), temperature 1 with no
top-p/top-k, AdamW with polyrl's defaults, one optimizer step per generation round, float32
weights on polyrl's default device (``auto``: Metal on Apple silicon, the CPU where MLX has no GPU;
on the CPU float32 is the dtype polyrl's MLX backend trains in, the one OpenBLAS speeds up). OpenBLAS is
loaded before MLX exactly as polyrl-mlx loads it, so both sides call the same BLAS.

Where it differs and cannot be told otherwise: it has no gradient clipping (polyrl clips at 1.0);
it generates ``prompts`` sequences at a time (its KV-cache bound), not the whole group batch; it
differentiates the loss in ``prompts``-row micro-batches. mlx-lm-lora is a bench-only dependency
(``pip install 'polyrl-mlx[bench]'``).

Prints one JSON line: seconds per step and per phase (median over the steps after the first,
which pays for MLX's compiles; that one is ``first_step_s``), tokens/s, peak RSS, one step's
prompt/completion lengths, the losses, and how far training moved the weights it saved (proof
that it trained).

Phases are timed by wrapping the trainer module's own functions (mlx-lm-lora 5.10 names):
``generate_grpo`` (rollouts), ``_rollout_rewards`` (rewards and group advantages: "scoring"),
``_grpo_value_and_grad`` (the loss with its gradient: MLX computes forward and backward in one
evaluation, so they are one phase, "forward_backward") and the optimizer's ``update`` (AdamW, made
to evaluate inside the timing: MLX is lazy and would otherwise defer it to the step's end).
"""

from __future__ import annotations

import contextlib
import json
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs


class _NoStopTokenizer:
    """The tokenizer with no EOS ids, so generation runs to ``max_tokens`` (fixed lengths)."""

    eos_token_ids: tuple[int, ...] = ()

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextlib.contextmanager
def _replaced(module: Any, attrs: dict[str, Any]) -> Iterator[None]:
    """``module``'s attributes swapped for ``attrs`` while inside (restored after, even on error),
    so a caller running :func:`run` twice in one process times each run once."""
    saved = {name: getattr(module, name) for name in attrs}
    for name, value in attrs.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The chat template with a generation prompt, tokenized without added specials (as polyrl-mlx)."""
    hf = tokenizer._tokenizer
    text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return [int(i) for i in hf(text, add_special_tokens=False)["input_ids"]]


def run(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
        lora: bool, ignore_eos: bool = False, device: str | None = None, few_shot: int = 0) -> dict[str, Any]:
    from polyrl_mlx import blas
    from polyrl_mlx._mx import mx, optim  # OpenBLAS first, as the backend does

    import mlx_lm_lora
    import numpy as np
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.tuner.callbacks import TrainingCallback
    from mlx_lm_lora.trainer import grpo_trainer as grpo
    from mlx_lm_lora.utils import from_pretrained

    from polyrl.bench.workload import bench_prompts
    from polyrl.types import EngineConfig, LoraConfig, OptimizerConfig

    from polyrl_mlx.engine import _device

    blas.set_threads(threads)
    engine_defaults = EngineConfig(model=model)
    if device:
        engine_defaults = attrs.evolve(engine_defaults, device=device)
    # the device polyrl's bench loads its MLX engine on (``--device``, default ``auto``), so both
    # sides run on the same device whatever MLX's own default is
    mx.set_default_device(_device(engine_defaults.device))
    seed = engine_defaults.seed
    mx.random.seed(seed)  # LoRA's A matrices draw from the global generator (as in train.py)
    np.random.seed(seed)
    layers = int(json.loads((Path(model) / "config.json").read_text())["num_hidden_layers"])
    ours = LoraConfig()
    lora_config = ({"rank": ours.rank, "scale": ours.alpha / ours.rank, "dropout": ours.dropout,
                    "num_layers": layers} if lora else None)
    t0 = time.perf_counter()
    net, tokenizer, _ = from_pretrained(model=model, lora_config=lora_config)
    dtype = getattr(mx, engine_defaults.dtype)  # polyrl's bench trains in its engines' default dtype
    net.update(tree_map(lambda v: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v,
                        net.parameters()))
    mx.eval(net.parameters())
    load_s = time.perf_counter() - t0
    before = {k: mx.array(v) for k, v in tree_flatten(net.trainable_parameters())}

    rows: list[tuple[list[int], list[int], str, str]] = [(_prompt_ids(tokenizer, p), [], p[0]["content"], "") for p in bench_prompts(prompts, few_shot)]
    reward_rng = np.random.default_rng(seed)

    def bench_reward(prompts: list[str], completions: list[str], answer: list[str], types: Any,
                     **_: Any) -> list[float]:
        """Seeded random rewards: nonzero group advantages (as polyrl's bench draws them)."""
        return [float(x) for x in reward_rng.standard_normal(len(completions))]

    seconds: list[float] = []
    phases: list[dict[str, float]] = []
    current: dict[str, float] = {}
    losses: list[float] = []
    shapes: list[dict[str, list[int]]] = []
    tokens: list[int] = []
    step_start = [0.0]

    def timed(fn: Any, phase: str, first: bool = False) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            if first:
                current.clear()
                step_start[0] = t
            try:
                return fn(*args, **kwargs)
            finally:
                current[phase] = current.get(phase, 0.0) + time.perf_counter() - t
        return wrapper

    generate = grpo.generate_grpo

    def generate_and_record(*args: Any, **kwargs: Any) -> Any:
        completions, texts, indices = generate(*args, **kwargs)
        prompt_tokens = kwargs["prompt_tokens"]
        lens = [int(c.size) for c in completions]
        tokens.append(sum(lens))
        shapes.append({"prompt_lens": [len(prompt_tokens[i]) for i in indices], "completion_lens": lens,
                       "owners": [int(i) for i in indices]})
        return completions, texts, indices

    wrapped = {"generate_grpo": timed(generate_and_record, "generate", first=True),
               "_rollout_rewards": timed(grpo._rollout_rewards, "scoring"),
               "_grpo_value_and_grad": timed(grpo._grpo_value_and_grad, "forward_backward")}

    opt = OptimizerConfig()
    optimizer = optim.AdamW(learning_rate=opt.lr, betas=list(opt.betas), eps=opt.eps,
                            weight_decay=opt.weight_decay)
    update = optimizer.update

    def update_now(model_: Any, gradients: Any) -> None:
        update(model_, gradients)
        mx.eval(model_.parameters(), optimizer.state)

    optimizer.update = timed(update_now, "optimizer")

    class StepTimer(TrainingCallback):
        """Called once per step (steps_per_report=1), after the step's arrays are evaluated."""

        def on_train_loss_report(self, train_info: dict) -> None:
            seconds.append(time.perf_counter() - step_start[0])
            phases.append(dict(current))
            losses.append(float(train_info["train_loss"]))

    with tempfile.TemporaryDirectory(prefix="polyrl-bench-mlx-lm-lora-") as tmp, _replaced(grpo, wrapped):
        adapter_file = Path(tmp) / "adapters.safetensors"
        args = grpo.GRPOTrainingArgs(
            batch_size=prompts, iters=steps, steps_per_report=1, steps_per_eval=10**9,
            steps_per_save=10**9, adapter_file=str(adapter_file), max_seq_length=4096,
            max_completion_length=max_new_tokens, group_size=group_size, beta=0.0,
            epsilon=0.2, epsilon_high=0.2, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0,
            grpo_loss_type="grpo",  # the mean over sequences of token means: polyrl's default
        )
        grpo.train_grpo(model=net, ref_model=None, tokenizer=_NoStopTokenizer(tokenizer) if ignore_eos else tokenizer,
                        optimizer=optimizer, train_dataset=rows, val_dataset=None,
                        reward_funcs=[bench_reward], args=args, training_callback=StepTimer(),
                        end_answer_token="")
        saved = mx.load(str(adapter_file))
        moved = sum(float(mx.sum(mx.square(saved[k].astype(mx.float32) - v.astype(mx.float32))).item())
                    for k, v in before.items() if k in saved)

    first = 1 if len(seconds) > 1 else 0

    def median(key: str) -> float | None:
        values = [p[key] for p in phases[first:] if key in p]
        return float(np.median(values)) if values else None

    step_s = float(np.median(seconds[first:]))
    gen_s = median("generate")
    fb_s, opt_s = median("forward_backward"), median("optimizer")
    step_tokens = float(np.median(tokens[first:]))
    return {
        "backend": "mlx-lm-lora", "load_s": load_s, "step_s": step_s, "generate_s": gen_s,
        "scoring_s": median("scoring"), "forward_backward_s": fb_s, "optimizer_s": opt_s,
        "train_step_s": step_s - gen_s if gen_s is not None else None,
        "tokens_per_step": step_tokens,
        "generate_tokens_per_s": step_tokens / gen_s if gen_s else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "shapes": shapes[len(shapes) // 2] if shapes else None,
        "steps_timed": len(seconds) - first, "step_s_each": [float(x) for x in seconds[first:]],
        "first_step_s": seconds[0] if seconds else None, "losses": losses,
        "trainable_params": int(sum(v.size for v in before.values())),
        "saved_weights_moved_l2": moved ** 0.5, "ignore_eos": ignore_eos, "grad_clip": None,
        "device": str(mx.default_device()), "dtype": engine_defaults.dtype, "blas": blas.blas_status(), "mlx_lm_lora_version": mlx_lm_lora.__version__,
    }


if __name__ == "__main__":
    print(json.dumps(run(*json.loads(sys.argv[1]))))
