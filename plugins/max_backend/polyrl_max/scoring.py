"""The ``logprobs`` hook on MAX: teacher-forced scoring of given completions.

Each sequence is a MAX row whose prompt is the sequence's prompt; a
:class:`~polyrl_max.runner.TeacherForcer` records ``log softmax(logits / T)`` of the given next
token, then leaves that token as the only one the sampler can pick, so the row walks exactly the
given completion. This reuses MAX's compiled decode graph and paged KV cache (no second graph to
compile); DESIGN.md measured no gain from a separate full-sequence scoring graph on CPU.

``reference=True`` returns None: a MAX engine holds one set of weights, so the core loads a
separate reference engine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from polyrl.errors import ConfigError
from polyrl.types import TokenSequence

from polyrl_max.engine import MaxEngine
from polyrl_max.runner import TeacherForcer, run_rows


def logprobs(engine: MaxEngine, sequences: Sequence[TokenSequence], temperature: float,
             reference: bool) -> list[np.ndarray] | None:
    if reference:
        return None
    temperature = float(temperature) or 1.0
    out: list[np.ndarray] = [np.zeros(0, dtype=np.float32) for _ in sequences]
    todo = [i for i, s in enumerate(sequences) if len(s.completion_ids) > 0]
    for i in todo:
        total = len(sequences[i].prompt_ids) + len(sequences[i].completion_ids)
        if len(sequences[i].prompt_ids) == 0:
            raise ConfigError(f"sequence {i} has an empty prompt", field="sequences",
                              fix="give at least one prompt token (e.g. BOS) to predict from")
        if total > engine.max_length:
            raise ConfigError(f"sequence {i} has {total} tokens, more than max_length={engine.max_length}",
                              field="model.max_length",
                              fix="raise model.max_length (the MAX graph is compiled for it)")
    forcers = {i: TeacherForcer(sequences[i].completion_ids.tolist(), temperature, engine.logits_width)
               for i in todo}

    def build(k: int):
        i = todo[k]
        seq = sequences[i]
        return engine.new_context(seq.prompt_ids.tolist(), len(seq.completion_ids), temperature=1.0,
                                  top_k=1, top_p=1.0, seed=0, processor=forcers[i],
                                  stop_on_eos=False)

    def on_tokens(k: int, new: list[int]) -> bool:
        forcer = forcers[todo[k]]
        return len(forcer.logprobs) >= len(forcer.targets)

    run_rows(engine, build, len(todo), [len(sequences[i].prompt_ids) for i in todo], on_tokens)
    for i in todo:
        values = forcers[i].logprobs
        if len(values) != len(sequences[i].completion_ids):
            raise RuntimeError(f"MAX scored {len(values)} of {len(sequences[i].completion_ids)} tokens "
                               f"of sequence {i}")
        out[i] = np.asarray(values, dtype=np.float32)
    return out
