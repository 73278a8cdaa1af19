"""``train_step`` without writing any RL loss: polyrl's numpy reference computes the loss and its
gradient with respect to each token's log-prob (``policy_loss_grad``); backpropagating
``sum(logp * that gradient)`` through the model then gives exactly the reference loss's gradient
for every objective polyrl has (GRPO, DAPO, GSPO, CISPO, KL terms, masks...).

It costs one extra forward (a no-grad pass for the log-probs the reference needs, then a pass with
gradients per micro-batch); a fast backend writes the loss in its own tensors instead and lets the
conformance kit prove it equal to the reference.
"""

from __future__ import annotations

import numpy as np
import torch

from polyrl.algorithms.objective import Objective
from polyrl.algorithms.reference import policy_loss, policy_loss_grad
from polyrl.errors import ConfigError
from polyrl.schedules import lr_at
from polyrl.types import StepMetrics, TrainBatch

from polyrl_example.engine import ExampleEngine


def train_step(engine: ExampleEngine, batch: TrainBatch, objective: Objective) -> StepMetrics:
    """One AdamW step on the reference loss of ``batch``."""
    if engine.optimizer is None:
        raise ConfigError(f"a {engine.config.role!r} engine does not train", field="role")
    if objective.needs_entropy:  # an objective this backend cannot compute is refused, never ignored
        raise ConfigError("the example backend computes no token entropies", field="algorithm.entropy_coef",
                          fix="set entropy_coef = 0 and top_entropy_quantile = 1, or train with torch")
    seqs = batch.sequences
    with torch.no_grad():
        current = [lp.numpy().astype(np.float64) for lp in engine.token_logprobs(seqs, batch.temperature)]
    given = {"old_logprobs": batch.old_logprobs, "ref_logprobs": batch.ref_logprobs,
             "sampler_logprobs": batch.sampler_logprobs, "masks": batch.masks,
             # what the aggregation divides by: rows the trainer left out may count (TrainBatch docs)
             "num_sequences": batch.loss_counts[0], "num_tokens": batch.loss_counts[1]}
    advantages = batch.advantages.tolist()
    loss, metrics = policy_loss(current, advantages, objective, **given)
    grads = policy_loss_grad(current, advantages, objective, **given)  # d loss / d logp; 0 where masked

    engine.optimizer.zero_grad()
    size = engine.config.optimizer.micro_batch_size or len(seqs)
    for start in range(0, len(seqs), size):  # micro-batches accumulate: same step, less memory
        chunk = slice(start, start + size)
        logps = engine.token_logprobs(seqs[chunk], batch.temperature)
        surrogate = sum((lp * torch.as_tensor(g, dtype=lp.dtype)).sum() for lp, g in zip(logps, grads[chunk]))
        if isinstance(surrogate, torch.Tensor):
            surrogate.backward()
    max_norm = engine.config.optimizer.max_grad_norm
    norm = float(torch.nn.utils.clip_grad_norm_(engine.model.parameters(),
                                                float("inf") if max_norm is None else max_norm))
    if not (np.isfinite(loss) and np.isfinite(norm)):  # weights and AdamW state stay as they were
        engine.optimizer.zero_grad()
        return StepMetrics(loss=float(loss), grad_norm=norm, skipped=True, tokens=batch.num_tokens)

    lr = lr_at(engine.config.optimizer, _applied_updates(engine.optimizer))
    for group in engine.optimizer.param_groups:
        group["lr"] = lr
    engine.optimizer.step()
    extra = {k: float(v) for k, v in metrics.items() if k not in ("kl", "clip_fraction", "tokens")}
    return StepMetrics(loss=float(loss), grad_norm=norm, kl=metrics["kl"], clip_fraction=metrics["clip_fraction"],
                       tokens=int(metrics["tokens"]), extra={**extra, "lr": lr})


def _applied_updates(optimizer: torch.optim.Optimizer) -> int:
    """AdamW's own step count: it is in the optimizer state a checkpoint restores, so a resumed
    run continues the lr schedule exactly."""
    first = optimizer.param_groups[0]["params"][0]
    step = optimizer.state.get(first, {}).get("step", 0)
    return int(step)
