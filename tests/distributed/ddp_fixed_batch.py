"""Run by tests/test_distributed.py, alone or under `torchrun --nproc_per_node 2`.

Trains the tiny model for a few steps on ONE fixed global batch (the same sequences and
advantages every step); each rank takes its shard (sequences i with i % world == rank). Rank 0
writes the per-step global losses and a weight checksum to argv[2] as JSON. With the same global
batch, one process and two must give the same loss curve and the same weights.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, TokenSequence, TrainBatch


def main() -> None:
    model, out = sys.argv[1], sys.argv[2]
    aggregation = sys.argv[3] if len(sys.argv) > 3 else "seq_mean_token_mean"
    torch.manual_seed(0)
    engine = Engine(get_registry(), "torch", EngineConfig(
        model=model, role="train", threads=1, seed=0, optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=1.0)))
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    rng = np.random.default_rng(0)
    sequences = [TokenSequence(rng.integers(5, 200, size=4), rng.integers(5, 200, size=int(rng.integers(2, 9))))
                 for _ in range(8)]  # uneven completion lengths: token-level normalisers matter
    advantages = rng.normal(size=8)
    mine = [i for i in range(8) if i % world == rank]
    shard = [sequences[i] for i in mine]
    # the rollout's log-probs as "old" (as with num_iterations > 1): the ratio, hence the loss,
    # moves as the weights move; a KL term against the same values adds its gradient too
    start = engine.logprobs(shard, 1.0)
    batch = TrainBatch(shard, advantages[mine], old_logprobs=start, ref_logprobs=start, temperature=1.0)
    objective = AlgorithmConfig.preset("grpo", loss_aggregation=aggregation, beta=0.1).objective(8)
    losses = [engine.train_step(batch, objective).loss for _ in range(4)]
    weights = engine.export_weights()
    checksum = float(sum(np.abs(w).astype(np.float64).sum() for w in weights.values()))
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"losses": losses, "checksum": checksum, "world": world}, fh)


if __name__ == "__main__":
    main()
