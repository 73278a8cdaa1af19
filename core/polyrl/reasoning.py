"""Where a completion's answer starts when the model reasons first (``<think>...</think>``).

One rule for every reader of a turn: the rewards read the answer after the last ``</think>``
(``polyrl.rewards.builtin``), and the episode runner reads tool calls there too
(``polyrl.agents.parsing``), so a call or an answer the model only drafted while reasoning is
neither run nor scored.
"""

from __future__ import annotations

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def final_part(text: str) -> str | None:
    """The part of a completion that holds its answer: the text after its last ``</think>`` (all
    of it when there is none), or None when a ``<think>`` is left open there (reasoning cut off
    before any answer). As TRL's ``reasoning_accuracy_reward``, which splits on ``</think>``, except
    that a completion with no think tags at all is read whole (a model that does not reason)."""
    _, closed, rest = text.rpartition(THINK_CLOSE)
    rest = rest if closed else text
    return None if THINK_OPEN in rest else rest
