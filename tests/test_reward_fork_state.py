"""A function reward run in a forked child that keeps state across calls is named once.

In a child (``isolation = "process"``, the default for math-verify rewards) a counter or a
curriculum the reward moves is moved in the child's copy of the process and lost when the call
returns; TRL, calling the reward on its main thread, keeps every change.
"""

from __future__ import annotations

import os

import pytest
from structlog.testing import capture_logs

from polyrl.rewards.functions import FunctionReward

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="process isolation needs os.fork")

CALLS = 0
SEEN: list[int] = []


def counting_accuracy(completions, solution, **kwargs):
    """The open-r1 accuracy reward with a call counter, as a curriculum keeps one."""
    from math_verify import parse, verify

    global CALLS
    CALLS += 1
    return [float(verify(parse(s), parse(c))) for c, s in zip(completions, solution)]


def remembering(completions, **kwargs):
    SEEN.append(len(completions))
    return [1.0] * len(completions)


def plain(completions, **kwargs):
    return [float(len(c) < 10) for c in completions]


class Curriculum:
    def __init__(self):
        self.level = 0

    def __call__(self, completions, **kwargs):
        self.level += 1
        return [float(self.level)] * len(completions)


def _warnings(fn, isolation):
    with capture_logs() as logs:
        reward = FunctionReward(fn, isolation=isolation)
    return reward, [e for e in logs if e.get("log_level") == "warning" and "forked child" in e["event"]]


def test_a_math_verify_reward_counting_its_calls_is_named_as_losing_the_count():
    pytest.importorskip("math_verify")
    reward, said = _warnings(counting_accuracy, "auto")
    assert reward.isolation == "process"
    assert len(said) == 1 and "global 'CALLS'" in said[0]["event"] and 'isolation = "thread"' in said[0]["fix"]


@pytest.mark.parametrize("fn, what", [(remembering, "module-level 'SEEN' (append)"), (Curriculum(), "self.level")])
def test_state_a_child_loses_is_named_for_a_forked_reward(fn, what):
    _, said = _warnings(fn, "process")
    assert len(said) == 1 and what in said[0]["event"]


def test_no_word_for_a_reward_without_state_or_on_the_thread():
    assert _warnings(plain, "process")[1] == []
    from polyrl.rewards.isolation import kept_state

    assert _warnings(Curriculum(), "thread")[1] == []
    assert kept_state(plain) is None


def test_a_cell_of_the_calls_own_nested_function_is_no_state():
    from polyrl.rewards.isolation import kept_state

    def reward(completions, **kwargs):
        total = 0

        def add(x):
            nonlocal total
            total += x

        for c in completions:
            add(len(c))
        return [float(total)] * len(completions)

    assert kept_state(reward) is None


def test_a_function_wrapped_twice_is_named_once():
    def counter(completions, **kwargs):
        SEEN.clear()
        return [1.0] * len(completions)

    assert len(_warnings(counter, "process")[1]) == 1
    assert _warnings(counter, "process")[1] == []


# --- state kept by item assignment, in containers, closures, helpers and random generators -----------

STATE = {"n": 0, "rows": [{}]}
CACHE: dict = {}
QUEUE: list = []
RNG = __import__("numpy").random.default_rng(0)


class Namespace:
    n = 0


NS = Namespace()


def counts_in_a_dict(completions, **kwargs):
    STATE["n"] += 1
    return [1.0] * len(completions)


def caches(completions, **kwargs):
    for c in completions:
        CACHE[c] = len(c)
    return [float(CACHE[c]) for c in completions]


def forgets(completions, **kwargs):
    del CACHE[completions[0]]
    return [1.0] * len(completions)


def counts_on_an_object(completions, **kwargs):
    NS.n += 1
    return [1.0] * len(completions)


def pushes(completions, **kwargs):
    import heapq

    heapq.heappush(QUEUE, len(completions))
    return [1.0] * len(completions)


def appends_to_an_item(completions, **kwargs):
    STATE.setdefault("seen", []).append(len(completions))
    return [1.0] * len(completions)


def marks_through_an_alias(completions, **kwargs):
    for row in STATE["rows"]:
        row["seen"] = True
    return [1.0] * len(completions)


def _remember(text):
    CACHE[text] = True


def remembers_in_a_helper(completions, **kwargs):
    for c in completions:
        _remember(c)
    return [1.0] * len(completions)


def keeps_a_default(completions, seen=set(), **kwargs):  # noqa: B006 - the state under test
    seen.update(completions)
    return [float(c in seen) for c in completions]


def draws_from_a_module_level_generator(completions, **kwargs):
    return [float(RNG.random()) for _ in completions]


def _closure_cache():
    cache: dict = {}

    def cached_reward(completions, **kwargs):
        cache[completions[0]] = 1
        return [1.0] * len(completions)

    return cached_reward


class Memo:
    def __init__(self):
        self.cache = {}

    def __call__(self, completions, **kwargs):
        memo = self.cache
        memo[completions[0]] = 1
        return [1.0] * len(completions)


class Logger:
    def __init__(self):
        self.seen = []

    def __call__(self, completions, **kwargs):
        self._note(completions)
        return [1.0] * len(completions)

    def _note(self, completions):
        self.seen.extend(completions)


KEPT = [
    (counts_in_a_dict, "changes the module-level 'STATE' (item assignment)"),
    (caches, "changes the module-level 'CACHE' (item assignment)"),
    (forgets, "changes the module-level 'CACHE' (del)"),
    (counts_on_an_object, "changes the module-level 'NS' (sets .n)"),
    (pushes, "changes the module-level 'QUEUE' (heappush)"),
    (appends_to_an_item, "changes the module-level 'STATE' (append)"),
    (marks_through_an_alias, "changes the module-level 'STATE' (item assignment)"),
    (remembers_in_a_helper, "changes the module-level 'CACHE' (item assignment) (in _remember, which it calls)"),
    (keeps_a_default, "changes its default argument 'seen' (update)"),
    (draws_from_a_module_level_generator, "draws from the random generator RNG (random)"),
    (_closure_cache(), "changes 'cache' of the function around it (item assignment)"),
    (Memo(), "changes self.cache (item assignment)"),
    (Logger(), "changes self.seen (extend) (in Logger._note, which it calls)"),
]


@pytest.mark.parametrize("fn, said", KEPT, ids=[getattr(f, "__name__", type(f).__name__) for f, _ in KEPT])
def test_state_kept_by_item_assignment_containers_helpers_and_generators_is_named(fn, said):
    """Once: only a ``global`` assignment, a mutating method called straight on a module-level
    name and ``self.x = ...`` were seen; ``STATE["n"] += 1``, ``CACHE[k] = v``, ``del``, a closure's
    or ``self.cache[k] = v``, a helper's change and the rest were lost in the child without a word."""
    _, warned = _warnings(fn, "process")
    assert len(warned) == 1 and said in warned[0]["event"], warned


def test_no_word_for_what_a_call_makes_itself_or_what_a_child_does_not_lose():
    """Local containers and generators, a ``functools.lru_cache`` (losing it costs time only), the
    ``random`` module's own generator (CPython reseeds it in each forked child), a module's
    attributes read, the arguments (``log_metric`` is a call's own)."""
    import functools
    import random

    import numpy as np

    @functools.lru_cache
    def length(text):
        return len(text)

    def local_work(completions, log_metric, **kwargs):
        seen, table = [], {}
        for c in completions:
            seen.append(c)
            table[c] = length(c)
        rng = np.random.default_rng(0)
        log_metric("noise", float(rng.random()) + random.random())
        completions[0] = completions[0].strip()
        return [float(table[c]) for c in seen]

    from polyrl.rewards.isolation import kept_state

    assert kept_state(local_work) is None
    assert _warnings(local_work, "process")[1] == []


def test_an_attribute_set_on_a_local_object_is_not_the_reward_objects_state():
    """Once: any attribute store in a callable object's ``__call__`` was named as ``self.<attr>``
    (``result.score = 1`` said "sets self.score")."""
    import types

    class Scorer:
        def __call__(self, completions, **kwargs):
            result = types.SimpleNamespace()
            result.score = 1.0
            return [result.score] * len(completions)

    from polyrl.rewards.isolation import kept_state

    assert kept_state(Scorer()) is None


def test_a_generator_a_forked_reward_draws_from_repeats_its_numbers_at_every_call():
    """Why draws are named: each call's child copies the trainer's generator unmoved."""
    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer
    from polyrl.types import Completion, RewardContext

    plugin = FunctionReward(draws_from_a_module_level_generator, isolation="process")
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [(plugin.name, 1.0, {})])
    comps = [Completion(0, [1], [7], [0.0], text=t) for t in ("x", "y")]
    context = RewardContext(rows=[{"prompt": "p"}] * 2, wanted=(plugin.name,))
    first, second = (computer(["p", "p"], comps, context).total.tolist() for _ in range(2))
    assert first == second and first[0] != first[1]


def test_code_without_source_is_read_from_its_bytecode():
    """A function made by ``exec`` has no source to parse: what its bytecode shows plainly is named."""
    from polyrl.rewards.isolation import kept_state

    space: dict = {}
    exec("SEEN = []\ndef made(completions, **kwargs):\n    SEEN.append(1)\n    return [1.0]\n"
         "def clean(completions, **kwargs):\n    return [1.0]\n", space)
    assert kept_state(space["made"]) == "changes the module-level 'SEEN' (append)"
    assert kept_state(space["clean"]) is None
