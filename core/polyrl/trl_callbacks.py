"""transformers' ``TrainerCallback`` objects for ``polyrl.trl.GRPOTrainer``: a TRL script's logging
and early-stopping callbacks run unchanged on polyrl's run.

``TrlCallbacks`` is transformers' ``CallbackHandler`` as TRL's trainer uses it (the same
``add_callback``/``pop_callback``/``remove_callback``, the same resets of ``TrainerControl``
before each event, the same keyword arguments), and a ``polyrl.run_observer.RunObserver`` the
trainer calls between steps, on every rank. Events, in transformers' order: ``on_init_end`` (the
trainer built), ``on_train_begin``, then each step ``on_step_begin``, ``on_step_end``, ``on_log``
(the step's metrics under TRL's names, as ``log_history`` gets them), and when it evaluated
``on_log`` and ``on_evaluate`` (``eval_`` names), ``on_save`` after a checkpoint is written, and
``on_train_end``. Not called: ``on_epoch_begin``/``on_epoch_end``, ``on_substep_end``,
``on_pre_optimizer_step``/``on_optimizer_step`` (the optimizer steps inside polyrl's backend),
``on_prediction_step``/``on_predict``/``on_push_begin`` (no predict, no Hub). Of the keyword
arguments ``processing_class`` is the run's tokenizer, and from ``on_train_begin`` to
``on_train_end`` ``model`` and ``optimizer`` are the training engine's own torch module and AdamW
when its backend trains in this process with torch (``training_module``: with LoRA the peft
``PeftModel``, as TRL's); else (another backend, ``on_init_end``) None, as ``lr_scheduler``,
``train_dataloader`` and ``eval_dataloader`` always are (polyrl sets the learning rate itself). Of ``TrainerControl``, ``should_training_stop`` ends the run
after the step (saved and exported as at its end), ``should_save`` checkpoints the step, and
``should_evaluate`` (set in ``on_step_begin`` or ``on_step_end``) evaluates the step's weights on
the ``eval_dataset``, on the step's line as an ``eval_steps`` evaluation, whatever the
``eval_strategy`` (``"no"`` too, as transformers' ``_maybe_log_save_evaluate``; a run without an
``eval_dataset`` warns once and goes on); ``should_log`` is met whatever it says (every step
is logged: ``logging_steps`` 1) and ``should_epoch_stop`` is ignored. A callback that raises ends
the run with one ``CallbackError`` naming it and the event, the steps trained checkpointed (one
raising in ``on_step_end``: after its step is recorded). Under a launcher (torchrun) every rank calls its callbacks, with
``state.is_world_process_zero`` true on rank 0 only, and the ranks agree on a stop or a checkpoint
asked on any of them after each step (a stop asked in ``on_save`` there: after the next step).
"""

from __future__ import annotations

import math
import numbers
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from polyrl.errors import CallbackError, ConfigError
from polyrl.logs import get_logger
from polyrl.run_observer import StepAsk

log = get_logger("polyrl.trl")

#: the events polyrl calls, each a method every callback must have (``TrainerCallback`` defines them all)
EVENTS = ("on_init_end", "on_train_begin", "on_step_begin", "on_step_end", "on_log", "on_evaluate", "on_save",
          "on_train_end")
#: ``TrainerControl`` flags ``CallbackHandler`` clears before an event, so each asks afresh
_CLEARED = {"on_train_begin": ("should_training_stop",), "on_step_begin": ("should_log", "should_evaluate",
            "should_save"), "on_log": ("should_log",), "on_evaluate": ("should_evaluate",),
            "on_save": ("should_save",)}


class TrlCallbacks:
    """The callbacks of one ``GRPOTrainer``, their ``TrainerState`` and ``TrainerControl``."""

    def __init__(self, callbacks: Sequence[Any], args: Any, processing_class: Callable[[], Any],
                 rank: int, local_rank: int, state: Any = None) -> None:
        """``state``: the ``TrainerState`` the callbacks share (the trainer's ``trainer.state``, as
        in transformers); a fresh one (``trainer_state``) when None."""
        from transformers import TrainerControl

        self.callbacks: list[Any] = []
        for i, callback in enumerate(callbacks):
            self.add_callback(callback, where=f"callbacks[{i}]")
        self.args = args
        self._processing_class = processing_class
        #: the training engine's torch module and optimizer during ``train()`` (``training_module``)
        self.model: Any = None
        self.optimizer: Any = None
        self.lr_scheduler = None  # polyrl sets the learning rate itself (``polyrl.schedules``)
        self.train_dataloader = self.eval_dataloader = None
        self.state = state if state is not None else trainer_state(args, rank, local_rank)
        self.control = TrainerControl()
        self._steps = 0  # the run's train.steps (``run_begin``)
        self._can_evaluate = False  # the run has held-out rows (``run_begin``)
        self._said_no_evaluation = False  # the warning for a should_evaluate the run cannot follow
        #: under a launcher, the error a callback raised on this rank, raised on every rank after the
        #: step (``StepAsk.failed``); no event is called after it
        self.deferred: CallbackError | None = None
        self._defer = False

    # --- transformers' CallbackHandler API ------------------------------------------------------

    def add_callback(self, callback: Any, where: str = "callback") -> None:
        """A ``TrainerCallback`` instance, or a class made with no arguments (transformers' rule)."""
        try:
            made = callback() if isinstance(callback, type) else callback
        except Exception as exc:  # noqa: BLE001 - the user's class: its own error, named
            from polyrl.agents.threads import describe

            raise ConfigError(f"{where} is the class {callback.__name__}, which could not be made with no arguments "
                              f"({describe(exc, run_goes_on=False)})", field=where,
                              fix=f"pass an instance made with its arguments, e.g. {callback.__name__}(...)") from None
        missing = [event for event in EVENTS if not callable(getattr(made, event, None))]
        if missing:
            raise ConfigError(f"{where} is a {type(made).__name__} without {', '.join(missing)}", field=where,
                              fix="pass a transformers.TrainerCallback subclass (or an instance of one)")
        if type(made) in [type(c) for c in self.callbacks]:
            log.warning("a callback of this class is there already (transformers warns too)",
                        callback=type(made).__name__)
        self.callbacks.append(made)

    def pop_callback(self, callback: Any) -> Any:
        """Remove and return the first callback of that class (or that instance); None if none."""
        for made in self.callbacks:
            if (isinstance(made, callback) if isinstance(callback, type) else made == callback):
                self.callbacks.remove(made)
                return made
        return None

    def remove_callback(self, callback: Any) -> None:
        """Remove the first callback of that class, or that instance (a ValueError when absent, as
        transformers' ``list.remove``)."""
        if isinstance(callback, type):
            self.pop_callback(callback)
        else:
            self.callbacks.remove(callback)

    @property
    def callback_list(self) -> str:
        return "\n".join(type(c).__name__ for c in self.callbacks)

    @property
    def draws_progress(self) -> bool:
        """Whether a callback is transformers' progress bar (``ProgressCallback``, its notebook
        one): polyrl's own bar stays off then, or the run would draw two."""
        bars = {"ProgressCallback", "NotebookProgressCallback"}  # the latter's module needs IPython: by name
        return any(bars & {k.__name__ for k in type(c).__mro__} for c in self.callbacks)

    @property
    def processing_class(self) -> Any:
        return self._processing_class()

    def event(self, name: str, **kwargs: Any) -> None:
        """Call ``name`` on every callback in order, as ``CallbackHandler.call_event`` does; one that
        raises is a ``CallbackError`` naming it and the event, without polyrl's traceback."""
        if not self.callbacks or self.deferred is not None:
            return
        for flag in _CLEARED.get(name, ()):
            setattr(self.control, flag, False)
        processing_class = self.processing_class
        for callback in list(self.callbacks):
            try:
                result = getattr(callback, name)(
                    self.args, self.state, self.control, model=self.model, processing_class=processing_class,
                    optimizer=self.optimizer, lr_scheduler=self.lr_scheduler,
                    train_dataloader=self.train_dataloader, eval_dataloader=self.eval_dataloader, **kwargs)
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code: any error is theirs
                if not self._defer:
                    raise _callback_error(callback, name, exc) from None
                self.deferred = _callback_error(callback, name, exc)
                return
            if result is not None:  # a callback may return the control it changed (or none)
                self.control = result

    # --- the run's observer (polyrl.run_observer.RunObserver) ------------------------------------

    def run_begin(self, trainer: Any) -> None:
        """``on_train_begin``, the state set to where ``trainer`` starts (a resumed run's step)."""
        from polyrl.rewards.trl_compat import with_trl_names

        self._defer = trainer.world_size > 1
        self._per_step = updates_per_step(trainer)
        self._steps = trainer.config.train.steps * self._per_step
        run_settings(self.state, trainer)
        self.state.global_step = trainer.step * self._per_step
        self.state.log_history = [in_updates(with_trl_names(m), self._per_step) for m in trainer.history]
        self.state.epoch = next((m["epoch"] for m in reversed(trainer.history) if "epoch" in m), 0.0)
        self.deferred = None  # a train() again after one a callback ended: its callbacks are called anew
        self._can_evaluate = trainer.eval_dataset is not None
        self._said_no_evaluation = False
        self.model, self.optimizer = training_module(trainer)
        self.event("on_train_begin")

    def step_begin(self, step: int) -> None:
        self.event("on_step_begin")

    def step_trained(self, metrics: Mapping[str, Any]) -> bool:
        """``on_step_end``, before the step is evaluated and recorded (transformers' order: the
        evaluation ``should_evaluate`` asks follows it); True when ``control.should_evaluate`` is
        set and the run has held-out rows, else one warning the first time. What a callback raises
        here is raised after the step is recorded (``step_end``): the step trained, its line and
        checkpoint are kept."""
        step = metrics.get("step")
        self.state.global_step = (int(step) * self._per_step if isinstance(step, numbers.Integral)
                                  else self.state.global_step + self._per_step)
        if isinstance(metrics.get("epoch"), (int, float)):
            self.state.epoch = float(metrics["epoch"])
        if isinstance(metrics.get("num_tokens"), (int, float)):
            self.state.num_input_tokens_seen = int(metrics["num_tokens"])
        launcher, self._defer = self._defer, True
        try:
            self.event("on_step_end")
        finally:
            self._defer = launcher
        asked = self.deferred is None and bool(self.control.should_evaluate)
        if asked and not self._can_evaluate:
            if not self._said_no_evaluation:
                log.warning("a callback set control.should_evaluate, but this run has no eval_dataset to "
                            "evaluate on (none given, or a dict of them or an IterableDataset); ignored for the "
                            "whole run. Fix: pass GRPOTrainer(eval_dataset=<held-out rows>), one datasets.Dataset",
                            step=self.state.global_step)
                self._said_no_evaluation = True
            return False
        return asked

    def step_end(self, metrics: Mapping[str, Any]) -> StepAsk:
        from polyrl.rewards.trl_compat import with_trl_names
        from polyrl.step_metrics import trl_eval_names

        if self.deferred is not None and not self._defer:  # on_step_end raised (``step_trained``)
            raise self.deferred from None
        self._log(with_trl_names(metrics))
        evaluated = trl_eval_names(metrics)
        if evaluated:
            self._evaluation(evaluated)
            self._track_best(evaluated)
        return self._asked()

    def _track_best(self, metrics: Mapping[str, Any]) -> None:
        """transformers' ``_determine_best_metric`` after a step's evaluation (after ``on_evaluate``,
        as there): ``state.best_metric`` / ``best_global_step`` by ``args.metric_for_best_model``
        (``eval_`` prefixed when not already) and ``greater_is_better``, which EarlyStoppingCallback
        compares each evaluation against. A name the evaluation does not log stops the run after
        the step (its steps checkpointed), naming the names it logs (transformers: a KeyError)."""
        name = getattr(self.args, "metric_for_best_model", None)
        if name is None or self.deferred is not None:
            return
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            self.deferred = CallbackError(
                f"TRL's metric_for_best_model = {name!r}: the evaluation logs no {key!r}; the run stopped after "
                f"step {self.state.global_step}, the steps it trained checkpointed. Fix: set metric_for_best_model "
                f"to one of {', '.join(sorted(metrics))} (the eval_ prefix may be left out)")
            return
        greater = self.args.greater_is_better
        if greater is None:  # transformers' default for the name
            greater = not name.endswith("loss")
        value = float(metrics[key])
        best = self.state.best_metric
        if best is None or (value > best if greater else value < best):
            self.state.best_metric = value
            if str(getattr(self.args, "save_strategy", "steps")).lower().rpartition(".")[2] != "no":
                self.state.best_global_step = self.state.global_step

    def evaluated(self, phase: str, step: int, metrics: Mapping[str, Any]) -> None:
        """The evaluation before training (TRL's ``eval_on_start``) or after it, when the last step's
        line does not hold it: logged and ``on_evaluate`` as TRL's trainer does."""
        from polyrl.step_metrics import trl_eval_names

        last = self.state.log_history[-1] if self.state.log_history else {}
        if phase == "after" and trl_eval_names(last):
            return
        evaluated = trl_eval_names(metrics)
        if evaluated:
            self._evaluation(evaluated)

    def saved(self, step: int, path: Path) -> StepAsk:
        self.event("on_save")
        return self._asked()

    def train_end(self, log_history: list[dict[str, Any]], global_step: int,
                  summary: Mapping[str, Any] | None = None) -> None:
        """``on_train_end``, the state as ``trainer.state`` has it after ``train()``; first the
        ``summary`` (transformers' end-of-training metrics) logged as transformers logs it: appended
        to ``log_history`` and given to ``on_log``."""
        self.state.log_history = log_history
        self.state.global_step = global_step
        try:
            if summary is not None:
                self._log(summary)
            self.event("on_train_end")
        finally:
            self.model = self.optimizer = None  # the engine's memory is not held past the run by the callbacks
        if self.deferred is not None:  # raised after the last step's gather (the final on_save)
            raise self.deferred from None

    def _log(self, entry: Mapping[str, Any]) -> None:
        """``log_history`` gets ``entry`` with its ``step``; ``on_log`` the entry without it."""
        logs = {k: v for k, v in entry.items() if k != "step"}
        if self.state.epoch is not None:
            logs.setdefault("epoch", self.state.epoch)
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.event("on_log", logs=logs)

    def log_called(self, logs: dict[str, Any]) -> None:
        """A script's ``trainer.log(logs)`` outside the run: appended to ``log_history`` and given to
        ``on_log``, as transformers' ``Trainer.log`` does; a callback that raises is raised here."""
        self._log(logs)
        self._raise_deferred()

    def evaluate_called(self, metrics: dict[str, Any]) -> None:
        """A ``trainer.evaluate()`` outside the run: its metrics logged (``log_history``, ``on_log``)
        and ``on_evaluate`` called, as transformers' ``evaluate()`` does; a callback that raises is
        raised here (nothing to checkpoint)."""
        self._evaluation(metrics)
        self._raise_deferred()

    def _raise_deferred(self) -> None:
        """The error a callback raised in an event called outside the run, raised now (nothing to
        checkpoint), and forgotten."""
        if self.deferred is not None:
            failed, self.deferred = self.deferred, None
            raise failed

    def _evaluation(self, metrics: dict[str, Any]) -> None:
        self._log(metrics)
        self.event("on_evaluate", metrics={**metrics, "epoch": self.state.epoch})

    def _asked(self) -> StepAsk:
        """What ``TrainerControl`` asks of the run now (or the error a callback raised)."""
        if self.deferred is not None:
            return StepAsk(stop=True, failed=str(self.deferred))
        stop, save = self.control.should_training_stop, self.control.should_save
        if stop and self.state.global_step >= self._steps:
            stop = False  # the run ends here anyway
        why = "a callback set control.should_training_stop" if stop else ""
        return StepAsk(save=bool(save), stop=bool(stop), why=why)


def training_module(trainer: Any) -> tuple[Any, Any]:
    """(model, optimizer) the callbacks get, as transformers passes them: the training engine's
    live ``torch.nn.Module`` (the torch backend's ``model``: a peft ``PeftModel`` with LoRA) and its
    ``torch.optim.Optimizer``, when the engine trains in this process with torch; (None, None) for
    another backend (MLX's arrays, a remote engine). Why duck-typed through ``Engine.raw``: the core
    imports no torch, and only a backend that already loaded it can answer True here."""
    import sys

    torch = sys.modules.get("torch")
    raw = getattr(getattr(trainer, "train_engine", None), "raw", None)
    model = getattr(raw, "model", None)
    if torch is None or not isinstance(model, torch.nn.Module):
        return None, None
    optimizer = getattr(raw, "optimizer", None)
    return model, optimizer if isinstance(optimizer, torch.optim.Optimizer) else None


def trainer_state(args: Any, rank: int, local_rank: int) -> Any:
    """A fresh ``transformers.TrainerState`` for ``trainer.state`` and the callbacks, as TRL's
    trainer makes it: nothing logged yet, ``is_world_process_zero`` on rank 0, polyrl's logging
    every step and ``args``' batch. Why lazily and with a stand-in: the core imports no transformers,
    and a run on the remote backend needs none (``polyrl.rewards.trl_compat.TrainerState`` then,
    with the same fields and ``save_to_json``)."""
    try:
        from transformers import TrainerState
    except ImportError:
        from polyrl.rewards.trl_compat import TrainerState
    state = TrainerState(is_world_process_zero=rank == 0, is_local_process_zero=local_rank == 0, log_history=[])
    state.logging_steps = 1  # polyrl logs every step (``run_settings`` sets the run's own)
    batch = getattr(args, "per_device_train_batch_size", None)
    state.train_batch_size = batch if isinstance(batch, int) else None
    return state


def updates_per_step(trainer: Any) -> int:
    """Optimizer updates one polyrl step makes (``num_iterations`` x ``minibatches``): TRL's
    ``global_step``, ``max_steps``, ``save_steps`` and ``log_history`` steps count updates, so a
    script or callback comparing them with its ``GRPOConfig`` reads them on that scale."""
    return int(trainer.config.algorithm.updates_per_step)


def in_updates(entry: dict[str, Any], per_step: int) -> dict[str, Any]:
    """A ``log_history`` entry with its polyrl ``step`` counted in optimizer updates (TRL's)."""
    step = entry.get("step")
    if per_step == 1 or not isinstance(step, numbers.Integral):
        return entry
    return {**entry, "step": int(step) * per_step}


def run_settings(state: Any, trainer: Any) -> None:
    """The fields of ``state`` polyrl's ``trainer`` (a ``polyrl.trainer.Trainer``) sets by its
    config: ``max_steps``, ``save_steps``, ``eval_steps`` and ``num_train_epochs``."""
    from polyrl.step_metrics import trl_epoch

    c, per_step = trainer.config.train, updates_per_step(trainer)
    state.max_steps = c.steps * per_step
    if c.checkpoint_every:
        state.save_steps = c.checkpoint_every * per_step
    if trainer.config.eval.every:
        state.eval_steps = trainer.config.eval.every * per_step
    state.num_train_epochs = math.ceil(trl_epoch(c.steps, c.prompts_per_step, len(trainer.dataset)))


def _callback_error(callback: Any, event: str, exc: BaseException) -> CallbackError:
    """One line: the callback's class and event, what it raised, and where in its own code."""
    from polyrl.agents.threads import describe

    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if len(frames) > 1 else ""
    name = type(callback).__name__
    return CallbackError(f"callback {name}.{event} raised {describe(exc, run_goes_on=False)}{at}; "
                         f"{_AFTER.get(event, _STOPPED)}. Fix: fix {name}.{event}, or remove {name} from "
                         "callbacks (trainer.remove_callback)")


#: what became of the run when a callback raised in an event (``_callback_error``)
_STOPPED = "the run stopped there, the steps it trained checkpointed (train(resume_from_checkpoint=True) goes on)"
_AFTER = {"on_init_end": "the GRPOTrainer was not built",
          "on_train_begin": "the run stopped before its first step",
          "on_train_end": "after the run ended, its checkpoints and model written"}
