"""What ``polyrl.trl.GRPOTrainer.evaluate()`` needs besides the run itself: the eval datasets it was
given, read as transformers' ``Trainer.evaluate`` reads them, the run's settings for one evaluation,
and polyrl's eval numbers under the key names TRL's ``evaluate()`` returns.

Why a module of its own: the evaluation is the trainer's (``polyrl.trainer.Trainer.evaluate``,
the same pass the run makes during training); this is only the translation around it, testable
without a model.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from polyrl.errors import ConfigError

_FIX = "pass a datasets.Dataset (or a list of rows) with a prompt column"


class StreamOrder(list[dict[str, Any]]):
    """An eval ``IterableDataset``'s rows, already in the order TRL's eval dataloader streams them
    (``stream_eval_rows``): ``trl_eval_order`` keeps them so."""


def stream_eval_rows(dataset: Any, args: Any, where: str) -> StreamOrder:
    """The rows TRL 1.16's ``get_eval_dataloader`` reads from the ``IterableDataset`` ``dataset``:
    every one, to the stream's end (transformers' evaluation loop runs until the loader ends), in
    the order of ``dataset.shuffle(seed=args.seed)`` (its buffered shuffle, made afresh for each
    evaluation), each then repeated ``num_generations_eval`` times as a map-style set is. polyrl's
    own GRPOConfig: the order given. Why: TRL evaluates a stream, and polyrl refused one."""
    if hasattr(args, "per_device_eval_batch_size") and isinstance(getattr(args, "seed", None), int):
        dataset = dataset.shuffle(seed=args.seed)
    rows = rows_of([dict(row) for row in dataset], where)
    return StreamOrder(rows)


def eval_sets(given: Any, kept: Any, args: Any = None) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """The sets ``evaluate(eval_dataset=given)`` evaluates: (name, rows) each, the name None for a
    single set. As transformers reads them: ``given``, else the trainer's ``kept`` one; a dict of
    named datasets (a ``DatasetDict`` too) is each of them, named; a string names one set of a
    dict ``kept``. Anything else that is not rows with a prompt is one ConfigError naming
    ``eval_dataset``."""
    chosen = kept if given is None else given
    if chosen is None:
        raise ConfigError("evaluate() has no eval_dataset: none was passed to it or to GRPOTrainer",
                          field="eval_dataset",
                          fix="pass trainer.evaluate(eval_dataset=<held-out rows>), or GRPOTrainer(..., "
                              "eval_dataset=<held-out rows>)")
    if isinstance(given, str) and isinstance(kept, Mapping):  # transformers: one of the named eval sets
        if given not in kept:
            raise ConfigError(f"eval_dataset {given!r} is not one of the trainer's eval datasets "
                              f"({', '.join(map(repr, kept))})", field="eval_dataset",
                              fix="name one of them, or pass the dataset itself")
        return [(None, rows_of(kept[given], f"eval_dataset[{given!r}]", args))]
    if isinstance(chosen, Mapping):
        if not chosen:
            raise ConfigError("eval_dataset is an empty dict of datasets", field="eval_dataset", fix=_FIX)
        return [(str(name), rows_of(dataset, f"eval_dataset[{name!r}]", args)) for name, dataset in chosen.items()]
    return [(None, rows_of(chosen, "eval_dataset", args))]


def rows_of(dataset: Any, where: str, args: Any = None) -> list[dict[str, Any]]:
    """``dataset``'s rows (``polyrl.api.prompt_rows``; an ``IterableDataset``'s as TRL streams them
    under ``args``, ``stream_eval_rows``), or one ConfigError naming ``eval_dataset`` (``where``
    says which of a dict's sets). Why here: ``prompt_rows``' own errors name ``prompts``, the
    training rows, and an object that is no sequence would end in a TypeError."""
    from polyrl.api import prompt_rows

    if isinstance(dataset, StreamOrder):
        return dataset
    if type(dataset).__name__ == "IterableDataset":
        return stream_eval_rows(dataset, args, where)
    if isinstance(dataset, (str, bytes, Mapping)) or not isinstance(dataset, Iterable):
        raise ConfigError(f"{where} is of type {type(dataset).__name__}, not a dataset", field="eval_dataset", fix=_FIX)
    try:
        rows = prompt_rows(dataset)
    except ConfigError as exc:
        raise ConfigError(exc.message.replace("prompts", where, 1), field="eval_dataset", fix=_FIX) from None
    if not rows:
        raise ConfigError(f"{where} is empty", field="eval_dataset", fix="pass at least one held-out row")
    return rows


def trl_eval_order(rows: list[dict[str, Any]], args: Any) -> list[dict[str, Any]]:
    """``rows`` in the order TRL's eval dataloader draws them: its ``RepeatSampler`` (made afresh
    for each evaluation, shuffling, seeded with ``args.seed``) permutes them with
    ``torch.randperm``, and so decides which prompts share an eval batch, whose advantages and
    loss are the batch's own (``eval.loss_batch``). polyrl's own GRPOConfig: the order given.
    Why torch here: TRL's permutation is torch's generator's; a script giving a TRL config has
    TRL, and so torch, installed."""
    seed = getattr(args, "seed", None)
    if isinstance(rows, StreamOrder):  # a stream's rows: TRL's order already
        return rows
    if not hasattr(args, "per_device_eval_batch_size") or isinstance(seed, bool) or not isinstance(seed, int):
        return rows
    import torch

    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    return whole_eval_batches([rows[i] for i in order], args)


def whole_eval_batches(rows: list[dict[str, Any]], args: Any) -> list[dict[str, Any]]:
    """``rows`` (in TRL's eval sampler order) cut to the whole eval batches TRL evaluates under
    ``dataloader_drop_last=True``: transformers' eval DataLoader then drops the last batch of
    ``per_device_eval_batch_size`` (x processes) completions when it is short, so TRL evaluates the
    prompts before it only (``num_generations_eval`` completions each). Why: ``dataloader_drop_last``
    was taken as a setting without effect, and the evaluation scored prompts TRL never scores, its
    ``eval_reward`` another mean, without a word. Every batch short (fewer rows than one batch) is
    one ConfigError: TRL's evaluation would score nothing."""
    from polyrl.trl_config import processes

    if getattr(args, "dataloader_drop_last", False) is not True:
        return rows
    generations = getattr(args, "num_generations_eval", None) or getattr(args, "num_generations", None) or 1
    batch = int(getattr(args, "per_device_eval_batch_size", 8) or 8) * processes(args)
    kept = len(rows) * generations // batch * batch // generations
    if kept == 0:
        raise ConfigError(f"dataloader_drop_last=True with {len(rows)} eval rows x num_generations_eval = "
                          f"{generations} completions, fewer than one eval batch of {batch}: TRL's eval DataLoader "
                          "drops that short batch and evaluates nothing", field="grpo_config.dataloader_drop_last",
                          fix="set dataloader_drop_last=False, lower per_device_eval_batch_size, or add eval rows")
    return rows[:kept]


def eval_settings(settings: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """``settings`` (a ``GRPOConfig``'s) for one evaluation as TRL's evaluation samples: the
    run's own settings, its evaluation schedule dropped, and ``[eval]`` as ``from_trl`` sets it
    (``trl_config.eval_settings``: ``num_generations_eval``, else ``num_generations``, sampled
    completions per row, scored with every reward, weighted; no greedy pass). Read from ``args``
    too, as TRL's ``eval_strategy = "no"`` leaves them out of ``settings``; polyrl's own
    ``GRPOConfig`` samples its ``generation.group_size``."""
    from polyrl.api import GenerationConfig
    from polyrl.config import RUN_REWARDS
    from polyrl.trl_config import eval_loss_settings

    samples = (settings.get("eval.samples") or getattr(args, "num_generations_eval", None)
               or getattr(args, "num_generations", None) or settings.get("generation.group_size")
               or GenerationConfig().group_size)
    kept = {key: value for key, value in settings.items() if not key.startswith("eval.")}
    loss = eval_loss_settings(args) if hasattr(args, "per_device_eval_batch_size") else {"eval.loss": True}
    return {**kept, "eval.reward": RUN_REWARDS, "eval.greedy": False, "eval.samples": int(samples),
            "eval.before": False, "eval.every": 0, **loss}


def trl_metrics(ours: Mapping[str, Any], prefix: str, rows: int, seconds: float, batch_size: int,
                epoch: float | None, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """polyrl's numbers of one evaluation as TRL's ``evaluate()`` returns them: its reward keys
    (``step_metrics.trl_eval_names``, ``names`` the rewards' TRL names) under ``prefix`` (TRL's
    ``metric_key_prefix``), transformers' ``speed_metrics`` (``rows`` samples, in steps of
    ``batch_size`` rows, as it counts them) and the ``epoch`` when one is known."""
    from polyrl.step_metrics import eval_speed, trl_eval_names

    timed = {k: v for k, v in ours.items() if k not in ("eval/seconds", "eval/batches")}  # this call's own time
    out: dict[str, Any] = {f"{prefix}_{key.removeprefix('eval_')}": value
                           for key, value in trl_eval_names(timed, names).items()}
    out.update(eval_speed(prefix, seconds, rows, math.ceil(rows / max(batch_size, 1))))
    if epoch is not None:
        out["epoch"] = epoch
    return out

