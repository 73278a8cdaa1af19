"""The machine's matmul peak as torch sees it, for ``polyrl bench``'s utilisation figures.

Runs in a child process with the bench's thread count. Square products of a few sizes; the best
rate is the peak a phase is compared with (what this device + torch's BLAS can reach at all). With
``dtype`` bfloat16 (a ``--compute-dtype bfloat16`` bench) the products are bfloat16: a mixed
precision run's utilisation is against the peak of the precision its matmuls run in. On CUDA the
sizes are larger (a GPU needs them to fill its units), the clock is read after a synchronize, and
float32 products run as torch leaves them by default (full float32, no TF32), as polyrl's do.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (2048, 4096, 8192)


def measure(threads: int, seconds_per_size: float = 1.0, dtype: str = "float32",
            device: str = "cpu") -> dict[str, Any]:
    import torch

    from polyrl.errors import ConfigError
    from polyrl_torch.devices import resolve_device, wait_for_device

    torch.set_num_threads(threads)
    try:
        where = resolve_device(device)
    except ConfigError as exc:
        return {"error": f"torch {torch.__version__}: {exc.message}", "device": device}
    cuda = where.type == "cuda"
    if where.type not in ("cpu", "cuda"):
        return {"error": f"the matmul peak is measured on cpu or cuda, not {device!r}", "device": device}

    rates = {}
    for n in CUDA_SIZES if cuda else CPU_SIZES:
        gen = torch.Generator(device=where).manual_seed(n)
        a = torch.randn(n, n, dtype=getattr(torch, dtype), device=where, generator=gen)
        b = torch.randn(n, n, dtype=getattr(torch, dtype), device=where, generator=gen)
        torch.mm(a, b)  # warm-up: thread pool, packing buffers, the GPU's kernel choice
        wait_for_device(where)
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds_per_size:
            for _ in range(10 if cuda else 1):  # queue several products between reads of the clock
                torch.mm(a, b)
                reps += 1
            wait_for_device(where)
        rates[str(n)] = 2.0 * n**3 * reps / (time.perf_counter() - start) / 1e9
    out = {"peak_gflops": max(rates.values()), "by_size_gflops": rates, "threads": threads,
           "dtype": dtype, "library": "torch " + torch.__version__, "device": where.type,
           "cpu_capability": torch.backends.cpu.get_cpu_capability()}  # the ISA ATen's kernels use here
    if cuda:
        out["device_name"] = torch.cuda.get_device_name(where)
        out["cuda_version"] = torch.version.cuda
        out["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    return out


if __name__ == "__main__":
    args = json.loads(sys.argv[1])  # threads, [threads, dtype] or [threads, dtype, device]
    threads, dtype, device = (args, "float32", "cpu") if isinstance(args, int) else (list(args) + ["cpu"])[:3]
    print(json.dumps(measure(int(threads), dtype=dtype, device=device)))
