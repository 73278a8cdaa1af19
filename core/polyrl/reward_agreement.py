"""Ranks agree on whether a step's rewards (or an evaluation's) failed.

Why: under a launcher each rank scores its own shard, and a reward that raises, times out or is
abandoned on a stop request does so on one rank only (it depends on the prompts, the rank, a
flaky service). That rank used to leave the step while its peers waited for it in the next
collective (gloo's default timeout is 30 minutes, and torchrun only tears the job down once the
failing rank's process is gone). Instead every rank sends its outcome in one small gather right
after scoring, and all ranks raise the same error together: the step is not taken anywhere, and
the state before it can be checkpointed collectively, as in one process.
"""

from __future__ import annotations

from collections.abc import Sequence

from polyrl.errors import RewardError
from polyrl.rewards.guard import RewardCancelled

#: What a rank sends: None (scored), or (kind, message) with kind "error" or "cancelled".
Outcome = tuple[str, str] | None


def reward_outcome(failed: RewardError | RewardCancelled | None) -> Outcome:
    """This rank's outcome, small and picklable (an exception object may not be)."""
    if failed is None:
        return None
    return ("cancelled" if isinstance(failed, RewardCancelled) else "error", str(failed))


def agreed_reward_failure(outcomes: Sequence[object], rank: int) -> RewardError | RewardCancelled | None:
    """The error every rank raises, given every rank's outcome in rank order; None when all scored.

    An error anywhere beats a cancellation (it is the cause to report and fix); the lowest failing
    rank's message is used, prefixed with that rank, so every rank prints the same line."""
    failures = [(r, o) for r, o in enumerate(outcomes) if isinstance(o, tuple) and len(o) == 2]
    if not failures:
        return None
    errors = [(r, o) for r, o in failures if o[0] == "error"]
    where, (kind, message) = (errors or failures)[0]
    text = f"on rank {where} of {len(outcomes)} (every rank stopped at this step): {message}"
    if kind == "error":
        return RewardError(text)
    return RewardCancelled(text)
