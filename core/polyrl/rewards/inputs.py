"""What a reward receives, read the same way by every built-in reward."""

from __future__ import annotations

from polyrl.reasoning import final_part
from polyrl.types import Completion


def completion_text(completion: Completion | str) -> str:
    """The completion's text: rewards are called with ``Completion`` objects or, TRL-style, strings."""
    return completion if isinstance(completion, str) else completion.text


def reasoning_open(completion: Completion | str) -> bool:
    """Its prompt opened the ``<think>`` (``Completion.reasoning_open``); a string (TRL-style) says nothing."""
    return not isinstance(completion, str) and completion.reasoning_open


def answer_part(completion: Completion | str) -> str | None:
    """The completion's answer (``polyrl.reasoning.final_part``), None while it is still reasoning:
    one whose prompt opened the ``<think>`` is all reasoning until its ``</think>``."""
    return final_part(completion_text(completion), opened=reasoning_open(completion))
