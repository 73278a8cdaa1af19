"""Whether ``data.eval_split`` reads rows that ``data.split`` also trains on.

Why: a split may be a slice (``train[:90%]``, ``train[-50:]``, ``train+test``), so two different
split names can still name the same rows; evaluating on prompts the policy trains on reads as a
held-out score while it is not. Disjoint slices of one split (``train[:90%]`` / ``train[90%:]``)
are the common legitimate pattern. Percentages need the split's row count, so this runs when the
source is loaded, not when the config is read.
"""

from __future__ import annotations

from collections.abc import Callable

from polyrl.errors import ConfigError


def split_names(spec: str) -> set[str]:
    """The base split names in a 🤗 datasets split spec (``"train[:10%]+test"`` -> train, test)."""
    return {part.split("[", 1)[0].strip() for part in spec.split("+")}


def check_disjoint(train_spec: str | None, eval_spec: str, rows_in: Callable[[str], int]) -> None:
    """A ConfigError naming ``data.eval_split`` when its rows overlap the training split's;
    ``rows_in(name)`` counts a base split's rows (asked only when both specs name one split)."""
    import datasets

    train_spec = train_spec or "train"
    train_names, eval_names = split_names(train_spec), split_names(eval_spec)
    if not train_names & eval_names:
        return
    lengths = {name: rows_in(name) for name in train_names | eval_names}
    trained = datasets.ReadInstruction.from_spec(train_spec).to_absolute(lengths)
    for held in datasets.ReadInstruction.from_spec(eval_spec).to_absolute(lengths):
        for rows in trained:
            first, end = max(rows.from_, held.from_), min(rows.to, held.to)
            if rows.splitname == held.splitname and first < end:
                name = held.splitname
                where = f"row {first}" if end - first == 1 else f"rows {first}-{end - 1}"
                raise ConfigError(
                    f"{eval_spec!r} reads {where} of split {name!r}, which data.split = "
                    f"{train_spec!r} trains on: the evaluation would score prompts the policy trains on",
                    field="data.eval_split",
                    fix=f'use disjoint slices, e.g. split = "{name}[:90%]" and eval_split = "{name}[90%:]", '
                        "or name another split")
