"""The one place this package imports MLX: OpenBLAS is preloaded first (see ``blas.py``).

Every module that needs MLX does ``from polyrl_mlx._mx import mx, nn, optim``.
"""

from __future__ import annotations

from polyrl_mlx import blas

blas.preload()

import mlx.core as mx  # noqa: E402  (must follow the preload)
import mlx.nn as nn  # noqa: E402
import mlx.optimizers as optim  # noqa: E402

__all__ = ["mx", "nn", "optim"]
