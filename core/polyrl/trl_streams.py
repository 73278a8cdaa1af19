"""TRL's streaming ``train_dataset`` (a 🤗 ``IterableDataset``) as the rows polyrl trains on.

Why: TRL 1.16 trains on an ``IterableDataset`` when ``max_steps`` is set, reading it in the order
``GRPOTrainer.get_train_dataloader`` streams it (``IterableDataset.shuffle(seed=args.seed)``'s
buffered shuffle under ``shuffle_dataset``, then one generation batch of prompts after another).
polyrl reads its prompts whole, so the run's prompts are taken from the stream in that order, as
many as ``max_steps`` consumes, and trained unshuffled: the same prompts in the same steps. A
stream that ends first is refused: TRL would start it again, reshuffled for its next epoch.
"""

from __future__ import annotations

import itertools
from typing import Any

from polyrl.errors import ConfigError


def is_stream(dataset: Any) -> bool:
    """A 🤗 ``IterableDataset`` (not imported here: datasets may be absent)."""
    return type(dataset).__name__ == "IterableDataset"


def stream_rows(dataset: Any, args: Any, steps: int, prompts_per_step: int) -> list[dict[str, Any]]:
    """The ``steps`` x ``prompts_per_step`` rows TRL's training reads from the stream ``dataset``
    under ``args`` (a ``trl.GRPOConfig``), in its order; one ConfigError where TRL's run would
    not be these rows."""
    if not getattr(args, "max_steps", -1) > 0:
        raise ConfigError("train_dataset is an IterableDataset, whose length the run cannot know without max_steps "
                          "(TRL needs it too)", field="train_dataset",
                          fix="set GRPOConfig(max_steps=N), or pass a datasets.Dataset")
    if getattr(args, "shuffle_dataset", True):
        dataset = dataset.shuffle(seed=args.seed)  # TRL's get_train_dataloader: the buffered shuffle
    needed = steps * prompts_per_step
    rows = [dict(row) for row in itertools.islice(iter(dataset), needed)]
    if len(rows) < needed:
        raise ConfigError(f"train_dataset is an IterableDataset of {len(rows)} rows, and max_steps = {args.max_steps} "
                          f"reads {needed} prompts ({steps} steps of {prompts_per_step}); TRL would stream it again, "
                          "reshuffled for a next epoch, which polyrl does not reproduce", field="train_dataset",
                          fix=f"lower max_steps to what {len(rows)} prompts give, or pass a datasets.Dataset "
                              "(Dataset.from_list(list(stream)))")
    return rows
