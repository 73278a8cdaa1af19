"""``RunObserver``: code that watches a run from inside its process and may ask it to save or stop.

Why not a tracker: trackers only receive metrics (rank 0, on threads of their own, dropped when they
fail, since a dashboard must never cost a run). An observer is the user's own code steering the run
(``polyrl.trl``'s transformers callbacks: early stopping, a checkpoint at a step they choose), so it
runs on every rank, in the training loop's thread, between steps, and what it raises ends the run
(the checkpoints already written stay as they were).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, Protocol

import attrs


@attrs.frozen
class StepAsk:
    """What the observers asked after a step: a checkpoint now, the end of the run (``why``: who asked),
    the end of the epoch (``epoch_stop``: the next step's prompts start the dataset's next epoch).
    ``failed``: the one-line error of the user's code on this rank, which under a launcher is raised
    on every rank once they agree (one rank raising alone would leave its peers in a collective)."""

    save: bool = False
    stop: bool = False
    why: str = ""
    failed: str = ""
    epoch_stop: bool = False
    #: no checkpoint at this step though ``train.checkpoint_every`` has one due (``checkpoint_due``):
    #: a transformers callback cleared ``control.should_save`` there, as it cancels a ``save_steps``
    #: checkpoint on TRL's trainer; ``save`` asked by anyone wins; the run's last checkpoint is
    #: written whatever it says (a resume and the exported model need it)
    cancel_save: bool = False
    #: evaluate the step's weights now, after its callbacks (and its checkpoint where one was
    #: written), its numbers added to the step's line (``RunObserver.step_evaluated``): transformers
    #: evaluates an ``eval_strategy`` "epoch" step after ``on_save`` and ``on_epoch_end``, whose
    #: ``control.should_evaluate`` decides it. Single process only: under a launcher it is ignored
    evaluate: bool = False

    def __or__(self, other: StepAsk) -> StepAsk:
        return StepAsk(save=self.save or other.save, stop=self.stop or other.stop,
                       why="; ".join(dict.fromkeys(w for w in (self.why, other.why) if w)), failed=self.failed or other.failed,
                       epoch_stop=self.epoch_stop or other.epoch_stop, cancel_save=self.cancel_save or other.cancel_save,
                       evaluate=self.evaluate or other.evaluate)

    def saves(self, due: bool) -> bool:
        """Whether the run checkpoints the step: one asked, or one due (``checkpoint_due``) and not cancelled."""
        return self.save or (due and not self.cancel_save)


#: ``RunObserver.step_trained``'s answer that cancels the evaluation of the step's weights the run
#: would make on its own: the one ``eval.every`` has due at the step, and at the run's last step the
#: evaluation after training. Why: a transformers callback clearing ``control.should_evaluate`` cancels
#: TRL's evaluation there. An evaluation asked (True) by another observer wins; under a launcher it is
#: cancelled only where every rank cancelled it.
CANCEL_EVALUATION: Final = "cancel"


def checkpoint_due(step: int, every: int) -> bool:
    """Whether ``train.checkpoint_every`` = ``every`` checkpoints step ``step`` (0: only the last,
    written apart); the trainer and the observers that let a callback cancel it read it alike."""
    return bool(every) and step % every == 0


class RunObserver(Protocol):
    """Called by ``Trainer.run`` on every rank (``Trainer.observers``)."""

    def run_begin(self, trainer: Any) -> None:
        """The run starts on ``trainer`` (``polyrl.trainer.Trainer``): its ``step`` and ``history``
        are where it starts (a resumed run's), before any evaluation or step."""

    def step_begin(self, step: int) -> None:
        """Step ``step`` (1-based) is about to be taken."""

    def step_trained(self, metrics: Mapping[str, Any]) -> bool | Literal["cancel"]:
        """Step ``metrics["step"]`` trained (its metrics, before any evaluation of it and before they
        are recorded). True asks for an evaluation of these weights now, on the step's line as an
        ``eval.every`` one (transformers' ``control.should_evaluate``); the ranks agree on it (any asks).
        ``CANCEL_EVALUATION`` cancels the one the run would make of them on its own."""

    def step_end(self, metrics: Mapping[str, Any]) -> StepAsk:
        """The step's metrics were recorded (metrics.jsonl, trackers); an evaluation during the run is
        on the same line (``eval/`` keys). The answer is agreed across ranks before it is acted on, and
        an ``epoch_stop`` before the step's checkpoint (which then resumes in the next epoch)."""

    def step_evaluated(self, metrics: Mapping[str, Any]) -> StepAsk:
        """The evaluation an observer asked after the step's callbacks (``StepAsk.evaluate``) ran:
        ``metrics`` is the step's line with its ``eval/`` keys, rewritten so in metrics.jsonl and
        sent to the trackers. The answer acts as ``step_end``'s (the step's checkpoint, where one
        was due, is written already)."""

    def evaluated(self, phase: str, step: int, metrics: Mapping[str, Any]) -> None:
        """The evaluation ``phase`` "before" or "after" training (not on a step's line) at ``step``."""

    def saved(self, step: int, path: Path, asked: bool = True) -> StepAsk:
        """The checkpoint of ``step`` was written to ``path`` (periodic, asked for, or the final one;
        ``asked`` False: the run's own last checkpoint, which no flag or observer asked for, and which
        transformers' ``on_save`` is not called for).
        A stop or an ``epoch_stop`` asked here acts at once in a single process (the checkpoint,
        written before, resumes where the epoch would have gone on, as transformers' written before
        its ``on_save``); under a launcher, after the next step (the ranks agree on it with that
        step's answer)."""

    def checkpoint_state(self) -> Mapping[str, Any]:
        """What of this observer each checkpoint keeps: JSON values under keys of its own (the
        checkpoint's ``observers``), handed back after a full resume in
        ``Trainer.resumed_observer_state`` before ``run_begin``; {} for nothing. Why: state the
        user's code steers the run by (an early-stopping patience count) must survive a crash as
        the run's own does. Rank 0's is written; every rank reads it back."""

    def protected_checkpoint(self) -> Path | None:
        """A checkpoint pruning (``train.keep_checkpoints``) must not delete, counted among the kept
        ones (transformers' ``best_model_checkpoint``, which ``load_best_model_at_end`` loads at the
        end); None for none. Asked on rank 0 after each checkpoint is written."""
