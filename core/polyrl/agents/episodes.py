"""Multi-turn episodes, exact to the token: generate, call tools / the environment, continue.

An episode is built as one token sequence: the first prompt (the chat template applied to the
environment's first messages, with the tools' schemas), then alternating segments:

* sampled: the generator's own ids and log-probs for one assistant turn (loss mask True);
* inserted: the template's glue after that turn, the tool results or the environment's
  observation, and the next assistant header (loss mask False, log-prob 0).

Turn k+1 is generated from ``TokenPrompt(prompt + segments so far)``: what the model sampled is
never decoded and re-encoded (the text is decoded for parsing tool calls and for rewards only).
The result is an ordinary ``Completion`` whose ``mask`` marks the sampled tokens, so the rest of
the trainer (rewards, advantages, the loss, checkpoints) handles episodes like single turns.

All episodes of a step advance together: each turn is one batched ``generate`` call over the
episodes still running, and their tool calls and environment steps of that turn run concurrently
(bounded by the tool box).

The environment's code (its factory, ``reset``, ``step``, its own tools through the tool box and
their schemas, its ``rewarded`` and ``episode_over`` after the rollout) runs on a daemon thread of
the episode's own, with a time limit per call (``polyrl.agents.threads.Worker``: one thread and
event loop per environment, so state it ties to either keeps working from ``reset`` to the last ``step`` and its
``episode_over``, after the rollout): whatever it raises (``sys.exit`` included), a call past
the limit, or an answer that is not a valid ``Observation`` ends that episode as an environment
error (``info["env_error"]``), never the run (``episode_over`` raising is only a warning). Such an episode is unscored (no reward sees it, see
``polyrl.episode_scoring``): it is trained neither for nor against. A rollout in which every episode
ended so is not trained (``untrainable``); ``MAX_FAILED_ROLLOUTS`` of them in a row stop the run
(``EnvironmentFailed``), since an environment that never works cannot be trained against. An
environment call that raises ``EnvironmentFailed`` itself (TRL's environments do where TRL's run
stops: ``polyrl.agents.trl_environments``) ends its episode so too, no turn of that rollout is
sampled, and the trainer stops the run before the rollout is scored or trained (``raised``). So does
a first message in a role the chat template drops, or an assistant tool call it writes without the
call (``_dropped_role``): the environment's code writes it every time, so waiting for ``MAX_FAILED_ROLLOUTS`` would only spend rollouts.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from polyrl.agents.control_text import environment_misread, tool_result_misread
from polyrl.agents.glue import ChatGlue, EncodeChat, RenderError, content_left_out, model_text_left_out
from polyrl.agents.prompting import template_ignores_tools, tool_results_as_user, with_tools_prompt
from polyrl.agents.sizes import content_chars
from polyrl.agents.spec import (Observation, checked_environment, checked_reset, checked_step, end_episode,
                                environment_tools, plain_text, rewarded_environment)
from polyrl.agents.threads import (MAX_ABANDONED, CallRaised, CallTimedOut, LateCalls, Worker, describe, described,
                                   finished, raised_text)
from polyrl.agents.tools import ToolBox, ToolCall, error_message, quoted
from polyrl.control_chars import ControlProbe
from polyrl.errors import ConfigError, EnvironmentFailed
from polyrl.reasoning import opens_reasoning
from polyrl.logs import get_logger
from polyrl.rewards.trl_compat import private_copy
from polyrl.stored_rows import for_reset
from polyrl.template_roles import CALL_FIX, MODEL_FIX, ROLE_FIX, TemplateRoles
from polyrl.types import Completion, FinishReason, Prompt, SamplingParams, TokenPrompt

if TYPE_CHECKING:
    from polyrl.backend_kit.eos_rest import EosRest

log = get_logger(__name__)

Generate = Callable[[Sequence[Prompt], SamplingParams], list[Completion]]

#: Rollouts in a row whose every episode ended in an environment error before the run stops.
MAX_FAILED_ROLLOUTS = 3

#: Where seeds derived for a later turn or a budget group start (``turn_seed``): above every step
#: seed the trainer makes (``_step_seed`` + 104729 x rank, below 2**32), and with room below 2**63
#: (the largest seed every backend and ``polyrl serve`` take) for the per-prompt offsets added to them.
DERIVED_SEEDS = (2**32, 2**62)

#: Characters of message content per token of room past which messages are refused unread: no
#: tokenizer's tokens average this many characters (about 4 in text), so such messages cannot
#: fit. Why: a 7.5 M-character observation took 51 s and 3.5 GB to render and tokenize (on the
#: main thread, outside env_timeout_s) only to end its episode as ``length`` after.
MAX_CHARS_PER_TOKEN = 32

#: The tokens an environment's first messages are bounded by when no ``max_length`` is given
#: (``EpisodeLimits(max_length=None)``, the API's default; a run always has ``model.max_length``):
#: the longest context common models take. Why: without a bound a ``reset`` answering 100 MB was
#: checked, copied and rendered whole before anything could refuse it.
UNBOUNDED_FIRST_TOKENS = 131_072


def agreed_failure(failures: Sequence[object]) -> EnvironmentFailed | None:
    """Under a launcher, the error every rank raises, from each rank's ``failure().shared()`` (or
    None) in rank order. Each rank counts its own shard's rollouts, so the global streak of rollouts
    whose every episode failed is the shortest of theirs: the run stops once every rank's streak
    reached the limit, with rank 0's text, and on every rank together (a rank stopping alone left
    its peers waiting for it in the next step's collectives). A failure one rank's is enough for
    (``alone``: its abandoned calls reached the cap) stops every rank with the first such text."""
    alone = [f for f in failures if isinstance(f, tuple) and len(f) == 2 and f[1]]
    if alone:
        return EnvironmentFailed(str(alone[0][0]), alone=True)
    if not failures or any(f is None for f in failures):
        return None
    first = failures[0]
    return EnvironmentFailed(str(first[0] if isinstance(first, tuple) else first))


class _EnvError(Exception):
    """An environment call failed; ``text`` says how (the episode's ``env_error``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@attrs.define(frozen=True)
class EpisodeLimits:
    """How long an episode may run."""

    max_turns: int = 4  # assistant turns (generate calls) per episode
    #: tokens after the first prompt, sampled and inserted together; each turn samples at most
    #: ``min(max_new_tokens, what is left)``
    max_episode_tokens: int = 512
    #: ``model.max_length``: the first prompt and the episode's tokens together stay within it (an
    #: environment writes its own first messages and observations, so no startup check sees them)
    max_length: int | None = None
    #: tool calls run per assistant turn; those past it are answered with an error, not run
    max_tool_calls_per_turn: int = 8

    def may_fit(self, messages: Sequence[Mapping[str, Any]], tokens: int) -> bool:
        """Whether ``messages`` may fit in ``tokens`` tokens, judged before any rendering: at most
        ``MAX_CHARS_PER_TOKEN`` content characters a token (a bound no real text reaches) and one
        message a token (a template writes at least a role's marker for each); past either they
        are refused unrendered. Why count messages too: 100,000 empty messages held no characters
        and took 100 s of the trainer's thread to render and tokenize, only to end as ``length``."""
        room = max(tokens, 0)
        return len(messages) <= room and content_chars(messages, MAX_CHARS_PER_TOKEN * room) <= MAX_CHARS_PER_TOKEN * room

    def cap(self, prompt_tokens: int) -> int:
        """The most tokens an episode whose first prompt has ``prompt_tokens`` may hold after it."""
        if self.max_length is None:
            return self.max_episode_tokens
        return min(self.max_episode_tokens, self.max_length - prompt_tokens)


@attrs.define(frozen=True)
class _Made:
    """An environment the factory made for episode ``index``, and the worker its code runs on."""

    index: int
    env: Any
    worker: Worker


@attrs.define
class _Episode:
    """One running episode's state."""

    index: int  # its position in the step's output (prompt-major, as generate's groups)
    row: Mapping[str, Any]
    env: Any
    first_messages: list[dict[str, Any]]
    prompt_ids: np.ndarray
    worker: Worker | None = None  # where the environment's code runs (None: no environment)
    toolbox: ToolBox | None = None
    ids: list[int] = attrs.field(factory=list)
    logprobs: list[float] = attrs.field(factory=list)
    mask: list[bool] = attrs.field(factory=list)
    texts: list[str] = attrs.field(factory=list)
    messages: list[dict[str, Any]] = attrs.field(factory=list)
    turns: int = 0
    done: bool = False
    finish_reason: FinishReason = "stop"
    env_reward: float | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    #: calls of the last turn ``max_turns`` allows: never run, and left out of TRL's ``tools/*``
    #: metrics (TRL's loop stops after ``max_tool_calling_iterations`` rounds, running and counting
    #: none of the next turn's calls), while ``tool_calls`` counts them
    unrun_last_turn_calls: int = 0
    format_errors: int = 0
    env_error: str | None = None
    #: the environment's first messages (before tool instructions); None: the dataset prompt's
    asked: list[dict[str, Any]] | None = None
    #: what the rewards get as its environment (``rewarded_environment``), read on its thread once
    #: the rollout is over (``_end_episode``); None: no environment, or it could not be read
    rewarded: Any = None

    def context(self) -> list[dict[str, Any]]:
        return [*self.first_messages, *self.messages]

    def add(self, ids: Sequence[int] | np.ndarray, logprobs: Sequence[float] | np.ndarray | None, sampled: bool) -> None:
        self.ids.extend(int(i) for i in ids)
        self.logprobs.extend([float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids))
        self.mask.extend([sampled] * len(ids))

    def completion(self, prompt_index: int, decode_text: str) -> Completion:
        info: dict[str, Any] = {"turns": self.turns, "tool_calls": self.tool_calls, "tool_errors": self.tool_errors,
                "format_errors": self.format_errors, "env_reward": self.env_reward,
                "unrun_last_turn_calls": self.unrun_last_turn_calls}
        if self.env_error is not None:
            info["env_error"] = self.env_error
        return Completion(prompt_index=prompt_index, prompt_ids=self.prompt_ids,
                          completion_ids=np.asarray(self.ids, dtype=np.int64),
                          logprobs=np.asarray(self.logprobs, dtype=np.float32), text=decode_text,
                          finish_reason=self.finish_reason, mask=np.asarray(self.mask, dtype=bool),
                          messages=list(self.messages), info=info, prompt_messages=self.asked,
                          environment=self.rewarded)


def turn_seed(seed: int | None, turn: int, group: int) -> int | None:
    """The seed of turn ``turn``'s budget group ``group`` in a step seeded ``seed``: the step's seed
    itself for the first turn's widest group (so a one-turn episode samples as a single-turn step
    does), else a hash of the three (numpy ``SeedSequence``) in ``DERIVED_SEEDS``. Why a hash: the
    earlier ``seed + 7919 turn + 104729 group`` were the very offsets of the trainer's step and
    rank seeds, so turn 1 of step s drew step s+1's random numbers and group 1 rank 1's."""
    if seed is None:
        return None
    if turn == 0 and group == 0:
        return seed
    seed &= 2**64 - 1  # four 32-bit words: the entropy of two different triples never coincides
    words = np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, turn, group]).generate_state(2, np.uint32)
    low, high = DERIVED_SEEDS
    return low + ((int(words[0]) << 32) | int(words[1])) % (high - low)


def _past(messages: Sequence[Mapping[str, Any]], budget: int | None) -> bool:
    """Whether an environment's ``messages`` are past ``budget`` characters: the runner refuses
    those by size, unkept, so they are neither copied nor made plain text on the environment's
    thread (a 100 MB value took it seconds, only to be dropped)."""
    return budget is not None and content_chars(messages, budget) > budget


def as_messages(prompt: Any) -> list[dict[str, Any]]:
    """A dataset prompt as chat messages (a text prompt becomes one user message); any other value
    is a ConfigError naming the column (it was a TypeError from deep in a rollout)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": plain_text(prompt)}]
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(m, Mapping) for m in prompt):
        raise ConfigError(f"a row's prompt must be text or a list of chat messages, got {_kind(prompt)}",
                          field="data.prompt_column",
                          fix='give each row\'s prompt as a string or as [{"role": "user", "content": "..."}, ...]')
    return [plain_text(dict(m)) for m in prompt]


def _kind(value: Any) -> str:
    """What a prompt value is, for an error (its type, and the first element's for a list)."""
    if isinstance(value, (list, tuple)):
        odd = next((m for m in value if not isinstance(m, Mapping)), None)
        return f"a {type(value).__name__} holding a {type(odd).__name__}"
    return "None" if value is None else f"a {type(value).__name__}"


class EpisodeRunner:
    """Runs a step's episodes; see the module docstring.

    ``make_environment(row)`` returns a fresh environment per episode, or None for plain tool use
    (the episode then ends at the first turn without a tool call). ``toolbox`` runs tool calls
    (``polyrl.agents.tools.ToolBox``); ``parse(text)`` finds them in a turn's text
    (``parse(text, reasoning_open=True)`` after a generation prompt that opened ``<think>``).
    ``probe``: the model tokenizer's ``ControlProbe``; an environment's first messages or
    observation holding a control character it misreads end the episode as an environment error,
    a tool's result holding one is answered with an error (``polyrl.agents.control_text``).
    ``eos_ids``: the generator's end-of-sequence ids; ``eos_rest``: the tokenizer's reading of an
    end marker one of whose tokens' text holds the EOS a turn stopped on (``<|im_end|>\\n`` added as
    one token: ``polyrl.backend_kit.eos_rest``; None: such a marker goes whole after that EOS).
    """

    def __init__(self, generate: Generate, encode_chat: EncodeChat, limits: EpisodeLimits,
                 make_environment: Callable[[], Any] | None = None, toolbox: ToolBox | None = None,
                 parse: Callable[..., Any] | None = None, prompt_column: str = "prompt",
                 tools_prompt_format: str = "hermes", env_timeout_s: float = 60.0,
                 environment_name: str | None = None, tool_timeout_s: float = 10.0,
                 max_concurrent_tools: int = 8, tool_format: str = "auto", model_name: str | None = None,
                 max_abandoned: int = MAX_ABANDONED, probe: ControlProbe | None = None,
                 eos_ids: Collection[int] | None = None, eos_rest: EosRest | None = None) -> None:
        self.generate = generate
        #: the generator's end-of-sequence ids: a turn that stopped on one holds its end-of-turn
        #: token already, whatever text the template writes before it (``ChatGlue._rest_of``)
        self.eos_ids = frozenset(int(i) for i in eos_ids or ())
        self.probe = probe
        self.limits = limits
        self.make_environment = make_environment
        self.toolbox = toolbox
        #: what an environment's own tools extend when [environment] tools is empty: the run's
        #: timeout and its bound across the step's episodes (ToolBox's defaults would be neither)
        self._env_tools_base = toolbox if toolbox is not None else ToolBox(
            (), timeout_s=tool_timeout_s, max_concurrency=max_concurrent_tools)
        self.parse = parse
        self.prompt_column = prompt_column
        self.tools_prompt_format = tools_prompt_format  # how a template without tools hears of them
        self.tool_format = tool_format  # what ``parse`` reads (environment.tool_format)
        self.glue = ChatGlue(encode_chat, self.eos_ids, eos_rest)
        self._template_ignores_tools: bool | None = None
        self._first_roles = TemplateRoles()  # which roles the template shows in a first prompt
        #: the role a tool's result is rendered as: "tool", or "user" for a template that cannot
        #: show a tool message (``check_tool_results``); None until asked
        self.tool_results_role: str | None = None
        self._shows_no_tool_results: str | None = None  # why the template shows a tool's result in no role
        self.tool_results_reason: str | None = None  # why a tool's result goes as a user message
        self.model_name = model_name  # how errors about the model's chat template name it
        self.env_timeout_s = float(env_timeout_s)  # per call of the environment's code
        self.environment_name = environment_name  # how warnings and errors name it
        #: the environment's calls (create, reset, step) left running past env_timeout_s, capped as
        #: tools' are; once the cap is reached no call starts and the run stops (``failure``)
        self._late = LateCalls(max_abandoned)
        self._too_many_late: str | None = None  # why the run stops, once the cap was reached
        self._stop: EnvironmentFailed | None = None  # what an environment raised to stop the run
        self.failed_rollouts = 0  # rollouts in a row whose every episode ended in an environment error
        self._warned_silent_step = False  # a step with no messages and done=False was reported
        self._warned_refused = False  # a turn the chat template refused was reported
        self._warned_last_words = False  # a final observation too large to keep was reported
        self._warned_tool_control = False  # a tool result holding a control character was reported
        self.last_env_error: str | None = None
        #: the template's generation prompt ids when they open a ``<think>`` (``reasoning.think_suffix``,
        #: set by the trainer): a turn sampled after them without ``</think>`` holds no tool call
        self.think_suffix: np.ndarray | None = None

    # --- the environment's code -----------------------------------------------------------------

    @property
    def _env_name(self) -> str:
        return self.environment_name or ("tools" if self.make_environment is None else "environment")

    async def _env_call(self, worker: Worker, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` (the environment's code and the checks of its answer) on the episode's worker
        with the time limit; ``_EnvError`` with what went wrong, logged naming the environment.
        No call starts once ``max_abandoned`` earlier ones still run past their limit (each holds a
        thread that cannot be stopped): the episode ends and the run stops (``failure``)."""
        if self._late.full:
            error = self._capped()
            log.warning(f"environment {what} not run; episode ended", environment=self._env_name, error=error)
            raise _EnvError(error)
        try:  # what it raises is described on its thread, within the limit (its __str__ is its code)
            return await worker.call(described(fn), self.env_timeout_s)
        except CallRaised as raised:
            cause, error = raised_text(raised)
            if isinstance(cause, EnvironmentFailed):  # the run stops once the resets are done
                if self._stop is None:
                    self._stop = cause
                raise _EnvError(error) from None
        except CallTimedOut as timed_out:
            error = (f"{what} did not return within {self.env_timeout_s:g} s (environment.env_timeout_s); "
                     "abandoned, its thread may keep running")
            if self._late.add(timed_out) and self._late.full:
                self._capped()
        log.warning(f"environment {what} failed; episode ended", environment=self._env_name, error=error)
        raise _EnvError(error)

    def _capped(self) -> str:
        """Record (once) that the environment's abandoned calls reached the cap; the error text."""
        if self._too_many_late is None:
            self._too_many_late = (
                f"environment {self._env_name!r}: {self._late.limit} of its calls (create/reset/step/episode_over) "
                f"are still running past environment.env_timeout_s = {self.env_timeout_s:g} s, each on a thread that "
                "cannot be stopped; stopping rather than adding a thread per episode. Fix: make reset/step return "
                "(bound their own waits: a request timeout, a subprocess timeout), or raise "
                "environment.env_timeout_s if they are only slow")
            log.error("the environment's calls past their time limit reached the cap; no more run and the run "
                      "stops", environment=self._env_name, running_late=self._late.running,
                      max_abandoned=self._late.limit)
        return f"not run: {self._too_many_late}"

    def _warn_silent_step(self) -> None:
        """Once per run: a step answered no messages yet ``done=False``. The model would have
        nothing to answer, so the episode ends there (scored as usual); the warning says so,
        since the environment asked for the episode to go on."""
        if self._warned_silent_step:
            return
        self._warned_silent_step = True
        log.warning("the environment's step returned no messages and done=False; the episode ended there "
                    "(the model has nothing new to answer). Fix: return Observation(messages=[...]) to go on, "
                    "or Observation(done=True) to end it", environment=self._env_name)

    def _ended(self, ep: _Episode, error: str) -> None:
        ep.env_error, ep.done = error, True

    # --- first observation ------------------------------------------------------------------

    async def _reset(self, index: int, row: Mapping[str, Any], made: list[_Made]) -> _Episode:
        """Episode ``index``'s environment made and reset, and its first prompt; ``made`` gets the
        environment with its worker (``end_episode`` there once the rollout is over, then the
        worker is closed: whatever ends the episode, its worker is ``made``'s from then on)."""
        toolbox = self.toolbox
        env, worker = None, None
        if self.make_environment is not None:
            make = self.make_environment
            worker = Worker(name=f"polyrl-env-{index}")
            try:
                env = await self._env_call(worker, "create", lambda: checked_environment(make()))
                self._check_unshared(env, made)
            except _EnvError as failed:  # a broken environment ends its episode (empty, untrained), not the run
                worker.close()  # no environment of its own to tell
                return self._failed_at_reset(index, row, failed.text)
            made.append(_Made(index, env, worker))
            try:
                first, own = await self._env_call(worker, "reset",
                                                  lambda: self._first_messages(env, row, self._first_budget()))
            except _EnvError as failed:
                return self._failed_at_reset(index, row, failed.text)
            if own:  # tools bound to this episode's environment; the step's bound still holds
                try:
                    box = await self._env_call(worker, "tools", lambda: self._own_tools(own, worker))
                except _EnvError as failed:
                    return self._failed_at_reset(index, row, failed.text)
                if isinstance(box, str):  # a schema or a name the setup check did not see: this episode's
                    log.warning("environment tools failed; episode ended", environment=self._env_name, error=box)
                    return self._failed_at_reset(index, row, box)
                toolbox = box
        else:
            if self.prompt_column not in row:
                raise ConfigError(f"a row has no column {self.prompt_column!r} (it has {sorted(map(str, row))[:8]})",
                                  field="data.prompt_column",
                                  fix="set data.prompt_column (prompt_column=) to the column that holds the prompt")
            first = as_messages(row[self.prompt_column])
        if env is not None and worker is not None and (oversize := self._oversize_first(first)) is not None:
            log.warning("an episode's first prompt does not fit; episode ended", environment=self._env_name,
                        error=oversize)
            return self._failed_at_reset(index, row, oversize)
        if env is not None and (misread := environment_misread(self.probe, self._env_name, "its reset", first)):
            log.warning("an episode's first messages hold a control character the model's tokenizer cannot encode; "
                        "episode ended", environment=self._env_name, error=misread)
            return self._failed_at_reset(index, row, misread)
        if (dropped := self._dropped_role(first, toolbox, env)) is not None:
            log.warning("the chat template drops a message of an episode's first prompt; episode ended",
                        environment=self._env_name, error=dropped)
            if self._stop is None:  # the environment's code and the template, not this row: the run stops
                self._stop = EnvironmentFailed(f"environment {self._env_name!r}: {dropped}", alone=True)
            return self._failed_at_reset(index, row, dropped)
        asked = copy.deepcopy(first) if env is not None else None  # what rewards and the log see as the prompt
        first = self._with_tool_instructions(first, toolbox)
        try:
            prompt_ids = self.glue.prompt(first, toolbox.schemas if toolbox is not None else None)
        except RenderError as exc:
            if env is None:  # the dataset's prompt: the run's setup is at fault
                raise
            log.warning("the chat template cannot render the environment's first messages; episode ended",
                        environment=self._env_name, error=str(exc))
            return self._failed_at_reset(index, row, str(exc))
        limit = self.limits.max_length
        if limit is not None and len(prompt_ids) >= limit:  # this row's content, not the run: the episode ends
            error = (f"the first prompt has {len(prompt_ids)} tokens as the model sees it (chat template included), "
                     f"not below model.max_length = {limit}")
            log.warning("an episode's first prompt does not fit; episode ended", environment=self._env_name,
                        error=error)
            return _Episode(index=index, row=row, env=None, first_messages=first, prompt_ids=prompt_ids, done=True,
                            env_error=error, asked=asked)
        return _Episode(index=index, row=row, env=env, first_messages=first, toolbox=toolbox, prompt_ids=prompt_ids,
                        worker=worker, asked=asked)

    def _dropped_role(self, first: list[dict[str, Any]], toolbox: Any, env: Any) -> str | None:
        """Why the first prompt cannot be shown whole: a message in a role the chat template does not
        render (``polyrl.template_roles``; Qwen2.5's drops ``developer`` and ``ipython``), or None.
        Asked of the prompt as it is rendered, tool instructions included; once per conversation
        shape, with or without tools. An environment's such message ends its episode and stops the
        run (``raised``): its ``reset`` writes that role every time, so every episode would end so,
        for ``MAX_FAILED_ROLLOUTS`` rollouts. A dataset prompt's is the run's setup at fault (a
        ConfigError; the startup check finds it first in a run)."""
        schemas = toolbox.schemas if toolbox is not None else None

        def render(messages: list[dict[str, Any]]) -> Any:
            return self.glue.prompt(self._with_tool_instructions(messages, toolbox), schemas)

        found = self._first_roles.problem(first, render, context=bool(schemas))
        fix, model_fix = ROLE_FIX, MODEL_FIX
        if found is None:
            # an assistant tool call the template writes without its calls (SmolLM2's writes the content
            # alone): the model would read an empty turn, as a dataset prompt's is refused at startup
            call = self._first_roles.dropped_call(first, render, context=bool(schemas))
            if call is None:
                return None
            found = (call, "is an assistant tool call that the model's chat template does not render (it writes no "
                           "tool_calls): the model would never read that call")
            fix, model_fix = CALL_FIX, ", or use a model whose chat template renders tool calls"
        i, what = found
        if env is None:
            raise ConfigError(f"message {i} of the prompt in column {self.prompt_column!r} {what}", field="data",
                              fix=fix + model_fix)
        return f"{type(env).__name__}.reset message {i} {what}. Fix: {fix}"

    def _check_unshared(self, env: Any, made: Sequence[_Made]) -> None:
        """``_EnvError`` when the factory returned an instance another episode of this rollout has.
        Why: the episodes run at once, each on its own thread, so they would share (and race on)
        its state, silently; the setup's probe (two calls) cannot see a factory handing out a
        small pool's instances in turn."""
        if any(entry.env is env for entry in made):
            error = (f"the factory returned a {type(env).__name__} instance that another episode of this rollout "
                     "already has (the episodes run at once: they would share its state). Fix: return a new "
                     "instance on every call of the factory")
            log.warning("environment create failed; episode ended", environment=self._env_name, error=error)
            raise _EnvError(error)

    def _first_tokens(self) -> int:
        """The tokens an environment's first messages must fit: ``max_length``, else
        ``UNBOUNDED_FIRST_TOKENS``."""
        limit = self.limits.max_length
        return UNBOUNDED_FIRST_TOKENS if limit is None else limit

    def _oversize_first(self, first: Sequence[Mapping[str, Any]]) -> str | None:
        """Why an environment's first messages cannot fit ``model.max_length`` (or, without one,
        ``UNBOUNDED_FIRST_TOKENS``), judged by their size before the template renders them (see
        ``MAX_CHARS_PER_TOKEN``), or None."""
        limit = self._first_tokens()
        if self.limits.may_fit(first, limit):
            return None
        budget = MAX_CHARS_PER_TOKEN * limit
        chars = content_chars(first, budget)
        counted = " or more" if chars > budget and any(set(m) - {"role", "content"} for m in first) else ""
        given = self.limits.max_length is not None
        bound = f"model.max_length = {limit}" if given else f"the {limit:,}-token bound on a first prompt without max_length"
        return (f"the environment's first messages ({len(first):,} message(s), {chars:,} characters{counted}) "
                f"cannot fit {bound} tokens (at most one message and {MAX_CHARS_PER_TOKEN} "
                "characters a token): they were not rendered"
                + ("" if given else " (EpisodeLimits(max_length=...) sets another bound)"))

    def _first_budget(self) -> int:
        """The characters an environment's first messages may hold (``_oversize_first``'s bound)."""
        return MAX_CHARS_PER_TOKEN * max(self._first_tokens(), 0)

    @staticmethod
    def _first_messages(env: Any, row: Mapping[str, Any],
                        budget: int | None = None) -> tuple[list[dict[str, Any]], list[Callable[..., Any]]]:
        """On the environment's thread: its checked first messages and the tools it offers. The
        environment gets a copy of the row: the group's episodes share one row object, which the
        rewards and the completions log read afterwards, so an environment editing it in place
        would change its siblings' games and what the rewards score. The messages are a copy too
        (as each step's are), made there: an environment editing what it answered later (a nested
        value it keeps) changes nothing the episode recorded. Messages past ``budget`` characters
        are neither JSON-checked nor copied (``_past``): they are refused by size."""
        first = checked_reset(env, finished(env.reset(private_copy(for_reset(env, row)))), budget)
        if _past(first, budget):
            return first, environment_tools(env)
        return copy.deepcopy(as_messages(first)), environment_tools(env)

    def _own_tools(self, own: Sequence[Callable[..., Any]], worker: Worker) -> ToolBox | str:
        """On the environment's thread: the tool box with its own tools (run on ``worker``, where its
        state lives), or why they cannot be offered. Why there: a tool's name, docstring and
        signature are read to build its schema, and they are the environment's code (a callable
        object's ``__name__`` or ``__doc__`` property): one raising ended the run with a traceback,
        one blocking hung it, on the trainer's thread."""
        try:
            return self._env_tools_base.extended(own, worker=worker)
        except ConfigError as exc:
            return f"its own tools cannot be offered: {exc.message}"

    def _failed_at_reset(self, index: int, row: Mapping[str, Any], error: str) -> _Episode:
        """The episode ended before its first turn, with ``error``. The row's prompt is kept as its
        prompt where it is chat-like; with an environment it is the environment's input, any value
        (an int, None), so one that is not leaves the prompt empty: the error is the environment's,
        not a TypeError of the row's."""
        try:
            first = as_messages(row.get(self.prompt_column, ""))
            prompt_ids = self.glue.prompt(first)
        except ConfigError:
            first, prompt_ids = [], np.zeros(0, dtype=np.int64)
        except RenderError:
            prompt_ids = np.zeros(0, dtype=np.int64)
        return _Episode(index=index, row=row, env=None, first_messages=first, prompt_ids=prompt_ids,
                        done=True, env_error=error)

    def first_prompt_ids(self, prompt: Prompt) -> np.ndarray:
        """The ids of the first prompt an episode on a dataset row with ``prompt`` samples from
        (no environment: the row's prompt, the tool instructions and the chat template), as
        ``_reset`` encodes it; the startup length check counts these."""
        toolbox = self.toolbox
        first = self._with_tool_instructions(as_messages(prompt), toolbox)
        return self.glue.prompt(first, toolbox.schemas if toolbox is not None else None)

    def _with_tool_instructions(self, messages: list[dict[str, Any]], toolbox: Any) -> list[dict[str, Any]]:
        """The tools go through the template's ``tools=``; a template that ignores them gets them
        described in a system message instead (otherwise the model would never hear of them)."""
        schemas = toolbox.schemas if toolbox is not None else []
        if not schemas:
            return messages
        self.check_tool_results(schemas)
        if self._template_ignores_tools is None:  # a property of the template: asked once
            self._template_ignores_tools = template_ignores_tools(
                lambda probe, tools: self.glue.encode(probe, True, tools).tolist(), schemas)
        if not self._template_ignores_tools:
            return messages
        if self.tool_format not in ("auto", self.tools_prompt_format):  # taught one form, reading another
            raise ConfigError(
                f"this model's chat template renders no tools, so the model is taught the {self.tools_prompt_format} "
                f"tool-call form in a system message, which tool_format = {self.tool_format!r} never reads: "
                "every call would be ignored", field="environment.tool_format",
                fix=f'set tool_format = "auto" (or "{self.tools_prompt_format}") for this model, or use a model whose '
                    "chat template renders tools")
        return with_tools_prompt(messages, schemas, self.tools_prompt_format)

    def check_tool_results(self, schemas: Sequence[Mapping[str, Any]]) -> None:
        """Decide once, before the first episode samples, how this template shows the model a
        tool's result: as ``tool`` messages, or (a template that raises on them, Gemma 3's, or
        drops them, Phi-3's) as one ``user`` message per turn (``tool_results_as_user``). The same
        holds for an environment's own ``tool`` messages, so it is decided for an environment
        without tools too (``schemas`` empty). A template that shows neither is a ConfigError once
        there are tools (``schemas``); an environment's ``tool`` message then ends its episode.
        Why at setup: left to the first call, every episode with a tool call (a malformed one too)
        ended as an environment error, unscored, so a junk ``<tool_call>`` let the model escape a
        bad reward."""
        if self.tool_results_role is None:
            self.tool_results_role, self._shows_no_tool_results = self._tool_results_role(schemas)
        if schemas and self._shows_no_tool_results is not None:
            model = f"model {self.model_name!r}" if self.model_name else "this model"
            raise ConfigError(
                f"the chat template of {model} cannot show the model a tool's result: "
                f"{self._shows_no_tool_results}", field="environment.tools",
                fix="use a model whose chat template renders tool messages (Qwen2.5, Qwen3, Llama 3.1+) or at "
                    "least alternating user/assistant turns, or run without [environment] tools")

    def check_reasoning_kept(self, reasoning_closed: bool = False) -> str | None:
        """Warn (once, at setup) of a template that writes an earlier assistant turn otherwise than
        the episode holds it once what this runner inserts follows it. Each turn continues from the
        ids so far, exact to the token as generated and trained (as TRL's and verl's multi-turn
        rollouts do), but turn 2 on then sees a context that the template, and so a deployed model,
        never shows: a warning with the fixes, not a refusal, since such runs train correctly. Two
        ways, asked of the messages the episodes insert (an environment's ``user`` observations, and
        tool results in the role ``check_tool_results`` chose):

        * the template leaves the turn's ``<think>`` block out (Qwen3's, after a new user query);
        * ``reasoning_closed``: the generation prompt closes the reasoning itself (Qwen3 with
          ``enable_thinking = false``), so no turn writes any, but the template writes an earlier
          turn without the empty block its prompt held (``ChatGlue.opens_turns_as_prompted``).

        Returns the warning, or None."""
        followers = self._followers()
        if reasoning_closed:
            differs = [what for what, follow, calls, tools in followers
                       if not self.glue.opens_turns_as_prompted(follow, tools, calls)]
        else:
            differs = [what for what, follow, calls, tools in followers
                       if self.glue.drops_reasoning(follow, tools, calls)]
        if not differs:
            return None
        model = f"model {self.model_name!r}" if self.model_name else "this model"
        after = (f"once {' or '.join(differs)} follows it; an episode's turns continue from the ids the model was "
                 "prompted with and sampled, so turns after the first are sampled and trained on a context this "
                 "template (and a model deployed with it) never shows")
        if reasoning_closed:
            message = (f"the chat template of {model} writes an earlier assistant turn without the closed <think> "
                       f"block its generation prompt holds (model.chat_template_kwargs) {after}")
            fix = ("leave enable_thinking = false out of model.chat_template_kwargs so the model writes its own "
                   "reasoning (Qwen3's template keeps it before tool results, not before a new user message), or "
                   "use a model whose chat template writes earlier assistant turns as their generation prompt began")
            log.warning(message, field="model.chat_template_kwargs", fix=fix)
            return f"{message}; fix: {fix}"
        kept = [what for what, *_ in followers if what not in differs]
        message = f"the chat template of {model} leaves an earlier assistant turn's <think> reasoning out {after}"
        fix = ("set model.chat_template_kwargs = {enable_thinking = false} where the template has it and writes "
               "earlier turns with the closed block its generation prompt holds (Qwen3's does not: warned too)"
               + (", have the environment answer with 'tool' messages (the template keeps the reasoning "
                  "before those)" if kept else "")
               + ", or use a model whose chat template keeps earlier turns' reasoning")
        log.warning(message, field="environment", fix=fix)
        return f"{message}; fix: {fix}"

    def _followers(self) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[Any] | None]]:
        """(what, the messages, the calls they answer, the tools) for each kind of message the
        episodes insert after an assistant turn: an environment's ``user`` observation, a tool's
        result (as a ``user`` message where ``check_tool_results`` chose so)."""
        if self.tool_results_role is None:
            self.check_tool_results(self.toolbox.schemas if self.toolbox is not None else [])
        schemas = list(self.toolbox.schemas) if self.toolbox is not None else []
        name = str((schemas[0].get("function") or {}).get("name") or "tool") if schemas else "tool"
        call = {"id": "call00000", "type": "function", "function": {"name": name, "arguments": {}}}
        result = [{"role": "tool", "name": name, "content": "a", "tool_call_id": "call00000"}]
        tools = schemas or None
        followers: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], list[Any] | None]] = []
        if self.make_environment is not None:
            followers.append(("a 'user' observation", [{"role": "user", "content": "a"}], [], tools))
        if schemas or self.make_environment is not None:
            as_user = self.tool_results_role == "user"
            followers.append(("a tool's result" + (" (as a 'user' message)" if as_user else ""),
                              tool_results_as_user(result) if as_user else result, [call], tools))
        return followers

    def _tool_results_role(self, schemas: Sequence[Mapping[str, Any]]) -> tuple[str, str | None]:
        """("tool" or "user", why neither works or None), asked of the template."""
        tools = list(schemas) or None
        as_tool = self.glue.renders_tool_results(tools, "tool", lambda results: results)
        if as_tool is None:
            return "tool", None
        as_user = self.glue.renders_tool_results(tools, "user", tool_results_as_user)
        if as_user is not None:
            return "tool", f"as a 'tool' message {as_tool}; as a 'user' message {as_user}"
        self.tool_results_reason = as_tool
        return "user", None

    def _carried(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """An environment's answer as this template can show it: each run of ``tool`` messages as one
        ``user`` message when it has no tool role (``check_tool_results``), as tool results go."""
        if self.tool_results_role != "user" or not any(m.get("role") == "tool" for m in messages):
            return messages
        out: list[dict[str, Any]] = []
        run: list[dict[str, Any]] = []
        for m in [*messages, None]:
            if m is not None and m.get("role") == "tool":
                run.append(m)
                continue
            out += tool_results_as_user(run)
            run = []
            if m is not None:
                out.append(m)
        return out

    # --- one turn -----------------------------------------------------------------------------

    async def _respond(self, ep: _Episode, turn: Completion) -> None:
        """After a sampled turn: the tools' or the environment's answer, or the episode's end.

        A turn with tool calls (or malformed ones) is answered by the tool box; a turn without
        any by the environment's ``step`` (no environment: the episode is over). A ``done``
        observation's messages are kept in the conversation (rewards, the completions log and a
        checkpointed rollout read it) if they could fit the episode (``_last_words``), never
        inserted: nothing follows them.

        A turn cut at its budget (``length``) whose last call closed exactly at the cut is answered
        like any other, as TRL runs every call it parses, cut or not (such a call was never run); one
        cut before that holds no call and ends the episode as ``length``. Calls with no turn or
        token left to read their results count but are not run (TRL runs a call at its budget and
        drops the result: the same tokens are trained)."""
        text = turn.text
        parsed = None
        if self.parse is not None and ep.toolbox is not None:  # every turn's prompt ends with the first's
            opened = opens_reasoning(ep.prompt_ids, self.think_suffix)  # generation prompt
            parsed = self.parse(text, reasoning_open=True) if opened else self.parse(text)
        calls = list(parsed.calls) if parsed is not None else []
        errors = list(parsed.errors) if parsed is not None else []
        # cut before its last call closed (a Hermes call's JSON complete but its </tool_call> not
        # written: inside its tags, as a cut inside the tag itself): no call
        open_call = bool(getattr(parsed, "unterminated", False))
        if turn.finish_reason == "length" and (errors or not calls or open_call):
            self._cut_off(ep, turn)
            return
        assistant: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            assistant["tool_calls"] = [c.as_message_entry() for c in calls]
        ep.messages.append(assistant)
        new: list[dict[str, Any]] = []
        if calls or errors:
            ep.tool_calls += len(calls)
            ep.format_errors += len(errors)
            if ep.turns >= self.limits.max_turns or self._room(ep) <= 0:  # no turn or token left to read their
                ep.done = True  # results: not run (their time and side effects would be for nothing)
                if ep.turns >= self.limits.max_turns:
                    ep.unrun_last_turn_calls += len(calls)
                if turn.finish_reason == "length" or self._room(ep) <= 0:
                    ep.finish_reason = "length"
                return
            cap = self.limits.max_tool_calls_per_turn
            results = [self._shown_result(ep, plain_text(r)) for r in await ep.toolbox.run(calls[:cap])] \
                if calls and ep.toolbox is not None else []
            ep.tool_errors += sum(1 for r in results if str(r.get("content", "")).startswith("error:"))
            ep.tool_errors += len(calls[cap:])  # answered "not run": failed calls, as TRL's failure_frequency counts
            new = [*results, *self._unrun_errors(calls, errors)]
            if self.tool_results_role == "user":  # a template without a tool role (check_tool_results)
                new = tool_results_as_user(new)
        elif ep.env is not None and ep.worker is not None:
            env = ep.env
            mine = copy.deepcopy(assistant)  # the episode's own record: an environment editing it would rewrite
            # what the rewards score and the log shows; what cannot fit its whole cap is never kept (_last_words)
            budget = MAX_CHARS_PER_TOKEN * max(self.limits.cap(len(ep.prompt_ids)), 0)

            def stepped() -> Observation:  # on its thread; a copy made there: what it keeps is not the record
                obs = checked_step(env, finished(env.step(mine)), budget)
                return obs if _past(obs.messages, budget) else copy.deepcopy(obs)

            try:  # an environment bug ends its episode, not the run
                obs = await self._env_call(ep.worker, "step", stepped)
            except _EnvError as failed:
                self._ended(ep, failed.text)
                return
            if obs.reward is not None:
                total = (ep.env_reward or 0.0) + float(obs.reward)
                if not np.isfinite(total):
                    self._ended(ep, f"the environment's rewards of this episode sum to {total}")
                    log.warning("environment step failed; episode ended", environment=self._env_name,
                                error=ep.env_error)
                    return
                ep.env_reward = total
            new = [dict(m) for m in obs.messages]
            # what is inserted is encoded into the next turn's ids: a character the tokenizer misreads
            # (read unless refused by size, unread, below) would be another token there, never said
            if not obs.done and not _past(new, budget) and \
                    (misread := environment_misread(self.probe, self._env_name, f"its step after turn {ep.turns}", new)):
                self._ended(ep, misread)
                log.warning("the environment's observation holds a control character the model's tokenizer cannot "
                            "encode; episode ended", environment=self._env_name, turn=ep.turns, error=misread)
                return
            if not obs.done:  # what is inserted: its tool messages as the template shows tool results
                new = self._carried(new)
            if not new and not obs.done:
                self._warn_silent_step()
            ep.done = bool(obs.done) or not new
            if obs.done:  # its last words: never inserted (nothing follows), kept for the rewards and the log
                self._last_words(ep, new)
        else:
            ep.done = True  # a plain answer: the episode is over
        if ep.done:
            return
        if ep.turns >= self.limits.max_turns:
            ep.done = True
            return
        if not self.limits.may_fit(new, self._room(ep)):  # cannot fit: ends as `length`, unrendered
            ep.done, ep.finish_reason = True, "length"
            return
        schemas = ep.toolbox.schemas if ep.toolbox is not None else None
        try:
            closed = turn.finish_reason == "stop" and len(turn.completion_ids) > 0 \
                and int(turn.completion_ids[-1]) in self.eos_ids
            inserted = self.glue.after_turn(ep.context()[:-1], assistant, turn.completion_ids, new, schemas, closed)
        except RenderError as exc:  # this conversation's content, not the run: the episode ends here
            # the template raised on the model's calls, or (a plain answer) on what the model wrote
            refused = self._calls_refused(ep, new, schemas, exc) if calls or errors else self._text_refused(ep, schemas)
            if refused is not None:
                self._refused(ep, refused)
                return
            self._ended(ep, str(exc))
            log.warning("the chat template cannot render this episode's next turn; episode ended",
                        environment=self._env_name, error=ep.env_error)
            return
        if len(ep.ids) + len(inserted) >= self.limits.cap(len(ep.prompt_ids)):
            ep.done, ep.finish_reason = True, "length"
            return
        ep.add(inserted, None, sampled=False)
        ep.messages.extend(new)

    def _shown_result(self, ep: _Episode, result: dict[str, Any]) -> dict[str, Any]:
        """A tool's ``result``, or, holding a control character the tokenizer misreads, the error the
        model reads instead (``tool_result_misread``; a tool error, as one that raises), said once
        per run naming the environment, the tool, the turn and the character."""
        misread = tool_result_misread(self.probe, result)
        if misread is None:
            return result
        if not self._warned_tool_control:
            self._warned_tool_control = True
            log.warning("a tool's result holds a control character the model's tokenizer cannot encode; the model "
                        "reads an error instead (said once per run)", environment=self._env_name,
                        tool=result.get("name"), turn=ep.turns, error=misread)
        return error_message(misread, name=str(result.get("name") or "invalid_tool_call"),
                             call_id=str(result.get("tool_call_id") or ""))

    def _last_words(self, ep: _Episode, new: list[dict[str, Any]]) -> None:
        """Keep a ``done`` observation's messages in the conversation, if they could fit the episode
        at all (``may_fit`` in its whole token cap, not only what is left: they are never
        rendered); else leave them out and end it as ``length``, as a turn's observation that cannot
        fit is. Why: they went into the record unbounded, so a 100 MB final observation (or a
        value under a key of its own) reached the rewards, completions.jsonl and every checkpoint
        of a pending rollout."""
        cap = self.limits.cap(len(ep.prompt_ids))
        if self.limits.may_fit(new, cap):
            ep.messages.extend(new)
            return
        ep.finish_reason = "length"
        if not self._warned_last_words:
            self._warned_last_words = True
            log.warning("the environment's final observation is too large for its episode; left out of the "
                        "conversation the rewards read, the episode ended as length (said once per run)",
                        environment=self._env_name, messages=len(new), episode_tokens=cap,
                        max_chars_per_token=MAX_CHARS_PER_TOKEN)

    def _calls_refused(self, ep: _Episode, answers: Sequence[Mapping[str, Any]],
                       schemas: Sequence[Mapping[str, Any]] | None, exc: RenderError) -> BaseException | None:
        """What the chat template raised on a turn with calls (``exc``'s cause) when the model's
        calls are what it refused, or None when it refused the text of their ``answers`` (a tool's
        result): the same conversation with each answer's text a stand-in renders. Why ask: every
        refusal after a turn with calls was the model's format error, so a tool (an environment's
        own, say) answering what the template refuses (an empty result) had the policy trained
        against a call it made right, where it is the environment's error, unscored."""
        if exc.__cause__ is None:
            return None
        try:
            self.glue.encode([*ep.context(), *content_left_out(answers)], True, schemas)
        except RenderError:  # refused whatever the answers say: the calls (or the errors of malformed ones)
            return exc.__cause__
        return None

    def _text_refused(self, ep: _Episode, schemas: Sequence[Mapping[str, Any]] | None) -> BaseException | None:
        """What the chat template raised on the conversation through the model's last turn for the
        model's own text (it renders with stand-in text in the assistant turns instead), or None
        (then the environment's messages are what it refused). Why ask: the glue renders a
        stand-in for the turn it joins, so a template refusing what the model wrote (an empty
        answer) first raised on the next turn's rendering, and with no call in that turn the
        episode ended as an environment error, unscored, where a refused turn with calls is the
        model's format error."""
        try:
            self.glue.encode(ep.context(), False, schemas)
        except RenderError as exc:
            if exc.__cause__ is None:  # past polyrl's bounds: the size, not the model's text
                return None
            try:
                self.glue.encode(model_text_left_out(ep.context()), False, schemas)
            except RenderError:  # refused without the model's words too
                return None
            return exc.__cause__
        return None

    def _unrun_errors(self, calls: Sequence[ToolCall], malformed: Sequence[str]) -> list[dict[str, Any]]:
        """The errors answering a turn's calls that did not run: each call past the per-turn cap,
        then each malformed one; at most ``max_tool_calls_per_turn`` of them, and one more saying
        how many were left out. Why a cap: every one got its own message, so a turn of 200
        ``<tool_call>x</tool_call>`` had 200 errors inserted (more tokens than the model wrote),
        filling the episode's room with polyrl's own text."""
        cap = self.limits.max_tool_calls_per_turn
        answers = [error_message(f"not run: this turn asked for {len(calls)} tool calls, more than the {cap} run "
                                 "per turn (environment.max_tool_calls_per_turn)", name=call.name, call_id=call.id)
                   for call in calls[cap:]]
        answers += [error_message(e) for e in malformed]
        if len(answers) <= cap:
            return answers
        return [*answers[:cap], error_message(
            f"{len(answers) - cap} more of this turn's tool calls were malformed or not run; their errors are not "
            f"shown (at most {cap} a turn: environment.max_tool_calls_per_turn)")]

    def _refused(self, ep: _Episode, cause: BaseException) -> None:
        """The chat template raised on a turn the model wrote with its calls answered (several calls
        where it takes one, a malformed call's error where it wants a result for a real call): the
        model's format error, as a malformed call is. The episode ends there, scored, and the
        conversation the rewards read ends with the error, the template's message quoted (never
        inserted: nothing follows it). Why: it ended as an environment error, unscored, so a policy
        writing what its template refuses was never trained against it (and every rollout so
        stopped the run)."""
        ep.format_errors += 1
        ep.done = True
        error = [error_message(f"the chat template refused this turn: {quoted(describe(cause, run_goes_on=False))}")]
        ep.messages.extend(tool_results_as_user(error) if self.tool_results_role == "user" else error)
        if not self._warned_refused:
            self._warned_refused = True
            log.warning("the chat template refused a turn the model wrote; counted as the model's format error and "
                        "its episode ended there (said once per run)", environment=self._env_name,
                        error=describe(cause, run_goes_on=False))

    async def _respond_all(self, pairs: list[tuple[_Episode, Completion]]) -> None:
        await asyncio.gather(*(self._respond(ep, turn) for ep, turn in pairs))

    # --- the step --------------------------------------------------------------------------

    def run(self, rows: Sequence[Mapping[str, Any]], sampling: SamplingParams, counted: bool = True) -> list[Completion]:
        """``sampling.n`` episodes per row, grouped by row as ``generate``'s completions are.
        ``counted``: a training rollout, which adds to or resets the failure streak (``failure``);
        an evaluation's episodes (False) must do neither, or an eval set the environment handles
        hid a broken training environment (and a broken eval one stopped training)."""
        n = sampling.n
        # before any environment starts: a ConfigError leaves nothing behind
        self.check_tool_results(self.toolbox.schemas if self.toolbox is not None else [])
        made: list[_Made] = []  # every environment made (by episode), its episode failed or not
        episodes: list[_Episode] = []
        try:
            episodes = asyncio.run(self._reset_all(rows, n, made))
            if self._stop is None:  # else the run stops (``raised``): no turn for a rollout never trained
                self._run_turns(episodes, sampling)
        finally:  # each is told its episode is over, then its thread ends
            try:
                over = asyncio.run(self._end_episodes(made)) if made else {}
            finally:
                for entry in made:
                    entry.worker.close()
        for ep in episodes:
            error, rewarded = over.get(ep.index, (None, None))
            if error is not None and ep.env_error is None:
                self._ended(ep, error)
            if ep.env is not None:
                ep.rewarded = rewarded
        if counted:
            self._count_failures(episodes)
        return [ep.completion(ep.index // n, self._text(ep)) for ep in episodes]

    async def _end_episodes(self, made: Sequence[_Made]) -> dict[int, tuple[str | None, Any]]:
        """``_end_episode`` for every environment made, all at once: by episode, why it failed
        there (None: it did not) and what its rewards get as its environment."""
        ended = await asyncio.gather(*(self._end_episode(entry) for entry in made))
        return {entry.index: outcome for entry, outcome in zip(made, ended)}

    async def _end_episode(self, made: _Made) -> tuple[str | None, Any]:
        """Read what the rewards get as ``made``'s environment (``_read_rewarded``), then tell it
        its episode is over (``end_episode``) on its episode's worker, the thread and loop its
        ``reset`` and ``step`` ran on, within ``env_timeout_s`` as every call of its code; (why the
        episode failed there or None, what was read). What ``episode_over`` raises (``sys.exit``
        included) is a warning naming it, the episode kept. Why there: it ran on a fresh thread,
        so what ``reset`` tied to its thread (an sqlite connection) or loop could not be closed in
        it (TRL calls an environment's plain methods on one thread too). A worker still running a
        call abandoned past its limit would never reach it: it runs on a fresh thread then, as it
        always did. Why a limit: one that hung, hung the step for ever; it ends its episode as an
        environment error (unscored: the rewards would read an environment whose code still
        runs). Why it is caught: it escaped ``run`` with a traceback that ended the run, after
        the rollout was sampled, and skipped the other environments' ``episode_over`` (a TRL
        pool's instances then never came back)."""
        env = made.env
        rewarded, unread = await self._read_rewarded(made)

        def told() -> str | None:  # on the thread: its raising is its own, not a failed call
            try:
                finished(end_episode(env))
            except BaseException as exc:  # noqa: BLE001 - the environment's code, exits included
                return describe(exc, run_goes_on=False)
            return None

        try:
            raised = await self._call_after_rollout(made, "episode_over", told)
        except _EnvError as failed:
            return unread or failed.text, None
        if raised is not None:
            log.warning("the environment's episode_over failed; the run goes on", environment=self._env_name,
                        error=raised)
        return unread, rewarded

    async def _read_rewarded(self, made: _Made) -> tuple[Any, str | None]:
        """(what the rewards get as ``made``'s environment, None) or (None, why it cannot be read):
        its ``rewarded`` (``rewarded_environment``) is read on the episode's worker within
        ``env_timeout_s``, before ``episode_over``. Why there: a ``rewarded`` property is the
        environment's code, read on the trainer's thread once the rollout was over, so one that
        raised ended the run with a traceback and one that blocked hung it; it ends its episode as
        an environment error now (unscored), as a ``step`` raising or hanging does."""
        env = made.env
        try:
            return await self._call_after_rollout(made, "rewarded", lambda: rewarded_environment(env)), None
        except _EnvError as failed:
            return None, f"reading the environment's rewarded failed: {failed.text}"

    async def _call_after_rollout(self, made: _Made, what: str, fn: Callable[[], Any]) -> Any:
        """``_env_call`` on ``made``'s worker, or on a fresh one while it still runs a call
        abandoned past its limit (queued behind it, ``fn`` would never run)."""
        worker = Worker(name="polyrl-env-over") if made.worker.late else made.worker
        try:
            return await self._env_call(worker, what, fn)
        finally:
            if worker is not made.worker:
                worker.close()

    def _room(self, ep: _Episode) -> int:
        """Tokens this episode may still hold."""
        return self.limits.cap(len(ep.prompt_ids)) - len(ep.ids)

    def _sample(self, active: list[_Episode], sampling: SamplingParams, turn: int, per_prompt: int) -> list[Completion]:
        """One completion per episode of ``active``, each sampled within its own room: one
        ``generate`` call per distinct budget (usually one, ``max_new_tokens``; episodes near their
        cap get their own). Why not one call at the largest budget, cut after: the cut ids and
        log-probs would keep the whole text, so rewards would score tokens that were never trained.
        ``per_prompt`` > 1: a group's episodes share their first prompt, sampled as one prompt x n,
        exactly as a single-turn step samples its groups. Each call's seed is ``turn_seed``'s for
        (the step's seed, the turn, the group), the first turn's widest group keeping the step's."""
        heads = active[::per_prompt]
        by_budget: dict[int, list[int]] = {}
        for i, ep in enumerate(heads):
            by_budget.setdefault(max(1, min(sampling.max_new_tokens, self._room(ep))), []).append(i)
        outs: list[Completion] = [None] * len(active)  # type: ignore[list-item]  # every slot filled below
        for k, (budget, members) in enumerate(sorted(by_budget.items(), reverse=True)):
            params = attrs.evolve(sampling, n=per_prompt, max_new_tokens=budget, seed=turn_seed(sampling.seed, turn, k))
            prompts = [TokenPrompt(np.concatenate([heads[i].prompt_ids, np.asarray(heads[i].ids, dtype=np.int64)]))
                       for i in members]
            got = self.generate(prompts, params)
            for j, i in enumerate(members):
                outs[i * per_prompt:(i + 1) * per_prompt] = got[j * per_prompt:(j + 1) * per_prompt]
        return outs

    def _run_turns(self, episodes: list[_Episode], sampling: SamplingParams) -> None:
        """Generate and respond, turn after turn, until every episode is done."""
        n = sampling.n
        turn = 0
        while True:
            active = [ep for ep in episodes if not ep.done]
            if not active:
                break
            shared = turn == 0 and len(active) == len(episodes) and self._groups_share_prompts(episodes, n)
            outs = self._sample(active, sampling, turn, n if shared else 1)
            for ep, out in zip(active, outs):
                room = self._room(ep)
                if len(out.completion_ids) > room:  # a generator past the budget it was given: cut, and said
                    log.warning("a turn came back longer than its budget and was cut; its text still holds the "
                                "cut tokens", environment=self._env_name, room=room, sampled=len(out.completion_ids))
                    out = attrs.evolve(out, completion_ids=out.completion_ids[:room], logprobs=out.logprobs[:room],
                                       finish_reason="length")
                    self._cut_off(ep, out)  # its text holds tokens that are not in the episode: never parsed
                ep.add(out.completion_ids, out.logprobs, sampled=True)
                ep.texts.append(out.text)
                ep.turns += 1
            asyncio.run(self._respond_all([(ep, out) for ep, out in zip(active, outs) if not ep.done]))
            turn += 1

    @staticmethod
    def _cut_off(ep: _Episode, turn: Completion) -> None:
        """End ``ep`` at a turn cut at its token budget (``length``), its text kept as the answer."""
        ep.messages.append({"role": "assistant", "content": turn.text})
        ep.done, ep.finish_reason = True, "length"

    def _count_failures(self, episodes: list[_Episode]) -> None:
        """Count this rank's rollouts in a row whose every episode failed (``failure``); the
        warning is the trainer's, once per step on the whole step (``warn_failed_step``): under a
        launcher a rank's share is not the step, and each rank said its own."""
        errors = [ep.env_error for ep in episodes if ep.env_error is not None]
        if not episodes or len(errors) < len(episodes):
            self.failed_rollouts = 0
            return
        self.failed_rollouts += 1
        self.last_env_error = errors[-1]

    def warn_failed_step(self, in_a_row: int) -> None:
        """Say that every episode of the step (every rank's) ended in an environment error."""
        log.warning("every episode of this rollout ended in an environment error; it is not trained",
                    environment=self._env_name, env_error_share=1.0, error=self.last_env_error,
                    in_a_row=in_a_row, stop_at=MAX_FAILED_ROLLOUTS)

    @property
    def raised(self) -> EnvironmentFailed | None:
        """What an environment call raised to stop the run (``EnvironmentFailed``, TRL's
        environments' way), None until one did. The trainer stops at once on it, before the
        rollout is scored (TRL's ``train()`` raises there too); ``failure`` says it as well."""
        return self._stop

    def failure(self) -> EnvironmentFailed | None:
        """The error that stops the run once ``MAX_FAILED_ROLLOUTS`` rollouts in a row had every
        episode end in an environment error, once ``max_abandoned`` of the environment's calls
        were left running past their limit, or once an environment call raised ``EnvironmentFailed``
        (these two ``alone``: one rank's is enough); None before that."""
        if self._too_many_late is not None:
            return EnvironmentFailed(self._too_many_late, alone=True)
        if self._stop is not None:
            return self._stop
        if self.failed_rollouts < MAX_FAILED_ROLLOUTS:
            return None
        text = (f"environment {self._env_name!r}: every episode of the last {self.failed_rollouts} rollouts "
                f"ended in an error; the last: {self.last_env_error}")
        if ". Fix: " not in text:
            text += (". Fix: make the environment's reset/step work on these rows (run it on one row by hand), "
                     "or raise environment.env_timeout_s if its calls are slow")
        return EnvironmentFailed(text)

    @staticmethod
    def _groups_share_prompts(episodes: list[_Episode], n: int) -> bool:
        return all(np.array_equal(ep.prompt_ids, episodes[ep.index - ep.index % n].prompt_ids) for ep in episodes)

    async def _reset_all(self, rows: Sequence[Mapping[str, Any]], n: int, made: list[_Made]) -> list[_Episode]:
        """Every episode's first prompt. One whose environment-written first messages the template
        refuses is that episode's environment error, counted toward ``MAX_FAILED_ROLLOUTS`` like
        any other, whatever the rest of the batch did (it stopped the run when its row was alone
        in the step); a dataset prompt the template refuses raises (``_reset``): the setup's."""
        return list(await asyncio.gather(*(self._reset(i * n + j, row, made) for i, row in enumerate(rows)
                                           for j in range(n))))

    @staticmethod
    def _text(ep: _Episode) -> str:
        """The episode's answer: its last assistant turn. Never the whole transcript, whose tool
        results and observations would let a text reward score the environment's words."""
        return ep.texts[-1] if ep.texts else ""
