"""The machine's matmul peak as torch sees it, for ``polyrl bench``'s utilisation figures.

Runs in a child process with the bench's thread count. Square products of a few sizes; the best
rate is the peak a phase is compared with (what this CPU + torch's BLAS can reach at all). With
``dtype`` bfloat16 (a ``--compute-dtype bfloat16`` bench) the products are bfloat16: a mixed
precision run's utilisation is against the peak of the precision its matmuls run in.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def measure(threads: int, seconds_per_size: float = 1.0, dtype: str = "float32") -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for n in (512, 1024, 2048):
        a, b = torch.randn(n, n, dtype=getattr(torch, dtype)), torch.randn(n, n, dtype=getattr(torch, dtype))
        torch.mm(a, b)  # warm-up: thread pool, packing buffers
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds_per_size:
            torch.mm(a, b)
            reps += 1
        rates[str(n)] = 2.0 * n**3 * reps / (time.perf_counter() - start) / 1e9
    return {"peak_gflops": max(rates.values()), "by_size_gflops": rates, "threads": threads,
            "dtype": dtype, "library": "torch " + torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}  # the ISA ATen's kernels use here


if __name__ == "__main__":
    args = json.loads(sys.argv[1])  # threads, or [threads, dtype]
    threads, dtype = (args, "float32") if isinstance(args, int) else args
    print(json.dumps(measure(int(threads), dtype=dtype)))
