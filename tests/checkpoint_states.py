"""Checkpoints whose trainer_state.json holds what a test wants, with a manifest that verifies
(whoever edits the file can rewrite the manifest and marker too): no engine, no model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polyrl import checkpoint as ckpt
from polyrl import strict_json

#: A prompt sampler's state as ``PromptSampler.state`` writes it.
SAMPLER = {"version": 1, "seed": 0, "epoch": 0, "position": 4, "shuffle": True, "size": 16, "fingerprint": "rows"}


def well_formed_state(step: int) -> dict[str, Any]:
    """A trainer_state.json as the trainer writes it (its real RNG states), no pending rollout."""
    from polyrl.trainer import _rng_states

    return json.loads(strict_json.dumps({"step": step, "sampler": dict(SAMPLER), **_rng_states(),
                                         "pending_rollout": None, "kl_coef": 0.0}))


def checkpoint_with_state(root: Path, step: int, text: str | None = None) -> Path:
    """A verifying checkpoint ``step`` under ``root`` whose trainer_state.json is ``text`` (default:
    ``well_formed_state``)."""
    found = ckpt.write_checkpoint(root, step, well_formed_state(step),
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
