"""Each turn an episode trainer generates, recorded as token ids, for tests of the glue between turns."""

from __future__ import annotations

from typing import Any

import numpy as np

#: One generate call of the episodes: every prompt's ids, every completion's ids.
Turn = tuple[list[np.ndarray], list[np.ndarray]]


def recorded_turns(trainer: Any) -> list[Turn]:
    """The turns ``trainer``'s episodes generate from now on (its own ``generate``, kept as it is)."""
    calls: list[Turn] = []
    generate = trainer.episodes.generate

    def record(prompts, sampling):
        out = generate(prompts, sampling)
        calls.append(([np.asarray(p.ids) for p in prompts], [c.completion_ids for c in out]))
        return out

    trainer.episodes.generate = record
    return calls
