"""A script's ``trl.GRPOConfig`` changed after ``polyrl.trl.GRPOTrainer`` read it, refused at ``train()``
(or, changed by a callback while the run trains, where TRL would read the new value: ``READ_IN_RUN``).

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


#: ``trl.GRPOConfig`` fields TRL 1.16 and transformers read again while ``train()`` runs, so a callback
#: changing one (in ``on_step_end``...) changes the rest of that run there: ``DefaultFlowCallback``'s
#: strategies, the training loop's clipping, NaN filter and checkpoint limit, each evaluation's batch,
#: GRPOTrainer's loss terms (``entropy_coef_*``, ``delta``, SAPO, VESPO, the KL correction) and its log.
#: polyrl turned them into its run settings once, when the trainer was built.
READ_IN_RUN = frozenset({
    "logging_strategy", "logging_first_step", "eval_strategy", "eval_delay", "eval_on_start", "save_strategy",
    "max_grad_norm", "logging_nan_inf_filter", "save_total_limit", "load_best_model_at_end",
    "include_num_input_tokens_seen", "per_device_eval_batch_size", "entropy_coef_min", "entropy_coef_max",
    "entropy_coef_delta", "entropy_target", "delta", "sapo_temperature_neg", "sapo_temperature_pos",
    "vespo_k_neg", "vespo_k_pos", "vespo_lambda_neg", "vespo_lambda_pos", "use_bias_correction_kl", "report_to",
})
#: of those, what polyrl's callback handler reads again at each evaluation, as transformers'
#: ``_determine_best_metric`` does (``TrlCallbacks._track_best``): a change there is followed
READ_AGAIN = frozenset({"metric_for_best_model", "greater_is_better"})


def changed_fields(seen: dict[str, str], args: Any) -> list[tuple[str, str, str]]:
    """(field, value seen, value now) for each field of ``args`` changed since ``seen``."""
    now = snapshot(args) or {}
    return [(name, value, now[name]) for name, value in seen.items() if now.get(name, value) != value]


def _text(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a value without a repr: compared by its type alone
        return f"<{type(value).__name__}>"
