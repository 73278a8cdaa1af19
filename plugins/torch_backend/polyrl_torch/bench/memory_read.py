"""How fast the bench's threads read memory, for ``polyrl bench``'s generation floor.

Runs in a child process with the bench's thread count, as the matmul peak does. A decode step
streams every weight of the model once, so on a CPU whose threads read slowly generation is bound
by that reading as much as by the arithmetic (``polyrl.bench.memory_floor``). Sums a float32
buffer larger than the caches here (``MEGABYTES``), its pages touched before timing.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from polyrl.bench.memory_floor import read_rate

MEGABYTES = 512


def measure(threads: int, seconds: float = 1.0, megabytes: int = MEGABYTES) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    buffer = torch.ones(megabytes * 2**20 // 4)
    rate = read_rate(buffer.sum, buffer.numel() * 4, seconds)
    return {"read_gb_per_s": rate, "threads": threads, "buffer_mb": megabytes, "library": "torch " + torch.__version__}

if __name__ == "__main__":
    print(json.dumps(measure(int(json.loads(sys.argv[1])))))
