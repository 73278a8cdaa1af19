"""transformers' ``model.generate`` on polyrl's bench prompts, for ``polyrl bench --hf-generate``.

The baseline the generation goal is stated against ("MAX at least 2x HF generate"): the same model
folder, chat-templated prompts, ``group_size`` samples per prompt (``num_return_sequences``, so
each prompt is prefilled once per sample, as HF does), completion length, temperature 1 with no
top-k/top-p truncation, thread count and device as the backends' runs; its weights are float32, or
the ``compute_dtype`` polyrl's sampler runs in (bfloat16 weights: HF's fastest way to sample in it). A child process of the
bench; prints one JSON line: median seconds per call over the steps, tokens/s, peak RSS.
``ignore_eos`` (fixed lengths) sets ``min_new_tokens = max_new_tokens``: EOS is masked until then.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any


def _generated_lengths(new_tokens: Any, eos_ids: set[int]) -> list[int]:
    """Tokens each row really sampled: up to and including its first EOS (HF pads after it)."""
    lengths = []
    for row in new_tokens.tolist():
        stop = next((j for j, t in enumerate(row) if t in eos_ids), None)
        lengths.append(len(row) if stop is None else stop + 1)
    return lengths


def run(model: str, prompts: int, group_size: int, max_new_tokens: int, threads: int,
        steps: int, ignore_eos: bool = False, compute_dtype: str | None = None,
        device: str = "cpu", few_shot: int = 0) -> dict[str, Any]:
    import numpy as np
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyrl.bench.workload import bench_prompts
    from polyrl_torch.devices import resolve_device, wait_for_device

    torch.set_num_threads(threads)
    where = resolve_device(device)
    dtype = getattr(torch, compute_dtype or "float32")

    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(where).eval()
    load_s = time.perf_counter() - t0
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
             for p in bench_prompts(prompts, few_shot)]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(where)
    eos = lm.generation_config.eos_token_id
    eos_ids = {int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    fixed_length = {"min_new_tokens": max_new_tokens} if ignore_eos else {}
    seconds, tokens, lengths = [], [], []
    for step in range(steps):
        torch.manual_seed(step)
        wait_for_device(where)
        t = time.perf_counter()
        with torch.inference_mode():
            out = lm.generate(**inputs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              num_return_sequences=group_size, max_new_tokens=max_new_tokens,
                              pad_token_id=pad_id, **fixed_length)
        wait_for_device(where)
        seconds.append(time.perf_counter() - t)
        lengths = _generated_lengths(out[:, inputs["input_ids"].shape[1]:], eos_ids)
        tokens.append(sum(lengths))
    generate_s = float(np.median(seconds))
    return {
        "backend": "hf-generate", "load_s": load_s, "generate_s": generate_s,
        "tokens_per_step": float(np.median(tokens)),
        "generate_tokens_per_s": float(np.median([n / s for n, s in zip(tokens, seconds)])),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "prompt_tokens_padded": int(inputs["input_ids"].numel()), "completion_lens": lengths,
        "transformers_version": transformers.__version__, "device": where.type, "dtype": str(dtype).removeprefix("torch."),
        **({"peak_device_mb": torch.cuda.max_memory_allocated(where) / 2**20} if where.type == "cuda" else {}),
    }


if __name__ == "__main__":
    print(json.dumps(run(*json.loads(sys.argv[1]))))
