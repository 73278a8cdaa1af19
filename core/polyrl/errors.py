"""Errors a user can act on: each names the field at fault and how to fix it."""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"\s+")


def one_line(text: str) -> str:
    """``text`` with each run of whitespace (newlines included) as one space.

    Why: the CLI promises ONE ``error:`` line, and a library's multi-line text wrapped in an error
    (torch's UnpicklingError, a module's traceback-like message) broke it in two; nothing of the
    text, its ``Fix:`` part included, is dropped."""
    return _WHITESPACE.sub(" ", text).strip()


def _starts_with_field(message: str, field: str) -> bool:
    """Whether ``message`` opens with ``field`` as a word (``"data.split must ..."``, ``"lr: ..."``).

    Why not "appears anywhere": a field named mid-sentence, or inside a longer word ("lr" in
    "lr_schedule", "data" in "dataset", "model" in "the embedded model"), dropped the prefix and the
    error line then named no field at all."""
    return message.startswith(field) and message[len(field):len(field) + 1] in ("", ":", " ")


class PolyrlError(Exception):
    """Base class: anything polyrl raises on purpose."""


class ConfigError(PolyrlError, ValueError):
    """A configuration value is missing or invalid; ``field`` names it (dotted path)."""

    def __init__(self, message: str, field: str | None = None, fix: str | None = None):
        self.message = message
        self.field = field
        self.fix = fix
        super().__init__(self._text())

    def _text(self) -> str:
        text = self.message
        if self.field and not _starts_with_field(self.message, self.field):
            text = f"{self.field}: {text}"
        if self.fix:
            text = f"{text}. Fix: {self.fix}"
        return text

    def under(self, section: str) -> ConfigError:
        """The same error with ``field`` placed under ``section`` (``temperature`` ->
        ``generation.temperature``), unless it already names a top-level section."""
        root = section.split(".")[0].split("[")[0]
        if self.field and not self.field.startswith(root):
            self.renamed(f"{section}.{self.field}")
        return self

    def renamed(self, field: str | None, in_fix: bool = False) -> ConfigError:
        """The same error naming ``field`` instead (its text follows). ``in_fix``: the fix's mentions
        of the old field name the new one too (a TRL script never wrote polyrl's ``logging.project``,
        so "give logging.project a value" pointed at nothing it holds)."""
        if in_fix and self.fix and self.field and field:
            self.fix = re.sub(rf"(?<![\w.]){re.escape(self.field)}(?!\w)", field, self.fix)
        self.field = field
        self.args = (self._text(),)
        return self


class TemplateRefused(ConfigError):
    """A chat template's rendering went past one of ``polyrl.backend_kit.template_limits``' bounds;
    ``reason`` says which. A class of its own because a conversation's own size can be at fault (an
    episode's environment wrote megabytes), and then that episode ends, not the run."""

    def __init__(self, message: str, reason: str, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(message, field=field, fix=fix)
        self.reason = reason


class OutOfMemory(PolyrlError):
    """This process could not get the memory it asked for (a ``MemoryError``) while it did
    ``what``. Not a ConfigError: no setting is at fault (a chat template renders within
    ``template_limits``' bounds), the machine or a limit on the process is short, so a message
    blaming the model folder's template sent the user to fix what was not broken."""

    def __init__(self, what: str, kept: str | None = None) -> None:
        resume = f"; {kept}" if kept else ", then run again (a training run continues from its last checkpoint with --resume)"
        super().__init__(f"out of memory while {what}: this process could not get the memory it asked for (the "
                         "machine's, or a limit set on the process); no setting is at fault. Fix: free memory (other "
                         f"processes, fewer rows or episodes a step) or raise the process's memory limit{resume}")
        self.what = what
        #: what of the run was kept for a resume (the trainer's words), None: not said
        self.kept = kept


class BackendUnavailable(PolyrlError):
    """A backend exists but cannot run here (missing package, no device) or does not exist."""


class BenchFailed(PolyrlError):
    """Every side of ``polyrl bench`` failed: nothing was measured (its report keeps each side's error)."""


class RewardError(PolyrlError):
    """A reward function raised or returned something unusable."""


class CallbackError(PolyrlError):
    """A user's code watching the run raised (``polyrl.run_observer``: ``polyrl.trl``'s transformers
    ``TrainerCallback``); it names the callback and the event. The run stops there, its checkpoints
    as they were (under a launcher on every rank together, after the step)."""


class EnvironmentFailed(PolyrlError):
    """An environment that never works stops the run: every episode of ``MAX_FAILED_ROLLOUTS``
    rollouts in a row ended in an environment error, the environment's calls left running past
    their limit reached ``MAX_ABANDONED`` (``polyrl.agents.episodes``), or an environment call
    raised it itself (TRL's ``environment_factory``: the run stops at once, as TRL's).
    ``alone``: one rank's failure stops every rank (its threads pile up whatever the others do).
    Here, not in the agents package, so the trainer catches it without loading that package."""

    def __init__(self, message: str, alone: bool = False) -> None:
        super().__init__(message)
        self.alone = alone

    def shared(self) -> str | tuple[str, bool]:
        """What a rank gathers to its peers (``agreed_failure``)."""
        return (str(self), True) if self.alone else str(self)


class PluginError(PolyrlError):
    """A plugin misbehaved (raised in a hook, returned the wrong type)."""


class NonFiniteModel(PolyrlError):
    """An engine answered non-finite log-probs: the model's weights are no longer finite (most often
    a learning rate too high), or the backend is faulty. Stops the run before it samples or trains
    on them (a NaN sampler log-prob skipped every step, a -inf one was capped into the gradient)."""


class CollectiveTimeout(ConfigError):
    """A rank waited past ``train.collective_timeout_s`` in a collective for the others: one of them
    is stuck (or far slower) outside anything with a timeout of its own. Raised by a backend,
    which knows the collective; the trainer adds the phase it was in (``during``)."""

    FIELD = "train.collective_timeout_s"

    def __init__(self, collective: str, timeout_s: float, rank: int, world_size: int, phase: str = "") -> None:
        self.collective, self.timeout_s, self.rank, self.world_size = collective, timeout_s, rank, world_size
        self.phase = phase
        super().__init__(self._message(), field=self.FIELD, fix=self._fix())

    def _message(self) -> str:
        where = f" during {self.phase}" if self.phase else ""
        return (f"rank {self.rank} of {self.world_size} waited {self.timeout_s:g} s in {self.collective}{where} "
                "for the other ranks: one of them is stuck or far slower (its own log says where it was)")

    def _fix(self) -> str:
        return (f"if the ranks are only slow, raise it (e.g. --set {self.FIELD}={max(2 * self.timeout_s, 600):g}); "
                "else find what the late rank waits on, then resume with --resume")

    def during(self, phase: str) -> CollectiveTimeout:
        """The same error naming the trainer's phase (kept when one is already named)."""
        if not self.phase:
            self.phase = phase
            self.message = self._message()
            self.args = (self._text(),)
        return self


class StoppedAtOnce(KeyboardInterrupt):
    """A second Ctrl-C left the run mid-step (``phase``: where it was); the steps before it are
    as the last checkpoint holds them. A ``KeyboardInterrupt``, so a script or notebook calling the
    run stops as Python stops on Ctrl-C."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase
