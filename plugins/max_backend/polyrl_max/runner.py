"""Driving MAX rows step by step, and the two logits processors the hooks use.

``run_rows`` feeds our own ``TextContext`` rows to ``GenerateIterator.from_contexts`` in chunks
that fit the pipeline's plan (``max_batch_size`` rows and its prefill token budget), runs one
``pipeline.execute`` per ``step()`` and hands every new token to a callback, which may end the
row (a stop string). The pipeline is synchronous (AutoModel turns the overlap scheduler off), so a
step's tokens are that step's own, and each row's logits processor has seen exactly the logits
that produced them.

Log-probs are computed here, not taken from MAX: MAX's ``output_logprobs`` are
``log_softmax(raw logits)`` whatever the temperature (measured: at T=0.7 they equal the T=1
values to 1e-5 and differ from ``log_softmax(logits / 0.7)`` by up to 0.17), while the contract
wants the sampler's distribution ``softmax(logits / T)`` before top-k/top-p. One value cannot be
converted into the other (the normaliser needs the whole row), so each processor keeps the raw
row and :func:`token_logprob` evaluates ``logits[t] / T - logsumexp(logits / T)`` in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: A logit no sampler picks (finite and representable in bfloat16, so no NaN/inf appears).
_FORBIDDEN = np.float32(-1e30)


def host_row(logits: Any, width: int | None = None) -> np.ndarray:
    """A float32 host copy of the last row of a MAX logits buffer (the next-token logits)."""
    from max.dtype import DType

    if logits.dtype == DType.bfloat16:  # numpy has no bfloat16: widen the bit patterns
        bits = logits.view(DType.uint16, list(logits.shape)).to_numpy()[-1].astype(np.uint32)
        row = (bits << 16).view(np.float32)
    else:
        row = np.array(logits.to_numpy()[-1], dtype=np.float32, copy=True)
    return row[:width] if width is not None and row.shape[0] > width else row


def token_logprob(row: np.ndarray, token: int, temperature: float) -> float:
    """``log softmax(row / T)[token]`` in float64 (``T`` is 1 for greedy)."""
    scaled = row.astype(np.float64) / float(temperature)
    top = scaled.max()
    return float(scaled[token] - top - np.log(np.exp(scaled - top).sum()))


class LogitsRecorder:
    """Logits processor that keeps a copy of the row's newest raw next-token logits."""

    __slots__ = ("last", "width")

    def __init__(self, width: int | None) -> None:
        self.last: np.ndarray | None = None
        self.width = width

    def __call__(self, inputs: Any) -> None:
        # copied: the next step (or a graph replay) reuses the buffer
        self.last = host_row(inputs.logits, self.width)


class TeacherForcer:
    """Logits processor for scoring: records the log-prob of the given next token under
    ``softmax(logits / T)``, then overwrites the logits so the sampler must pick that token."""

    __slots__ = ("targets", "temperature", "width", "logprobs")

    def __init__(self, targets: Sequence[int], temperature: float, width: int | None) -> None:
        self.targets = [int(t) for t in targets]
        self.temperature = temperature
        self.width = width
        self.logprobs: list[float] = []

    def __call__(self, inputs: Any) -> None:
        step = len(self.logprobs)
        target = self.targets[min(step, len(self.targets) - 1)]
        if step < len(self.targets):
            self.logprobs.append(token_logprob(host_row(inputs.logits, self.width), target,
                                               self.temperature))
        force_token(inputs.logits, target)


def force_token(logits: Any, token: int) -> None:
    """Make ``token`` the only pickable token of the last row, in place."""
    from max.dtype import DType

    if logits.device.is_host and logits.dtype == DType.float32:
        view = logits.to_numpy()  # aliases the buffer on the host
        view[-1, :] = _FORBIDDEN
        view[-1, token] = 0.0
        return
    from max.pipelines.lib.bfloat16_utils import float32_array_to_buffer

    values = host_rows(logits)  # a device buffer (or bfloat16): rewrite it whole
    values[-1, :] = _FORBIDDEN
    values[-1, token] = 0.0
    logits.inplace_copy_from(float32_array_to_buffer(values, dtype=logits.dtype, device=logits.device))


def host_rows(logits: Any) -> np.ndarray:
    """All rows of a logits buffer as float32 on the host (only used off the fast path)."""
    from max.dtype import DType

    if logits.dtype == DType.bfloat16:
        bits = logits.view(DType.uint16, list(logits.shape)).to_numpy().astype(np.uint32)
        return (bits << 16).view(np.float32)
    return np.array(logits.to_numpy(), dtype=np.float32)


def chunks(lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[range]:
    """Consecutive index ranges with at most ``max_rows`` rows and ``max_tokens`` prompt tokens."""
    out: list[range] = []
    start, tokens = 0, 0
    for i, n in enumerate(lengths):
        if i > start and (i - start >= max_rows or tokens + n > max_tokens):
            out.append(range(start, i))
            start, tokens = i, 0
        tokens += n
    if start < len(lengths):
        out.append(range(start, len(lengths)))
    return out


def run_rows(engine: Any, build: Callable[[int], Any], count: int, prompt_lengths: Sequence[int],
             on_tokens: Callable[[int, list[int]], bool]) -> None:
    """Run rows ``0..count-1`` (``build(i)`` makes row ``i``'s context) to completion.

    ``on_tokens(i, tokens)`` receives each step's new tokens of row ``i`` and returns True to end
    the row now (MAX ends rows itself at EOS and at their ``max_length``).
    """
    from max.pipelines.lib.generate import GenerateIterator

    for part in chunks(prompt_lengths, engine.max_batch_size, engine.prefill_token_budget()):
        contexts = [build(i) for i in part]
        with GenerateIterator.from_contexts(engine.pipeline, contexts,
                                            caller="polyrl-max") as batch:
            while not batch.done:
                for row, tokens in batch.step().items():
                    if tokens and on_tokens(part[row], tokens):
                        batch.remove(row)
