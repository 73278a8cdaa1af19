"""Where a step's rollouts come from: sampled inside the step, or one step ahead on a worker thread.

With ``generation.overlap = true`` the generate engine (a copy of the policy) samples step k+1's
completions while the train engine updates on step k's, so a step costs about
``max(generate, train)`` instead of their sum when the two have cores of their own. The price is
one step of policy lag: step k's completions come from the weights after k-1 updates, and the
loss's importance ratio uses the sampler's own log-probs as the behaviour policy's (the clipped
ratio that every preset has keeps the update bounded, as in PPO).

A pending rollout is part of the run's state: a checkpoint stores it (``as_state``) and a resumed
run trains on exactly the completions the interrupted run would have used.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import attrs

from polyrl.errors import ConfigError
from polyrl.rollout_state import PENDING_FIX, pending_rollout_problem
from polyrl.types import Completion


@attrs.define
class Rollout:
    """One step's prompts and completions, and which weights sampled them."""

    step: int  # the step that trains on it
    rows: list[dict[str, Any]]
    completions: list[Completion]
    policy_version: int  # updates the generating weights had seen (== step when on-policy)
    seconds: float  # the generation's own duration
    sampler_before: dict[str, Any]  # the prompt sampler's state before ``rows`` were drawn

    def as_state(self) -> dict[str, Any]:
        """JSON for a checkpoint; the rows are drawn again from ``sampler_before`` on resume. Every
        ``Completion`` field is kept (``from_state`` gives back an equal one): a field left out
        came back as its default, e.g. an episode's ``prompt_messages``, so a resumed step's
        rewards scored the dataset row's prompt instead of what the environment asked."""
        return {
            "step": self.step, "policy_version": self.policy_version, "seconds": self.seconds,
            "sampler_before": self.sampler_before,
            "completions": [
                {"prompt_index": int(c.prompt_index), "prompt_ids": c.prompt_ids.tolist(),
                 "completion_ids": c.completion_ids.tolist(), "logprobs": c.logprobs.tolist(),
                 "text": c.text, "finish_reason": c.finish_reason,
                 **({} if c.mask is None else {"mask": c.mask.astype(int).tolist(), "messages": c.messages,
                                               "info": c.info}),
                 # what an environment's reset asked: the resumed step's rewards and log read it
                 **({} if c.prompt_messages is None else {"prompt_messages": c.prompt_messages}),
                 # the template opened the reasoning: the resumed step's rewards read it as such
                 **({"reasoning_open": True} if c.reasoning_open else {})}
                for c in self.completions
            ],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], rows: list[dict[str, Any]]) -> Rollout:
        """The rollout ``as_state`` wrote; a malformed one (a hand-edited checkpoint) is a
        ``ConfigError`` naming the field (``resume_point`` names the file too, before any load)."""
        problem = pending_rollout_problem(state, prompts=len(rows))
        if problem is not None:
            raise ConfigError(f"the checkpoint's {problem}", field="--resume", fix=PENDING_FIX)
        completions = [Completion(**c) for c in state["completions"]]
        return cls(step=int(state["step"]), rows=rows, completions=completions,
                   policy_version=int(state["policy_version"]), seconds=float(state["seconds"]),
                   sampler_before=state["sampler_before"])


Generate = Callable[[int, list[dict[str, Any]]], list[Completion]]


class DaemonWorker:
    """One daemon thread running the calls given to it in order, each answering a ``Future``.

    Why not ``ThreadPoolExecutor(1)``: the interpreter joins its threads at exit, so after a second
    Ctrl-C in the Python API (``StoppedAtOnce``) a script's exit waited for the rollout still being
    sampled, minutes of generation the second Ctrl-C refused (the CLI leaves with ``os._exit``).
    A daemon thread is dropped at exit; nothing is lost, the checkpoints are written atomically by
    the main thread. One persistent thread, not one per call: the generate engine's thread-local
    state (MLX streams, torch's grad mode) is made once.
    """

    _STOP = object()

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (item := self._calls.get()) is not self._STOP:
            future, call, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call(*args))
            except BaseException as exc:  # the caller's result() raises it, as an executor's does
                future.set_exception(exc)

    def submit(self, call: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._calls.put((future, call, args))
        return future

    def shutdown(self, wait: bool = True) -> None:
        """Stop after the running call (queued ones are cancelled); ``wait``: until it is done."""
        pending = []
        while True:
            try:
                pending.append(self._calls.get_nowait())
            except queue.Empty:
                break
        for future, _, _ in pending:
            future.cancel()
        self._calls.put(self._STOP)
        if wait and self._thread is not threading.current_thread():
            self._thread.join()


class RolloutAhead:
    """At most one rollout sampled ahead, on one worker thread (the generate engine's only user)."""

    def __init__(self, generate: Generate) -> None:
        self._generate = generate
        self._executor: DaemonWorker | None = None
        self._pending: Future[Rollout] | None = None

    def sample(self, step: int, rows: list[dict[str, Any]], sampler_before: dict[str, Any],
               policy_version: int) -> Rollout:
        """Sample now, on the calling thread."""
        t0 = time.perf_counter()
        completions = self._generate(step, rows)
        return Rollout(step, rows, completions, policy_version, time.perf_counter() - t0, sampler_before)

    def start(self, step: int, rows: list[dict[str, Any]], sampler_before: dict[str, Any],
              policy_version: int) -> None:
        """Begin sampling step ``step``'s rollout in the background."""
        if self._pending is not None:
            raise RuntimeError("a rollout is already pending; take() it first")
        if self._executor is None:
            self._executor = DaemonWorker("polyrl-rollout")
        self._pending = self._executor.submit(self.sample, step, rows, sampler_before, policy_version)

    def put(self, rollout: Rollout) -> None:
        """Make a finished rollout (a resumed checkpoint's) the pending one."""
        done: Future[Rollout] = Future()
        done.set_result(rollout)
        self._pending = done

    def discard(self) -> None:
        """Drop the pending rollout unread, never waiting for it (a failed one raised nothing here):
        a checkpoint written next has none, and a resume samples its step again."""
        self._pending = None

    def pending(self) -> Rollout | None:
        """The pending rollout, waiting for it to finish (the generate engine is free after)."""
        return None if self._pending is None else self._pending.result()

    def drop(self) -> Rollout | None:
        """Wait for the pending rollout, then drop it (the generate engine is free, and a checkpoint
        written next has none); it is returned for what it was sampled from. Unlike ``discard``,
        which never waits, it raises what a failed rollout raised."""
        rollout = self.pending()
        self._pending = None
        return rollout

    def take(self, step: int) -> Rollout | None:
        """The pending rollout for ``step`` (waiting for it), or None when there is none."""
        rollout = self.drop()
        if rollout is not None and rollout.step != step:
            raise RuntimeError(f"pending rollout is for step {rollout.step}, not {step}")
        return rollout

    def close(self, wait: bool = True) -> None:
        """Let a running generation finish (``wait``; else leave it to run out), then stop the worker thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=wait)
            self._executor = None
