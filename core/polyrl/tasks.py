"""Built-in tasks: datasets generated from a seed, so demos and tests need no download.

``arithmetic``: "What is 37 + 48? Answer with the number only." as a single user turn (no
system message: every chat template can render it), with the answer in the ``answer`` column
(a string, as a JSONL file would hold it) and the plain question in ``question``.

Held-out split: each distinct problem (``a op b``) belongs to *train* or *eval* by a stable
hash of its text (``eval_fraction`` of the problem space is held out), independent of the seed,
the count and the order of calls. Train and eval rows are therefore disjoint for every seed and
count, and the held-out set is the same across runs (comparable evaluations). The seed only
chooses which problems are drawn within a split (and the split gets its own random stream).
Problems are drawn independently, so a large ``count`` on a small space repeats problems.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from polyrl.errors import ConfigError

OPS = ("+", "-", "*")
SPLITS = ("train", "eval")

ARITHMETIC_DEFAULTS: dict[str, Any] = {
    "count": 1000,
    "ops": ["+", "-", "*"],
    "digits": 2,
    "seed": 0,
    "eval_fraction": 0.2,
    "chat": True,
    # follows the question in the prompt; "{expression}" in it becomes the problem, e.g. "12 * 34"
    "instruction": "Answer with the number only.",
}


def _option_error(key: str, message: str, fix: str | None = None) -> ConfigError:
    return ConfigError(message, field=f"data.options.{key}", fix=fix)


#: the most problems a task builds (each is a Python row held in memory)
MAX_COUNT = 1_000_000


def _int_option(options: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int:
    value = options[key]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or (
        high is not None and value > high
    ):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        example = ARITHMETIC_DEFAULTS[key] if low <= ARITHMETIC_DEFAULTS[key] else low
        raise _option_error(key, f"must be an integer {bound}, got {value!r}",
                            f"e.g. options = {{{key} = {example}}} (default {ARITHMETIC_DEFAULTS[key]})")
    return int(value)


def problem_split(text: str, eval_fraction: float) -> str:
    """"eval" for the stable ``eval_fraction`` of problems (by a hash of ``text``), else "train"."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return "eval" if int.from_bytes(digest, "big") / 2**64 < eval_fraction else "train"


def _arithmetic_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    opts = {**ARITHMETIC_DEFAULTS, **dict(options or {})}
    unknown = sorted(set(opts) - set(ARITHMETIC_DEFAULTS))
    if unknown:
        raise _option_error(unknown[0], f"the arithmetic task has no option {unknown[0]!r}",
                            f"valid options: {', '.join(sorted(ARITHMETIC_DEFAULTS))}")
    opts["count"] = _int_option(opts, "count", 1, MAX_COUNT)  # unbounded, 10**12 took 22 GB before any error
    opts["digits"] = _int_option(opts, "digits", 1, 9)
    opts["seed"] = _int_option(opts, "seed", 0)
    ops = opts["ops"]
    ops = list(ops) if isinstance(ops, (str, list, tuple)) else None
    if not ops or any(op not in OPS for op in ops):
        raise _option_error("ops", f"must be a non-empty list of {', '.join(OPS)}, got {opts['ops']!r}",
                            'e.g. ops = ["+", "-"]')
    opts["ops"] = sorted(set(ops), key=OPS.index)
    frac = opts["eval_fraction"]
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac < 1:
        raise _option_error("eval_fraction", f"must be in (0, 1), got {frac!r}")
    if not isinstance(opts["instruction"], str):
        raise _option_error("instruction", f"must be a string, got {opts['instruction']!r}",
                            'e.g. instruction = "Use the calculator."')
    if not isinstance(opts["chat"], bool):
        raise _option_error("chat", f"must be true or false, got {opts['chat']!r}")
    return opts


def arithmetic(
    options: Mapping[str, Any] | None = None, split: str = "train", prompt_column: str = "prompt"
) -> list[dict[str, Any]]:
    """Rows of the arithmetic task. Options: count, ops, digits, seed, eval_fraction, chat, instruction."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}", field="split", fix=f"use one of {', '.join(SPLITS)}")
    opts = _arithmetic_options(options)
    low = 0 if opts["digits"] == 1 else 10 ** (opts["digits"] - 1)
    high = 10 ** opts["digits"]  # exclusive
    rng = np.random.default_rng([opts["seed"], SPLITS.index(split)])
    rows: list[dict[str, Any]] = []
    attempts, max_attempts = 0, 1000 + 200 * opts["count"]
    while len(rows) < opts["count"]:
        attempts += 1
        if attempts > max_attempts:
            raise _option_error("digits", f"the {split} split of this problem space is (nearly) empty",
                                "use more digits or more ops, or change eval_fraction")
        op = opts["ops"][int(rng.integers(len(opts["ops"])))]
        a, b = int(rng.integers(low, high)), int(rng.integers(low, high))
        if op == "-" and b > a:
            a, b = b, a  # non-negative answers
        question = f"What is {a} {op} {b}?"
        if problem_split(question, opts["eval_fraction"]) != split:
            continue
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        instruction = opts["instruction"].replace("{expression}", f"{a} {op} {b}")
        content = f"{question} {instruction}".strip()
        prompt: Any = [{"role": "user", "content": content}] if opts["chat"] else content
        rows.append({prompt_column: prompt, "answer": str(answer), "question": question})
    return rows


#: Built-in tasks by name: ``fn(options, split, prompt_column) -> rows``.
TASKS: dict[str, Callable[[Mapping[str, Any] | None, str, str], list[dict[str, Any]]]] = {
    "arithmetic": arithmetic,
}
#: The options each built-in task reads (``data.options``): any other key is refused when the config is read.
TASK_OPTIONS: dict[str, tuple[str, ...]] = {"arithmetic": tuple(ARITHMETIC_DEFAULTS)}
#: Each task's check of its options' values, run when the config is read (``count = "3"`` was
#: refused only once the trainer built the rows, after ``polyrl launch --dry-run`` passed it).
TASK_CHECKS: dict[str, Callable[[Mapping[str, Any] | None], Any]] = {"arithmetic": _arithmetic_options}
