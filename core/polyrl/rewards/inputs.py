"""What a reward receives, read the same way by every built-in reward."""

from __future__ import annotations

from polyrl.types import Completion


def completion_text(completion: Completion | str) -> str:
    """The completion's text: rewards are called with ``Completion`` objects or, TRL-style, strings."""
    return completion if isinstance(completion, str) else completion.text
