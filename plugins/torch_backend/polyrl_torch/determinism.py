"""``backends.options.deterministic``: ask torch for run-to-run identical results on a GPU.

Why a switch: on the CPU polyrl's runs repeat bit for bit with one seed (tests/test_determinism.py),
but on a CUDA GPU they did not (README "On a GPU": six repeats of one gradient gave six digests),
most likely because CUDA's backward kernels add with atomics in whatever order threads finish.
torch has deterministic variants of those kernels, slower, chosen only when asked; cuBLAS repeats
its results only with a fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, read when cuBLAS first starts,
so this must run before the process's first CUDA matmul). The settings are per process: every engine
loaded after this one gets them too. An op with no deterministic CUDA variant then fails naming
itself, rather than drifting silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from polyrl.backend_kit.options import bool_option

#: cuBLAS's documented setting for reproducible results (a fixed workspace per handle).
CUBLAS_WORKSPACE = ":4096:8"


def requested(options: Mapping[str, Any]) -> bool:
    """``backends.options.deterministic`` (default off), checked to be a boolean."""
    return bool_option(options, "deterministic", False,
                       fix="write deterministic = true for run-to-run identical GPU results (slower), or remove it")


def enable() -> None:
    """Deterministic kernels for the rest of the process (CUDA and CPU alike)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
