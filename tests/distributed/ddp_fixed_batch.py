"""Run by tests/test_distributed.py, alone or under `torchrun --nproc_per_node 2`.

Trains the tiny model for a few steps on ONE fixed global batch (the same sequences and
advantages every step); each rank takes its shard (sequences i with i % world == rank). Rank 0
writes the per-step global losses, grad norms, a weight checksum and a greedy completion to
``--out`` as JSON. With the same global batch, one process and two (DDP-style gradient sum or
FSDP2 shards) must give the same loss curve and the same weights. ``--save`` checkpoints at the
end (every rank takes part), ``--resume`` starts from a checkpoint (written by any world size).
"""

from __future__ import annotations

import argparse
import json
import os

import attrs
import numpy as np
import torch

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.engine import Engine
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams, TokenSequence, TrainBatch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--aggregation", default="seq_mean_token_mean")
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu: gloo ranks; cuda: NCCL, one GPU per rank")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--save")
    parser.add_argument("--resume")
    parser.add_argument("--masks", action="store_true",
                        help="episode loss masks: the global token count must be of masked-in tokens")
    parser.add_argument("--normaliser", action="store_true",
                        help="rows left out of the batch count (TrainBatch.normaliser_*): 3 sequences and 7 "
                             "tokens more over the global batch, split unevenly over the ranks")
    parser.add_argument("--masked", action="store_true", help="episode-style loss masks (every third token inserted)")
    parser.add_argument("--micro", type=int, default=2, help="optimizer.micro_batch_size")
    parser.add_argument("--router", type=float, help="algorithm.router_aux_loss_coef (a Mixture-of-Experts model)")
    args = parser.parse_args()
    torch.manual_seed(0)
    engine = Engine(get_registry(), "torch", EngineConfig(
        model=args.model, role="train", threads=1, seed=0, options={"fsdp": args.fsdp}, device=args.device,
        optimizer=OptimizerConfig(lr=1e-2, max_grad_norm=1.0, micro_batch_size=args.micro)))
    if args.resume:
        engine.load_checkpoint(args.resume)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    rng = np.random.default_rng(0)
    sequences = [TokenSequence(rng.integers(5, 200, size=4), rng.integers(5, 200, size=int(rng.integers(2, 9))))
                 for _ in range(5)]  # uneven completion lengths: token-level normalisers matter
    if args.masked:  # the ranks' trained-token counts differ from their completion lengths
        sequences = [TokenSequence(s.prompt_ids, s.completion_ids, np.arange(len(s.completion_ids)) % 3 != 1)
                     for s in sequences]
    advantages = rng.normal(size=5)
    if args.masks:  # every third token sampled, the rest inserted: ranks keep uneven counts
        masks = [np.arange(len(s.completion_ids)) % 3 == 0 for s in sequences]
        sequences = [TokenSequence(s.prompt_ids, s.completion_ids, m) for s, m in zip(sequences, masks)]
    # 5 rows in micro-batches of 2: rank 0 runs two (3 rows), rank 1 one (2 rows); FSDP pads rank 1
    mine = [i for i in range(5) if i % world == rank]
    shard = [sequences[i] for i in mine]
    # the rollout's log-probs as "old" (as with num_iterations > 1): the ratio, hence the loss,
    # moves as the weights move; a KL term against the same values adds its gradient too
    start = engine.logprobs(shard, 1.0)
    # a sampler a little off the trainer: the mismatch metrics must sum over ranks
    sampler = [lp + 0.05 * np.sin(np.arange(len(lp), dtype=np.float32)) for lp in start]
    if 0 in mine:  # one token the sampler could not score: left out of the gap on every world size
        sampler[mine.index(0)][0] = np.nan
    batch = TrainBatch(shard, advantages[mine], old_logprobs=start, ref_logprobs=start, temperature=1.0,
                       sampler_logprobs=sampler)
    if args.normaliser:  # every rank's part of the left-out rows; train_step sums them over ranks
        extra_seqs, extra_tokens = (3, 7) if world == 1 else ((1, 3), (2, 4))[rank]
        batch = attrs.evolve(batch, normaliser_sequences=len(shard) + extra_seqs,
                             normaliser_tokens=batch.num_tokens + extra_tokens)
    # a correction whose cap binds on some tokens: its weights' extremes are reduced over ranks
    objective = AlgorithmConfig.preset("grpo", loss_aggregation=args.aggregation, beta=0.1,
                                       mismatch_correction="tis", mismatch_cap=1.02,
                                       router_aux_loss_coef=args.router).objective(8)
    reference = None
    if args.masks and world == 1:  # the numpy reference on the global batch, before any step
        from polyrl.algorithms.reference import policy_loss

        counts = ({"num_sequences": 5 + 3, "num_tokens": int(sum(s.loss_mask.sum() for s in sequences)) + 7}
                  if args.normaliser else {})
        reference = policy_loss(start, advantages, objective, start, start, sampler,
                                masks=[s.loss_mask for s in sequences], **counts)[0]
    steps = [engine.train_step(batch, objective) for _ in range(args.steps)]
    weights = engine.export_weights()
    checksum = float(sum(np.abs(w).astype(np.float64).sum() for w in weights.values()))
    # ranks decode different lengths (no lock-step) from the same weights
    tokens = engine.generate(["12 + 7 ="], SamplingParams(max_new_tokens=3 + 5 * rank, temperature=0.0))
    if args.save:  # every rank takes part (FSDP gathers its shards); rank 0 writes
        engine.save_checkpoint(args.save)
    if rank == 0:
        with open(args.out, "w") as fh:
            json.dump({"losses": [m.loss for m in steps], "grad_norms": [m.grad_norm for m in steps],
                       "checksum": checksum, "world": world, "device": str(engine.raw.device),
                       "process_group": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
                       "mismatch_abs": [m.extra.get("mismatch_abs") for m in steps],
                       "sampling": [[m.extra.get(k) for k in ("mismatch_abs_max", "mismatch_unscored",
                                                              "mismatch_ratio_min", "mismatch_ratio_mean",
                                                              "mismatch_ratio_max")] for m in steps],
                       "entropy": [m.extra.get("entropy") for m in steps],
                       "aux_loss": [m.extra.get("aux_loss") for m in steps],
                       "tokens": [m.tokens for m in steps], "reference_loss": reference,
                       "completion_tokens": sum(len(s.completion_ids) for s in sequences),
                       "clip_high_fraction": [m.extra.get("clip_high_fraction") for m in steps],
                       "clip_extremes": [[m.extra.get("clip_low_min"), m.extra.get("clip_high_max")] for m in steps],
                       "generated": [int(t) for t in tokens[0].completion_ids]}, fh)


if __name__ == "__main__":
    main()
