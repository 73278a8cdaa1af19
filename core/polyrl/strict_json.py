"""Strict JSON for every file polyrl writes: NaN and infinities become ``null``.

Why: ``json.dumps`` writes bare ``NaN``/``Infinity`` tokens by default, which are not JSON; jq,
JavaScript and most readers then fail on the whole file. A metric that is not a number (a skipped
step's loss) is honestly "no value", so it is written as ``null``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def sanitize(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None and numpy scalars/arrays made plain."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    if isinstance(value, np.generic):
        return sanitize(value.item())
    if isinstance(value, np.ndarray):
        return sanitize(value.tolist())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that can only produce strict JSON (``allow_nan=False`` after sanitising)."""
    return json.dumps(sanitize(value), allow_nan=False, **kwargs)
