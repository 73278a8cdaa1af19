"""What may change between a checkpoint and the run that resumes it.

A checkpoint stores the run's config. At resume every changed field is either *applied and
logged* (a knob that does not change what the resumed steps mean: learning rate, step count,
checkpoint cadence...) or *refused* with one error naming all of them (anything that would make
the resumed run a different experiment than the checkpointed one: model, algorithm, data,
rewards, seed...). Nothing is silently ignored. ``--resume-weights-only`` starts a new
experiment from the weights, so there every change is applied and logged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import attrs

from polyrl.config import RewardSection, RunConfig
from polyrl.errors import ConfigError

#: Fields a resumed run takes from its new config (prefix match on the dotted name).
APPLIED = (
    "optimizer.lr", "optimizer.max_grad_norm", "optimizer.weight_decay", "optimizer.betas",
    "optimizer.eps", "optimizer.micro_batch_size",
    "optimizer.total_steps",  # the lr schedule's span, as train.steps is (``schedule_note`` says what it does)
    "train.steps", "train.checkpoint_every", "train.keep_checkpoints", "train.keep_previous_runs",
    "train.max_consecutive_skips",
    "train.threads", "train.output_dir", "train.collective_timeout_s",
    "eval.every", "eval.reward", "eval.max_new_tokens",
    "eval.before",  # read at step 0 only, which a resumed run is past (TRL's eval_on_start, changed at resume)
    # what the evaluation also reports, not what it samples or scores (loss_batch also groups its reward
    # calls, TRL's eval batches: a reward scoring each completion on its own scores them the same)
    "eval.loss", "eval.loss_batch",
    "generation.overlap",  # a pending rollout is trained on (overlap) or drawn again on-policy
    # what is shown and where, never what is trained: the step line, the completions log (drawn with a
    # seed of its own), the trackers (a resumed run's tracker run is a new one, named apart). Refused
    # as "breaks exact resumption", a tracker forgotten at the start could not be added at resume.
    "logging",
)


def snapshot(config: RunConfig) -> dict[str, Any]:
    """The config as flat ``{"section.key": value}`` JSON values (inline rows, training and eval, by their hash)."""
    data = attrs.asdict(config)
    for key in ("rows", "eval_rows"):
        rows = data.get("data", {}).get(key)
        if rows is not None:
            text = json.dumps(rows, sort_keys=True, default=str).encode()
            data["data"][key] = "sha256:" + hashlib.sha256(text).hexdigest()
    flat: dict[str, Any] = {}
    for section, value in data.items():
        if isinstance(value, dict):
            for key, inner in value.items():
                flat[f"{section}.{key}"] = _plain(inner)
        else:
            flat[section] = _plain(value)
    return flat


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _is_applied(field: str) -> bool:
    return any(field == p or field.startswith(p + ".") for p in APPLIED)


def changes(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """[(field, saved value, current value)] for every field that differs."""
    return [(k, saved.get(k), current.get(k)) for k in sorted(set(saved) | set(current))
            if saved.get(k) != current.get(k)]


def _added_at_default(change: tuple[str, Any, Any], saved: dict[str, Any], config: RunConfig) -> bool:
    """A field the checkpoint's version did not have, left at its default: the resumed run
    behaves as the checkpointed one did (e.g. a new algorithm knob that is off by default)."""
    field, _, current = change
    if field in saved or "." not in field:
        return False
    section, key = field.split(".", 1)
    record = getattr(config, section, None)
    if record is None or not attrs.has(type(record)):
        return False
    spec = attrs.fields_dict(type(record)).get(key)
    if spec is None or spec.default is attrs.NOTHING:
        return False
    default: Any = spec.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        if default.takes_self:
            return False
        default = default.factory()
    return bool(_plain(default) == current)


#: The keys whose "~" the config now reads as the home folder, which a checkpoint written
#: before stored as written (its backend expanded it at load): ``_home_expanded``.
_HOME_PATHS = ("model.path", "model.reference_path", "generation.max_model_path")


def _home_expanded(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with a leading "~" of its model paths and reward files read as the config reads it
    now. Why: a checkpoint of a run whose ``model.path = "~/models/m"`` (the backend expanded it)
    stored the text as written; resumed with the same config, which now expands it at reading,
    it was "config changed at resume in a way that breaks exact resumption" (model.path)."""
    out = {key: os.path.expanduser(saved[key]) if key in _HOME_PATHS and isinstance(saved.get(key), str)
           else value for key, value in saved.items()}
    entries = saved.get("rewards")
    if isinstance(entries, list):
        out["rewards"] = [{**entry, "function": os.path.expanduser(entry["function"])}
                          if isinstance(entry, dict) and isinstance(entry.get("function"), str) else entry
                          for entry in entries]
    return out


def _reward_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with each ``[[rewards]]`` entry given the defaults of the keys its version did not
    have (``isolation``...), as ``_added_at_default`` does for a section's keys: a checkpoint
    written before a key existed resumes when the key is left at its default."""
    entries = saved.get("rewards")
    if not isinstance(entries, list):
        return saved
    defaults = {f.name: _plain(f.default) for f in attrs.fields(RewardSection)
                if f.default is not attrs.NOTHING and not isinstance(f.default, attrs.Factory)}  # type: ignore[arg-type]
    filled = [{**defaults, **entry} if isinstance(entry, dict) else entry for entry in entries]
    for entry in filled:  # ``label`` (empty by default) is filled from the name, as RewardSection does
        if isinstance(entry, dict) and not entry.get("label"):
            entry["label"] = entry.get("name") or str(entry.get("function")).rsplit(":", 1)[-1]
    return {**saved, "rewards": filled}


def _unset_limits_as_default(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat`` with each ``[[rewards]]`` entry's unset ``timeout_s`` (None) read as the default it
    stands for. Why: before ``timeout_s`` could be left unset, checkpoints saved the default (600.0),
    which grew with the batch as an unset one does now; such a run resumes unchanged. (An explicit
    600 now caps instead of growing: a limit, not a change of what the steps mean.)"""
    from polyrl.rewards.combine import DEFAULT_TIMEOUT_S

    entries = flat.get("rewards")
    if not isinstance(entries, list):
        return flat
    return {**flat, "rewards": [{**e, "timeout_s": DEFAULT_TIMEOUT_S}
                                if isinstance(e, dict) and "timeout_s" in e and e["timeout_s"] is None else e
                                for e in entries]}


def describe(change: tuple[str, Any, Any]) -> str:
    field, old, new = change
    return f"{field} {old!r} -> {new!r}"


def _span(flat: dict[str, Any], updates_per_step: int) -> int | None:
    """The optimizer updates a saved config's lr schedule decays over (as ``run_optimizer`` sets it)."""
    total, steps = flat.get("optimizer.total_steps"), flat.get("train.steps")
    if isinstance(total, int):
        return total
    return steps * updates_per_step if isinstance(steps, int) else None


def schedule_note(saved: dict[str, Any] | None, config: RunConfig, updates: int | None,
                  step: int | None = None) -> str | None:
    """What a changed schedule span (``train.steps``, or ``optimizer.total_steps``) does at resume
    to a decaying lr schedule, with the way to keep the checkpoint's; None when nothing changes.

    Why: the span follows ``train.steps``, so extending a linear/cosine run at resume re-stretched
    the decay from the resumed update on (the lr jumped back up mid-run), and only
    ``train.steps 4 -> 8`` was logged. ``updates``: the checkpoint's applied updates (the lrs are
    left out without it); ``step``: its step (the fix then says which train.steps keeps the old
    span's steps off a zero lr)."""
    from polyrl.engines import run_optimizer
    from polyrl.schedules import lr_multiplier

    opt = config.optimizer
    if not saved or opt.schedule == "constant":
        return None
    per_step = config.algorithm.updates_per_step
    old = _span(saved, per_step)
    new = run_optimizer(config).total_steps
    assert new is not None  # with_total_steps sets it
    if old is None or old == new:
        return None
    why = [f"{field} {saved.get(field)!r} -> {value!r}" for field, value in
           (("train.steps", config.train.steps), ("optimizer.total_steps", opt.total_steps))
           if saved.get(field) != value]
    text = (f"the {opt.schedule} lr schedule now decays over {new} optimizer updates instead of the "
            f"checkpoint's {old} ({', '.join(why)})")
    if isinstance(updates, int):
        def lr(span: int) -> float:
            return opt.lr * lr_multiplier(updates, opt.schedule, opt.warmup_steps, span, opt.min_lr_ratio)

        text += (f": after the {updates} updates already applied, the next lr is {lr(new):.4g} where the "
                 f"checkpoint's schedule is at {lr(old):.4g}")
    keep = f"optimizer.total_steps = {old}"
    if opt.min_lr_ratio == 0 and isinstance(updates, int) and isinstance(step, int):
        span = max(old, opt.warmup_steps)
        if _last_update(config, updates, step) > span:  # that span ends at lr 0 before this run does
            keep += f" and train.steps = {_steps_within(span, updates, step, per_step)} (past update {span} it is at lr 0)"
    return (text + f". Fix: to keep the checkpoint's schedule, resume with {keep}; "
            "or go on, and the rest of the run follows the new span")


def _last_update(config: RunConfig, updates: int, step: int) -> int:
    """The optimizer updates applied when the resumed run ends (no step skipped)."""
    return updates + max(0, config.train.steps - step) * config.algorithm.updates_per_step


def _steps_within(span: int, updates: int, step: int, per_step: int) -> int:
    """The train.steps whose updates all come before the schedule's floor at update ``span``."""
    return step + max(0, span - updates) // per_step


def _past_span(config: RunConfig, opt: Any, span: int, done: int, step: int) -> tuple[int, str]:
    """How many of the run's updates come after the decay's end at update ``span``, from ``done``
    updates applied at ``step``, and the sentence saying where (the same for a new run and a
    resumed one); ``opt``: the run's optimizer settings (``run_optimizer``)."""
    per_step = config.algorithm.updates_per_step
    past = _last_update(config, done, step) - span
    first = step + max(0, span - done) // per_step + 1
    steps = f"step {first}" if first == config.train.steps else f"steps {first}-{config.train.steps}"
    return past, (f"the {opt.schedule} lr schedule ends its decay at update {span} "
                  f"(optimizer.total_steps = {opt.total_steps}), and this run goes on to update "
                  f"{span + past} ({steps}, train.steps = {config.train.steps})")


def fresh_floor_check(config: RunConfig) -> None:
    """A ``ConfigError`` when a run starting over would train its last updates at lr 0: a decaying
    schedule whose ``optimizer.total_steps`` ends before ``train.steps`` x updates per step, with
    ``min_lr_ratio`` 0. Why: those steps roll out and score for nothing, the model unchanged by
    them, and no line said so; at resume ``floor_check`` says the same."""
    from polyrl.engines import run_optimizer

    opt = run_optimizer(config)
    if opt.schedule == "constant" or opt.min_lr_ratio != 0 or config.optimizer.total_steps is None:
        return
    span = max(opt.total_steps or 0, opt.warmup_steps)
    past, where = _past_span(config, opt, span, 0, 0)
    if past <= 0:
        return
    within = _steps_within(span, 0, 0, config.algorithm.updates_per_step)
    ways = ([f"train.steps = {within} to end where the schedule does"] if within > 0 else []) + \
        [f"optimizer.total_steps = {span + past} (or unset) to decay over the whole run",
         "optimizer.min_lr_ratio > 0 to train those steps at a floor"]
    raise ConfigError(f"the last {past} optimizer updates would train at lr 0, changing nothing: {where}",
                      field="optimizer.total_steps", fix="set " + ", or ".join(ways))


def floor_check(saved: dict[str, Any] | None, config: RunConfig, updates: int | None, step: int | None) -> str | None:
    """A warning when a resumed run's added updates train at a decaying schedule's floor
    (``lr x min_lr_ratio``), past the update its ``optimizer.total_steps`` ends the decay at; a
    ``ConfigError`` when that floor is lr 0. None when the run stays within its span, or runs past
    it no further than the checkpoint's own config did (a span its run chose).

    Why: resuming with the checkpoint's span (the fix ``schedule_note`` gives) and more
    ``train.steps`` trained the added steps at lr 0, which leaves the model as it was: steps of
    rollouts and scoring for nothing, and no line said so."""
    from polyrl.engines import run_optimizer

    opt = run_optimizer(config)
    if not saved or opt.schedule == "constant" or not isinstance(step, int):
        return None
    per_step = config.algorithm.updates_per_step
    done = updates if isinstance(updates, int) else step * per_step
    span = max(opt.total_steps or 0, opt.warmup_steps)
    past, where = _past_span(config, opt, span, done, step)
    old_span = _span(saved, per_step)
    old_steps, old_warmup = saved.get("train.steps"), saved.get("optimizer.warmup_steps")
    if isinstance(old_span, int) and isinstance(old_steps, int):
        already = old_steps * per_step - max(old_span, old_warmup if isinstance(old_warmup, int) else 0)
        if past <= already:
            return None
    if past <= 0:
        return None
    floor = opt.lr * opt.min_lr_ratio
    if floor == 0:
        within = _steps_within(span, done, step, per_step)
        keep = f"train.steps = {within} to end where the schedule does, " if within > step else ""
        raise ConfigError(
            f"the last {past} optimizer updates of the resumed run would train at lr 0, changing nothing: {where}",
            field="optimizer.total_steps" if config.optimizer.total_steps is not None else "train.steps",
            fix=f"resume with {keep}or optimizer.total_steps = {span + past} (or unset) to decay over the whole run "
                "(the lr then leaves the checkpoint's schedule, as its warning says)")
    return (f"the last {past} optimizer updates train at the schedule's floor, lr {floor:.4g} (lr x "
            f"min_lr_ratio {opt.min_lr_ratio:g}): {where}. Fix: to decay over the whole run, resume with "
            f"optimizer.total_steps = {span + past} (or unset)")


def _same_output_dir(change: tuple[str, Any, Any], checkpoint: Path | None) -> bool:
    """The output_dir a checkpoint stored and the one this run names are the same run's folder: no
    change to warn of at each resume. Why: the stored one is absolute (``run_paths`` anchors it at
    the start folder; one from before that is relative to a start folder it does not record), so
    the same ``output_dir = "runs/x"`` resumed from another working folder, or after the run's
    folder was moved or copied, was logged as an applied change though the run goes on in the
    folder that holds its ``checkpoint`` (``<output_dir>/checkpoints/step-N``). A run resumed from
    another folder's checkpoint writes elsewhere: that change is still said."""
    field, before, after = change
    if field != "train.output_dir" or not isinstance(before, str) or not isinstance(after, str):
        return False
    if checkpoint is not None and checkpoint.parent.name == "checkpoints":
        if os.path.realpath(checkpoint.parent.parent) == os.path.realpath(after):
            return True
        if not os.path.isabs(before):  # it named the folder the checkpoint is in, which this is not
            return False
    return os.path.realpath(before) == os.path.realpath(after)


def _file_reward(function: Any) -> tuple[str, str] | None:
    """(file, function name) of a ``function = "path/file.py:name"`` reward; None for a module's."""
    if not isinstance(function, str) or ":" not in function:
        return None
    file, name = function.rsplit(":", 1)
    return (file, name) if file.endswith(".py") else None


def _moved_reward_files(change: tuple[str, Any, Any]) -> list[tuple[str, Any, Any]] | None:
    """``[(rewards[i].function, old, new)]`` when a ``rewards`` change is only function rewards'
    files named at another path (a project moved or copied elsewhere, its config edited to the new
    place), the same function names; None for any other change of the rewards."""
    field, before, after = change
    if field != "rewards" or not isinstance(before, list) or not isinstance(after, list) or len(before) != len(after):
        return None
    moved: list[tuple[str, Any, Any]] = []
    for i, (old, new) in enumerate(zip(before, after)):
        if not isinstance(old, dict) or not isinstance(new, dict):
            return None
        if {k: v for k, v in old.items() if k != "function"} != {k: v for k, v in new.items() if k != "function"}:
            return None
        if old.get("function") != new.get("function"):
            was, now = _file_reward(old.get("function")), _file_reward(new.get("function"))
            if was is None or now is None or was[1] != now[1]:
                return None
            moved.append((f"rewards[{i}].function", old["function"], new["function"]))
    return moved or None


def _reward_moves(found: list[tuple[str, Any, Any]], code_saved: bool) -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """``found`` less a ``rewards`` change that only moved reward files, and the lines saying that
    move (applied). Why: the checkpoint stores each reward file's path; a project moved to another
    folder, its config's absolute ``function = "/old/place/reward.py:score"`` edited to the new
    place, was refused as a changed experiment though the code was the same. What the resumed steps
    are scored by is the code, which the trainer compares by content (``reward_code``: the file's
    bytes and the function's bytecode, not its path) and refuses when it differs. A checkpoint
    from before that comparison (``code_saved`` False) cannot show the code is the same: refused."""
    if not code_saved:
        return found, []
    kept, said = [], []
    for change in found:
        moved = _moved_reward_files(change)
        if moved is None:
            kept.append(change)
        else:
            said += [describe(m) + " (the same file moved: its code is compared by content)" for m in moved]
    return kept, said


def check(saved: dict[str, Any] | None, config: RunConfig, weights_only: bool,
          checkpoint: Path | None = None, reward_code: Any = None) -> list[str]:
    """The changes to log as applied; raises ``ConfigError`` naming every refused change.
    ``checkpoint``: the folder resumed (a run going on in the folder that holds it kept its output_dir);
    ``reward_code``: the checkpoint's ``reward_code`` (a reward file moved elsewhere is compared by it).
    ``saved`` is empty or None only for a weights-only resume (``checkpoint_state`` refuses it for
    a full one): there is nothing to compare, and that resume starts a new experiment anyway."""
    if not saved:
        if not weights_only:
            raise ConfigError("the checkpoint holds no saved config to compare this one with", field="--resume",
                              fix="resume from a checkpoint polyrl wrote, or with --resume-weights-only")
        return []
    found = [c for c in changes(_unset_limits_as_default(_reward_defaults(_home_expanded(saved))),
                                _unset_limits_as_default(snapshot(config)))
             if not _added_at_default(c, saved, config) and not _same_output_dir(c, checkpoint)]
    found, moves = _reward_moves(found, isinstance(reward_code, list))
    refused = [c for c in found if not weights_only and not _is_applied(c[0])]
    if refused:
        first = refused[0][0]
        raise ConfigError(
            "config changed at resume in a way that breaks exact resumption: "
            + "; ".join(describe(c) for c in refused),
            field=first,
            fix="restore the checkpoint's values, or start from its weights with --resume-weights-only "
            "(fresh optimizer and RNG), or train into a new output_dir",
        )
    return [describe(c) for c in found] + moves
