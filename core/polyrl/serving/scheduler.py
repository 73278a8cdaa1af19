"""The bounded, fair queue in front of the one thread that owns the engine.

Why: the engine generates one batch at a time, so a plain FIFO lets one request with a huge ``n``
hold every other client until all its completions are done. Here each request is cut into
*units* of at most ``max_batch_size`` completions and the generation thread takes units
round-robin across the requests waiting, merging units of different requests with the same
sampling settings into one ``generate`` call. A small request waits for at most one unit of each
request ahead of it, not for their whole work. The queue is bounded (``max_queue`` requests): past
it a request is answered 503 with Retry-After at once, never left to time out.

A weight load (``run_exclusive``) waits for the requests already started and goes before those not
started yet: no request's completions mix two policies, and a stream of requests cannot hold a
trainer's push back for longer than the started ones take. Each request is answered with the
``tag`` (the served weights' id) read when its first unit ran, which is therefore the id of the
weights every one of its completions came from.

A request whose client closed its connection before any unit of it started leaves the queue
unanswered (``submit_tagged``'s ``gone``): a client that timed out and retried would otherwise have
the server generate both copies. One already started runs to its end (its units may be merged with
other requests').

Stopping (``close``) lets the batch generating now finish and answers every other request 503 at
once: a batch cannot be cut short, and the interpreter must not exit while this thread is inside
the backend (torch aborts the process then, and every client loses its connection unanswered).

Seeded requests stay reproducible: their cut depends only on the request itself (unit 0 keeps
the request's seed, so a request that fits one unit is sampled as it would be alone; unit ``i``
gets a hash of the seed and ``i``, ``unit_seed``), and their units never share a ``generate`` call
with another request's.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import attrs
import numpy as np

from polyrl.serving.api_error import overloaded, shutting_down
from polyrl.serving.limits import SEED_LIMIT
from polyrl.types import Completion, Prompt, SamplingParams


#: how often a waiting request checks that its client is still connected
GONE_POLL_S = 1.0


class ClientGone(Exception):
    """The client closed its connection before any of its request was generated: not answered."""


@attrs.define
class Unit:
    """Some of a request's prompts, each sampled ``sampling.n`` times, in one engine call."""

    prompt_indices: list[int]
    sampling: SamplingParams


@attrs.define(eq=False)
class Job:
    """One request: its prompts, the units left to run, and the completions so far per prompt."""

    prompts: list[Prompt]
    units: collections.deque[Unit]
    future: Future = attrs.field(factory=Future)
    done: dict[int, list[Completion]] = attrs.field(factory=dict)
    started: bool = False  # a unit has run or is running: the rest must see the same weights
    tag: Any = None  # the scheduler's ``tag()`` when the first unit ran: the weights all units use

    def finish_unit(self, unit: Unit, out: list[Completion]) -> None:
        per_prompt = unit.sampling.n
        for k, prompt_index in enumerate(unit.prompt_indices):
            for c in out[k * per_prompt:(k + 1) * per_prompt]:
                c.prompt_index = prompt_index
                self.done.setdefault(prompt_index, []).append(c)
        if not self.units:
            self.future.set_result([c for i in range(len(self.prompts)) for c in self.done.get(i, [])])


def plan_units(n_prompts: int, sampling: SamplingParams, max_batch_size: int) -> list[Unit]:
    """Cut ``n_prompts`` x ``sampling.n`` completions into units of at most ``max_batch_size``."""
    n = sampling.n
    if n_prompts * n <= max_batch_size:
        return [Unit(list(range(n_prompts)), sampling)]
    if n <= max_batch_size:
        per_unit = max_batch_size // n
        groups = [list(range(i, min(i + per_unit, n_prompts))) for i in range(0, n_prompts, per_unit)]
        pieces = [(g, n) for g in groups]
    else:
        pieces = [([p], min(max_batch_size, n - start)) for p in range(n_prompts)
                  for start in range(0, n, max_batch_size)]
    units = []
    for i, (indices, k) in enumerate(pieces):
        seed = None if sampling.seed is None else unit_seed(sampling.seed, i)
        units.append(Unit(indices, attrs.evolve(sampling, n=k, seed=seed)))
    return units


def unit_seed(seed: int, unit: int) -> int:
    """The seed of unit ``unit`` of a request seeded ``seed``: the request's own for the first, else
    a hash of both (numpy ``SeedSequence``) in ``[0, SEED_LIMIT)``. Why a hash: units seeded ``seed +
    i`` drew what the requests seeded ``seed + i`` drew in their first unit, so with ``n`` past
    ``--max-batch-size`` the completions 4..7 of ``seed = 0, n = 8`` were those of ``seed = 1, n = 4``
    (a client drawing seeds 0, 1, 2... got the same samples over again)."""
    if unit == 0:
        return seed
    words = np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, unit]).generate_state(2, np.uint32)
    return ((int(words[0]) << 32) | int(words[1])) % SEED_LIMIT


class FairScheduler:
    """Owns the engine on one thread; requests queue here and are served round-robin."""

    def __init__(self, generate: Callable[[list[Prompt], SamplingParams], list[Completion]],
                 max_batch_size: int, max_queue: int, on_batch: Callable[[int], None] | None = None,
                 tag: Callable[[], Any] | None = None) -> None:
        self.generate = generate
        self.tag = tag or (lambda: None)
        self.max_batch_size = max(1, int(max_batch_size))
        self.max_queue = max(1, int(max_queue))
        self.on_batch = on_batch or (lambda prompts: None)
        self._jobs: collections.deque[Job] = collections.deque()
        self._actions: collections.deque[tuple[Callable[[], Any], Future]] = collections.deque()
        self._cond = threading.Condition()
        self._pending = 0  # requests submitted and not yet answered (waiting or running)
        self._closing = False
        self.thread = threading.Thread(target=self._run, name="polyrl-serve-generate", daemon=True)
        self.thread.start()

    def queued(self) -> int:
        """Requests waiting or running."""
        with self._cond:
            return self._pending

    def loads_waiting(self) -> int:
        """Weight loads (``run_exclusive``) handed in and not yet run: lets a caller know that a
        load is in line before it sends what must come after it."""
        with self._cond:
            return len(self._actions)

    def submit(self, prompts: list[Prompt], sampling: SamplingParams) -> list[Completion]:
        """The completions (``sampling.n`` per prompt, in prompt order); 503 when the queue is full."""
        return self.submit_tagged(prompts, sampling)[0]

    def submit_tagged(self, prompts: list[Prompt], sampling: SamplingParams,
                      gone: Callable[[], bool] | None = None) -> tuple[list[Completion], Any]:
        """``submit``, and the ``tag()`` of the weights that generated every one of the completions.

        ``gone()`` is asked every ``GONE_POLL_S`` while the request waits: once it is true and no
        unit of the request has started, the request leaves the queue (``ClientGone``), so a client
        that timed out and retried does not have the server generate the abandoned copy too."""
        job = Job(list(prompts), collections.deque(plan_units(len(prompts), sampling, self.max_batch_size)))
        with self._cond:
            if self._closing:
                raise shutting_down()
            if self._pending >= self.max_queue:
                raise overloaded(f"the server has {self._pending} requests queued (polyrl serve "
                                 "--max-queue); retry after the Retry-After seconds")
            self._pending += 1
            self._jobs.append(job)
            self._cond.notify()
        try:
            while True:
                try:
                    return job.future.result(timeout=GONE_POLL_S if gone is not None else None), job.tag
                except FutureTimeout:
                    if gone is not None and gone() and self._withdraw(job):
                        raise ClientGone() from None
        finally:
            with self._cond:
                self._pending -= 1

    def _withdraw(self, job: Job) -> bool:
        """Take a request none of whose units has started out of the queue; whether it was."""
        with self._cond:
            if job.started or job not in self._jobs:
                return False
            self._jobs.remove(job)
            return True

    def run_exclusive(self, action: Callable[[], Any]) -> Any:
        """Run ``action()`` (a weight load) on the generation thread between two batches. Requests
        already started finish first, so every request's completions come from one set of
        weights; requests not started yet wait for it, so a trainer's push is not starved."""
        future: Future = Future()
        with self._cond:
            if self._closing:
                raise shutting_down()
            self._actions.append((action, future))
            self._cond.notify()
        return future.result()

    def close(self) -> None:
        """Stop: no new requests; the batch generating now finishes and answers its requests; every
        request still waiting (and every waiting weight load) gets a 503 at once; the thread ends."""
        with self._cond:
            self._closing = True
            jobs, actions = list(self._jobs), list(self._actions)
            self._jobs.clear()
            self._actions.clear()
            self._cond.notify_all()
        refusal = shutting_down()
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(refusal)
        for _, future in actions:
            future.set_exception(refusal)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the generation thread to end (after ``close``); whether it has."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _next_batch(self, started_only: bool = False) -> list[tuple[Job, Unit]]:
        """Round-robin: the first waiting request's next unit, then the next unit of each
        following request that can share its ``generate`` call; every request served moves to
        the back of the line. ``started_only``: only requests with units already run."""
        order = list(self._jobs)
        eligible = [job for job in order if job.started or not started_only]
        lead_job = eligible[0]
        lead = lead_job.units.popleft()
        batch, served = [(lead_job, lead)], [lead_job]
        size = len(lead.prompt_indices) * lead.sampling.n
        if lead.sampling.seed is None:  # seeded units run alone: their results must not depend on load
            for job in eligible[1:]:
                unit = job.units[0]
                unit_size = len(unit.prompt_indices) * unit.sampling.n
                if unit.sampling == lead.sampling and size + unit_size <= self.max_batch_size:
                    batch.append((job, job.units.popleft()))
                    served.append(job)
                    size += unit_size
        for job in served:
            if not job.started:  # actions run on this thread, so the tag is that of the weights loaded now
                job.started, job.tag = True, self.tag()
        self._jobs = collections.deque([job for job in order if job not in served]
                                       + [job for job in served if job.units])
        return batch

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._actions:
                    if self._closing:
                        return
                    self._cond.wait()
                action, batch = None, None
                if not self._actions:
                    batch = self._next_batch()
                elif any(job.started for job in self._jobs):
                    batch = self._next_batch(started_only=True)
                else:
                    action = self._actions.popleft()
            if action is not None:
                fn, future = action
                try:
                    future.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    future.set_exception(exc)
                continue
            assert batch is not None  # no action was due, so a batch was taken
            try:
                self._generate(batch)
            except BaseException as exc:  # noqa: BLE001 - this thread must outlive any one batch
                self._fail({job for job, _ in batch}, exc)

    def _generate(self, batch: list[tuple[Job, Unit]]) -> None:
        prompts = [job.prompts[i] for job, unit in batch for i in unit.prompt_indices]
        n = batch[0][1].sampling.n
        try:
            out = self.generate(prompts, batch[0][1].sampling)
            if len(out) != len(prompts) * n:
                raise RuntimeError(f"the engine returned {len(out)} completions for {len(prompts)} prompts "
                                   f"x n={n}")
        except BaseException as exc:  # noqa: BLE001 - handed to every request in the batch
            self._fail({job for job, _ in batch}, exc)
            return
        self.on_batch(len(prompts))
        start = 0
        for job, unit in batch:
            count = len(unit.prompt_indices) * n
            if not job.future.done():
                job.finish_unit(unit, out[start:start + count])
            start += count

    def _fail(self, jobs: set[Job], exc: BaseException) -> None:
        with self._cond:
            for job in jobs:
                job.units.clear()
                if job in self._jobs:
                    self._jobs.remove(job)
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(exc)
