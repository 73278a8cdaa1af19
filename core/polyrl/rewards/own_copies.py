"""Each reward plugin's own copies of a step's prompts, completions and rows.

Why: the trainer trains on the ``Completion`` objects' ``completion_ids`` (the generator's own
token ids), logs their ``text`` and keeps the dataset rows for the whole run. A reward plugin's
``reward`` hook was handed those very objects, so one that edited them in place
(``completions[i].completion_ids[0] = ...``, ``completions[i].text = ...``, ``context.rows[i][k] =
...``, a chat prompt's message ``"content"``) changed the trained tokens, the completions log,
the rewards called after it and every later step's prompts. Function rewards build their own
copies (``FunctionReward._arguments``); every other plugin gets these.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from polyrl.types import Completion, RewardContext


class _Copier:
    """Deep copies sharing one memo for a call: a row or prompt the trainer repeats for each
    completion of a group (one object) is copied once, not ``group_size`` times (a row of large
    test cases). A value that cannot be copied (a lock from the Python API) is passed as is."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}

    def __call__(self, value: Any) -> Any:
        if value is None or isinstance(value, (str, bytes, int, float, bool)):
            return value
        try:
            return copy.deepcopy(value, self.memo)
        except Exception:  # noqa: BLE001 - an uncopyable object: as private_copy passes it
            return value

    def completion(self, completion: Any) -> Any:
        """A copy of one completion a reward may edit freely; its live ``environment`` (an
        episode's instance, what a reward reads) is the same object."""
        if not isinstance(completion, Completion):
            return self(completion)
        return attrs.evolve(
            completion,
            prompt_ids=np.array(completion.prompt_ids, copy=True),
            completion_ids=np.array(completion.completion_ids, copy=True),
            logprobs=np.array(completion.logprobs, copy=True),
            mask=None if completion.mask is None else np.array(completion.mask, copy=True),
            messages=self(completion.messages),
            prompt_messages=self(completion.prompt_messages),
            response_message=self(completion.response_message),
            info=self(completion.info),
        )

    def row(self, row: Any) -> Any:
        """A row copied column by column: one value that cannot be copied leaves no other column shared."""
        if isinstance(row, Mapping):
            return {key: self(value) for key, value in row.items()}
        return self(row)


def _data_copy(value: Any) -> Any:
    """``value``'s dicts, lists, tuples and sets copied, any other object the same one: options are
    the plugin's settings (data a plugin may edit without changing the next call's), and an object
    given through the Python API (a cache, a client, a counter) keeps the state the plugin leaves in
    it, as the plugin's author meant (a deep copy lost it every call)."""
    if isinstance(value, Mapping):
        return {key: _data_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(_data_copy(item) for item in value) if type(value) in (list, tuple, set, frozenset) \
            else value
    return value


def own_inputs(prompts: Sequence[Any], completions: Sequence[Any], context: RewardContext
               ) -> tuple[list[Any], list[Any], RewardContext]:
    """``prompts``, ``completions`` and ``context`` copied for one plugin call: every prompt, row,
    id list and option container its own (``_data_copy``). The ``trainer_state`` stays the one shared object, as TRL passes
    its trainer's state."""
    copy_ = _Copier()
    ids = context.completion_ids
    copied = attrs.evolve(
        context,
        rows=[copy_.row(row) for row in context.rows],
        options=_data_copy(context.options),
        completion_ids=None if ids is None else [copy_(x) for x in ids],
    )
    return [copy_(p) for p in prompts], [copy_.completion(c) for c in completions], copied
