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

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from polyrl.rewards.trl_compat import private_copy
from polyrl.types import Completion, RewardContext


def own_completion(completion: Any) -> Any:
    """A copy of one completion a reward may edit freely; its live ``environment`` (an episode's
    instance, what a reward reads) is the same object. A string is returned as is."""
    if not isinstance(completion, Completion):
        return private_copy(completion)
    return attrs.evolve(
        completion,
        prompt_ids=np.array(completion.prompt_ids, copy=True),
        completion_ids=np.array(completion.completion_ids, copy=True),
        logprobs=np.array(completion.logprobs, copy=True),
        mask=None if completion.mask is None else np.array(completion.mask, copy=True),
        messages=private_copy(completion.messages),
        prompt_messages=private_copy(completion.prompt_messages),
        info=private_copy(completion.info),
    )


def _own_row(row: Any) -> Any:
    """A row copied column by column: one value that cannot be copied (a lock from the Python
    API) is passed as is without leaving the row's other columns shared."""
    if isinstance(row, Mapping):
        return {key: private_copy(value) for key, value in row.items()}
    return private_copy(row)


def own_inputs(prompts: Sequence[Any], completions: Sequence[Any], context: RewardContext
               ) -> tuple[list[Any], list[Any], RewardContext]:
    """``prompts``, ``completions`` and ``context`` copied for one plugin call: every prompt, row,
    option and id list its own (rows repeated per completion are copied per completion). The
    ``trainer_state`` stays the one shared object, as TRL passes its trainer's state."""
    ids = context.completion_ids
    copied = attrs.evolve(
        context,
        rows=[_own_row(row) for row in context.rows],
        options=private_copy(context.options),
        completion_ids=None if ids is None else [private_copy(x) for x in ids],
    )
    return [private_copy(p) for p in prompts], [own_completion(c) for c in completions], copied
