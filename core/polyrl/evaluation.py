"""Evaluation arithmetic and its files: unbiased pass@k, the eval metrics, ``eval_completions.jsonl``.

Why pass@k from ``n`` samples with the unbiased estimator (Chen et al., 2021, "Evaluating Large
Language Models Trained on Code") instead of "k samples, any correct": drawing exactly k samples
gives a high-variance estimate; drawing n >= k and counting all k-subsets averages over them
exactly, with no extra generation. The trainer generates and scores; this module only does the
arithmetic and writes the records, so it is testable without a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polyrl import metrics_file, strict_json
from polyrl.redact import Redactor
from polyrl.safe_stats import mean_std
from polyrl.tracking.completions import shown_value

COMPLETIONS_FILE = "eval_completions.jsonl"


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n is correct), c of n correct:
    ``1 - C(n-c, k) / C(n, k)``, as a product so large n does not overflow."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(scores: np.ndarray, samples: int, k: int, threshold: float) -> float:
    """pass@k over prompts: ``scores`` holds ``samples`` rewards per prompt, prompt after prompt;
    a sample is correct when its reward is at least ``threshold`` (a failed reward is not)."""
    per_prompt = np.asarray(scores, dtype=np.float64).reshape(-1, samples)
    correct = (np.nan_to_num(per_prompt, nan=-np.inf) >= threshold).sum(axis=1)
    return float(np.mean([pass_at_k(samples, int(c), k) for c in correct])) if len(correct) else float("nan")


def eval_metrics(greedy: np.ndarray | None, sampled: np.ndarray | None, samples: int, k: int,
                 threshold: float, count: int, *, per_reward: Mapping[str, np.ndarray] | None = None,
                 lengths: np.ndarray | None = None) -> dict[str, float]:
    """The numbers of one evaluation, under the names every sink uses (``metrics.jsonl``, the
    trackers, the step line, the run summary): ``eval/accuracy`` is the greedy reward's mean
    (absent with ``eval.greedy = false``); sampled keys appear only when ``eval.samples`` > 0.
    ``per_reward`` (each reward's raw scores of the sampled completions, with ``eval.reward =
    "run"``) adds the sampled reward's std, each reward's mean and std and, from ``lengths``, the
    mean completion length: what TRL logs as ``eval_reward_std``, ``eval_rewards/<f>/mean``..."""
    out: dict[str, float] = {}
    if greedy is not None:
        out["eval/accuracy"] = float(np.nanmean(greedy)) if np.isfinite(greedy).any() else float("nan")
    out["eval/count"] = count
    if sampled is not None and samples > 0:
        out["eval/sampled_reward_mean"] = float(np.nanmean(sampled)) if np.isfinite(sampled).any() else float("nan")
        out[f"eval/pass@{k}"] = mean_pass_at_k(sampled, samples, k, threshold)
        if k != 1:
            out["eval/pass@1"] = mean_pass_at_k(sampled, samples, 1, threshold)
        if per_reward is not None:
            out["eval/sampled_reward_std"] = mean_std(sampled)[1]
            for label, scores in per_reward.items():
                out[f"eval/reward/{label}/mean"], out[f"eval/reward/{label}/std"] = mean_std(scores)
            if lengths is not None and len(lengths):
                out["eval/completion_len_mean"] = float(np.mean(lengths))
    return out


def completion_records(phase: str, after_steps: int, prompts: Sequence[Any], texts: Sequence[str],
                       scores: np.ndarray, samples: int, greedy: bool, threshold: float) -> list[dict[str, Any]]:
    """One record per completion; ``samples`` completions per prompt, in prompt order. ``correct``
    is what pass@k counted (reward at least ``threshold``). Texts are redacted, made valid and cut
    as in ``completions.jsonl``: a completion quoting a credential or running away is the same here."""
    redact = Redactor()
    shown_prompts = [shown_value(p, redact) for p in prompts]
    return [{"phase": phase, "after_steps": after_steps, "greedy": greedy, "prompt_index": i // samples,
             "sample": i % samples, "prompt": shown_prompts[i // samples], "completion": shown_value(text, redact),
             "reward": float(score),
             "correct": bool(np.isfinite(score) and score >= threshold)}
            for i, (text, score) in enumerate(zip(texts, scores))]


def shown_records(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of one evaluation its completions table shows: the sampled ones, as TRL's table
    holds its evaluation's sampled completions; the greedy ones where none were sampled."""
    return [r for r in records if not r.get("greedy")] or list(records)


def append_records(output_dir: Path, records: Sequence[dict[str, Any]]) -> None:
    """Append strict-JSON lines to ``eval_completions.jsonl`` (flushed: a crash loses no finished eval)."""
    strict_json.append_lines(output_dir / COMPLETIONS_FILE, records)


def keep_record(record: Any, step: int) -> bool:
    """Whether an eval record survives a resume at ``step``: evaluations up to the checkpoint ran
    before it was written; the final evaluation runs again and ``before`` only on a fresh start."""
    if not isinstance(record, dict) or not metrics_file.is_step_number(record.get("after_steps")):
        return False
    phase = record.get("phase")
    if phase == "before":
        return step > 0
    return phase == "during" and record["after_steps"] <= step


def rewind_records(output_dir: Path, step: int) -> None:
    """Rewrite ``eval_completions.jsonl`` with the records a run resumed at ``step`` keeps (atomic)."""
    path = output_dir / COMPLETIONS_FILE
    if path.exists():
        strict_json.rewrite_lines(path, (line for line, record in strict_json.read_lines(path)
                                         if record is not None and keep_record(record, step)))
