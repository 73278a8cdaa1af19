"""The fair scheduler in front of the engine (unit tests with a recording fake engine: the
scheduler's job is order and bookkeeping, which a real model would only make slow to observe)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from polyrl.serving.api_error import ApiError
from polyrl.serving.limits import SEED_LIMIT
from polyrl.serving.scheduler import FairScheduler, plan_units
from polyrl.types import Completion, SamplingParams


#: How long the tests' waits may last: liveness bounds far past what each waits for (they return
#: as soon as it happens), not measures of the machine.
BOUND_S = 60.0


class RecordingEngine:
    """Answers ``prompt#k`` for each completion; records each call; can hold calls until released.
    A held call fails by itself only after ``BOUND_S``; ``ended`` counts the calls over, so a test
    can see that something happened while the engine still held (no stopwatch)."""

    def __init__(self, hold: bool = False) -> None:
        self.calls: list[tuple[list[str], SamplingParams]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.ended = 0
        if not hold:
            self.release.set()

    def generate(self, prompts, sampling):
        self.calls.append((list(prompts), sampling))
        self.entered.set()
        try:
            assert self.release.wait(BOUND_S)
            if any(p == "boom" for p in prompts):
                raise RuntimeError("engine failed")
            return [Completion(i, [1], [2], [0.0], text=f"{p}#{len(self.calls)}.{k}")
                    for i, p in enumerate(prompts) for k in range(sampling.n)]
        finally:
            self.ended += 1


def _submit(scheduler, prompts, sampling, out, key):
    def run():
        try:
            out[key] = scheduler.submit(prompts, sampling)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            out[key] = exc
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _queued(scheduler, count):
    deadline = time.monotonic() + BOUND_S
    while scheduler.queued() < count and time.monotonic() < deadline:
        time.sleep(0.005)


def _loads_waiting(scheduler, count):
    """Wait until ``count`` weight loads are in line (a starved loader thread may take a while to
    hand its load in; a fixed sleep then let the next request in ahead of it)."""
    deadline = time.monotonic() + BOUND_S
    while scheduler.loads_waiting() < count and time.monotonic() < deadline:
        time.sleep(0.005)
    assert scheduler.loads_waiting() >= count, "the weight load never got in line"


def _running(key: str, sampling: SamplingParams, max_batch_size: int = 4,
             max_queue: int = 8) -> tuple[RecordingEngine, FairScheduler, dict[str, object], list[threading.Thread]]:
    """A scheduler whose held engine is generating the first unit of request ``key`` (its one
    prompt, and its key in ``out``): the engine, the scheduler, ``out`` and the request's thread."""
    engine = RecordingEngine(hold=True)
    scheduler = FairScheduler(engine.generate, max_batch_size=max_batch_size, max_queue=max_queue)
    out: dict[str, object] = {}
    threads = [_submit(scheduler, [key], sampling, out, key)]
    assert engine.entered.wait(BOUND_S)
    return engine, scheduler, out, threads


def test_units_cover_every_completion_within_the_batch_size():
    s = SamplingParams(n=10, seed=7)
    units = plan_units(3, s, 4)
    assert [(u.prompt_indices, u.sampling.n) for u in units] == [([p], k) for p in range(3) for k in (4, 4, 2)]
    seeds = [u.sampling.seed for u in units]
    assert seeds[0] == 7 and len(set(seeds)) == 9 and all(0 <= seed < 2 ** 63 for seed in seeds)
    assert seeds == [u.sampling.seed for u in plan_units(3, s, 4)]  # the same request, the same seeds
    assert [(u.prompt_indices, u.sampling.n) for u in plan_units(5, SamplingParams(n=2), 4)] == \
        [([0, 1], 2), ([2, 3], 2), ([4], 2)]
    one = plan_units(2, SamplingParams(n=2, seed=3), 4)
    assert len(one) == 1 and one[0].sampling == SamplingParams(n=2, seed=3)  # fits: unchanged


def test_the_units_of_a_seeded_request_never_draw_what_the_next_seeds_draw():
    """Unit i of a request seeded s was seeded s + i: with n past --max-batch-size, the completions
    4..7 of seed = 0, n = 8 were exactly those of seed = 1, n = 4, and a client drawing seeds 0, 1,
    2... for independent samples got the same ones over again. Only the first unit keeps the seed."""
    unit_seeds = {seed: [u.sampling.seed for u in plan_units(1, SamplingParams(n=16, seed=seed), 4)]
                  for seed in range(64)}
    assert all(seeds[0] == seed for seed, seeds in unit_seeds.items())
    every = [seed for seeds in unit_seeds.values() for seed in seeds]
    assert len(set(every)) == len(every) == 64 * 4
    top = SEED_LIMIT - 1  # the largest seed a request may send: every unit's seed is still one a backend takes
    assert all(0 <= seed < SEED_LIMIT for seed in (u.sampling.seed for u in plan_units(1, SamplingParams(n=8, seed=top), 4)))


def test_a_small_request_waits_for_one_unit_of_a_huge_one_not_all_of_it():
    # the first unit of the huge request is being generated
    engine, scheduler, out, threads = _running("huge", SamplingParams(n=16, max_new_tokens=4))
    threads.append(_submit(scheduler, ["small"], SamplingParams(n=1, max_new_tokens=4), out, "small"))
    _queued(scheduler, 2)
    engine.release.set()
    for t in threads:
        t.join(BOUND_S)
    order = [prompts for prompts, _ in engine.calls]
    assert order == [["huge"], ["huge"], ["small"], ["huge"], ["huge"]]  # FIFO would put it last
    assert len(out["huge"]) == 16 and [c.text.split("#")[0] for c in out["huge"]] == ["huge"] * 16
    assert [c.prompt_index for c in out["huge"]] == [0] * 16 and len(out["small"]) == 1


def test_compatible_requests_share_a_call_and_seeded_ones_never_do():
    engine, scheduler, out, threads = _running("first", SamplingParams(max_new_tokens=2), max_batch_size=8,
                                               max_queue=16)
    threads += [_submit(scheduler, [f"p{i}"], SamplingParams(max_new_tokens=2), out, f"p{i}") for i in range(3)]
    threads.append(_submit(scheduler, ["seeded"], SamplingParams(max_new_tokens=2, seed=1), out, "seeded"))
    threads.append(_submit(scheduler, ["p3"], SamplingParams(max_new_tokens=2, seed=1), out, "p3"))
    _queued(scheduler, 6)
    engine.release.set()
    for t in threads:
        t.join(BOUND_S)
    calls = [sorted(prompts) for prompts, _ in engine.calls]
    assert calls[0] == ["first"] and ["p0", "p1", "p2"] in calls
    assert ["seeded"] in calls and ["p3"] in calls  # same seed, still apart: results do not depend on load
    for key in ("p0", "p1", "p2", "seeded", "p3"):
        assert [c.text.split("#")[0] for c in out[key]] == [key] and out[key][0].prompt_index == 0


def test_a_full_queue_answers_503_with_retry_after_at_once():
    engine = RecordingEngine(hold=True)
    scheduler = FairScheduler(engine.generate, max_batch_size=4, max_queue=2)
    out: dict[str, object] = {}
    threads = [_submit(scheduler, [f"p{i}"], SamplingParams(seed=i), out, f"p{i}") for i in range(2)]
    _queued(scheduler, 2)
    with pytest.raises(ApiError) as refused:
        scheduler.submit(["one too many"], SamplingParams())
    assert engine.ended == 0  # at once: refused while the held engine freed no slot (was < 10 s elapsed)
    assert refused.value.status == 503 and int(refused.value.headers["Retry-After"]) >= 1
    engine.release.set()
    for t in threads:
        t.join(BOUND_S)
    assert all(isinstance(out[k], list) for k in ("p0", "p1"))


def test_a_failing_batch_fails_only_its_requests_and_weight_loads_go_first():
    engine, scheduler, out, threads = _running("boom", SamplingParams(n=8, seed=0))
    threads.append(_submit(scheduler, ["fine"], SamplingParams(seed=5), out, "fine"))
    _queued(scheduler, 2)
    loaded = []
    loader = threading.Thread(target=lambda: loaded.append(scheduler.run_exclusive(lambda: len(engine.calls))))
    loader.start()
    _loads_waiting(scheduler, 1)
    engine.release.set()
    for t in [*threads, loader]:
        t.join(BOUND_S)
    assert isinstance(out["boom"], RuntimeError) and isinstance(out["fine"], list)
    assert loaded == [1]  # ran right after the batch in progress, before anything queued
    assert [p for p, _ in engine.calls] == [["boom"], ["fine"]]  # the failed request's other unit dropped


def test_an_engine_answering_the_wrong_count_fails_the_request_and_the_thread_lives_on():
    calls = []

    def short(prompts, sampling):
        calls.append(prompts)
        if prompts == ["short"]:
            return []
        return [Completion(i, [1], [2], [0.0], text=p) for i, p in enumerate(prompts) for _ in range(sampling.n)]

    scheduler = FairScheduler(short, max_batch_size=4, max_queue=4)
    with pytest.raises(RuntimeError, match="returned 0 completions"):
        scheduler.submit(["short"], SamplingParams(n=2))
    assert [c.text for c in scheduler.submit(["next"], SamplingParams(n=2))] == ["next", "next"]
    assert scheduler.queued() == 0


def test_a_weight_load_never_lands_inside_a_request():
    engine, scheduler, out, threads = _running("huge", SamplingParams(n=12))  # three units
    loader = threading.Thread(target=lambda: out.update(load=scheduler.run_exclusive(
        lambda: [p for p, _ in engine.calls])))
    loader.start()
    _loads_waiting(scheduler, 1)
    threads.append(_submit(scheduler, ["later"], SamplingParams(), out, "later"))
    _queued(scheduler, 2)
    engine.release.set()
    for t in [*threads, loader]:
        t.join(BOUND_S)
    assert out["load"] == [["huge"]] * 3  # after all of the started request, before the new one
    assert [p for p, _ in engine.calls] == [["huge"]] * 3 + [["later"]]


def test_each_request_is_tagged_with_the_weights_all_its_units_ran_on():
    engine, version = RecordingEngine(hold=True), {"now": 0}
    scheduler = FairScheduler(engine.generate, max_batch_size=4, max_queue=8, tag=lambda: version["now"])
    out: dict[str, object] = {}

    def submit(key: str, prompt: str, n: int) -> threading.Thread:
        thread = threading.Thread(target=lambda: out.update({key: scheduler.submit_tagged([prompt], SamplingParams(n=n))}))
        thread.start()
        return thread

    threads = [submit("huge", "huge", 12)]  # three units; the load queued during the first waits for all
    assert engine.entered.wait(BOUND_S)
    loader = threading.Thread(target=lambda: scheduler.run_exclusive(lambda: version.update(now=1)))
    loader.start()
    _loads_waiting(scheduler, 1)
    threads.append(submit("later", "later", 1))
    _queued(scheduler, 2)
    engine.release.set()
    for t in [*threads, loader]:
        t.join(BOUND_S)
    assert out["huge"][1] == 0 and len(out["huge"][0]) == 12 and out["later"][1] == 1  # type: ignore[index]


def test_closing_finishes_the_running_batch_and_refuses_the_rest_at_once():
    engine, scheduler, out, threads = _running("running", SamplingParams(n=4, seed=1))
    threads.append(_submit(scheduler, ["waiting"], SamplingParams(seed=2), out, "waiting"))
    threads.append(_submit(scheduler, ["huge"], SamplingParams(n=12), out, "huge"))
    _queued(scheduler, 3)
    loads: list[object] = []

    def load() -> None:
        try:
            loads.append(scheduler.run_exclusive(lambda: "loaded"))
        except ApiError as exc:
            loads.append(exc)

    loader = threading.Thread(target=load)
    loader.start()
    _loads_waiting(scheduler, 1)
    scheduler.close()
    for waiting in (threads[1], threads[2], loader):
        waiting.join(BOUND_S)
    # at once: all refused while the engine still held its batch (was < 10 s elapsed)
    assert not any(t.is_alive() for t in (threads[1], threads[2], loader)) and engine.ended == 0, \
        "waiting requests were not refused at once"
    for refused in (out["waiting"], out["huge"], loads[0]):
        assert isinstance(refused, ApiError) and refused.status == 503 and refused.code == "shutting_down"
        assert int(refused.headers["Retry-After"]) >= 1
    with pytest.raises(ApiError) as late:
        scheduler.submit(["late"], SamplingParams())
    assert late.value.status == 503 and late.value.code == "shutting_down"
    assert not scheduler.join(0.1), "the thread ended while its batch was still generating"
    engine.release.set()
    threads[0].join(BOUND_S)
    assert [c.text for c in out["running"]] == ["running#1.0", "running#1.1", "running#1.2", "running#1.3"]
    assert scheduler.join(BOUND_S), "the generation thread did not end after its last batch"
    assert [p for p, _ in engine.calls] == [["running"]]


def test_a_request_whose_client_left_before_it_started_is_never_generated():
    """A client that timed out (and retried elsewhere) left its request queued, and the server
    generated it anyway for nobody: under load each retry doubled the work. A request not started
    when its client is gone leaves the queue; one already started runs to its end."""
    from polyrl.serving.scheduler import ClientGone

    engine, scheduler, out, threads = _running("started", SamplingParams(n=8))  # 2 units: one runs now
    gone = threading.Event()
    left: dict[str, object] = {}

    def leaving(key: str) -> None:
        try:
            left[key] = scheduler.submit_tagged([key], SamplingParams(seed=1), gone.is_set)
        except ClientGone as exc:
            left[key] = exc

    waiting = threading.Thread(target=leaving, args=("abandoned",))
    waiting.start()
    _queued(scheduler, 2)
    gone.set()  # the client closes its connection while its request waits
    waiting.join(BOUND_S)
    assert isinstance(left["abandoned"], ClientGone) and scheduler.queued() == 1
    engine.release.set()
    for t in threads:
        t.join(BOUND_S)
    assert len(out["started"]) == 8  # type: ignore[arg-type]
    assert all("abandoned" not in prompts for prompts, _ in engine.calls)
    stays = scheduler.submit_tagged(["stays"], SamplingParams(), lambda: False)  # a client still there
    assert [c.text for c in stays[0]] == [f"stays#{len(engine.calls)}.0"]


class _HeldServer:
    """A real PolyrlServer on 127.0.0.1 whose held fake engine keeps a first request ("held", sent
    by a thread) generating until ``release_first()``, which checks it got its 200."""

    def __init__(self, engine: RecordingEngine, server: Any, client: Any, held: threading.Thread,
                 first: dict[str, Any]) -> None:
        self.engine, self.server, self.client, self._held, self._first = engine, server, client, held, first
        self.address = server.server_address[:2]

    def release_first(self) -> None:
        self.engine.release.set()
        self._held.join(BOUND_S)
        assert self._first["r"].status_code == 200


@contextlib.contextmanager
def _a_request_held() -> Iterator[_HeldServer]:
    import httpx

    from polyrl.serve import PolyrlServer

    engine = RecordingEngine(hold=True)
    server = PolyrlServer(("127.0.0.1", 0), engine, model_name="m")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with httpx.Client(base_url=server.url, trust_env=False, timeout=BOUND_S) as client:
            first: dict[str, Any] = {}
            held = threading.Thread(target=lambda: first.update(r=client.post(
                "/v1/completions", json={"prompt": "held", "max_tokens": 1})))
            held.start()
            assert engine.entered.wait(BOUND_S)
            yield _HeldServer(engine, server, client, held, first)
    finally:
        engine.release.set()
        server.shutdown()
        server.server_close()


def _send_request(sock: Any, prompt: str) -> None:
    """A whole POST /v1/completions for ``prompt`` written to a raw socket."""
    import json

    body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


@pytest.mark.faults
def test_a_client_that_closes_its_connection_while_queued_is_dropped_by_a_real_server():
    """Through a real PolyrlServer on 127.0.0.1 (the held fake engine keeps the first request
    generating): the second client sends its request and closes; the server sees end-of-file on
    its socket, counts it abandoned and never generates it, and keeps serving."""
    import socket

    with _a_request_held() as held:
        with socket.create_connection(held.address, timeout=BOUND_S) as sock:
            _send_request(sock, "left")
            _queued(held.server.scheduler, 2)
        deadline = time.monotonic() + BOUND_S / 2  # within the engine's hold
        while held.server.scheduler.queued() > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.server.scheduler.queued() == 1  # the held request only
        assert held.server.stats.abandoned == 1
        held.release_first()
        assert held.client.post("/v1/completions", json={"prompt": "next", "max_tokens": 1}).status_code == 200
    assert [p for p, _ in held.engine.calls] == [["held"], ["next"]]


@pytest.mark.faults
def test_a_client_that_only_half_closes_after_its_request_is_answered_by_a_real_server(monkeypatch):
    """A client may send its whole request, shut down its write side (``shutdown(SHUT_WR)``, ``nc -N``)
    and read the answer: HTTP allows it. Its end-of-file looked like a client gone, and a request
    waiting a poll's time in the queue was dropped unanswered. The server now writes an interim
    ``100 Continue``, which only a closed connection resets; this client reads it, then its answer."""
    import json
    import socket

    from polyrl.serving import scheduler as scheduler_module
    from polyrl.serving.peer import INTERIM

    monkeypatch.setattr(scheduler_module, "GONE_POLL_S", 0.02)  # the waiting request's socket looked at often
    with _a_request_held() as held:
        with socket.create_connection(held.address, timeout=BOUND_S) as sock:
            _send_request(sock, "half")
            sock.shutdown(socket.SHUT_WR)
            interim = b""
            while len(interim) < len(INTERIM) and (chunk := sock.recv(len(INTERIM) - len(interim))):
                interim += chunk  # b"" before: the server took the end-of-file for the client gone
            assert interim == INTERIM
            time.sleep(0.5)  # many polls more: the interim answer was not reset, the client is there
            assert held.server.stats.abandoned == 0 and held.server.scheduler.queued() == 2
            held.engine.release.set()
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, answer = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), reply[:300]
        assert json.loads(answer)["choices"][0]["text"] == "half#2.0"
        held.release_first()
    assert [p for p, _ in held.engine.calls] == [["held"], ["half"]] and held.server.stats.abandoned == 0


def test_a_client_is_told_gone_only_at_end_of_file_even_past_descriptor_1023():
    """select.select refuses descriptors past 1023 (ValueError), which read as "gone": on a server
    with more open files every queued request would have been dropped unanswered."""
    import os
    import resource
    import socket
    import types

    from polyrl.serve import Handler

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.skip("needs 1200 open files (ulimit -n) to put a socket past descriptor 1023")
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1030)]
    try:
        ours, theirs = socket.socketpair()
        assert ours.fileno() > 1023
        connection = types.SimpleNamespace(connection=ours)
        assert Handler._client_gone(connection) is False  # connected, nothing sent
        theirs.sendall(b"GET /health HTTP/1.1\r\n")  # a next request already sent: still there, bytes kept
        assert Handler._client_gone(connection) is False and ours.recv(3) == b"GET"
        theirs.close()
        assert Handler._client_gone(connection) is False  # unread bytes left: not yet end-of-file
        ours.recv(64)
        assert Handler._client_gone(connection) is True
        ours.close()
    finally:
        for fd in fillers:
            os.close(fd)
