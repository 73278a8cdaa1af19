"""Which checkpoint a resume restores, and whether it may: chosen, verified and its saved config
checked against the new one with no engine loaded, so a resume that cannot go on is refused in
the trainer (``Trainer(config, resume=...)``) and in ``polyrl launch`` (before torchrun starts a
rank) as one error line, not after minutes of model loading. ``check_backend_files`` adds the
train backend's own files (``BackendSpec.check_checkpoint``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from polyrl import checkpoint as ckpt
from polyrl import checkpoint_state, resume_config
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.logs import get_logger

if TYPE_CHECKING:
    from polyrl.registry import Registry

log = get_logger("polyrl.trainer")


def resume_point(config: RunConfig, path: str | Path | None, weights_only: bool,
                 *, announce: bool = True) -> tuple[Path, dict[str, Any]] | None:
    """The checkpoint a resume restores (``path``, or the newest that verifies) and its saved
    state, checked against this run's config: a refused change raises. None when there is no
    checkpoint. It needs no engine, so a resume that cannot go on is refused before any loads
    (by the trainer and by ``polyrl launch``, before torchrun starts a rank).

    ``announce=False`` (the launcher's early check) raises the same refusals but logs no warning:
    the trainer in the rank runs this again and says each applied change and skipped checkpoint
    once; the launcher saying them too doubled every line."""
    root = Path(config.train.output_dir) / "checkpoints"
    only = ckpt.MODEL_DIR if weights_only else None
    if path:
        found: Path | None = Path(path)
        wrong = ckpt.not_a_checkpoint(Path(path))
        if wrong:
            raise ConfigError(wrong[0], field="--resume", fix=wrong[1])
        problem = ckpt.verify(Path(path), only=only)
        if problem:
            raise ConfigError(f"{found} cannot be resumed: {problem}", field="--resume",
                              fix=resume_fix(weights_only, [Path(path)]))
    else:
        found, skipped = ckpt.newest_verified(root, only=only)
        for bad, why in skipped if announce else ():
            log.warning("checkpoint skipped: it does not verify", checkpoint=str(bad), problem=why)
        if found is None and skipped:
            raise ConfigError(
                f"no checkpoint under {root} can be resumed: "
                + "; ".join(f"{p.name}: {why}" for p, why in skipped),
                field="--resume", fix=resume_fix(weights_only, [p for p, _ in skipped]))
        if found is None:
            return None
    assert found is not None
    if announce and ckpt.is_unverifiable(found):
        log.warning("checkpoint written before checksums: resumed without verifying its files",
                    checkpoint=str(found))
    # every field checked (the pending rollout's too, read even by a weights-only resume for its
    # sampler state) before the saved config is compared: one line naming the file and the field
    state = checkpoint_state.read(found, config, weights_only)
    if announce and weights_only and not state.get("config"):
        log.warning("checkpoint holds no saved config: the settings changed since it cannot be listed",
                    checkpoint=str(found))
    for change in resume_config.check(state.get("config"), config, weights_only, checkpoint=found,
                                       reward_code=state.get("reward_code")):
        if announce:
            log.warning(f"config changed at resume: {change}", applied=True)
    # a weights-only resume starts the optimizer, and so the schedule, fresh: nothing to compare
    if not weights_only:
        saved, updates, step = state.get("config"), state.get("updates_applied"), state.get("step")
        note = resume_config.schedule_note(saved, config, updates, step)
        if announce and note:
            log.warning(f"lr schedule changed at resume: {note}")
        floor = resume_config.floor_check(saved, config, updates, step)  # raises for a floor of lr 0
        if announce and floor:
            log.warning(f"lr schedule floor at resume: {floor}")
    return found, state


def check_backend_files(registry: Registry, config: RunConfig, point: tuple[Path, dict[str, Any]] | None,
                        weights_only: bool) -> None:
    """The train backend's files in ``point`` (engine state, optimizer, weights: presence, sizes,
    headers) through its optional ``BackendSpec.check_checkpoint``, which needs no engine: a
    damaged one is one ``--resume`` error before any model loads or any rank starts."""
    if point is not None:
        registry.run_check(config.backends.train, "check_checkpoint", str(point[0] / ckpt.MODEL_DIR),
                           str(point[0] / ckpt.ENGINE_STATE_DIR), weights_only)


def resume_fix(weights_only: bool, damaged: list[Path]) -> str:
    """The way past damaged checkpoints: a weights-only resume only where some weights verify
    (suggesting it for damaged weights sent the user in a circle)."""
    if weights_only or all(ckpt.verify(p, only=ckpt.MODEL_DIR) is not None for p in damaged):
        return ("the model/ weights are damaged too: resume an earlier checkpoint with --resume PATH, or "
                "delete the damaged checkpoints to start over")
    return ("resume with --resume-weights-only to load the weights alone (fresh optimizer and "
            "RNG), or delete the damaged checkpoints to start over")
