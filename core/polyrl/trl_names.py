"""TRL's ``GRPOConfig`` names and where each lives in polyrl (README: "Coming from TRL").

Why: a TRL user writes ``num_generations = 8`` or ``loss_type = "dapo"`` into polyrl's TOML; a
generic "unknown key" error would leave them to find the translation. This one table turns such
a key, in whatever section it was written, into the fix naming polyrl's ``table.key`` (and the
value to write where TRL's values differ).
"""

from __future__ import annotations

from typing import Any

import attrs

from polyrl.validators import shown


@attrs.frozen
class TrlName:
    """Where one ``GRPOConfig`` field lives in polyrl: ``key`` (``table.key``, None: no
    equivalent), ``values`` (TRL value -> polyrl assignment, when they differ) and ``note``."""

    key: str | None
    values: dict[Any, str] = attrs.field(factory=dict)
    note: str = ""  # may name the user's value as {value}


_SAME = {
    "generation": ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"),
    "algorithm": ("beta", "epsilon", "epsilon_high", "scale_rewards", "num_iterations", "importance_sampling_level",
                  "mask_truncated_completions", "top_entropy_quantile"),
    "optimizer": ("weight_decay", "max_grad_norm"),
}
_LOSS_PRESET = 'set algorithm.name = "{0}" (a preset) instead'

#: The README's GRPOConfig -> polyrl table (tests/test_trl_names.py keeps the two in step).
TRL_NAMES: dict[str, TrlName] = {
    **{name: TrlName(f"{table}.{name}") for table, names in _SAME.items() for name in names},
    "scale_rewards": TrlName("algorithm.scale_rewards", values={
        True: 'write scale_rewards = "group" in [algorithm]', False: 'write scale_rewards = "none" in [algorithm]'}),
    "num_generations": TrlName("generation.group_size"),
    "max_completion_length": TrlName("generation.max_new_tokens"),
    "loss_type": TrlName("algorithm.loss_aggregation", values={
        **{trl: f'write loss_aggregation = "{ours}" in [algorithm]' for trl, ours in (
            ("dapo", "token_mean"), ("bnpo", "token_mean"), ("grpo", "seq_mean_token_mean"),
            ("dr_grpo", "seq_mean_token_sum_norm"))},
        **{name: _LOSS_PRESET.format(name) for name in ("cispo", "sapo", "luspo", "vespo")},
    }, note='"dapo"/"bnpo" = "token_mean", "grpo" = "seq_mean_token_mean", "dr_grpo" = "seq_mean_token_sum_norm"; '
            '"cispo", "sapo", "luspo", "vespo" are algorithm.name presets'),
    "sync_ref_model": TrlName("algorithm.ref_sync_every", note="set ref_sync_every to TRL's ref_model_sync_steps "
                                                                "(e.g. 512); 0 never refreshes the reference"),
    "ref_model_sync_steps": TrlName("algorithm.ref_sync_every"),
    "ref_model_mixup_alpha": TrlName("algorithm.ref_sync_alpha"),
    "learning_rate": TrlName("optimizer.lr"),
    "max_steps": TrlName("train.steps"),
    "per_device_train_batch_size": TrlName("train.prompts_per_step", note="TRL counts completions, polyrl prompts: "
                                                                          "write prompts_per_step = {value} / "
                                                                          "generation.group_size in [train]"),
    "reward_weights": TrlName("rewards[].weight", note="write weight = ... in each [[rewards]] table"),
    **{name: TrlName(None, note="polyrl samples one rollout batch per step") for name in (
        "steps_per_generation", "generation_batch_size")},
    "multi_objective_aggregation": TrlName(None, note="polyrl sums the rewards with their weights before the "
                                                      "advantage (TRL's \"sum_then_normalize\")"),
}


def trl_fix(name: str, value: Any) -> str | None:
    """The fix for the unknown key ``name`` (set to ``value``) when it is a ``GRPOConfig`` name."""
    entry = TRL_NAMES.get(name)
    if entry is None:
        return None
    if entry.key is None:
        return f"remove it: TRL's {name} has no polyrl equivalent ({entry.note})"
    table, _, key = entry.key.rpartition(".")
    head = f"TRL's {name} is polyrl's {entry.key}"
    try:
        translated = entry.values.get(value)
    except TypeError:  # an unhashable value (a list, a table): no translation to offer
        translated = None
    if translated is not None:
        return f"{head}: for {name} = {shown(value)}, {translated}"
    if entry.note:
        return f"{head}: {entry.note.format(value=shown(value))}"
    if table == "rewards[]":
        return head
    return f"{head}: write {key} = {shown(value)} in [{table}]"


def trl_value_fix(field: str, value: Any) -> str | None:
    """The fix when polyrl's ``field`` (``table.key``) holds a TRL value it spells differently
    (``scale_rewards = true``, ``loss_aggregation = "dapo"``)."""
    for name, entry in TRL_NAMES.items():
        if entry.key == field and entry.values:
            try:
                translated = entry.values.get(value)
            except TypeError:
                return None
            if translated is not None:
                return f"this is TRL's {name} = {shown(value)}: {translated}"
    return None
