"""A ``RunObserver`` stand-in for trainer tests: it asks one thing after one step and passes on
every other event, so a test states only what its observer asks, not the whole protocol."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polyrl.run_observer import StepAsk


class AskAfterStep:
    """Answers ``ask`` to ``step_end`` of step ``step`` (an early stop, an epoch's end, a save)
    and nothing elsewhere: no evaluation asked, no state kept, no checkpoint protected."""

    def __init__(self, step: int, ask: StepAsk) -> None:
        self.step = step
        self.ask = ask

    def run_begin(self, trainer: Any) -> None: ...
    def step_begin(self, step: int) -> None: ...
    def evaluated(self, phase: str, step: int, metrics: Mapping[str, Any]) -> None: ...

    def step_trained(self, metrics: Mapping[str, Any]) -> bool:
        return False

    def step_end(self, metrics: Mapping[str, Any]) -> StepAsk:
        return self.ask if metrics["step"] == self.step else StepAsk()

    def step_evaluated(self, metrics: Mapping[str, Any]) -> StepAsk:
        return StepAsk()

    def saved(self, step: int, path: Path, asked: bool = True) -> StepAsk:
        return StepAsk()

    def checkpoint_state(self) -> Mapping[str, Any]:
        return {}

    def protected_checkpoint(self) -> Path | None:
        return None
