"""Checkpoints whose trainer_state.json holds what a test wants, with a manifest that verifies
(whoever edits the file can rewrite the manifest and marker too): no engine, no model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polyrl import checkpoint as ckpt
from polyrl import strict_json

if TYPE_CHECKING:
    from polyrl.config import RunConfig

#: A prompt sampler's state as ``PromptSampler.state`` writes it.
SAMPLER = {"version": 1, "seed": 0, "epoch": 0, "position": 4, "shuffle": True, "size": 16, "fingerprint": "rows"}


def well_formed_state(step: int, config: RunConfig | None = None) -> dict[str, Any]:
    """A trainer_state.json as the trainer writes it (its real RNG states), no pending rollout, and
    ``config`` saved as the run's (without it, the state lacks the config a full resume needs)."""
    from polyrl.resume_config import snapshot
    from polyrl.trainer import _rng_states

    saved = {} if config is None else {"config": snapshot(config)}
    return json.loads(strict_json.dumps({"step": step, "sampler": dict(SAMPLER), **_rng_states(),
                                         "pending_rollout": None, "kl_coef": 0.0, **saved}))


def checkpoint_with_state(root: Path, step: int, text: str | None = None, config: RunConfig | None = None) -> Path:
    """A verifying checkpoint ``step`` under ``root`` whose trainer_state.json is ``text`` (default:
    ``well_formed_state(step, config)``)."""
    found = ckpt.write_checkpoint(root, step, well_formed_state(step, config),
                                  lambda model, _state: (Path(model).mkdir(), (Path(model) / "w.bin").write_bytes(b"0")))
    if text is not None:
        rewrite_state(found, text)
    return found


def rewrite_state(found: Path, text: str) -> None:
    """Replace ``found``'s trainer_state.json by ``text`` and re-sign its manifest and marker."""
    (found / ckpt.STATE_FILE).write_text(text)
    manifest = json.loads((found / ckpt.MANIFEST).read_text())
    manifest["files"][ckpt.STATE_FILE] = {"sha256": ckpt.sha256(found / ckpt.STATE_FILE),
                                          "size": (found / ckpt.STATE_FILE).stat().st_size}
    (found / ckpt.MANIFEST).write_text(json.dumps(manifest))
    step = int(found.name.removeprefix("step-"))
    (found / ckpt.MARKER).write_text(json.dumps({"step": step, "manifest_sha256": ckpt.sha256(found / ckpt.MANIFEST)}))
