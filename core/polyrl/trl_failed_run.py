"""The model a ``polyrl.trl.GRPOTrainer`` holds after a ``train()`` that raised past its first step.

Why: TRL's trainer trains the model object it holds, so after ``train()`` raised (a reward function
failing in step 3) ``save_model``, ``trainer.model`` and ``evaluate()`` use the weights trained so
far. polyrl's run trains in its engines and exports ``output_dir/model`` only when it returns, so
those calls read the model the trainer was built with: ``save_model`` saved the untrained model
without a word. A failing run checkpoints the last step it trained where that is sound (a reward's
or a callback's error, an out-of-memory between updates: ``Trainer._save_last_good_state``): that
checkpoint's model folder is what the trainer holds. Where no checkpoint holds those weights (an
error mid-update), the calls that would read them are one ``ConfigError`` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from polyrl.errors import ConfigError
from polyrl.trl_saves import Identity, model_identity


@attrs.define
class FailedRun:
    """What a ``train()`` that raised after training ``steps`` step(s) left: ``folder``, the model
    folder of the checkpoint of its last trained step (None: none holds those weights), and that
    folder's ``identity`` (its files' stats), which tells it from a later run's."""

    steps: int
    folder: Path | None
    identity: Identity = ()

    def model(self, asked: str) -> Path:
        """The folder holding the weights trained, or one ``ConfigError`` naming ``asked``."""
        fix = ("continue the run with trainer.train(resume_from_checkpoint=True) (from its last checkpoint), then "
               f"call {asked} again")
        if self.folder is None:
            raise ConfigError(f"train() raised after training {self.steps} step(s), and no checkpoint holds the "
                              f"weights it left (the error came mid-update): {asked} would read the model the "
                              "trainer was built with, not the one it trained", field=asked, fix=fix)
        if not self.identity or model_identity(self.folder) != self.identity:
            raise ConfigError(f"train() raised after training {self.steps} step(s); the checkpoint holding those "
                              f"weights ({self.folder}) was changed or removed since", field=asked, fix=fix)
        return self.folder


def kept_after(trainer: Any, steps: int) -> FailedRun:
    """The ``FailedRun`` of polyrl's ``trainer``, whose ``run()`` raised after training ``steps``
    step(s): its last trained step's checkpoint where the run saved it (``_saved_step``) whole.
    Never raises (it runs while the run's own error propagates): anything unreadable is None."""
    from polyrl import checkpoint

    try:
        step = int(trainer.step)
        if getattr(trainer, "_saved_step", None) != step:
            return FailedRun(steps, None)
        folder = checkpoint.checkpoint_dir(Path(trainer.checkpoint_root), step)
        if not checkpoint.is_complete(folder):
            return FailedRun(steps, None)
        model = folder / checkpoint.MODEL_DIR
        return FailedRun(steps, model, model_identity(model))
    except Exception:  # noqa: BLE001 - the run's own error is what the script sees
        return FailedRun(steps, None)


__all__ = ["FailedRun", "kept_after"]
