"""Tool schemas (checked against transformers' own ``get_json_schema``) and the ``ToolBox``: every
failure a tool call can have becomes a message the model reads, calls keep their order, and the
concurrency bound holds across all the episodes that share a box (counted, not timed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Literal, Optional, Union

import pytest
from transformers.utils import get_json_schema

from polyrl.agents import ToolBox, ToolCall, tool_schema
from polyrl.agents.threads import Worker, finished
from polyrl.errors import ConfigError
from tool_util import stubborn_fetch

# --- real functions with the docstrings users write ------------------------------------------------


def add(x: int, y: float = 1.5) -> float:
    """Add two numbers.

    Args:
        x: The first number.
        y: The second number, which may be a
            fraction.

    Returns:
        The sum.
    """
    return x + y


def search(query: str, limit: Optional[int] = None, tags: list[str] | None = None,  # noqa: UP045 - tested spelling
           mode: Literal["fast", "exact"] = "fast") -> list[str]:
    """Search the notes.

    Args:
        query: Words to look for.
        limit: At most this many hits.
        tags: Only notes with these tags.
        mode: How to match.
    """
    return [query] * (limit or 1)


def brew(drink: str, sizes: dict[str, int], point: tuple[float, float], value: Union[int, str]) -> None:  # noqa: UP007 - tested spelling
    """Brew something.

    Args:
        drink: What to brew (choices: ["tea", "coffee"])
        sizes: Cup sizes by name.
        point: Where to put it.
        value: A number or a label.
    """


def untyped_any(blob: Any, flag: bool) -> str:
    """Anything goes.

    Args:
        blob: Whatever the model sends.
        flag: A switch.
    """
    return "ok"


@pytest.mark.parametrize("fn", [add, search, brew, untyped_any])
def test_schema_equals_transformers_get_json_schema(fn):
    assert tool_schema(fn) == get_json_schema(fn)  # {"type": "function", "function": {...}}


def test_schema_name_override_and_required():
    schema = tool_schema(add, name="plus")["function"]
    assert schema["name"] == "plus"
    assert schema["parameters"]["required"] == ["x"]
    assert schema["parameters"]["properties"]["y"]["description"] == "The second number, which may be a fraction."


def _no_doc(x: int) -> int:
    return x


def _no_hint(x) -> int:
    """Doc.

    Args:
        x: A value.
    """
    return x


def _undocumented_arg(x: int, y: int) -> int:
    """Doc.

    Args:
        x: A value.
    """
    return x


def _star(*values: int) -> int:
    """Doc.

    Args:
        values: Values.
    """
    return 0


class Point:
    pass


def _object_arg(p: Point) -> int:
    """Doc.

    Args:
        p: A point.
    """
    return 0


def _yields(x: int) -> str:
    """Doc.

    Args:
        x: A value.
    """
    yield str(x)


async def _async_yields(x: int) -> str:
    """Doc.

    Args:
        x: A value.
    """
    yield str(x)


def _renamed_yields():
    """``_yields`` as a registered tool is wrapped under its registered name (``functools.wraps``)."""
    from polyrl.agents.loading import _renamed

    return _renamed(_yields, "_renamed_yields")


@pytest.mark.parametrize(("fn", "words"), [
    (_no_doc, "no docstring"), (_no_hint, "no type hint"), (_undocumented_arg, "does not describe argument 'y'"),
    (_star, "variadic"), (_object_arg, "JSON cannot carry"),
    # once offered: every call answered "returned a generator, which is neither text nor JSON", its code never run
    (_yields, "is a generator function (its body has a yield)"),
    (_async_yields, "is a generator function (its body has a yield)"),
    (_renamed_yields(), "is a generator function (its body has a yield)"),
])
def test_schema_refuses_what_the_model_could_not_use(fn, words):
    with pytest.raises(ConfigError) as err:
        tool_schema(fn)
    assert err.value.field == "environment.tools"
    assert words in str(err.value) and fn.__name__ in str(err.value) and "Fix:" in str(err.value)


# --- ToolBox ---------------------------------------------------------------------------------------


def divide(a: float, b: float) -> float:
    """Divide a by b.

    Args:
        a: Numerator.
        b: Denominator.
    """
    return a / b


def quits(code: int) -> str:
    """Exit the process.

    Args:
        code: Exit status.
    """
    sys.exit(code)


def hard_quits(code: int) -> str:
    """Exit the process at once.

    Args:
        code: Exit status.
    """
    os._exit(code)


def give_set(n: int) -> Any:
    """Return a set.

    Args:
        n: Size.
    """
    return set(range(n))


def shout(text: str) -> str:
    """Repeat text loudly.

    Args:
        text: The text.
    """
    return text.upper() * 1000


async def async_lookup(key: str) -> dict:
    """Look a key up.

    Args:
        key: The key.
    """
    await asyncio.sleep(0)
    return {"key": key, "found": True}


def run(box: ToolBox, calls: list[ToolCall]) -> list[dict]:
    return asyncio.run(box.run(calls))


def test_good_calls_answer_in_order_with_json_results():
    box = ToolBox([divide, async_lookup, search], timeout_s=10)
    out = run(box, [ToolCall("divide", {"a": 1, "b": 4}, "c1"), ToolCall("async_lookup", {"key": "k"}, "c2"),
                    ToolCall("search", {"query": "q", "limit": 2, "tags": None, "mode": "exact"}, "c3")])
    assert out == [
        {"role": "tool", "name": "divide", "content": "0.25", "tool_call_id": "c1"},
        {"role": "tool", "name": "async_lookup", "content": '{"key": "k", "found": true}', "tool_call_id": "c2"},
        {"role": "tool", "name": "search", "content": '["q", "q"]', "tool_call_id": "c3"},
    ]
    assert [s["function"]["name"] for s in box.schemas] == ["divide", "async_lookup", "search"]
    assert box.counts["calls"] == 3 and sum(box.counts.values()) == 3


@pytest.mark.faults
@pytest.mark.parametrize(("call", "kind", "words"), [
    (ToolCall("nope", {}), "unknown_tool", "unknown tool 'nope'; the tools are: divide, search"),
    (ToolCall("divide", {"a": 1, "c": 2}), "bad_arguments", "unexpected argument(s) 'c' (it takes: a, b)"),
    (ToolCall("divide", {"a": 1}), "bad_arguments", "missing required argument(s) 'b'"),
    (ToolCall("divide", {"a": "one", "b": 2}), "bad_arguments", "argument 'a' must be number, got string"),
    (ToolCall("divide", {"a": True, "b": 2}), "bad_arguments", "argument 'a' must be number, got boolean"),
    (ToolCall("search", {"query": "q", "mode": "slow"}), "bad_arguments", "argument 'mode' must be one of ['fast', 'exact']"),
    (ToolCall("search", {"query": "q", "tags": ["a", 3]}), "bad_arguments", "argument 'tags'[1] must be string"),
    (ToolCall("divide", {"a": 1, "b": 0}), "raised", "tool 'divide' raised ZeroDivisionError: division by zero"),
])
def test_each_bad_call_becomes_an_error_the_model_reads(call, kind, words):
    box = ToolBox([divide, search])
    [message] = run(box, [call])
    assert message["role"] == "tool" and message["name"] == call.name
    assert message["content"].startswith("error: ") and words in message["content"]
    assert box.counts[kind] == 1


@pytest.mark.faults
def test_exiting_tools_and_unserialisable_results_do_not_end_the_run():
    box = ToolBox([quits, hard_quits, give_set])
    out = run(box, [ToolCall("quits", {"code": 3}), ToolCall("hard_quits", {"code": 4}), ToolCall("give_set", {"n": 2})])
    assert "raised SystemExit(3)" in out[0]["content"]
    assert "raised os._exit(4)" in out[1]["content"]
    assert out[2]["content"].startswith("error: tool 'give_set' returned a set, which is neither text nor JSON")
    assert box.counts["raised"] == 2 and box.counts["bad_result"] == 1


def numpy_stats(n: int) -> Any:
    """Summarise a range with numpy.

    Args:
        n: How many values.
    """
    import numpy as np

    values = np.arange(n)
    if n == 0:
        return np.float64("nan")  # the mean of nothing: still refused, as a float NaN is
    return {"sum": values.sum(), "mean": values.mean(), "positive": np.bool_(True), "values": values,
            "half": np.float32(0.5)}


def test_numpy_numbers_and_arrays_in_a_result_are_its_json():
    """np.int64 and arrays (what a tool computing with numpy returns) were answered "neither text
    nor JSON" on every call; they are the numbers and lists they hold. A NaN is still refused."""
    box = ToolBox([numpy_stats])
    ok, nan = run(box, [ToolCall("numpy_stats", {"n": 4}), ToolCall("numpy_stats", {"n": 0})])
    assert not ok["content"].startswith("error:"), ok["content"]
    assert json.loads(ok["content"]) == {"sum": 6, "mean": 1.5, "positive": True, "values": [0, 1, 2, 3], "half": 0.5}
    assert nan["content"].startswith("error: tool 'numpy_stats' returned a float64, which is neither text nor JSON")
    assert box.counts["bad_result"] == 1


def nested(depth: int) -> list:
    """Nest a list.

    Args:
        depth: How deep.
    """
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("its __str__ raised")


def unprintable(x: int) -> str:
    """Fail oddly.

    Args:
        x: Anything.
    """
    raise Unprintable()


@pytest.mark.faults
def test_results_nested_past_the_recursion_limit_and_unprintable_errors_do_not_end_the_run():
    """json.dumps raised RecursionError out of the tool box (a traceback ending the step), and an
    exception whose __str__ raises was reported as that second error."""
    box = ToolBox([nested, unprintable])
    out = run(box, [ToolCall("nested", {"depth": 5000}), ToolCall("unprintable", {"x": 1})])
    assert out[0]["content"].startswith("error: tool 'nested' returned a list, which is neither text nor JSON")
    assert out[1]["content"].startswith("error: tool 'unprintable' raised Unprintable: (its message cannot be shown")
    assert box.counts["bad_result"] == 1 and box.counts["raised"] == 1


@pytest.mark.faults
def test_a_tool_past_its_timeout_is_an_error_and_the_next_call_still_runs():
    release = threading.Event()

    def stuck(seconds: float) -> str:
        """Wait.

        Args:
            seconds: How long.
        """
        release.wait(seconds)
        return "late"

    async def stuck_async(seconds: float) -> str:
        """Wait without blocking.

        Args:
            seconds: How long.
        """
        await asyncio.sleep(seconds)
        return "late"

    box = ToolBox([stuck, stuck_async, divide], timeout_s=0.2, max_concurrency=1)
    try:
        out = run(box, [ToolCall("stuck", {"seconds": 60}), ToolCall("stuck_async", {"seconds": 60}),
                        ToolCall("divide", {"a": 6, "b": 3})])
    finally:
        release.set()
    assert out[0]["content"] == "error: tool 'stuck' did not finish within 0.2 s"
    assert out[1]["content"] == "error: tool 'stuck_async' did not finish within 0.2 s"
    assert out[2]["content"] == "2.0"  # the slot of the abandoned thread was given back
    assert box.counts["timeout"] == 2 and box.abandoned == 1


def test_long_results_are_cut_with_a_note():
    box = ToolBox([shout], max_result_chars=100)
    [message] = run(box, [ToolCall("shout", {"text": "ab"})])
    assert message["content"].startswith("AB" * 50) and message["content"].endswith("... [1900 more characters cut]")


def test_concurrency_is_bounded_across_all_episodes_of_a_step():
    bound = 3
    lock = threading.Lock()
    active = {"now": 0, "peak": 0}
    # a bound below 3 would break it: every call errors; the wait is a bound below the box's 30 s tool
    # timeout, not a measure (was 10 s: three threads starting on a loaded machine)
    barrier = threading.Barrier(bound, timeout=25)

    def work(i: int) -> int:
        """Count concurrent calls.

        Args:
            i: Call number.
        """
        with lock:
            active["now"] += 1
            active["peak"] = max(active["peak"], active["now"])
        try:
            barrier.wait()
        finally:
            with lock:
                active["now"] -= 1
        return i

    box = ToolBox([work], max_concurrency=bound)

    async def step() -> list[list[dict]]:  # three episodes of one step call the same box at once
        return await asyncio.gather(*(box.run([ToolCall("work", {"i": 3 * e + k}) for k in range(3)])
                                      for e in range(3)))

    episodes = asyncio.run(step())
    assert [[m["content"] for m in ep] for ep in episodes] == [[str(3 * e + k) for k in range(3)] for e in range(3)]
    assert active["peak"] == bound
    # the same box serves the next step's event loop too
    assert [m["content"] for m in run(box, [ToolCall("work", {"i": i}) for i in range(3)])] == ["0", "1", "2"]
    assert active["peak"] == bound


def test_two_tools_with_one_name_are_refused():
    with pytest.raises(ConfigError, match="two tools are named 'divide'"):
        ToolBox([divide, search, divide])


@pytest.mark.faults
def test_a_timeout_the_tool_raises_itself_is_its_error_not_the_box_timeout():
    async def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: The address.
        """
        raise TimeoutError("upstream took too long")

    def fetch_sync(url: str) -> str:
        """Fetch a page.

        Args:
            url: The address.
        """
        raise TimeoutError("upstream took too long")

    box = ToolBox([fetch, fetch_sync], timeout_s=30)
    out = run(box, [ToolCall("fetch", {"url": "u"}), ToolCall("fetch_sync", {"url": "u"})])
    assert [m["content"] for m in out] == [f"error: tool {n!r} raised TimeoutError: upstream took too long"
                                           for n in ("fetch", "fetch_sync")]
    assert box.counts["raised"] == 2 and box.counts["timeout"] == 0


class Board:
    """An environment's state with a tool bound to it."""

    def __init__(self) -> None:
        self.marks: list[str] = []

    def mark(self, cell: str) -> str:
        """Mark a cell.

        Args:
            cell: The cell, e.g. "b2".
        """
        self.marks.append(cell)
        return f"marked {cell}"


def test_episode_tools_extend_the_step_box_and_share_its_bound_and_counts():
    shared = ToolBox([divide], max_concurrency=2)
    boards = [Board(), Board()]
    boxes = [shared.extended([b.mark]) for b in boards]
    assert [s["function"]["name"] for s in boxes[0].schemas] == ["divide", "mark"]
    assert tool_schema(boards[0].mark)["function"]["parameters"]["required"] == ["cell"]  # no self

    async def step() -> list[list[dict]]:
        return await asyncio.gather(boxes[0].run([ToolCall("mark", {"cell": "a1"})]),
                                    boxes[1].run([ToolCall("mark", {"cell": "c3"}), ToolCall("divide", {"a": 1, "b": 1})]))

    out = asyncio.run(step())
    assert [m["content"] for m in out[0] + out[1]] == ["marked a1", "marked c3", "1.0"]
    assert [b.marks for b in boards] == [["a1"], ["c3"]]  # each episode's state got its own calls
    assert shared.counts["calls"] == 3 and boxes[0]._semaphores is shared._semaphores
    assert shared.extended([]) is shared
    with pytest.raises(ConfigError, match="the environment's tool\\(s\\) 'divide' clash"):
        shared.extended([divide])


def echo(x: str) -> str:
    """Echo the text.

    Args:
        x: the text
    """
    return x


def surrogate_result(n: int) -> Any:
    """A result holding lone surrogates.

    Args:
        n: which kind
    """
    if n == 0:
        return "bad \udcff\ud800 text"
    if n == 1:
        return {"k\ud800": ["v\udfff"]}
    raise ValueError("broken \ud800 message")


@pytest.mark.faults
def test_tool_messages_never_carry_lone_surrogates_a_tokenizer_refuses():
    """A tool echoing the model's escape, returning one, or raising with one: every message the
    box writes is valid UTF-8 (U+FFFD in their place), so the chat template can render it."""
    box = ToolBox([echo, surrogate_result])
    out = run(box, [ToolCall("echo", {"x": "a\ud800"}, "c1"), ToolCall("surrogate_result", {"n": 0}),
                    ToolCall("surrogate_result", {"n": 1}), ToolCall("surrogate_result", {"n": 2}),
                    ToolCall("nope\ud800", {}, "id\udc00")])
    for message in out:
        for value in message.values():
            value.encode("utf-8")
    assert out[0]["content"] == "a\ufffd" and out[1]["content"] == "bad \ufffd\ufffd text"
    assert out[2]["content"] == '{"k\ufffd": ["v\ufffd"]}'
    assert out[3]["content"].startswith("error:") and "broken \ufffd message" in out[3]["content"]
    assert out[4]["name"] == "nope\ufffd" and out[4]["tool_call_id"] == "id\ufffd"


# --- where a tool runs: its own thread and loop, its own copy of the arguments -----------------------


def median(values: list[int], options: dict[str, Any]) -> str:
    """The median of some numbers, editing its arguments in place as ordinary code does.

    Args:
        values: the numbers
        options: settings
    """
    values.sort()
    options.setdefault("seen", []).append(len(values))
    return str(values[len(values) // 2])


async def async_median(values: list[int], options: dict[str, Any]) -> str:
    """The median, asynchronously.

    Args:
        values: the numbers
        options: settings
    """
    await asyncio.sleep(0)
    return median(values, options)


def test_a_tool_editing_its_arguments_in_place_leaves_the_models_call_as_written():
    """The call's arguments are the episode's record of what the model wrote (its assistant
    message's tool_calls): a tool got them by reference and sorted the recorded list."""
    box = ToolBox([median, async_median])
    calls = [ToolCall(name, {"values": [9, 1, 5], "options": {"keep": [1]}}, f"c{i}")
             for i, name in enumerate(("median", "async_median"))]
    recorded = [c.as_message_entry() for c in calls]
    out = run(box, calls)
    assert [m["content"] for m in out] == ["5", "5"]
    assert [r["function"]["arguments"] for r in recorded] == [{"values": [9, 1, 5], "options": {"keep": [1]}}] * 2


async def cancelled_lookup(key: str) -> str:
    """Await a request something else cancelled (a connection pool tearing it down).

    Args:
        key: the key
    """
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    return await future


@pytest.mark.faults
def test_an_async_tools_own_cancelled_error_is_its_error_and_the_run_goes_on():
    """Async tools ran on the caller's loop, whose CancelledError the box re-raised as the runner's
    own: one tool's cancelled request ended the whole step."""
    box = ToolBox([cancelled_lookup, divide])
    out = run(box, [ToolCall("cancelled_lookup", {"key": "k"}), ToolCall("divide", {"a": 1, "b": 2})])
    assert out[0]["content"] == "error: tool 'cancelled_lookup' raised CancelledError"
    assert out[1]["content"] == "0.5" and box.counts["raised"] == 1


ASYNC_EXIT = '''
import asyncio, os
from polyrl.agents import ToolBox, ToolCall

async def leave(code: int) -> str:
    """Leave the process.

    Args:
        code: exit status
    """
    os._exit(code)

out = asyncio.run(ToolBox([leave]).run([ToolCall("leave", {"code": 3})]))
print("the run went on:", out[0]["content"])
'''


@pytest.mark.faults
def test_an_async_tool_calling_os_exit_is_its_error_as_for_a_plain_one():
    """The os._exit guard holds on worker threads only, and async tools ran on the main thread:
    the process ended at once with the tool's exit code (in a child here, so a regression cannot
    end the test run)."""
    child = subprocess.run([sys.executable, "-c", ASYNC_EXIT], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "the run went on: error: tool 'leave' raised os._exit(3) (the run goes on)" in child.stdout


@pytest.mark.faults
def test_an_async_tool_ignoring_its_cancellation_is_abandoned_at_its_timeout():
    """A retry loop catching CancelledError kept the caller's loop waiting for it for ever (the
    run hung in asyncio.run's shutdown); now it is left on its own thread's loop, like a plain
    function's thread, and the answer comes at the timeout."""
    stop = threading.Event()
    box = ToolBox([stubborn_fetch(stop), divide], timeout_s=0.3)
    answers: list[list[dict]] = []
    caller = threading.Thread(target=lambda: answers.append(run(box, [ToolCall("fetch", {"url": "u"}),
                                                                      ToolCall("divide", {"a": 1, "b": 1})])),
                              daemon=True)
    try:
        caller.start()
        caller.join(120)  # a liveness bound, not a measure: cut off at 0.3 s and the cancel grace
        assert answers, "the tool box still waits for the tool that ignores its cancellation (it never ends)"
        assert [m["content"] for m in answers[0]] == ["error: tool 'fetch' did not finish within 0.3 s", "1.0"]
        assert box.abandoned == 1 and box.running_late == 1
    finally:
        stop.set()
    deadline = time.monotonic() + 60  # a bound, not a measure: the loop ends as soon as it does
    while box.running_late and time.monotonic() < deadline:  # it ends once it stops looping
        time.sleep(0.01)
    assert box.running_late == 0


@pytest.mark.faults
def test_calls_left_running_past_their_timeout_are_capped_and_counted_down_as_they_end():
    """Each abandoned call holds a thread Python cannot stop: a tool that always hangs added one
    per call for the whole run. Past ``max_abandoned`` calls are refused (an error the model
    reads) until some end."""
    release = threading.Event()

    def hang(x: int) -> str:
        """Wait for a release.

        Args:
            x: anything
        """
        release.wait(30)
        return "released"

    async def hang_async(x: int) -> str:
        """Wait for a release, ignoring cancellation.

        Args:
            x: anything
        """
        while not release.is_set():
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                pass
        return "released"

    box = ToolBox([hang, hang_async, divide], timeout_s=0.5, max_abandoned=2)
    try:
        first = run(box, [ToolCall("hang", {"x": 1}), ToolCall("hang_async", {"x": 2})])
        assert [m["content"] for m in first] == ["error: tool 'hang' did not finish within 0.5 s",
                                                 "error: tool 'hang_async' did not finish within 0.5 s"]
        assert box.running_late == 2
        threads = threading.active_count()
        refused = run(box, [ToolCall("hang", {"x": 3}), ToolCall("divide", {"a": 1, "b": 1})])
        # not run at all, counted, not timed: no thread started (below), so no timeout was waited for
        assert [m["content"] for m in refused] == [
            f"error: tool {name!r} not run: 2 earlier tool calls are still running past their 0.5 s timeout "
            "(their threads cannot be stopped)" for name in ("hang", "divide")]
        assert threading.active_count() <= threads and box.counts["not_run"] == 2
    finally:
        release.set()
    deadline = time.monotonic() + 60  # a bound, not a measure: the loop ends as soon as they do
    while box.running_late and time.monotonic() < deadline:
        time.sleep(0.01)
    assert box.running_late == 0
    assert [m["content"] for m in run(box, [ToolCall("divide", {"a": 1, "b": 4})])] == ["0.25"]


def test_cancelling_the_caller_leaves_at_once_and_cancels_async_tools_on_their_loop():
    """The runner's own cancellation (asyncio.run turns a Ctrl-C into it) still stops everything:
    the box does not answer, and the async tool is cancelled where it runs."""
    started, cancelled = threading.Event(), threading.Event()

    async def slow(x: int) -> str:
        """Take long.

        Args:
            x: anything
        """
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    box = ToolBox([slow], timeout_s=60)

    async def caller() -> None:
        task = asyncio.ensure_future(box.run([ToolCall("slow", {"x": 1})]))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(caller())
    # cancelled where it runs, not waited for (it would have answered "late" at 60 s, never cancelled)
    assert cancelled.wait(60)


CTRL_C = '''
import asyncio, sys
from polyrl.agents import ToolBox, ToolCall

async def slow(x: int) -> str:
    """Take long.

    Args:
        x: anything
    """
    print("started", flush=True)
    await asyncio.sleep(600)
    return "late"

def hang(x: int) -> str:
    """Block long.

    Args:
        x: anything
    """
    import time
    time.sleep(600)
    return "late"

asyncio.run(ToolBox([slow, hang], timeout_s=600).run([ToolCall("slow", {"x": 1}), ToolCall("hang", {"x": 2})]))
print("answered")
'''


@pytest.mark.faults
def test_a_ctrl_c_of_the_run_still_stops_it_while_tools_run():
    """Seen, not timed: the tools take 600 s, so a run that ends within the 120 s bound did not wait
    for them (a bound of 10 s on the elapsed time measured the machine)."""
    child = subprocess.Popen([sys.executable, "-c", CTRL_C], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "started"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]


# The OS may hand a Ctrl-C to any thread that does not block it (to a tool's thread whenever the
# main thread is starting one: glibc blocks every signal meanwhile). Python's handler then waits for
# the main thread, asleep until the tools' time limit unless something wakes it. The tool here takes
# the signal itself once the caller sleeps (``pthread_kill`` to its own thread), then hangs.
SIGNAL_ON_TOOL_THREAD = '''
import asyncio, signal, sys, threading, time
from polyrl.agents import ToolBox, ToolCall
from polyrl.agents.threads import Worker

def hang(x: int) -> str:
    """Take the run's Ctrl-C on this thread, then block long.

    Args:
        x: anything
    """
    time.sleep(0.5)  # the caller is asleep, waiting for this call
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    print("signalled", flush=True)
    time.sleep(600)
    return "late"

if sys.argv[1] == "loop":
    asyncio.run(ToolBox([hang], timeout_s=600).run([ToolCall("hang", {"x": 1})]))
else:
    Worker().call_blocking(lambda: hang(1), 600)
print("answered")
'''


@pytest.mark.faults
@pytest.mark.parametrize("waiting", ["loop", "blocking"])
def test_a_ctrl_c_taken_by_a_tools_thread_still_stops_the_run_at_once(waiting):
    child = subprocess.Popen([sys.executable, "-c", SIGNAL_ON_TOOL_THREAD, waiting], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "signalled"
        # the tool takes 600 s: ending within this bound is not waiting for it (not a measure)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]


def test_an_extended_boxs_tools_run_on_its_worker_one_at_a_time_within_the_step_bound():
    """An environment's own tools run on its episode's worker (the thread and loop its state was
    made on); calls of one episode take turns there, the step's bound holds across episodes."""
    lock = threading.Lock()
    active = {"now": 0, "peak": 0}

    class Env:
        def __init__(self) -> None:
            self.seen: list[tuple[int, Any]] = []
            self.busy = False

        def work(self, i: int) -> int:
            """Work a while.

            Args:
                i: call number
            """
            assert not self.busy, "two calls at once on one environment's worker"
            self.busy = True
            with lock:
                active["now"] += 1
                active["peak"] = max(active["peak"], active["now"])
            time.sleep(0.05)
            with lock:
                active["now"] -= 1
            self.busy = False
            self.seen.append((threading.get_ident(), None))
            return i

        async def where(self) -> str:
            """Say where it runs."""
            self.seen.append((threading.get_ident(), asyncio.get_running_loop()))
            return "here"

    shared = ToolBox([divide], max_concurrency=2, timeout_s=5)
    workers = [Worker(name="polyrl-env-test") for _ in range(3)]
    envs = [Env() for _ in workers]
    try:
        loops = [run_on(w, lambda: finished(running_loop())) for w in workers]  # each worker's own loop
        idents = [run_on(w, threading.get_ident) for w in workers]
        boxes = [shared.extended([e.work, e.where], worker=w) for e, w in zip(envs, workers)]

        async def step() -> list[list[dict]]:
            return await asyncio.gather(*(box.run([ToolCall("work", {"i": 2 * e}), ToolCall("work", {"i": 2 * e + 1}),
                                                   ToolCall("where", {})]) for e, box in enumerate(boxes)))

        out = asyncio.run(step())
    finally:
        for w in workers:
            w.close()
    assert [[m["content"] for m in ep] for ep in out] == [[str(2 * e), str(2 * e + 1), "here"] for e in range(3)]
    assert active["peak"] == 2  # the step's bound, across the three episodes' workers
    for env, ident, loop in zip(envs, idents, loops):
        assert {t for t, _ in env.seen} == {ident}
        assert [lp for _, lp in env.seen if lp is not None] == [loop]


def run_on(worker: Worker, fn):
    return worker.call_blocking(fn, 5)


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


class ItemsRaise(dict):
    """A dict whose own code fails when serialised (``json.dumps`` calls ``items``)."""

    def items(self):  # type: ignore[override]
        raise RuntimeError("items() failed")


class ItemsHang(dict):
    def items(self):  # type: ignore[override]
        time.sleep(20)  # far past the 0.5 s timeout: a wait for it cannot pass for a slow machine
        return super().items()


class LenRaises(str):
    def __len__(self) -> int:
        raise RuntimeError("__len__ failed")


def odd_result(kind: str) -> Any:
    """Return an odd result.

    Args:
        kind: Which one.
    """
    return {"raise": lambda: ItemsRaise(a=1), "hang": lambda: ItemsHang(a=1), "len": lambda: LenRaises("text")}[kind]()


@pytest.mark.faults
def test_a_result_whose_own_code_raises_or_hangs_is_an_error_the_model_reads():
    """A dict subclass whose items() raised escaped ToolBox.run (a traceback ending the step), a
    str subclass whose __len__ raised too, and serialising a result ran on the caller's thread,
    outside the tool's timeout (one that hung there hung the run)."""
    box = ToolBox([odd_result], timeout_s=0.5)
    out = run(box, [ToolCall("odd_result", {"kind": k}) for k in ("raise", "hang", "len")])
    # the timeout message below is the cut: a result serialised after its 20 s hang would be its JSON
    assert out[0]["content"] == ("error: tool 'odd_result' returned a ItemsRaise, which is neither text nor JSON "
                                 "(RuntimeError: items() failed)")
    assert out[1]["content"] == "error: tool 'odd_result' did not finish within 0.5 s"
    assert out[2]["content"] == "text" and type(out[2]["content"]) is str
    assert box.counts["bad_result"] == 1 and box.counts["timeout"] == 1 and box.counts["raised"] == 0


def loud(size: int) -> str:
    """Fail with a long message.

    Args:
        size: Characters of the message.
    """
    raise ValueError("m" * size)


@pytest.mark.faults
def test_errors_quote_what_the_model_or_the_tool_wrote_in_bounded_length():
    """An unknown tool's 20,000-character name, 1,000 unexpected argument names and a tool's
    exception message of a megabyte were each echoed whole into the error the model reads (as
    many tokens inserted, or the episode ended as length where a short error fitted)."""
    box = ToolBox([loud, search], max_result_chars=1000)
    out = run(box, [ToolCall("n" * 20000, {}),
                    ToolCall("search", {"query": "q", **{f"k{i:04d}" + "x" * 200: 1 for i in range(1000)}}),
                    ToolCall("loud", {"size": 10**6})])
    assert all(m["content"].startswith("error: ") and len(m["content"]) < 1200 for m in out)
    assert "unknown tool 'nnnn" in out[0]["content"] and "(20000 characters)" in out[0]["content"]
    assert "unexpected argument(s) 'k0000" in out[1]["content"] and "and 995 more" in out[1]["content"]
    assert "raised ValueError: mmm" in out[2]["content"] and "more characters cut]" in out[2]["content"]
