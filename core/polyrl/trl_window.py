"""``model.max_length`` for a TRL script: the model's own position limit, on the torch backend.

Why: TRL 1.16 bounds neither a prompt (it has no ``max_prompt_length``) nor prompt + completion:
every completion may take ``max_completion_length`` new tokens. polyrl's ``model.max_length``
(default 1024) bounds prompt + completion, so a script's completions after a 300-token prompt were
cut at 724 tokens without a word, and ``max_completion_length=1024`` was refused with a fix naming
``model.max_length``, which a TRL script cannot set. The torch backend allocates nothing by
``model.max_length`` (it only caps the tokens), so there it is the model config's
``max_position_embeddings`` where that is larger: the most the model reads. Other backends size
compiled graphs and caches by it (MAX) or check it against a sliding window (MLX), so they keep
polyrl's default.

A run resumed keeps the window its checkpoint was written with (``resumed_window``): a run started
before this rule (or on a model whose config said fewer positions) was refused at resume for a
``model.max_length`` no TRL script sets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from polyrl.config import ModelSection, RunConfig
from polyrl.model_config import config_tables, first_positive_int

KEY = "model.max_length"


def _folder(model: str) -> str | None:
    """The folder holding ``model``'s config.json: itself, a plugin's model alias resolved, or a
    Hub id's cached snapshot, as the run resolves ``model.path`` (None where that fails: the run's
    own load names it). Why the aliases: a polyrl alias passed as a TRL script's ``model`` read no
    config here and kept 1024 where the folder it names reads more positions."""
    from polyrl.errors import PolyrlError
    from polyrl.registry import get_registry

    if config_tables(model):
        return model
    try:
        return get_registry().resolve_model(model)
    except PolyrlError:
        return None


def position_limit(model: str) -> int | None:
    """``max_position_embeddings`` of ``model``'s config.json (or its ``text_config``), if it says."""
    folder = _folder(model)
    return first_positive_int(config_tables(folder), ("max_position_embeddings",)) if folder else None


def with_model_window(grpo_config: Any, policy: Any) -> Any:
    """``grpo_config`` (polyrl's, made by ``from_trl``) with ``model.max_length`` set to the
    model's position limit where the policy trains on torch and that limit is above polyrl's
    default; unchanged for polyrl's own GRPOConfig or a ``model.max_length`` its settings give."""
    if not getattr(grpo_config, "_from_trl", False) or policy.backend != "torch" or KEY in grpo_config.settings:
        return grpo_config
    limit = position_limit(str(policy.model))
    default = int(attrs.fields(ModelSection).max_length.default or 0)
    if limit is None or limit <= default:
        return grpo_config
    return attrs.evolve(grpo_config, settings={**grpo_config.settings, KEY: limit})


def explain_no_room(exc: Any, grpo_config: Any, policy: Any) -> None:
    """The fix of a ``max_completion_length`` refused for leaving no room in ``model.max_length`` on
    a backend that keeps polyrl's default for a TRL script (MAX, MLX: ``with_model_window``) made
    one the script can apply. Why: it said "raise model.max_length", a key no TRL script sets."""
    if (not getattr(grpo_config, "_from_trl", False) or policy.backend == "torch" or KEY in grpo_config.settings
            or exc.field not in ("generation.max_new_tokens", "eval.max_new_tokens")
            or "leaves no room for the prompt" not in exc.message):
        return
    limit = position_limit(str(policy.model))
    reads = f", which reads the model's own {limit} positions" if limit else ""
    exc.fix = (f"lower {exc.field} (prompt + completion fit in model.max_length, which the {policy.backend} "
               f"backend sizes its compiled graphs by and keeps at polyrl's default for a TRL config), or train "
               f"on backend 'torch'{reads}")


def resumed_window(config: RunConfig, grpo_config: Any, resume: str | None) -> RunConfig:
    """``config`` with the ``model.max_length`` of the checkpoint ``resume`` names ("": the newest in
    its output_dir) where this rule, not the script, chose the window and the checkpoint's differs.
    Why: the window is derived, so newer code (or a model config now saying more positions) changed
    it under a run a TRL script only asked to resume, and the resume refused a field the script
    cannot set. The checkpoint's keeps the run what it was (its prompts checked, its completions cut
    as before). Unchanged where no checkpoint, or no readable saved window, is found: the resume's
    own checks name that."""
    from polyrl import checkpoint as ckpt
    from polyrl.logs import get_logger

    if resume is None or not getattr(grpo_config, "_from_trl", False) or KEY in grpo_config.settings:
        return config
    found = Path(resume) if resume else ckpt.latest_checkpoint(Path(config.train.output_dir) / "checkpoints")
    try:
        saved = json.loads((found / ckpt.STATE_FILE).read_text()).get("config", {}).get(KEY) if found else None
    except (OSError, ValueError, AttributeError):
        return config
    if not isinstance(saved, int) or isinstance(saved, bool) or saved == config.model.max_length:
        return config
    get_logger("polyrl.trl").warning(
        f"{KEY} = {saved} (prompt + completion tokens) kept from the checkpoint resumed, as the run started; a new "
        f"run on this model starts with {config.model.max_length}, its position limit. Fix: to train with that, start "
        "a new run (another output_dir) from the checkpoint's model folder", checkpoint=str(found))
    return attrs.evolve(config, model=attrs.evolve(config.model, max_length=saved))
