"""transformers' ``TrainerCallback`` objects for ``polyrl.trl.GRPOTrainer``: a TRL script's logging
and early-stopping callbacks run unchanged on polyrl's run.

``TrlCallbacks`` is transformers' ``CallbackHandler`` as TRL's trainer uses it (the same
``add_callback``/``pop_callback``/``remove_callback``, the same resets of ``TrainerControl``
before each event, the same keyword arguments), and a ``polyrl.run_observer.RunObserver`` the
trainer calls between steps, on every rank. Events, in transformers' order: ``on_init_end`` (the
trainer built), ``on_train_begin``, ``on_epoch_begin`` before each epoch's first step (a resumed
run's first step too; ``should_epoch_stop`` cleared first), then each step ``on_step_begin``,
``on_step_end``, ``on_log`` where a log is due (the steps' metrics under TRL's names, as ``log_history`` gets them), and
when it evaluated ``on_log`` and ``on_evaluate`` (``eval_`` names), ``on_epoch_end`` after the step
that ends an epoch (its last, ``state.epoch`` whole; an epoch stop; the run's last step: before the
events of an ``eval_strategy`` "epoch" evaluation, after those of an ``eval_steps`` one and after the
``on_save`` of a checkpoint asked before it: ``step_end``; an "epoch" evaluation of a step with such a
checkpoint runs after both, only where ``should_evaluate`` is still set: ``_held_epoch_end``), ``on_save``
after a checkpoint is written (the last step's under ``eval_strategy`` "steps" after the evaluation
after training: ``_final_events``), and ``on_train_end``. Not called: ``on_substep_end``,
``on_pre_optimizer_step``/``on_optimizer_step`` (the optimizer steps inside polyrl's backend),
``on_prediction_step``/``on_predict``/``on_push_begin`` (no predict, no Hub). Of the keyword
arguments ``processing_class`` is the run's tokenizer, and from ``on_train_begin`` to
``on_train_end`` ``model`` and ``optimizer`` are the training engine's own torch module and AdamW
when its backend trains in this process with torch (``training_module``: with LoRA the peft
``PeftModel``, as TRL's); else (another backend, ``on_init_end``) None, as ``lr_scheduler``,
``train_dataloader`` and ``eval_dataloader`` always are (polyrl sets the learning rate itself). Of ``TrainerControl``, ``should_training_stop`` ends the run
after the step (saved and exported as at its end; set before the last step's ``on_step_end``, as
transformers' ``DefaultFlowCallback`` sets it at ``max_steps``), ``should_save`` checkpoints the step (and, as
transformers' Trainer, TRL's ``save_strategy`` "best" sets it on each new best evaluation, after
``on_evaluate``, where no callback can clear it, as in transformers' ``_maybe_log_save_evaluate``;
"epoch" before ``on_epoch_end``, as transformers' ``DefaultFlowCallback.on_epoch_end`` sets it, so a
callback clearing it there cancels that checkpoint; under "steps" it is set before ``on_step_end``
where ``save_steps`` has a checkpoint due, as ``DefaultFlowCallback.on_step_end`` sets it, so a
callback clearing it there, in ``on_log`` or ``on_evaluate`` cancels that checkpoint; never the run's
last one, which polyrl always writes, but without ``on_save`` where no flag asked it, as transformers
writes none there: ``saved``'s ``asked``; set in ``on_epoch_end`` it checkpoints the step, and
``should_training_stop`` set there ends the run: ``_epoch_end``), and
``should_evaluate`` (set in ``on_step_begin`` or ``on_step_end``; set before ``on_step_end`` as
``DefaultFlowCallback`` sets it under ``eval_strategy`` "steps": ``_flow_evaluates``, ``_final_flow``;
cleared there, that evaluation is cancelled: ``CANCEL_EVALUATION``) evaluates the step's weights on
the ``eval_dataset``, on the step's line as an ``eval_steps`` evaluation, whatever the
``eval_strategy`` (``"no"`` too, as transformers' ``_maybe_log_save_evaluate``; a run without an
``eval_dataset`` warns once and goes on; ``eval_strategy`` "epoch" sets it before ``on_epoch_end``,
as ``DefaultFlowCallback``, and set there it evaluates the step after ``on_epoch_end``, as
transformers' ``_maybe_log_save_evaluate`` after it does: ``_epoch_end_first``; too late only where
an epoch stop asked after ``on_step_end`` ended the epoch: warned once); ``should_log`` logs the
steps since the last log, their mean (``polyrl.trl_log_steps``), after ``on_step_end`` (set first
where ``logging_steps`` or ``logging_first_step`` asks, as ``DefaultFlowCallback``) and after
``on_epoch_end`` (set first under ``logging_strategy`` "epoch"): ``_step_log``, ``_flush_window``;
and ``should_epoch_stop`` (set in ``on_step_end``, ``on_log``,
``on_evaluate`` or ``on_save``) ends the epoch as transformers' loop breaks out of it, to its
``on_epoch_end`` (one asked in ``on_save`` under a launcher: after the next step): the next
step's prompts are the next epoch's first (a step whose prompts already reached it goes on there;
a step sampled ahead under ``generation.overlap`` is sampled again) and the step's checkpoint
resumes there (one asked in ``on_save``: the checkpoint was written before, as transformers' is);
the run keeps its ``max_steps``, and one sized by ``num_train_epochs`` ends when an epoch stop
leaves its last epoch, as transformers' loop over them does. A callback that raises ends
the run with one ``CallbackError`` naming it and the event, the steps trained checkpointed (one
raising in ``on_step_end``: after its step is recorded). Under a launcher (torchrun) every rank calls its callbacks, with
``state.is_world_process_zero`` true on rank 0 only, and the ranks agree on a stop or a checkpoint
asked on any of them after each step (a stop or epoch stop asked in ``on_save`` there: after the
next step).
Each checkpoint keeps what transformers' ``trainer_state.json`` keeps for a resume
(``checkpoint_state``: ``best_metric``, ``best_global_step``, ``best_model_checkpoint``, the
``ExportableState`` callbacks' and the control's ``state()``, the entries a script's ``trainer.log`` made:
``script_logs``), and ``train(resume_from_checkpoint=...)`` restores it as transformers does
(``restore``): the best fields and those entries always, the callbacks with
``restore_callback_states_from_checkpoint``, so an EarlyStoppingCallback's patience count survives
a crash. ``best_model_checkpoint`` is the best step's checkpoint once written, kept from pruning
(``protected_checkpoint``); ``load_best_model_at_end`` loads it at the end (``polyrl.trl``).
"""

from __future__ import annotations

import json
import math
import numbers
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from polyrl import trl_args_seen
from polyrl.errors import CallbackError, ConfigError
from polyrl.logs import get_logger
from polyrl.trl_log_steps import flow_logs, logs_at_epoch_end, replayed, window_mean
from polyrl.run_observer import CANCEL_EVALUATION, StepAsk, checkpoint_due

log = get_logger("polyrl.trl")

#: this observer's key in a checkpoint's ``observers`` (``checkpoint_state``)
STATE_KEY = "trl"
#: the ``TrainerState`` fields a resume restores, as transformers' ``TrainerState.load_from_json``
_BEST = ("best_metric", "best_global_step", "best_model_checkpoint")
#: the checkpoint's list of global steps whose evaluation TRL's ``log_history`` has no entry for
#: (a held evaluation not yet run when its checkpoint was written): a resumed run's stays without them
UNTOLD_KEY = "untold_evaluations"
#: the checkpoint's list of polyrl steps the run logged at (``logged_lines``): where its ``log_history``
#: entries end, a callback's forced or cleared ``should_log`` included, rebuilt on resume (``replayed``)
LOGGED_KEY = "logged_steps"
#: the checkpoint's list of the entries a script's ``trainer.log`` added to ``log_history`` during the
#: run before it was written (``script_logs``): polyrl's metrics.jsonl, which the rest is rebuilt from,
#: never held them, and transformers' ``trainer_state.json`` keeps them with every other entry
SCRIPT_LOGS_KEY = "script_logs"

#: the events polyrl calls, each a method every callback must have (``TrainerCallback`` defines them all)
EVENTS = ("on_init_end", "on_train_begin", "on_epoch_begin", "on_step_begin", "on_step_end", "on_log", "on_evaluate",
          "on_epoch_end", "on_save", "on_train_end")
#: ``TrainerControl`` flags ``CallbackHandler`` clears before an event, so each asks afresh
_CLEARED = {"on_train_begin": ("should_training_stop",), "on_epoch_begin": ("should_epoch_stop",),
            "on_step_begin": ("should_log", "should_evaluate", "should_save"), "on_log": ("should_log",),
            "on_evaluate": ("should_evaluate",), "on_save": ("should_save",)}


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
        #: ``args`` as the run trains them (``trl_args_seen.snapshot``), from ``run_begin`` to ``train_end``
        self._args_in_run: dict[str, str] | None = None
        #: the state's ``eval_steps`` and ``save_steps`` as the run has them (``_check_args``)
        self._intervals: dict[str, Any] = {}
        #: the names of the run's named eval sets (TRL's dict eval_dataset), each evaluation logged per set
        self._eval_sets: list[str] = []
        self._said_no_evaluation = False  # the warning for a should_evaluate the run cannot follow
        #: under a launcher, the error a callback raised on this rank, raised on every rank after the
        #: step (``StepAsk.failed``); no event is called after it
        self.deferred: CallbackError | None = None
        self._defer = False
        self._said_unsaved: set[str] = set()  # callbacks whose state() could not be checkpointed (warned once)
        self._said_unkept: set[str] = set()  # trainer.log keys a checkpoint could not keep (``_json_entry``)
        self._per_step = 1  # optimizer updates a polyrl step makes (``run_begin``)
        self._checkpoints: Path | None = None  # the run's checkpoint folder (``run_begin``)
        self._names: dict[str, str] = {}  # the rewards' TRL names where not their labels (``run_begin``)
        self._every = 0  # the run's train.checkpoint_every (``run_begin``)
        self._due = False  # the step being ended has a save_steps checkpoint due (``step_trained``)
        self._epoch_open = False  # on_epoch_begin was called and its on_epoch_end not yet (``step_begin``)
        self._said_epoch_evaluation = False  # the warning for a should_evaluate on_epoch_end asks too late
        self._eval_every = 0  # the run's eval.every: a step the trainer evaluates on its own (``run_begin``)
        #: what the control asked of a step whose epoch ended before its evaluation (``_epoch_end_first``)
        self._ended_first: StepAsk | None = None
        #: the step's on_epoch_end waits for its on_save (``step_end``): whether the step was evaluated
        self._epoch_end_after_save: bool | None = None
        self._evaluates_after = False  # the trainer evaluates after training (``run_begin``)
        self._launcher = False  # the run is under a launcher (``run_begin``)
        #: DefaultFlowCallback set should_evaluate for the step being ended (``step_trained``, ``_epoch_end``)
        self._flow_eval = False
        #: the last step's evaluation is the one after training, its on_save and on_epoch_end wait for it
        #: (``_final_events``); ``_final_save``: a checkpoint of the step was written meanwhile
        self._final_eval_pending = self._final_save = False
        #: the step's evaluation under eval_strategy "epoch" waits for its on_save and on_epoch_end
        #: (``_holds_epoch_evaluation``): not run in ``step_trained`` (``_hold_eval``), then held
        #: until on_epoch_end asks it of the trainer (``_held_eval``, ``_held_epoch_end``)
        self._hold_eval = False
        self._held_eval = False
        #: the global_step of each evaluation TRL's ``log_history`` has no entry for: a resumed run's
        #: checkpoint was written before its held evaluation ran (``checkpoint_state``), as
        #: transformers' trainer_state.json is, though the step's line holds it (``run_begin``)
        self.untold_evaluations: list[int] = []
        #: the last step's checkpoint was written unasked before the evaluation after training (``saved``)
        self._unasked_final = False
        #: the step lines since the last log, averaged into the next (``polyrl.trl_log_steps``)
        self._window: list[Mapping[str, Any]] = []
        #: each log of the run as polyrl's names have it, by the polyrl step it was logged at: what
        #: ``trainer.state.log_history`` keeps of the steps after ``train()`` (``polyrl.trl``)
        self.logged_lines: dict[int, dict[str, Any]] = {}
        #: the entries a script's ``trainer.log`` added to ``log_history`` during the run, in order, a
        #: resumed run's checkpoint's first (``run_begin``): each checkpoint keeps them
        #: (``checkpoint_state``), and ``trainer.state.log_history`` after ``train()`` (``polyrl.trl``)
        #: and during a resumed run hold them among the run's own (``with_script_logs``). One list for
        #: the handler's life: ``polyrl.trl`` appends to it (``GRPOTrainer.log``) while the run goes on.
        self.script_logs: list[dict[str, Any]] = []
        #: the run's trackers where they get the logs, not every step (``RunTracking.window_logs``)
        self._tracking: Any = None

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
        if self.deferred is not None:
            return
        for flag in _CLEARED.get(name, ()):  # with no callbacks too: a control restored from a checkpoint
            setattr(self.control, flag, False)  # (its should_training_stop, should_save) must not act again
        if not self.callbacks:
            return
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
            if self._args_in_run is not None:
                self._check_args(callback, name)
                if self.deferred is not None:
                    return

    def _check_args(self, callback: Any, event: str) -> None:
        """A callback that changed ``args`` while the run trains: a field TRL reads again as it trains
        (``trl_args_seen.READ_IN_RUN``; the state's ``eval_steps`` and ``save_steps``, which
        ``DefaultFlowCallback`` reads) ends the run after the step with one ``CallbackError``
        naming it, as polyrl read the GRPOConfig once (the change would not be trained, without a
        word); any other is warned about once, as TRL does not read it again either."""
        assert self._args_in_run is not None
        changed = trl_args_seen.changed_fields(self._args_in_run, self.args)
        # transformers' DefaultFlowCallback reads these of the state at each step; polyrl's run its own
        intervals = [(f"state.{name}", str(was), str(getattr(self.state, name, was)))
                     for name, was in self._intervals.items() if getattr(self.state, name, was) != was]
        if not changed and not intervals:
            return
        self._args_in_run = trl_args_seen.snapshot(self.args)
        self._intervals = {name: getattr(self.state, name, was) for name, was in self._intervals.items()}
        who = f"{type(callback).__name__}.{event}"
        refused = intervals + [(f"args.{name}", was, now) for name, was, now in changed
                               if name in trl_args_seen.READ_IN_RUN]
        if refused:
            field, was, now = refused[0]
            failed = CallbackError(
                f"callback {who} changed {field} to {now} (it was {was}) during train(); TRL reads it again "
                f"as the run goes on, polyrl read the GRPOConfig once when the trainer was built, so the change "
                f"would not be trained; {_AFTER.get(event, _STOPPED)}. Fix: set {field.partition('.')[2]} in the trl.GRPOConfig before GRPOTrainer(...) "
                "and leave args unchanged in callbacks (control flags and state are read as transformers reads them)")
            if not self._defer:
                raise failed
            self.deferred = failed
            return
        for field, was, now in changed:
            if field not in trl_args_seen.READ_AGAIN:
                log.warning(f"callback {who} changed args.{field} during train(): this run does not read it again, "
                            "as TRL's does not (it read it when training began); the change has no effect on it",
                            was=was, now=now)

    # --- the run's observer (polyrl.run_observer.RunObserver) ------------------------------------

    def run_begin(self, trainer: Any) -> None:
        """``on_train_begin``, the state set to where ``trainer`` starts (a resumed run's step)."""
        from polyrl.rewards.trl_compat import with_trl_names

        self._defer = trainer.world_size > 1
        self._per_step = updates_per_step(trainer)
        self._checkpoints = Path(trainer.checkpoint_root)
        self._names = dict(getattr(trainer, "trl_names", {}))
        self._steps = trainer.config.train.steps * self._per_step
        self._every = int(trainer.config.train.checkpoint_every)
        run_settings(self.state, trainer, self.args)
        self.state.global_step = trainer.step * self._per_step
        # a resumed run's logs as the uninterrupted run's flow made them; its next window starts empty, as TRL's
        self._window = []
        resumed = getattr(trainer, "resumed_observer_state", {})
        self.logged_lines = {int(m["step"]): m for m in replayed(trainer.history, self.args, self.state.logging_steps,
                                                                  self._per_step, _kept_steps(resumed, LOGGED_KEY))}
        self.script_logs[:] = _kept_logs(resumed)  # in place: ``polyrl.trl`` holds this list
        self.state.log_history = with_script_logs([in_updates(with_trl_names(m, self._names), self._per_step)
                                                   for m in self.logged_lines.values()], self.script_logs)
        tracking = getattr(trainer, "tracking", None)
        self._tracking = tracking if getattr(tracking, "window_logs", False) else None
        # before any update transformers' int 0 (a reward's first trainer_state.epoch in TRL)
        self.state.epoch = next((m["epoch"] for m in reversed(trainer.history) if "epoch" in m), 0)
        self.deferred = None  # a train() again after one a callback ended: its callbacks are called anew
        self._can_evaluate = trainer.eval_dataset is not None
        self._eval_sets = [name for name, _ in getattr(trainer, "eval_set_sizes", ())]
        self._eval_every = int(getattr(trainer.config.eval, "every", 0) or 0)
        self._ended_first = self._epoch_end_after_save = None
        self._evaluates_after = trainer.eval_dataset is not None and bool(getattr(trainer, "evaluate_after", False))
        self._launcher = trainer.world_size > 1
        self._final_eval_pending = self._final_save = self._hold_eval = self._held_eval = False
        self.untold_evaluations = _kept_steps(resumed, UNTOLD_KEY) or []
        self._unasked_final = False
        self._said_no_evaluation = self._said_epoch_evaluation = False
        self._epoch_open = False  # transformers' loop calls on_epoch_begin for a resumed run's epoch too
        self.model, self.optimizer = training_module(trainer)
        self._args_in_run = trl_args_seen.snapshot(self.args)  # a callback's change from here: ``_check_args``
        self._intervals = {name: getattr(self.state, name, None) for name in ("eval_steps", "save_steps")}
        self.event("on_train_begin")

    def step_begin(self, step: int) -> None:
        """``on_step_begin``, after ``on_epoch_begin`` where the step starts an epoch (the run's
        first step, or the one after an epoch ended: ``_epoch_end``), as transformers' loop."""
        self._pending_epoch_end()
        if not self._epoch_open:
            self._epoch_open = True
            self.event("on_epoch_begin")  # clears should_epoch_stop first (``_CLEARED``), as CallbackHandler
        self.event("on_step_begin")

    def step_trained(self, metrics: Mapping[str, Any]) -> bool | Literal["cancel"]:
        """``on_step_end``, before the step is evaluated and recorded (transformers' order: the
        evaluation ``should_evaluate`` asks follows it); True when ``control.should_evaluate`` is
        set and the run has held-out rows, else one warning the first time; ``CANCEL_EVALUATION``
        where ``DefaultFlowCallback`` set it (``_flow_evaluates``, ``_final_flow``, ``_epoch_end``)
        and a callback cleared it, as that cancels transformers' evaluation. The last step's
        evaluation under ``eval_strategy`` "steps" off the ``eval_steps`` is the trainer's after
        training (False here): its ``on_save`` and ``on_epoch_end`` wait for it (``_final_events``).
        What a callback raises here is raised after the step is recorded (``step_end``): the step
        trained, its line and checkpoint are kept."""
        step = metrics.get("step")
        self.state.global_step = (int(step) * self._per_step if isinstance(step, numbers.Integral)
                                  else self.state.global_step + self._per_step)
        if isinstance(metrics.get("epoch"), (int, float)):
            self.state.epoch = float(metrics["epoch"])
        if isinstance(metrics.get("num_tokens"), (int, float)):
            self.state.num_input_tokens_seen = int(metrics["num_tokens"])
        # transformers' DefaultFlowCallback asks a save_steps checkpoint before the user's on_step_end,
        # so one clearing should_save (there, on_log or on_evaluate) cancels it (``step_end``)
        self._due = self._save_strategy() == "steps" and checkpoint_due(self.state.global_step // self._per_step,
                                                                          self._every)
        if self._due:
            self.control.should_save = True
        if flow_logs(self.args, self.state.logging_steps, self.state.global_step, self._per_step):
            self.control.should_log = True  # DefaultFlowCallback's, before the user's on_step_end
        final = self._final_flow()
        self._flow_eval = self._flow_evaluates() or final
        if self._flow_eval:
            self.control.should_evaluate = True
        if self.state.global_step >= self._steps:  # DefaultFlowCallback's too: on_step_end and on_epoch_end read it
            self.control.should_training_stop = True
            if self._save_strategy() == "steps":  # its save at the end: polyrl writes the last checkpoint anyway
                self.control.should_save = True
        launcher, self._defer = self._defer, True
        try:
            self.event("on_step_end")
            asked = self.deferred is None and bool(self.control.should_evaluate)
            if final and asked:  # evaluated after training (its model written first), before on_save's events
                self._final_eval_pending = not self._launcher
                return False
            self._hold_eval = not asked and self._holds_epoch_evaluation()
            if self._hold_eval:  # not now: asked after on_save and on_epoch_end, if still set (``_held_epoch_end``)
                return CANCEL_EVALUATION
            if not asked and self._ends_epoch_unevaluated():
                asked = self._epoch_end_first(metrics)
        finally:
            self._defer = launcher
        if asked and not self._can_evaluate:
            self._no_evaluation()
            return False
        if not asked and self._flow_eval and self.deferred is None:  # a callback cleared DefaultFlowCallback's flag
            return CANCEL_EVALUATION
        return asked

    def _no_evaluation(self) -> None:
        """One warning the first time a callback asks an evaluation of a run without held-out rows."""
        if not self._said_no_evaluation:
            log.warning("a callback set control.should_evaluate, but this run has no eval_dataset to "
                        "evaluate on; ignored for the whole run. Fix: pass GRPOTrainer(eval_dataset=<held-out rows>)",
                        step=self.state.global_step)
            self._said_no_evaluation = True

    def step_end(self, metrics: Mapping[str, Any]) -> StepAsk:
        from polyrl.step_metrics import trl_eval_names

        if self.deferred is not None and not self._defer:  # on_step_end raised (``step_trained``)
            raise self.deferred from None
        first, self._ended_first = self._ended_first, None
        if first is None:
            self._step_log(metrics)
        evaluated = trl_eval_names(metrics, self._names)
        if self._hold_eval:  # asked after on_epoch_end (``_held_epoch_end``), unless another observer asked it
            self._hold_eval, self._held_eval = False, not evaluated
        if evaluated:
            self._evaluation(evaluated)
            new_best = self._track_best(evaluated)
            if self._save_strategy() == "best":  # transformers' _maybe_log_save_evaluate: saved on a new best only
                self.control.should_save = new_best
        if first is not None:  # on_log and on_epoch_end came before the evaluation (``_epoch_end_first``)
            return first | self._asked()
        asked = self._asked(epoch=True)
        if self._due and not asked.save and not asked.failed:  # a callback cleared the flag step_trained set
            asked = attrs.evolve(asked, cancel_save=True)
        if self._final_eval_pending and not asked.failed:  # on_epoch_end after the evaluation (``_final_events``)
            self._epoch_end_after_save = True
            return asked
        if asked.epoch_stop or asked.stop or _epoch_ended(self.state.epoch) or self.state.global_step >= self._steps:
            if not self._defer and not asked.failed and (asked.save or (self._due and not asked.cancel_save)):
                # transformers saves the step (_maybe_log_save_evaluate) before on_epoch_end: ``saved`` calls it
                self._epoch_end_after_save = bool(evaluated)
            else:
                asked = asked | self._epoch_end(evaluated=bool(evaluated))
        return asked

    def _pending_epoch_end(self) -> None:
        """The ``on_epoch_end`` ``step_end`` left for ``saved``, called now where no checkpoint
        followed though one was asked; what it asks (a held evaluation too) can no longer act on
        that step. A save that raises never gets here: the run ends at once, with no
        ``on_epoch_end`` and so no held evaluation, as transformers' ``train()`` leaves when its
        ``_save_checkpoint`` (or ``on_save``) raises before ``on_epoch_end`` asks the evaluation
        (``tests/test_trl_epoch_events.py``)."""
        if self._epoch_end_after_save is not None:
            evaluated, self._epoch_end_after_save = self._epoch_end_after_save, None
            self._epoch_end(evaluated=evaluated)

    def _flow_evaluates(self) -> bool:
        """Whether transformers' ``DefaultFlowCallback.on_step_end`` (first in its callback list)
        sets ``should_evaluate`` before the user's ``on_step_end``: ``eval_strategy`` "steps" at an
        ``eval_steps`` step (polyrl's ``eval.every``). Why: a callback read False there, and one
        clearing it cancels the evaluation. The run's last step off the ``eval_steps``: ``_final_flow``."""
        if self._eval_strategy() != "steps" or not self._can_evaluate:
            return False
        return checkpoint_due(self.state.global_step // self._per_step, self._eval_every)

    def _holds_epoch_evaluation(self) -> bool:
        """Whether the step just trained ends its epoch under ``eval_strategy`` "epoch" with a
        checkpoint asked in ``on_step_end`` (a ``save_steps`` one, the last step's under "steps", a
        callback's): transformers saves it before ``on_epoch_end``, whose ``DefaultFlowCallback``
        asks the evaluation after it. So the step is not evaluated now: ``on_epoch_end`` asks the
        trainer for it after the checkpoint, where ``should_evaluate`` is still set
        (``_held_epoch_end``). Not under a launcher, nor ``save_strategy`` "best" (its save follows
        the evaluation)."""
        return (not self._launcher and self.deferred is None and self._can_evaluate
                and self._eval_strategy() == "epoch" and self._save_strategy() != "best"
                and bool(self.control.should_save) and self._ends_epoch_unevaluated())

    def _held_epoch_end(self) -> StepAsk:
        """``on_epoch_end`` of a step whose evaluation was held (``_holds_epoch_evaluation``), the
        evaluation's ``should_evaluate`` set first (``DefaultFlowCallback``); still set after it,
        the trainer is asked to evaluate the step now (``StepAsk.evaluate``; its ``on_log`` and
        ``on_evaluate``: ``step_evaluated``), as transformers' ``_maybe_log_save_evaluate`` after
        ``on_epoch_end``. Cleared there, no evaluation runs: none in metrics.jsonl, the trackers
        or ``log_history``."""
        self._held_eval = False
        asked = self._epoch_end(evaluated=None)
        wanted = self.deferred is None and bool(self.control.should_evaluate)
        self.control.should_evaluate = False
        return asked | StepAsk(evaluate=wanted)

    def step_evaluated(self, metrics: Mapping[str, Any]) -> StepAsk:
        """The evaluation ``_held_epoch_end`` asked, on the step's line (``metrics``): ``on_log``
        and ``on_evaluate`` (``eval_`` names), the best tracked, as transformers after
        ``on_epoch_end``; what the control asks then (EarlyStoppingCallback's stop)."""
        from polyrl.step_metrics import trl_eval_names

        evaluated = trl_eval_names(metrics, self._names)
        if evaluated and self.deferred is None:
            self._evaluation(evaluated)
            self._track_best(evaluated)
        return self._asked()

    def _final_flow(self) -> bool:
        """Whether ``DefaultFlowCallback.on_step_end`` sets ``should_evaluate`` at the run's last
        step off the ``eval_steps`` (``eval_strategy`` "steps"), as transformers does: polyrl's
        trainer evaluates that step after training (``_evaluates_after``), its model written first,
        so that a failing evaluation finds it saved."""
        return (self._eval_strategy() == "steps" and self._can_evaluate and self._evaluates_after
                and self.state.global_step >= self._steps and not self._flow_evaluates())

    def _final_events(self) -> None:
        """The last step's ``on_save`` (of the checkpoint written before the evaluation after
        training) and ``on_epoch_end``, called after that evaluation's ``on_log`` and
        ``on_evaluate``, as transformers calls them after evaluating the step (``step_trained``);
        at ``on_train_end`` where no evaluation came (a stop request abandoned it)."""
        if not self._final_eval_pending:
            return
        self._final_eval_pending = False
        if self._final_save:
            self._final_save = False
            self._note_best_checkpoint()
            self.event("on_save")
        self._pending_epoch_end()

    def _ends_epoch_unevaluated(self) -> bool:
        """Whether the step just trained ends its epoch (``state.epoch`` whole, the run's last step,
        or ``should_epoch_stop`` asked in ``on_step_end``) and has no evaluation of its own due before
        it (``eval.every`` outside TRL's ``eval_strategy`` "epoch"): then transformers calls
        ``on_log`` and ``on_epoch_end`` before it evaluates (``_epoch_end_first``)."""
        if self.deferred is not None:
            return False
        step = self.state.global_step // self._per_step
        if self._eval_every and step % self._eval_every == 0 and self._eval_strategy() != "epoch":
            return False  # an eval_steps evaluation: transformers' comes before on_epoch_end, as polyrl's does
        return bool(self.control.should_epoch_stop) or _epoch_ended(self.state.epoch) or \
            self.state.global_step >= self._steps

    def _epoch_end_first(self, metrics: Mapping[str, Any]) -> bool:
        """``on_log`` and ``on_epoch_end`` of a step that ends its epoch, called before the trainer
        evaluates it, as transformers' loop calls ``on_epoch_end`` before the evaluation
        ``_maybe_log_save_evaluate`` runs after it: ``should_evaluate`` set first under
        ``eval_strategy`` "epoch" (``DefaultFlowCallback.on_epoch_end``), so a callback reads it
        there, and one setting it there has the step evaluated (``on_evaluate`` after
        ``on_epoch_end``). Why: the evaluation came before ``on_epoch_end``, and one asked there
        was only warned about. True asks the trainer for the evaluation; what the control asked is
        kept for ``step_end``."""
        self._step_log(metrics)
        first = self._asked(epoch=True)
        if self._due and not first.save and not first.failed:  # a callback cleared the flag step_trained set
            first = attrs.evolve(first, cancel_save=True)
        self._ended_first = first | self._epoch_end(evaluated=None)
        asked, self.control.should_evaluate = bool(self.control.should_evaluate), False
        return asked and self.deferred is None

    def _epoch_end(self, evaluated: bool | None) -> StepAsk:
        """``on_epoch_end`` after the step that ended the epoch (its last, an epoch stop, or the
        run's last step: transformers' loop breaks out to it), then what the control asks as
        transformers' ``_maybe_log_save_evaluate`` after it: ``save_strategy`` "epoch"'s
        checkpoint is set before the callbacks, as ``DefaultFlowCallback.on_epoch_end`` (first in
        transformers' list) sets it, so one clearing ``should_save`` cancels it; a callback may ask
        one (any strategy) or ``should_training_stop``. ``should_evaluate`` is met by the step's
        own evaluation (``evaluated``: on its line); asked of a step not evaluated, it is too late
        (the step is recorded: an epoch stop asked after ``on_step_end``) and warned once.
        ``evaluated`` None: called before the step's evaluation (``_epoch_end_first``), which
        reads the flag; a held evaluation is told after it (``_held_epoch_end``). Why here and
        not in ``step_trained``: a callback summing its ``on_log`` calls per epoch (TRL's usual
        ``on_epoch_end``) has the epoch's last step then."""
        if self._held_eval:
            return self._held_epoch_end()
        self._epoch_open = False
        if self.deferred is not None:
            return StepAsk()
        self.control.should_save = self._save_strategy() == "epoch"  # the step's own save is in ``asked`` already
        # transformers' DefaultFlowCallback asks the epoch's evaluation (before the step's is done)
        self.control.should_evaluate = evaluated is None and self._can_evaluate and self._eval_strategy() == "epoch"
        self._flow_eval = self._flow_eval or self.control.should_evaluate
        if logs_at_epoch_end(self.args):
            self.control.should_log = True
        self.event("on_epoch_end")
        if self.control.should_log and self.deferred is None:  # transformers' _maybe_log_save_evaluate after it
            self._flush_window()
        if evaluated is None:
            return self._asked()
        late = self.deferred is None and self.control.should_evaluate and not evaluated
        if late and not self._can_evaluate:
            self._no_evaluation()
        elif late and not self._said_epoch_evaluation:
            log.warning("a callback set control.should_evaluate in on_epoch_end of an epoch ended by "
                        "control.should_epoch_stop set after on_step_end (in on_log, on_evaluate or on_save); "
                        "polyrl evaluates a step before that, so it is not evaluated. Fix: set "
                        "should_epoch_stop in on_step_end, or should_evaluate there", step=self.state.global_step)
            self._said_epoch_evaluation = True
        self.control.should_evaluate = False
        return self._asked()

    def _save_strategy(self) -> str:
        """TRL's ``save_strategy`` as a plain string (an enum's value)."""
        return str(getattr(self.args, "save_strategy", "steps")).lower().rpartition(".")[2]

    def _eval_strategy(self) -> str:
        """TRL's ``eval_strategy`` as a plain string (an enum's value)."""
        return str(getattr(self.args, "eval_strategy", "no")).lower().rpartition(".")[2]

    def _track_best(self, metrics: Mapping[str, Any]) -> bool:
        """transformers' ``_determine_best_metric`` after a step's evaluation (after ``on_evaluate``,
        as there): ``state.best_metric`` / ``best_global_step`` by ``args.metric_for_best_model``
        (``eval_`` prefixed when not already) and ``greater_is_better``, which EarlyStoppingCallback
        compares each evaluation against. As there, an unset best starts at -inf (inf when lower
        is better), so a NaN evaluation is never the best and the next number beats it. A name the evaluation does not log stops the run after
        the step (its steps checkpointed), naming the names it logs (transformers: a KeyError).
        True when this evaluation is the new best (save_strategy "best" saves the step then)."""
        name = getattr(self.args, "metric_for_best_model", None)
        if name is None or self.deferred is not None:
            return False
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            self.deferred = CallbackError(
                f"TRL's metric_for_best_model = {name!r}: the evaluation logs no {key!r}; the run stopped after "
                f"step {self.state.global_step}, the steps it trained checkpointed. Fix: set metric_for_best_model "
                f"to one of {', '.join(sorted(metrics))} (the eval_ prefix may be left out)")
            return False
        greater = self.args.greater_is_better
        if greater is None:  # transformers' default for the name
            greater = not name.endswith("loss")
        if self.state.best_metric is None:  # transformers' start: any number beats it, a NaN never does
            self.state.best_metric = float("-inf") if greater else float("inf")
        value, best = metrics[key], self.state.best_metric
        if not (isinstance(value, numbers.Real) and (value > best if greater else value < best)):
            return False
        self.state.best_metric = float(value)
        if self._save_strategy() != "no":
            self.state.best_global_step = self.state.global_step
        return True

    def checkpoint_state(self) -> dict[str, Any]:
        """What transformers' ``_save_checkpoint`` keeps of the run in ``trainer_state.json`` for a
        resume (``restore``): ``best_metric``, ``best_global_step``, ``best_model_checkpoint`` and
        ``stateful_callbacks`` (each ``ExportableState`` callback's ``state()`` by class name, a list
        for several of one class, and ``TrainerControl``'s), set on ``state`` too, as there."""
        self.state.stateful_callbacks = self._stateful_callbacks()
        self._note_best_checkpoint()
        kept = {name: getattr(self.state, name, None) for name in _BEST}
        kept["best_metric"] = _json_number(kept["best_metric"])
        # a held evaluation (``_holds_epoch_evaluation``) has not run yet: transformers writes this
        # checkpoint before on_epoch_end asks it, so its trainer_state.json, and a run resumed from
        # it, has no such entry, though the step's line in metrics.jsonl holds it once run
        untold = [*self.untold_evaluations, *([self.state.global_step] if self._held_eval else [])]
        return {STATE_KEY: kept | {"stateful_callbacks": self.state.stateful_callbacks,
                                   UNTOLD_KEY: sorted(set(untold)), LOGGED_KEY: sorted(self.logged_lines),
                                   SCRIPT_LOGS_KEY: [self._json_entry(e) for e in self.script_logs]}}

    def _json_entry(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``entry`` as a checkpoint can keep it: a value JSON cannot hold made a float where it is
        one number (a 0-d tensor, a ``Decimal``), else left out with one warning; a NaN is kept as
        null (``strict_json``). Why: transformers' ``save_to_json`` raises on such a value and the
        checkpoint is lost; polyrl keeps the checkpoint and the entry's other values."""
        from polyrl import strict_json

        out: dict[str, Any] = {}
        for key, value in entry.items():
            try:
                strict_json.dumps(value)
            except (TypeError, ValueError):
                try:
                    value = float(value)
                except (TypeError, ValueError, RuntimeError):
                    if key not in self._said_unkept:
                        log.warning("a trainer.log value is not JSON: the checkpoint keeps its entry without "
                                    "it, so a run resumed from it has none there (transformers' save would fail)",
                                    key=key, value_type=type(value).__name__)
                        self._said_unkept.add(key)
                    continue
            out[key] = value
        return out

    def _note_best_checkpoint(self) -> None:
        """``state.best_model_checkpoint`` as transformers' ``_save_checkpoint`` sets it when a
        checkpoint is written: the best step's checkpoint folder, once it is on disk (the one being
        written counts: this state goes into it); else it keeps its value."""
        from polyrl.checkpoint import checkpoint_dir, is_complete

        best = self.state.best_global_step
        if not best or self._checkpoints is None or best % self._per_step:
            return
        folder = checkpoint_dir(self._checkpoints, best // self._per_step)
        if best == self.state.global_step or is_complete(folder):
            self.state.best_model_checkpoint = str(folder)

    def protected_checkpoint(self) -> Path | None:
        """``state.best_model_checkpoint``, which pruning keeps as transformers' ``rotate_checkpoints``
        does (``load_best_model_at_end`` loads it at the end of ``train()``)."""
        best = self.state.best_model_checkpoint
        return Path(best) if best else None

    def _stateful_callbacks(self) -> dict[str, Any]:
        """``{class name: state()}`` of the ``ExportableState`` callbacks and the control. A
        ``state()`` that raises or is not JSON is left out with one warning (transformers' save
        would fail on it): that callback starts afresh on resume, the run goes on."""
        from transformers.trainer_callback import ExportableState

        out: dict[str, Any] = {}
        for callback in [*self.callbacks, self.control]:
            if not isinstance(callback, ExportableState):
                continue
            name = type(callback).__name__
            try:
                data = callback.state()
                json.dumps(data, allow_nan=True)
            except Exception as exc:  # noqa: BLE001 - the user's state(): named, the checkpoint still written
                if name not in self._said_unsaved:
                    from polyrl.agents.threads import describe

                    log.warning(f"{name}.state() could not be kept in the checkpoint ({describe(exc, run_goes_on=False)})"
                                "; a resumed run starts it afresh. Fix: return a dict of JSON values from state()",
                                callback=name)
                    self._said_unsaved.add(name)
                continue
            if name in out:  # several of one class: a list, restored in order (transformers')
                out[name] = [*(out[name] if isinstance(out[name], list) else [out[name]]), data]
            else:
                out[name] = data
        return out

    def evaluated(self, phase: str, step: int, metrics: Mapping[str, Any]) -> None:
        """The evaluation before training (TRL's ``eval_on_start``) or after it, when the last step's
        line does not hold it: logged and ``on_evaluate`` as TRL's trainer does. The one after
        counts for the best as TRL's evaluation of its last step does (``_track_best``: its
        ``best_metric``, and its checkpoint, written already, ``best_model_checkpoint``, which
        ``load_best_model_at_end`` loads); the one before does not, as TRL's ``eval_on_start``."""
        from polyrl.step_metrics import tokens_seen, trl_eval_names

        last = self.state.log_history[-1] if self.state.log_history else {}
        evaluated = {} if phase == "after" and trl_eval_names(last) else \
            trl_eval_names({**metrics, **tokens_seen(phase == "before", last)}, self._names)
        if evaluated:
            self._evaluation(evaluated)
            if phase == "after" and self._track_best(evaluated):
                self._note_best_checkpoint()
                # save_strategy "best": transformers saves the new best it evaluated there; polyrl wrote it before
                self._final_save = self._final_save or (self._unasked_final and self._save_strategy() == "best")
        if phase == "after":
            self._final_events()

    def saved(self, step: int, path: Path, asked: bool = True) -> StepAsk:
        """``on_save``; its ``should_epoch_stop`` read at once, as transformers' loop reads it right
        after ``on_save`` (under a launcher after the next step's callbacks, when the ranks agree).
        ``best_model_checkpoint`` is set first on every rank, as every rank's ``_save_checkpoint``
        sets it: rank 0 alone wrote the checkpoint (``checkpoint_state``), and the other ranks'
        callbacks read None. ``asked`` False (the last step's checkpoint polyrl wrote though no flag
        asked it: ``save_strategy`` "no", a cleared ``should_save``): no ``on_save``, as transformers
        writes none there, unless the evaluation after training, still to come, finds a new best
        under ``save_strategy`` "best", which transformers saves then (``evaluated``)."""
        if not asked:
            self._unasked_final = self._final_eval_pending
            return StepAsk()
        if self._final_eval_pending:  # called after the evaluation after training (``_final_events``)
            self._final_save = True
            return StepAsk()
        self._note_best_checkpoint()
        self.event("on_save")
        answer = self._asked(epoch=not self._defer)
        waiting, self._epoch_end_after_save = self._epoch_end_after_save, None
        if (waiting is not None or answer.epoch_stop or answer.stop) and self._epoch_open and not self._defer:
            # transformers' loop breaks out to on_epoch_end (or reaches it after the step's save: ``step_end``);
            # the checkpoint it may ask is this one, written
            evaluated = True if waiting is None else waiting
            answer = answer | attrs.evolve(self._epoch_end(evaluated=evaluated), save=False)
        return answer

    def train_end(self, log_history: list[dict[str, Any]], global_step: int,
                  summary: Mapping[str, Any] | None = None) -> None:
        """``on_train_end``, the state as ``trainer.state`` has it after ``train()``; first the
        ``summary`` (transformers' end-of-training metrics) logged as transformers logs it: appended
        to ``log_history`` and given to ``on_log``."""
        self._final_events()
        self._pending_epoch_end()
        self._args_in_run = None  # the run has ended: on_train_end's changes are the next train()'s to refuse
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

    def _step_log(self, metrics: Mapping[str, Any]) -> None:
        """The step's line joins the window; logged (with the steps before it) where
        ``control.should_log`` asks, as transformers' ``_maybe_log_save_evaluate`` reads it after
        ``on_step_end`` (``DefaultFlowCallback`` sets it at ``logging_steps``; a callback may set or
        clear it)."""
        self._window.append(metrics)
        if self.control.should_log and self.deferred is None:
            self._flush_window()

    def _flush_window(self) -> None:
        """The window's mean logged (``log_history``, ``on_log``, the trackers), at the step that
        ends it; nothing when no step came since the last log (transformers' ``global_step >
        _globalstep_last_logged``)."""
        from polyrl.rewards.trl_compat import with_trl_names

        if not self._window:
            return
        line, self._window = window_mean(self._window), []
        if isinstance(line.get("step"), numbers.Integral):
            self.logged_lines[int(line["step"])] = line
        if self._tracking is not None:  # a step's evaluation reached them with its line (``RunTracking.publish``)
            self._tracking.publish_log({k: v for k, v in line.items() if not k.startswith("eval/")},
                                       step=self.state.global_step // self._per_step)
        self._log(with_trl_names(line, self._names))

    def unlogged(self) -> dict[str, Any]:
        """The mean of the steps after the last log under TRL's names, but for transformers' own
        keys (``loss``, ``grad_norm``, ``learning_rate``, ``epoch``): what TRL's ``log`` adds from
        its buffers to the end-of-training entry (``polyrl.trl``). Why: a short run (fewer steps
        than ``logging_steps``) still ends with its ``reward`` in ``log_history[-1]``, as in TRL."""
        from polyrl.rewards.trl_compat import with_trl_names
        from polyrl.step_metrics import TRANSFORMERS_KEYS

        if not self._window:
            return {}
        line = with_trl_names(window_mean(self._window), self._names)
        return {k: v for k, v in line.items() if k not in TRANSFORMERS_KEYS and k not in ("step", "learning_rate")
                and not k.startswith("eval/")}

    def _log(self, entry: Mapping[str, Any]) -> None:
        """``log_history`` gets ``entry`` with its ``step``; ``on_log`` the entry without it."""
        logs = {k: v for k, v in entry.items() if k != "step"}
        if self.state.epoch is not None:
            logs.setdefault("epoch", self.state.epoch)
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.event("on_log", logs=logs)

    def log_called(self, logs: dict[str, Any]) -> None:
        """A script's ``trainer.log(logs)`` outside the run: appended to ``log_history`` and given to
        ``on_log``, as transformers' ``Trainer.log`` does; a callback that raises is raised here. A
        log the step had due (``should_log``, which ``on_log`` clears) is still made: in TRL that
        ``log`` takes the window's GRPO metrics into the script's entry, which polyrl's does not, so
        clearing it would lose the steps' numbers."""
        due = bool(self.control.should_log)
        self._log(logs)
        self.control.should_log = bool(self.control.should_log) or due
        self._raise_deferred()

    def evaluate_called(self, metrics: dict[str, Any]) -> None:
        """A ``trainer.evaluate()`` outside the run (one set's metrics): logged (``log_history``,
        ``on_log``) and ``on_evaluate`` called, as transformers' ``evaluate()`` does; a callback that
        raises is raised here (nothing to checkpoint)."""
        self._one_evaluation(metrics)
        self._raise_deferred()

    def _raise_deferred(self) -> None:
        """The error a callback raised in an event called outside the run, raised now (nothing to
        checkpoint), and forgotten."""
        if self.deferred is not None:
            failed, self.deferred = self.deferred, None
            raise failed

    def _evaluation(self, metrics: dict[str, Any]) -> None:
        """An evaluation of the run (TRL's names), one entry per named eval set where the run has
        them (``step_metrics.trl_eval_entries``), as transformers' ``evaluate()`` of a dict logs each
        set and calls ``on_evaluate`` with its metrics alone."""
        from polyrl.step_metrics import trl_eval_entries

        for entry in trl_eval_entries(metrics, self._eval_sets):
            self._one_evaluation(entry)

    def _one_evaluation(self, metrics: dict[str, Any]) -> None:
        """An evaluation's entry logged, then its completions printed where ``log_completions``
        asks (``RunTracking.show_evaluation``), as TRL's ``log`` prints them after that entry."""
        self._log(metrics)
        if self._tracking is not None:
            self._tracking.show_evaluation()
        self.event("on_evaluate", metrics={**metrics, "epoch": self.state.epoch})

    def _asked(self, epoch: bool = False) -> StepAsk:
        """What ``TrainerControl`` asks of the run now (or the error a callback raised). ``epoch``:
        after the step's callbacks (``on_step_end``, ``on_log``, ``on_evaluate``, ``on_save``), where
        transformers' loop reads ``should_epoch_stop``; read, it is cleared, as transformers' next
        ``on_epoch_begin`` does."""
        if self.deferred is not None:
            return StepAsk(stop=True, failed=str(self.deferred))
        stop, save = self.control.should_training_stop, self.control.should_save
        if stop and self.state.global_step >= self._steps:
            stop = False  # the run ends here anyway
        why = "a callback set control.should_training_stop" if stop else ""
        epoch_stop = epoch and bool(self.control.should_epoch_stop)
        if epoch_stop:
            self.control.should_epoch_stop = False
        if epoch and not stop and self._epochs_done(epoch_stop):
            stop, why = True, "the num_train_epochs are done (a callback set control.should_epoch_stop)"
        return StepAsk(save=bool(save), stop=bool(stop), why=why, epoch_stop=epoch_stop)

    def _epochs_done(self, epoch_stop: bool) -> bool:
        """A run ``num_train_epochs`` size (no ``max_steps``) ends, as transformers' loop over them,
        after the last epoch, which an epoch stop makes come before the steps they were turned
        into: this step ended it (the epoch after an epoch stop is ``ceil(epoch)``)."""
        if getattr(self.args, "max_steps", 0) > 0 or not self.state.num_train_epochs or \
                self.state.global_step >= self._steps:
            return False
        done = self.state.epoch or 0.0
        return (math.ceil(done) if epoch_stop else done) >= self.state.num_train_epochs


def _epoch_ended(epoch: Any) -> bool:
    """Whether a step's TRL ``epoch`` (``step_metrics.trl_epoch``: whole epochs at each epoch's
    last step, counted from the sampler after an epoch stop) says it ended an epoch."""
    return isinstance(epoch, (int, float)) and epoch > 0 and float(epoch).is_integer()


def restore(handler: TrlCallbacks | None, state: Any, resumed: Mapping[str, Any], args: Any,
            checkpoint: Path) -> None:
    """A resumed run's ``state`` and callbacks as transformers' resume leaves them. The fields
    ``checkpoint_state`` kept (``resumed``: the checkpoint's ``observers``; none in one written
    before they were kept) are set on ``state``, as ``TrainerState.load_from_json`` sets them,
    so ``best_metric`` is the pre-crash best an EarlyStoppingCallback compares against. With
    ``args.restore_callback_states_from_checkpoint`` (transformers' default: False) the callbacks
    follow as ``Trainer._load_callback_state`` does: each one (and the control) whose class name
    the checkpoint holds is replaced by one made from the saved ``args`` with the saved
    ``attributes`` (the patience count), moved to the end of the list, several of a class in
    order; a class held without such a callback is ignored with one warning, and a callback the
    checkpoint does not name keeps its own state."""
    saved = resumed.get(STATE_KEY)
    if saved is None:
        return
    where = f"{checkpoint / 'trainer_state.json'}: observers.{STATE_KEY}"

    def refuse(problem: str, fix: str = "restore trainer_state.json as polyrl wrote it, or resume from another "
                                        "checkpoint (resume_from_checkpoint=PATH)") -> ConfigError:
        return ConfigError(f"{where}{problem}", field="resume_from_checkpoint", fix=fix)

    if not isinstance(saved, Mapping):
        raise refuse(f" is {type(saved).__name__}, not an object")
    checks: dict[str, Callable[[Any], bool]] = {
        "best_metric": lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in _NON_FINITE,
        "best_global_step": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
        "best_model_checkpoint": lambda v: isinstance(v, str)}
    for name, fits in checks.items():
        value = saved.get(name)
        if value is not None and not fits(value):
            raise refuse(f".{name} is {value!r}, not {'a path' if name == 'best_model_checkpoint' else 'a number'} "
                         "or null")
        setattr(state, name, float(value) if value in _NON_FINITE else value)
    for key in (UNTOLD_KEY, LOGGED_KEY):
        steps = saved.get(key, [])
        if not (isinstance(steps, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                for v in steps)):
            raise refuse(f".{key} is {steps!r}, not a list of steps")
    entries = saved.get(SCRIPT_LOGS_KEY, [])
    if not (isinstance(entries, list) and all(isinstance(e, Mapping) and isinstance(e.get("step"), int)
                                              and not isinstance(e["step"], bool) and e["step"] >= 0
                                              for e in entries)):
        raise refuse(f".{SCRIPT_LOGS_KEY} is not a list of log_history entries (objects, each with its step, "
                     "a whole number from 0)")
    stored = saved.get("stateful_callbacks") or {}
    if not isinstance(stored, Mapping):
        raise refuse(f".stateful_callbacks is {type(stored).__name__}, not an object")
    state.stateful_callbacks = dict(stored)
    if not getattr(args, "restore_callback_states_from_checkpoint", False) or handler is None:
        return
    _load_callback_state(handler, stored, refuse)


def _kept_steps(resumed: Mapping[str, Any], key: str) -> list[int] | None:
    """The steps under ``key`` (``UNTOLD_KEY``, ``LOGGED_KEY``) a resumed run's checkpoint kept
    (``restore`` checked them); None for a fresh run or a checkpoint written before they were kept."""
    saved = resumed.get(STATE_KEY) if isinstance(resumed, Mapping) else None
    steps = saved.get(key) if isinstance(saved, Mapping) else None
    return [v for v in steps if isinstance(v, int)] if isinstance(steps, list) else None


def _kept_logs(resumed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``script_logs`` a resumed run's checkpoint kept (``restore`` checked them); none for a
    fresh run or a checkpoint written before they were kept."""
    saved = resumed.get(STATE_KEY) if isinstance(resumed, Mapping) else None
    entries = saved.get(SCRIPT_LOGS_KEY) if isinstance(saved, Mapping) else None
    return [dict(e) for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []


def with_script_logs(log_history: list[dict[str, Any]], logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``log_history`` (rebuilt from the run's steps) with the entries a script's ``trainer.log``
    added during the run (``TrlCallbacks.script_logs``), each after the last entry of its step or an
    earlier one, in the order logged. Why: polyrl rebuilds ``state.log_history`` from metrics.jsonl
    when a run ends or resumes, which dropped them, where transformers' keeps every ``Trainer.log``."""
    out = list(log_history)
    for entry in logged:
        step = entry.get("step", 0)
        at = next((i for i in range(len(out), 0, -1) if (out[i - 1].get("step") or 0) <= step), 0)
        out.insert(at, entry)
    return out


def _load_callback_state(handler: TrlCallbacks, stored: Mapping[str, Any],
                         refuse: Callable[..., ConfigError]) -> None:
    """transformers' ``Trainer._load_callback_state`` on ``handler`` (see ``restore``)."""
    not_found, made = [], []
    for name, data in stored.items():
        entries = data if isinstance(data, list) else [data]
        present = [c for c in [*handler.callbacks, handler.control] if type(c).__name__ == name]
        if not present:
            not_found.append(name)
            continue
        for callback, entry in zip(present, entries):
            if not (isinstance(entry, Mapping) and isinstance(entry.get("args", {}), Mapping)
                    and isinstance(entry.get("attributes", {}), Mapping)):
                raise refuse(f".stateful_callbacks.{name} is not an object of args and attributes (objects)")
            try:
                rebuilt = type(callback)(**entry.get("args", {}))
                for attribute, value in entry.get("attributes", {}).items():
                    setattr(rebuilt, attribute, value)
            except Exception as exc:  # noqa: BLE001 - the user's class, made from the saved args
                from polyrl.agents.threads import describe

                raise refuse(f".stateful_callbacks.{name}: {name}(**args) with the saved args raised "
                             f"{describe(exc, run_goes_on=False)}",
                             fix="resume with restore_callback_states_from_checkpoint=False (the callbacks given "
                                 "keep their state), or from another checkpoint") from None
            if callback is handler.control:  # its flags are cleared before use, as transformers' events clear them
                rebuilt.should_epoch_stop = False  # (transformers: the resumed epoch's on_epoch_begin)
                handler.control = rebuilt
            else:
                made.append(rebuilt)
            handler.remove_callback(type(rebuilt))  # transformers' order: the rebuilt ones go last
    if len(not_found) < len(stored):
        log.info("continuing training from the checkpoint, restoring the callbacks' states it holds")
    if not_found:
        log.warning("the checkpoint holds the state of callbacks this run was not given; ignored (as transformers "
                    f"does): {', '.join(not_found)}")
    for rebuilt in made:
        handler.add_callback(rebuilt, where="a callback restored from the checkpoint")


#: a non-finite ``best_metric`` as a checkpoint keeps it: the token transformers' ``trainer_state.json``
#: holds (``json.dumps``' own), as a string, since polyrl's files are strict JSON (``polyrl.strict_json``)
_NON_FINITE = ("Infinity", "-Infinity", "NaN")


def _json_number(value: Any) -> Any:
    """``value`` as a checkpoint keeps it: a non-finite float as its ``_NON_FINITE`` name (``float()``
    reads it back). Why: strict JSON would write ``null``, and a resumed run would then start its
    best afresh, where transformers' ``load_from_json`` restores the infinity ``_determine_best_metric``
    starts from (a NaN evaluation after the resume then counts against EarlyStoppingCallback's
    patience there; after ``null`` it reset it)."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    return value


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
    trainer makes it: nothing logged yet, ``is_world_process_zero`` on rank 0, transformers'
    default step intervals (``run_settings`` sets ``args``' when training starts) and ``args``'
    batch. Why lazily and with a stand-in: the core imports no transformers, and a run on the
    remote backend needs none (``polyrl.rewards.trl_compat.TrainerState`` then, with the same
    fields and ``save_to_json``)."""
    try:
        from transformers import TrainerState
    except ImportError:
        from polyrl.rewards.trl_compat import TrainerState
    state = TrainerState(is_world_process_zero=rank == 0, is_local_process_zero=local_rank == 0, log_history=[])
    # transformers' defaults until train() sets them from args (``run_settings``); the stand-in's differ
    state.logging_steps = state.eval_steps = state.save_steps = STEPS_DEFAULT
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


#: ``TrainerState``'s ``logging_steps``/``eval_steps``/``save_steps`` before ``compute_steps`` sets them
STEPS_DEFAULT = 500


def run_settings(state: Any, trainer: Any, args: Any, intervals: bool = True) -> None:
    """The fields of ``state`` a run sets when it starts: ``max_steps`` and ``num_train_epochs``
    from polyrl's ``trainer`` (a ``polyrl.trainer.Trainer``: its steps in optimizer updates), and
    with ``intervals`` ``logging_steps``, ``eval_steps`` and ``save_steps`` from TRL's ``args``
    (``compute_steps``). Without: the intervals the run had stay, as transformers sets them once when
    training starts (a callback's change of the state's stands, one of ``args``' has no effect)."""
    from polyrl.step_metrics import trl_epoch

    c, per_step = trainer.config.train, updates_per_step(trainer)
    state.max_steps = c.steps * per_step
    if intervals:
        compute_steps(state, args, state.max_steps)
    state.num_train_epochs = math.ceil(trl_epoch(c.steps, c.prompts_per_step, len(trainer.dataset)))


def compute_steps(state: Any, args: Any, max_steps: int) -> None:
    """transformers' ``TrainerState.compute_steps``: ``logging_steps``, ``eval_steps`` and
    ``save_steps`` are ``args``' own, whatever the strategies (a fraction below 1 of ``max_steps``
    rounded up; an unset one keeps its value). Why not polyrl's intervals: a callback comparing
    them with its ``GRPOConfig`` (or ``global_step % state.save_steps``) reads TRL's numbers, and
    polyrl's were its checkpoint or evaluation interval in other cases ("epoch", a default 500
    rounded to whole steps). Written here: the core's stand-in ``TrainerState`` has no such method."""
    for kind in ("logging", "eval", "save"):
        steps = getattr(args, f"{kind}_steps", None)
        if isinstance(steps, numbers.Real) and not isinstance(steps, bool):
            setattr(state, f"{kind}_steps", math.ceil(max_steps * float(steps)) if steps < 1 else steps)


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
