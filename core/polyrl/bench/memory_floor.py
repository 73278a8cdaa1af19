"""Generation's floor from memory as well as arithmetic: why its MFU can stay low on some CPUs.

A sampler's prefill and each decode step multiply the batch's rows by every weight of the model
once, so generating ``n`` tokens streams the weights ``n`` times. With few rows each weight is used
for few products after being read, and where a CPU thread reads slowly (this project's CPUs differ
several-fold there) it spends as long streaming as multiplying. Two bounds follow, the
same for every framework on the workload: streaming hidden behind the arithmetic (``overlapped``:
the slower of the two) and the two taking turns (``taking_turns``: their sum, what a matmul that
does not prefetch ahead gets). Their ratios to the arithmetic alone are the generation MFU each
allows; a measured generation MFU near ``mfu_taking_turns`` says the limit is the memory, not the
framework.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from polyrl.bench.flops import ModelShape

#: bytes a weight takes in the precision the sampler's matmuls read (the workload's minimum)
WEIGHT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def read_rate(sum_once: Callable[[], object], nbytes: int, seconds: float = 1.0) -> float:
    """GB/s of ``sum_once`` (a sum over a buffer of ``nbytes`` larger than the caches), repeated for
    ``seconds`` after one untimed call that faults its pages in and starts any thread pool."""
    sum_once()
    count, start = 0, time.perf_counter()
    while count == 0 or time.perf_counter() - start < seconds:
        sum_once()
        count += 1
    return nbytes * count / (time.perf_counter() - start) / 1e9


def weight_passes(completion_lens: Sequence[int]) -> int:
    """Times one generation streams the weights: the prefill (the first token) and one decode step
    for each later token of the longest completion (rows that finished early ride along)."""
    return max(completion_lens, default=0)


def generation_floor(shape: ModelShape, completion_lens: Sequence[int], generate_gflop: float, peak_gflops: float,
                     read_gb_per_s: float, dtype: str = "float32") -> dict[str, Any]:
    """The two bounds on generation's time (seconds), the weights it streams (GB) and the MFU each bound allows."""
    weights = shape.layers * shape.layer_params + shape.hidden * shape.vocab
    stream_gb = weight_passes(completion_lens) * weights * WEIGHT_BYTES.get(dtype, 4) / 1e9
    arithmetic_s, stream_s = generate_gflop / peak_gflops, stream_gb / read_gb_per_s
    overlapped_s, turns_s = max(arithmetic_s, stream_s), arithmetic_s + stream_s
    return {"weight_passes": weight_passes(completion_lens), "stream_gb": stream_gb, "read_gb_per_s": read_gb_per_s,
            "arithmetic_s": arithmetic_s, "stream_s": stream_s, "overlapped_s": overlapped_s,
            "taking_turns_s": turns_s, "mfu_overlapped": arithmetic_s / overlapped_s,
            "mfu_taking_turns": arithmetic_s / turns_s, "dtype": dtype}
