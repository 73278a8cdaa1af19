"""Tool schemas (checked against transformers' own ``get_json_schema``) and the ``ToolBox``: every
failure a tool call can have becomes a message the model reads, calls keep their order, and the
concurrency bound holds across all the episodes that share a box (counted, not timed)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any, Literal, Optional, Union

import pytest
from transformers.utils import get_json_schema

from polyrl.agents import ToolBox, ToolCall, tool_schema
from polyrl.errors import ConfigError

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


@pytest.mark.parametrize(("fn", "words"), [
    (_no_doc, "no docstring"), (_no_hint, "no type hint"), (_undocumented_arg, "does not describe argument 'y'"),
    (_star, "variadic"), (_object_arg, "JSON cannot carry"),
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
    barrier = threading.Barrier(bound, timeout=10)  # a bound below 3 would break it: every call errors

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
