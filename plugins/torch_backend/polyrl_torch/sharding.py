"""FSDP2 (``torch.distributed.fsdp.fully_shard``): weights, gradients and AdamW state split over ranks.

Turned on by the backend option ``fsdp = true`` under ``torchrun`` (a no-op in one process, so the
same config runs anywhere). Each decoder layer is one FSDP unit and :class:`TrainingForward` is the
root, owning the embeddings, final norm and ``lm_head``. Why a root of our own: the training forward
calls the backbone and ``lm_head`` separately (log-probs on completion tokens only), and FSDP can
only gather a unit's weights around a call *of that unit*; wrapping that whole forward in one
module makes every use of the weights go through FSDP's hooks.

What stays full on every rank, and why:

* generation and no-grad scoring run inside :func:`full_weights`: every unit is gathered once and
  kept for the whole call, so ranks may decode different numbers of tokens without per-token
  collectives. The trainer holds it over a whole rollout too (the ``generation_phase`` hook), so
  ranks may also call ``generate`` a different number of times (one rank's episodes end after
  one turn, another's after four). The full weights are held for that block only (1x the model); the
  gradients and the two AdamW moments (3x) stay sharded, which is what makes a full fine-tune fit.
* the training forward runs one backbone call per micro-batch on every rank (no shared-prompt
  split, whose number of calls depends on the data), and ranks run the same number of
  micro-batches (:func:`polyrl_torch.training.train_step` pads with zero-weight ones), because every
  unit's forward and backward are collectives.

The loss is already normalised by the global batch, so gradients are *summed* over ranks
(``set_gradient_divide_factor(1.0)``), exactly as the data-parallel path does it.
Checkpoints hold full, unsharded tensors in the usual layout (HF safetensors, optimizer state by
parameter index), so any world size, with or without FSDP, resumes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from polyrl.backend_kit.options import bool_option
from polyrl.errors import ConfigError
from polyrl.types import TokenSequence
from polyrl_torch import distributed

#: Module-attribute name of the model inside the root: its state-dict keys carry this prefix.
PREFIX = "lm."


def requested(options: Mapping[str, Any]) -> bool:
    return bool_option(options, "fsdp", False, fix="write fsdp = true (or remove it)")


class TrainingForward(torch.nn.Module):
    """FSDP's root: one call is one training forward (backbone + head on completion tokens)."""

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.lm = engine.causal_lm
        self._engine = engine  # not a module: not registered, not sharded

    def forward(self, sequences: list[TokenSequence], temperature: float) -> torch.Tensor:
        """Every completion token's log-prob, concatenated (not views: FSDP hooks the output)."""
        from polyrl_torch.scoring import token_logprobs

        return torch.cat(token_logprobs(self._engine, sequences, temperature, share_prompts=False))

    def per_sequence(self, sequences: list[TokenSequence], temperature: float) -> list[torch.Tensor]:
        flat = self(sequences, temperature)
        return list(torch.split(flat, [len(s.completion_ids) for s in sequences]))


class Sharded:
    """The FSDP units of one engine and what is needed to translate its state to full tensors."""

    def __init__(self, root: Any, units: list[Any], aliases: dict[str, str]) -> None:
        self.root = root
        self.units = units  # every FSDP unit, root last
        self.aliases = aliases  # tied name -> the name that holds the tensor (lm_head -> embed)
        self._depth = 0

    @contextmanager
    def full_weights(self) -> Iterator[None]:
        """Gather every unit once and keep it gathered for the block (a collective: all ranks);
        a block nested inside (a ``generate`` call within a rollout's phase) gathers nothing more."""
        self._depth += 1
        try:
            if self._depth == 1:
                with distributed.bounded("FSDP's all_gather of the whole weights (the rollout's generation phase)"):
                    self.root.set_reshard_after_forward(False)
                    for unit in self.units:
                        unit.unshard()
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                for unit in self.units:
                    unit.reshard()
                self.root.set_reshard_after_forward(True)

    # --- model state -------------------------------------------------------------------------

    def state_dict(self, everywhere: bool) -> dict[str, torch.Tensor]:
        """Full HF-named tensors (tied aliases dropped) on every rank, or on rank 0 only (on CPU)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(self.root, options=StateDictOptions(
            full_state_dict=True, cpu_offload=not everywhere))
        return {k[len(PREFIX):]: v for k, v in full.items()
                if k.startswith(PREFIX) and k[len(PREFIX):] not in self.aliases}

    def load_state_dict(self, weights: Mapping[str, np.ndarray | torch.Tensor]) -> None:
        """Shard full HF-named weights (every rank passes the same) into the units."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        tensors = {name: torch.as_tensor(value) for name, value in weights.items()}
        for alias, owner in self.aliases.items():
            if owner in tensors:
                tensors.setdefault(alias, tensors[owner])
        set_model_state_dict(self.root, {PREFIX + k: v for k, v in tensors.items()},
                             options=StateDictOptions(full_state_dict=True))

    # --- optimizer state (by parameter index, the layout torch.optim uses in one process) ------

    def _trainable_names(self) -> list[str]:
        return [name for name, p in self.root.named_parameters() if p.requires_grad]

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The full optimizer state as ``optimizer.state_dict()`` lays it out (rank 0; {} elsewhere)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        by_name = get_optimizer_state_dict(self.root, optimizer, options=StateDictOptions(
            full_state_dict=True, cpu_offload=True))
        if not by_name:
            return {}
        index = {name: i for i, name in enumerate(self._trainable_names())}
        groups = [{**g, "params": [index[n] for n in g["params"]]} for g in by_name["param_groups"]]
        return {"state": {index[n]: s for n, s in by_name["state"].items()}, "param_groups": groups}

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = self._trainable_names()
        by_name = {
            "state": {names[int(i)]: s for i, s in state["state"].items()},
            "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]}
                             for g in state["param_groups"]],
        }
        set_optimizer_state_dict(self.root, optimizer, by_name,
                                 options=StateDictOptions(full_state_dict=True))


def _tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Parameter names that share a tensor with an earlier name (e.g. lm_head -> embed_tokens)."""
    owner: dict[int, str] = {}
    aliases = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in owner:
            aliases[name] = owner[id(p)]
        else:
            owner[id(p)] = name
    return aliases


def shard(engine: Any) -> Sharded | None:
    """Split the engine's model over the ranks (before its optimizer is built); None alone."""
    if not distributed.active():
        return None
    if engine.lora is not None:
        raise ConfigError("fsdp and LoRA together are not supported", field="backends.options.fsdp",
                          fix="remove fsdp (LoRA weights are small: plain data parallelism holds them) "
                          "or remove the [lora] table")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    layers = getattr(engine.causal_lm.get_decoder(), "layers", None)
    if layers is None:
        raise ConfigError(f"fsdp: {type(engine.causal_lm).__name__} has no decoder .layers to shard",
                          field="backends.options.fsdp", fix="turn fsdp off for this model")
    aliases = _tied_aliases(engine.causal_lm)
    mesh = init_device_mesh(engine.device.type, (distributed.world_size(),))
    units = [fully_shard(layer, mesh=mesh) for layer in layers]
    root = fully_shard(TrainingForward(engine), mesh=mesh)
    for unit in (*units, root):  # our loss is globally normalised: sum the gradients, do not
        unit.set_gradient_divide_factor(1.0)  # average them; plain SUM collectives (gloo has
        unit.set_force_sum_reduction_for_comms(True)  # no PREMUL_SUM)
    state = Sharded(root, [*units, root], aliases)
    with torch.no_grad():  # FSDP picks its root at the first call: make it ours
        root([dummy_sequence(engine)], 1.0)
    for unit in state.units:  # a root keeps its weights gathered after a no-grad forward; the
        unit.reshard()  # optimizer must be built on the shards
    return state


def dummy_sequence(engine: Any) -> TokenSequence:
    """One pad token after one pad token: the zero-weight micro-batch of a rank with less data."""
    return TokenSequence([engine.pad_id], [engine.pad_id])
