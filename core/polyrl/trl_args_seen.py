"""A script's ``trl.GRPOConfig`` changed after ``polyrl.trl.GRPOTrainer`` read it, refused at ``train()``.

Why: TRL's trainer reads most of ``trainer.args`` when ``train()`` runs (``max_steps``,
``learning_rate``, the logging and save steps...), so a script may set ``trainer.args.max_steps = 5``
(or hand over another ``trainer.args``) between building the trainer and training. polyrl turns the
config into its run settings once, when the trainer is built, so such a change was trained without.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from polyrl.errors import ConfigError


def snapshot(args: Any) -> dict[str, str] | None:
    """Each init field of ``args`` (a dataclass config) as text; None for a config that is no
    dataclass instance (polyrl's own frozen one)."""
    if not dataclasses.is_dataclass(args) or isinstance(args, type):
        return None
    return {f.name: _text(getattr(args, f.name, None)) for f in dataclasses.fields(args) if f.init}


def refuse_changes(seen: dict[str, str] | None, args: Any) -> None:
    """One ConfigError naming the fields of ``args`` whose value is not the one ``seen`` when the
    trainer was built."""
    if seen is None:
        return
    now = snapshot(args) or {}
    changed = [name for name, value in seen.items() if now.get(name, value) != value]
    if not changed:
        return
    shown = "; ".join(f"args.{name} = {now[name]} (it was {seen[name]})" for name in changed[:3])
    raise ConfigError(f"{shown} changed after GRPOTrainer was built; polyrl reads the GRPOConfig once, when the "
                      "trainer is built (TRL reads it again in train())", field=f"args.{changed[0]}",
                      fix="set it in the trl.GRPOConfig before GRPOTrainer(...), or build a new GRPOTrainer with "
                          "the changed args")


def _text(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a value without a repr: compared by its type alone
        return f"<{type(value).__name__}>"
