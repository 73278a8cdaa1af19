"""The machine's fp32 matmul peak as torch sees it, for ``polyrl bench``'s utilisation figures.

Runs in a child process with the bench's thread count. Square products of a few sizes; the best
rate is the peak a phase is compared with (what this CPU + torch's BLAS can reach at all).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def measure(threads: int, seconds_per_size: float = 1.0) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    rates = {}
    for n in (512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # warm-up: thread pool, packing buffers
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds_per_size:
            torch.mm(a, b)
            reps += 1
        rates[str(n)] = 2.0 * n**3 * reps / (time.perf_counter() - start) / 1e9
    return {"peak_gflops": max(rates.values()), "by_size_gflops": rates, "threads": threads,
            "library": "torch " + torch.__version__}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))))
