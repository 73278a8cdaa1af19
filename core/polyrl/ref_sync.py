"""Reference-model refresh (TR-DPO style, as TRL's ``sync_ref_model``): every ``ref_sync_every``
optimizer steps the reference becomes ``alpha x policy + (1 - alpha) x reference``.

Why a module of its own: the mixing, the checkpointing of the drifted reference and the rule
that refresh needs a separate reference engine are one concern. A refreshed reference is no
longer the initial model, so it is saved in every checkpoint (``reference/weights.npz``, covered
by the checkpoint's manifest) and restored on resume; otherwise a resumed run would measure its
KL against a different model than the uninterrupted run.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from polyrl.errors import ConfigError

REFERENCE_DIR = "reference"
WEIGHTS_FILE = "weights.npz"


def mix_weights(policy: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
                alpha: float) -> dict[str, np.ndarray]:
    """``alpha x policy + (1 - alpha) x reference``, tensor by tensor, in the reference's dtype."""
    if policy.keys() != reference.keys():
        missing = sorted(set(policy) ^ set(reference))[:3]
        raise ConfigError(f"the policy and the reference have different tensors (e.g. {missing})",
                          field="algorithm.ref_sync_every",
                          fix="refresh needs a reference of the same architecture as the policy")
    out = {}
    for name, ref in reference.items():
        ref = np.asarray(ref)
        mixed = alpha * np.asarray(policy[name], dtype=np.float64) + (1.0 - alpha) * ref.astype(np.float64)
        out[name] = mixed.astype(ref.dtype)
    return out


class ReferenceSync:
    """Refreshes ``ref_engine`` from ``train_engine`` (both ``polyrl.engine.Engine``)."""

    def __init__(self, train_engine, ref_engine, every: int, alpha: float) -> None:
        self.train_engine, self.ref_engine = train_engine, ref_engine
        self.every, self.alpha = int(every), float(alpha)

    @property
    def active(self) -> bool:
        return self.every > 0 and self.ref_engine is not None

    def after_step(self, step: int) -> bool:
        """Refresh when ``step`` (1-based, just completed) is a multiple of ``every``."""
        if not self.active or step % self.every:
            return False
        mixed = mix_weights(self.train_engine.export_weights(), self.ref_engine.export_weights(), self.alpha)
        self.ref_engine.import_weights(mixed)
        return True

    def save(self, checkpoint_dir: str | Path) -> None:
        if not self.active:
            return
        folder = Path(checkpoint_dir) / REFERENCE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        weights = {k: np.asarray(v) for k, v in self.ref_engine.export_weights().items()}
        with open(folder / WEIGHTS_FILE, "wb") as f:
            np.savez(f, **weights)  # type: ignore[arg-type]  # numpy's stub: a name could be allow_pickle

    def writer(self, save_engine):
        """``checkpoint.write_checkpoint``'s engine writer: the policy's part, then the reference."""
        def write(model_dir: str, state_dir: str) -> None:
            save_engine(model_dir, state_dir)
            self.save(Path(model_dir).parent)
        return write

    def load(self, checkpoint_dir: str | Path) -> bool:
        """Restore the saved reference; False when the checkpoint has none (refresh was off)."""
        file = Path(checkpoint_dir) / REFERENCE_DIR / WEIGHTS_FILE
        if not self.active or not file.exists():
            return False
        try:
            with np.load(file, allow_pickle=False) as data:
                weights = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError) as exc:
            # a damaged archive (a checkpoint from before manifests is not verified): one line, no traceback
            raise ConfigError(f"{file} is not the reference weights polyrl wrote ({type(exc).__name__}: {exc})",
                              field="--resume", fix="resume from another checkpoint (--resume PATH), or with "
                              "--resume-weights-only (the reference starts again from model.reference_path)") from None
        self.ref_engine.import_weights(weights)
        return True


def needs_own_reference(algorithm) -> bool:
    """Refresh changes the reference's weights, so it cannot be the policy's own frozen base
    (a LoRA engine with adapters off): the run loads a separate reference engine."""
    return algorithm.beta > 0 and algorithm.ref_sync_every > 0
