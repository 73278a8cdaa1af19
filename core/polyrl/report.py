"""``polyrl report RUN_DIR``: the curves of a run as one PNG, and a self-contained HTML page.

Why a report built from the run directory alone: ``metrics.jsonl`` is everything a run writes
about its progress (the evaluations before and after training included), so the report works for
any run (finished, crashed, resumed, from any backend) without the config or the model. Panels
whose metrics a run does not have (no KL term, a backend without entropy) are left out rather than
drawn empty. A run from an earlier polyrl, whose ``metrics.jsonl`` numbered steps from 0 and had
no evaluation lines, is drawn in today's numbering, its evaluations before and after training
recomputed from ``eval_completions.jsonl``.
"""

from __future__ import annotations

import contextlib
import errno
import base64
import html
import json
import math
import os
import stat
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import attrs
import numpy as np

from polyrl import evaluation, metrics_file, plot_warnings
from polyrl.errors import ConfigError
from polyrl.folder_links import NOT_REGULAR
from polyrl.path_text import check_path_text, refuse_empty_path
from polyrl.safe_stats import mean_std
from polyrl.strict_json import valid_text

METRICS_FILE = metrics_file.FILE_NAME
PLOT_FIX = "pip install 'polyrl[plot]' (matplotlib)"


@attrs.frozen
class Panel:
    """One chart: a title and which metric keys it draws."""

    title: str
    wants: Callable[[str], bool]
    log_scale: bool = False


PANELS: tuple[Panel, ...] = (
    Panel("reward", lambda k: k in ("reward_mean",) or (k.startswith("reward/") and k.endswith("/mean"))),
    Panel("evaluation", lambda k: k.startswith("eval/") and k not in ("eval/count", "eval/seconds", "eval/batches")),
    Panel("loss", lambda k: k in ("loss", "grad_norm")),
    Panel("KL to reference", lambda k: k == "kl" or k.startswith("kl/") or k.endswith("/kl")),
    Panel("entropy", lambda k: "entropy" in k),
    Panel("clipping and flat groups", lambda k: k in ("clip_fraction", "clip_low_fraction",
                                                      "clip_high_fraction", "completions/clipped_ratio",
                                                      "frac_reward_zero_std") or k.startswith("clip/")),
    Panel("completion length (tokens)", lambda k: k.startswith("completions/") and k.endswith("_length")
          or k == "completion_len_mean"),
    Panel("throughput (tokens/s)", lambda k: k.startswith("perf/") and k.endswith("tokens_per_s")
          or k == "tokens_per_s", log_scale=True),
    Panel("step time (s)", lambda k: k.startswith("time/")),
    # the host's resident peak beside an accelerator's (torch on CUDA: memory/device_peak_mb)
    Panel("peak memory (MiB)", lambda k: k == "perf/peak_rss_mb" or k.startswith("memory/") and k.endswith("_mb")),
)


#: Older keys drawn only when their newer name is absent (runs from before the newer names).
SUPERSEDED = {"tokens_per_s": "perf/generate_tokens_per_s", "completion_len_mean": "completions/mean_length"}


def _number(value: Any) -> float | None:
    """``value`` as a float to draw, None when it is no finite number (an int past float range
    too: JSON allows any integer, and one in a hand-edited file was a traceback)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


@attrs.frozen
class RunData:
    """What a run directory holds for its report, and what had to be left out of it (said, not
    dropped silently: a chart missing steps must not pass for the whole run)."""

    name: str
    lines: list[dict[str, Any]]  # one per step, the last line of each, in step order
    #: the evaluations before and after training with no line in metrics.jsonl (a run from an
    #: earlier polyrl), from eval_completions.jsonl: each record's scores only
    records: list[dict[str, Any]]
    warnings: tuple[str, ...] = ()  # one sentence per kind of line left out
    evals: list[dict[str, Any]] = attrs.field(factory=list)  # metrics.jsonl's evaluation lines, before first
    #: one sentence when the run's newest checkpoint planned more steps than metrics.jsonl logged
    unfinished: str | None = None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


#: The most of metrics.jsonl a report reads: about 100,000 steps of a run's ~1.3 KB lines. Every
#: step is kept in memory (parsed, several times its size on disk), so a larger file is refused.
MAX_METRICS_BYTES = 128 * 2**20
#: The most of eval_completions.jsonl read: only the scores of the evaluations before and after
#: training are kept from it, but reading a larger file would cost minutes for two points on the
#: chart; it is left out instead.
MAX_COMPLETIONS_BYTES = 1024 * 2**20
#: A longer line is counted unreadable without being held in memory whole.
MAX_LINE_BYTES = 16 * 2**20


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a link to one too). Opened without
    blocking and checked on the open file: a FIFO named metrics.jsonl blocked the report forever,
    and a device (/dev/zero) is endless."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror}", field="RUN_DIR",
                          fix="check the file's permissions") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = ("is a directory, not the file polyrl writes" if stat.S_ISDIR(mode) else
                f"is {NOT_REGULAR}")
        raise ConfigError(f"{str(path)!r} {what}", field="RUN_DIR",
                          fix="pass a run's train.output_dir, whose metrics files polyrl wrote")
    return os.fdopen(fd, "rb")


def _lines(file: BinaryIO) -> Iterator[tuple[bytes | None, bool]]:
    """Each line without its "\n" (None when longer than ``MAX_LINE_BYTES``: skipped unread), and
    whether it ended with one. Only "\n" ends a line."""
    while chunk := file.readline(MAX_LINE_BYTES + 1):
        if len(chunk) <= MAX_LINE_BYTES or chunk.endswith(b"\n"):
            yield (chunk[:-1], True) if chunk.endswith(b"\n") else (chunk, False)
            continue
        while chunk and not chunk.endswith(b"\n"):  # the rest of the long line, never held whole
            chunk = file.readline(MAX_LINE_BYTES)
        yield None, chunk.endswith(b"\n")


@attrs.define
class _Tally:
    """How many lines of one kind were left out, and the first one's number (not every number:
    a damaged file may have millions)."""

    count: int = 0
    first: int = 0

    def add(self, number: int) -> None:
        self.count += 1
        self.first = self.first or number


def _read_jsonl(path: Path, take: Callable[[int, Any], None]) -> list[str]:
    """Hand ``take`` the (line number, value) of each line that parses, one at a time (the file is
    streamed: only what ``take`` keeps is held), and say what was left out. Only "\\n" ends a line:
    the files are written with ``ensure_ascii=False``, so a completion may hold U+2028 or U+0085
    raw, which ``str.splitlines`` would split on. A line nested too deeply for the parser, or
    longer than ``MAX_LINE_BYTES``, is as unreadable as a garbled one."""
    bad = _Tally()
    last_bad = number = 0
    complete = True  # the file ends with a newline: its last line was written whole
    with _open_regular(path) as file:
        for number, (raw, ended) in enumerate(_lines(file), start=1):
            complete = ended
            row = None if raw is None else raw.decode("utf-8", errors="replace")
            if row is not None and not row.strip():
                continue
            try:
                if row is None:
                    raise ValueError("line too long")
                value = json.loads(row)
            except (ValueError, RecursionError):
                bad.add(number)
                last_bad = number
                continue
            take(number, value)
    warnings = []
    if bad.count and not complete and last_bad == number:  # a run killed mid-write: expected, not damage
        # or one still running, whose line was read half written: it was said to have stopped
        warnings.append(f"{path}: line {number}, the last, is cut short (the run stopped while writing it, or is "
                        "writing it now); it is left out")
        bad.count -= 1
    if bad.count:
        warnings.insert(0, f"{path}: {_plural(bad.count, 'unreadable line')} left out (first: line {bad.first}); "
                           "the file was damaged or edited")
    return warnings


def _size(path: Path) -> int:
    """The size of what ``path`` leads to (0 when it cannot be read: ``_open_regular`` says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


#: the largest step drawn: past it a step is no exact float (10**400 has no float at all)
MAX_STEP = 2**53


def _is_step(value: Any) -> bool:
    return metrics_file.is_step_number(value) and value <= MAX_STEP


def _shown(text: str) -> str:
    """``text`` as matplotlib draws it literally: valid Unicode (a lone surrogate in a metric's
    name made the font raise) and ``$`` escaped (a folder named ``run_$MODEL_$SEED``, which an
    unexpanded ``${VAR}`` in output_dir leaves, or a key ``time/$x^{$`` was parsed as math:
    a traceback, or a title silently drawn as a formula)."""
    return valid_text(text).replace("$", r"\$")


def load_run(run_dir: str | Path) -> RunData:
    """The run's step lines, evaluation lines and (for a run from an earlier polyrl) eval
    completion records, with a warning for each kind of line left out. A step logged twice keeps
    its later line, as a resume's own rewind of metrics.jsonl does: the steps after a checkpoint
    are logged again by the run that continued from it. A run with an evaluation and no step yet
    (stopped in its first step) is drawn too."""
    refuse_empty_path(str(run_dir), "RUN_DIR", "polyrl report runs/my-run (a run's train.output_dir)")
    check_path_text(str(run_dir), "RUN_DIR")  # is_dir() raises on a NUL or a name past 255 bytes
    run = Path(run_dir)
    path = run / METRICS_FILE
    if not run.is_dir():
        raise ConfigError(f"{str(run)!r} is not a directory", field="RUN_DIR",
                          fix="pass a run's train.output_dir (the folder with metrics.jsonl)")
    by_step: dict[int, dict[str, Any]] = {}
    evals: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    if path.exists():  # a FIFO or device too, which _open_regular refuses (not "missing")
        if _size(path) > MAX_METRICS_BYTES:
            raise ConfigError(
                f"{str(path)!r} is {_mib(_size(path))}, more than polyrl report reads ({_mib(MAX_METRICS_BYTES)}, "
                "about 100,000 steps)", field="RUN_DIR",
                fix=f"report a copy of the run folder whose {METRICS_FILE} keeps fewer lines "
                    "(e.g. every 10th: awk 'NR % 10 == 1')")
        stepless, repeated = _Tally(), _Tally()

        def step_line(number: int, record: Any) -> None:
            if not isinstance(record, dict) or not _is_step(record.get("step")):
                stepless.add(number)
                return
            phase = metrics_file.eval_phase(record)
            if phase is not None:
                evals[phase] = record  # a resumed run evaluates again: its later line
                return
            if record["step"] in by_step:
                repeated.add(number)
            by_step[record["step"]] = record

        warnings = _read_jsonl(path, step_line)
        if stepless.count:
            warnings.append(f"{path}: {_plural(stepless.count, 'line')} without a step number left out "
                            f"(first: line {stepless.first})")
        if repeated.count:
            warnings.append(f"{path}: {_plural(repeated.count, 'step')} logged more than once (first: line "
                            f"{repeated.first}); the later line of each is drawn")
        if 0 in by_step:  # only a file of an earlier polyrl has a step line at 0 (metrics_file)
            by_step = {s + 1: {**line, "step": s + 1} for s, line in by_step.items()}
            warnings.append(f"{path}: steps numbered from 0 (an earlier polyrl wrote it); drawn one step later, "
                            "counting the steps taken as checkpoints do")
        warnings += _no_number_warning(path, [*by_step.values(), *evals.values()])
    records = _phase_records(run, [p for p in metrics_file.EVAL_PHASES if p not in evals], warnings)
    if not by_step and not evals and not records:
        why = "; ".join(warnings) or f"{METRICS_FILE} missing or empty"
        ending = _ending(run, 0)
        if ending is not None:  # a run that recorded its start: how it ended, not "pass another folder"
            said, advice = ending
            raise ConfigError(f"{str(run)!r} has no step metrics to draw ({why}): {said}", field="RUN_DIR",
                              fix=advice or "report it once it has logged a step")
        raise ConfigError(f"{str(run)!r} has no step metrics ({why})", field="RUN_DIR",
                          fix="pass a run's train.output_dir after at least one training step or evaluation")
    last = max(by_step, default=0)
    return RunData(run.resolve().name, [by_step[k] for k in sorted(by_step)], records, tuple(warnings),
                   [evals[p] for p in metrics_file.EVAL_PHASES if p in evals], unfinished(run, last))


def _no_number_warning(path: Path, lines: Sequence[dict[str, Any]]) -> list[str]:
    """One sentence naming the metrics some of whose lines hold no number: ``null`` (a NaN or inf
    the run logged, such as a skipped step's loss) or a ``NaN``/``Infinity`` token; none when every
    value is a number. Why: such points were dropped from the chart, and from a comparison's first,
    last and best, without a word: a run whose loss went NaN for its last steps compared with the
    loss of the step before as its ``last``, and a metric null at every step read as ``missing``."""
    at: dict[str, list[int]] = {}
    for line in lines:
        for key, value in line.items():
            if value is None or isinstance(value, float) and not math.isfinite(value):
                at.setdefault(key, []).append(line["step"])
    if not at:
        return []
    named = [f"{key} ({_plural(len(steps), 'step')}, first: step {min(steps)})" for key, steps in sorted(at.items())]
    more = f" and {len(named) - 5} more" if len(named) > 5 else ""
    return [f"{path}: {_plural(len(named), 'metric')} logged no number at some steps (null: NaN or inf when the run "
            f"logged it), left out of the chart there (and of a comparison's first, last and best): {', '.join(named[:5])}{more}"]


def planned_steps(run: Path) -> int | None:
    """``train.steps`` as the run recorded it at its start (``run_plan``), else as its newest
    complete checkpoint recorded it (a run of an earlier polyrl), or None (neither, an unreadable
    or odd file). Why: ``metrics.jsonl`` does not say how many steps the run meant to take, and a
    chart of a run stopped at step 2 of 50 read as a whole run."""
    from polyrl import run_plan
    from polyrl.checkpoint import PARSED_STATE_BYTES, STATE_FILE, latest_checkpoint

    recorded = run_plan.planned_steps(run)
    if recorded is not None:
        return recorded
    try:
        found = latest_checkpoint(run / "checkpoints")
        state = found / STATE_FILE if found is not None else None
        if state is None or not state.is_file() or state.stat().st_size > PARSED_STATE_BYTES:
            return None
        steps = json.loads(state.read_bytes()).get("config", {}).get("train.steps")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return steps if metrics_file.is_step_number(steps) else None


def unfinished(run: Path, last_step: int) -> str | None:
    """A sentence saying the run did not reach its planned steps and why, as the run recorded its
    end (``run_plan.ended``), or None (it did, or nothing says). Why: a run its own code stopped
    (early stopping, a TRL callback) was named as stopped by Ctrl-C, crashed or still running."""
    ending = _ending(run, last_step)
    return None if ending is None else "; ".join(part for part in ending if part)


def _ending(run: Path, last_step: int) -> tuple[str, str] | None:
    """``unfinished``'s sentence in two parts: what the run did (steps logged, how it ended) and
    what to do (continue it, how). Why apart: a run that logged no step has no chart, and its one
    ``error:`` line says the first as the error and the second as its fix; it said only that the
    folder had no metrics, however the run had ended (killed in its first step, a failed reward)."""
    from polyrl import run_plan

    planned = planned_steps(run)
    if planned is None or last_step >= planned:
        return None
    logged = f"the run logged {last_step} of its {planned} steps (train.steps)"
    after = f"after step {last_step}" if last_step else "before its first step ended"
    resume = run_plan.resume_command(run_plan.started_by(run))
    end = run_plan.ended(run)
    if end == run_plan.NOT_ENDED:  # recorded at the start, no end since: no Python code ran at its end
        return (f"{logged}: it was killed (SIGKILL, the OOM killer, a lost machine), crashed, or is still "
                "running", f"continue it with {resume}")
    if not isinstance(end, dict) or end["step"] != last_step:  # nothing says, or a record of another stretch of the run
        return f"{logged}: it was stopped (Ctrl-C, SIGTERM), crashed, or is still running", f"continue it with {resume}"
    if end["how"] == run_plan.ASKED:
        return f"{logged}: its own code asked it to stop {after} ({end['by']})", f"{resume} trains the rest"
    if end["how"] == run_plan.SIGNAL:
        return f"{logged}: it was stopped by a signal (Ctrl-C, SIGTERM) {after}", f"continue it with {resume}"
    if end["how"] == run_plan.FAILED:
        return f"{logged}: it stopped with an error {after} ({end['error']})", f"fix the cause, then continue it with {resume}"
    return (f"{logged}: it recorded its end at step {last_step} of {planned}, so {METRICS_FILE} or "
            f"{run_plan.FILE_NAME} was changed after the run", "")


def _phase_records(run: Path, phases: Sequence[str], warnings: list[str]) -> list[dict[str, Any]]:
    """The scores of the eval completion records of ``phases`` (evaluations that have no line in
    metrics.jsonl: a run from an earlier polyrl); none read when every phase has its line."""
    records: list[dict[str, Any]] = []
    completions = run / evaluation.COMPLETIONS_FILE
    if not phases or not completions.exists():
        return records
    if _size(completions) > MAX_COMPLETIONS_BYTES:
        warnings.append(f"{completions}: {_mib(_size(completions))}, more than polyrl report reads "
                        f"({_mib(MAX_COMPLETIONS_BYTES)}); the evaluations before and after training are left out")
        return records
    not_records = _Tally()

    def completion_line(number: int, record: Any) -> None:
        # a prompt_index that is no integer (a list or object in a damaged or edited file) was a
        # TypeError traceback where pass@k groups the samples by it
        index = record.get("prompt_index") if isinstance(record, dict) else None
        if not isinstance(record, dict) or not (index is None or isinstance(index, (int, str))):
            not_records.add(number)
        elif record.get("phase") in phases:  # the rest is on the step lines
            records.append({k: record[k] for k in _SCORE_FIELDS if k in record})  # not the texts

    warnings += _read_jsonl(completions, completion_line)
    if not_records.count:
        warnings.append(f"{completions}: {_plural(not_records.count, 'line')} that "
                        f"{'is' if not_records.count == 1 else 'are'} not a record left out "
                        f"(first: line {not_records.first})")
    return records


def series(lines: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
           evals: Sequence[dict[str, Any]] = ()) -> dict[str, list[tuple[float, float]]]:
    """Every numeric metric as (x, value) points at its line's step: the steps taken, so an
    evaluation on a step's line measured the weights after that step; the evaluation lines before
    (step 0) and after training (the last step) at theirs. The evaluations of a run from an
    earlier polyrl, which have no line, are recomputed from their completion records, at 0 and at
    the steps taken (with ``eval.every = 0`` they are the only ones)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for line in [*lines, *evals]:
        for key, value in line.items():
            number = _number(value)
            if key == "step" or number is None:
                continue
            out.setdefault(key, []).append((float(line["step"]), number))
    steps_keys = set(out)
    for phase in metrics_file.EVAL_PHASES:
        scored = [r for r in records if r.get("phase") == phase and _number(r.get("reward")) is not None]
        x = 0.0 if phase == "before" else float(max((_number(r.get("after_steps")) or 0.0) for r in scored or [{}]))
        for key, value in _evaluation(scored, steps_keys).items():
            out.setdefault(key, []).append((x, value))
    for key in out:
        if key.startswith("eval/"):
            out[key].sort(key=lambda point: point[0])
    return out


#: What the report keeps of an eval completion record.
_SCORE_FIELDS = ("phase", "after_steps", "greedy", "reward", "correct", "prompt_index")


def _evaluation(scored: Sequence[dict[str, Any]], keys: Collection[str]) -> dict[str, float]:
    """One evaluation recomputed from its completion records: greedy accuracy and sampled reward
    mean, and pass@k for the k the step lines log (pass@1 and pass@n when they log none)."""
    greedy = [r["reward"] for r in scored if r.get("greedy")]
    sampled = [r for r in scored if not r.get("greedy")]
    out: dict[str, float] = {}
    # overflow-safe means (safe_stats): a sum of rewards near float64's largest was inf, drawn as
    # such and printed by --json as the token Infinity, which no strict JSON reader takes
    if greedy:
        out["eval/accuracy"] = mean_std(np.asarray([float(v) for v in greedy]))[0]
    if sampled:
        out["eval/sampled_reward_mean"] = mean_std(np.asarray([float(r["reward"]) for r in sampled]))[0]
    per_prompt: dict[Any, list[bool]] = {}
    for r in sampled:
        per_prompt.setdefault(r.get("prompt_index"), []).append(bool(r.get("correct")))
    n = min((len(v) for v in per_prompt.values()), default=0)
    if per_prompt and not any(key.startswith("eval/pass@") for key in keys):
        # no step line names k (eval.every = 0: only the evaluations before and after training):
        # pass@1 and pass@n, every sample's, instead of none at all
        keys = [*keys, "eval/pass@1", f"eval/pass@{n}"]
    for key in keys:
        k = key.removeprefix("eval/pass@")
        if key.startswith("eval/pass@") and k.isdigit() and per_prompt:
            if 1 <= int(k) <= n:
                out[key] = sum(evaluation.pass_at_k(len(v), sum(v), int(k)) for v in per_prompt.values()) / len(per_prompt)
    return out


#: The largest magnitude a chart draws: matplotlib lays out an axis by subtracting its ends, and
#: values near float64's largest (a reward of 1e308 is a finite score polyrl trains on) overflowed
#: there, a ValueError traceback instead of a report. Past it a point is left out of the chart only.
MAX_DRAWN = 1e300


def drawable(data: dict[str, list[tuple[float, float]]], run: str = "") -> dict[str, list[tuple[float, float]]]:
    """``data`` without the points a chart cannot draw (``MAX_DRAWN``), and one warning naming the
    metrics that lost some (and ``run``, in a comparison; the table and the page keep every value:
    nothing is left out silently)."""
    out = {key: [p for p in points if abs(p[1]) <= MAX_DRAWN] for key, points in data.items()}
    cut = sorted(key for key, points in data.items() if len(out[key]) < len(points))
    if cut:
        from polyrl.logs import get_logger

        named = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
        get_logger("polyrl.report").warning(
            f"values past {MAX_DRAWN:g} in magnitude are left out of the chart (the table keeps them): {named}",
            **({"run": run} if run else {}))
    return {key: points for key, points in out.items() if points}


def panels_for(data: dict[str, list[tuple[float, float]]]) -> list[tuple[Panel, list[str]]]:
    """The panels that have at least one series here, with their keys."""
    chosen = []
    for panel in PANELS:
        keys = sorted(k for k in data if panel.wants(k) and SUPERSEDED.get(k) not in data)
        if keys:
            chosen.append((panel, keys))
    return chosen


def check_outputs(png: str | Path, html: str | Path | None) -> None:
    """Refuse output paths that cannot be written before drawing anything (a directory, a path
    under a file, an image format other than PNG, a name or path too long for the system): one
    error line instead of a traceback."""
    for flag, path, suffix in (("--output", Path(png), ".png"), ("--html", Path(html) if html else None, ".html")):
        if path is None:
            continue
        check_path_text(str(path), flag)  # is_dir() raises on a name past 255 bytes or a path past PATH_MAX
        if path.suffix.lower() not in (suffix, ".htm" if suffix == ".html" else suffix):
            raise ConfigError(f"{str(path)!r} does not end in {suffix}", field=flag,
                              fix=f"name the file with {suffix}, e.g. {flag} report{suffix}")
        if path.is_dir():
            raise ConfigError(f"{str(path)!r} is a directory", field=flag,
                              fix=f"give a file path, e.g. {flag} {path / ('report' + suffix)}")
        folder = next(p for p in path.absolute().parents if p.exists())  # missing folders are created
        if not folder.is_dir():
            raise ConfigError(f"{str(folder)!r} is a file, not a folder", field=flag,
                              fix="choose a path under a folder")


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed); ConfigError without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("polyrl report draws with matplotlib, which is not installed", field="report",
                          fix=PLOT_FIX) from None
    return plt


def label(text: str) -> str:
    """``text`` as a legend entry: drawn literally (``_shown``), and kept when it starts with "_",
    which matplotlib hides from legends (a metric ``_entropy`` or a run folder ``_baseline`` lost
    its entry, and a panel of only such lines warned that it had nothing to show)."""
    shown = _shown(text)
    return f" {shown}" if shown.startswith("_") else shown


def whole_steps(ax: Any, title: str) -> None:
    """A panel's title, step axis and grid, as every report draws them."""
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title)
    ax.set_xlabel("step")
    # whole steps only: a short run's axis read 0.5, 1.5, ..., steps no run takes
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def save_figure(plt: Any, fig: Any, output: str | Path) -> Path:
    """Lay out and write ``fig`` as a PNG at ``output`` (whole or not at all), then close it."""
    fig.tight_layout()
    out = Path(output)
    try:
        with _writing(out, "--output") as tmp:
            fig.savefig(tmp, dpi=90, format="png")
    finally:
        plt.close(fig)
    return out


def write_png(run: RunData, output: str | Path) -> Path:
    """Draw the run's panels into ``output`` (PNG); raises ConfigError without matplotlib.
    matplotlib's warnings are logged through structlog (``plot_warnings``)."""
    with plot_warnings.routed():
        plt = pyplot()
        lines = run.lines
        data = drawable(series(lines, run.records, run.evals))
        chosen = panels_for(data)
        cols = 2
        rows = max(1, math.ceil(len(chosen) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(12, 3.2 * rows), squeeze=False)
        for ax, (panel, keys) in zip(axes.flat, chosen):
            for key in keys:
                xs, ys = zip(*data[key])
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label(key))
            if panel.title == "reward" and "reward_std" in data and "reward_mean" in data:
                mean, std = dict(data["reward_mean"]), dict(data["reward_std"])
                # a band edge past MAX_DRAWN (a std of 1e300 rewards) is as undrawable as such a point
                both = [x for x in mean if x in std and abs(mean[x]) + std[x] <= MAX_DRAWN]
                ax.fill_between(both, [mean[x] - std[x] for x in both], [mean[x] + std[x] for x in both], alpha=0.2,
                                label="reward_std")
            if panel.log_scale and all(y > 0 for k in keys for _, y in data[k]):
                ax.set_yscale("log")
            whole_steps(ax, panel.title)
            ax.legend(fontsize=6, ncol=2 if len(keys) > 4 else 1)
        for ax in list(axes.flat)[len(chosen):]:
            ax.axis("off")
        fig.suptitle(_shown(f"{run.name}: {len(lines)} steps"))
        return save_figure(plt, fig, output)


@contextlib.contextmanager
def _writing(path: Path, flag: str) -> Iterator[Path]:
    """A temporary file beside ``path`` to write, put in its place once whole: a full disk left
    the previous report replaced by a cut-short file. An OS error (a read-only folder, /proc, a
    full disk) is one ConfigError naming ``flag``, not a traceback from matplotlib or PIL."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise ConfigError(f"cannot write {str(path)!r}: {exc.strerror or exc}", field=flag,
                          fix="free space on that disk (the previous file is kept)" if full
                          else f"give {flag} a path in a folder you can write") from None


#: the report pages' look: a table that scrolls under its sticky header
PAGE_STYLE = ("<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;font-size:12px}"
              "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{position:sticky;top:0;"
              "background:#eee}div.t{overflow:auto;max-height:60vh}</style>")


def _cell(value: Any) -> str:
    number = _number(value)
    if number is not None and not isinstance(value, int):
        return f"{number:.4g}"
    return html.escape("" if value is None else str(value))


def warnings_html(warnings: Sequence[str], run: str = "") -> str:
    """What the report left out of a run (``RunData.warnings``: unreadable or cut-short lines, steps
    logged twice, metrics with no number), one paragraph each, for the page. Why: they went to the
    terminal alone, so a page shared or opened later showed a chart missing a damaged file's steps
    as the whole run, without a word."""
    where = f" ({html.escape(run)})" if run else ""
    return "".join(f"<p><b>Left out{where}:</b> {html.escape(w)}</p>" for w in warnings)


def write_html(run: RunData, png: Path, output: str | Path) -> Path:
    """A single HTML file: the PNG embedded as base64 and every step's metrics as a table (the
    evaluation lines before and after training in their places)."""
    before = [line for line in run.evals if line.get("phase") == "before"]
    lines = [*before, *run.lines, *(line for line in run.evals if line.get("phase") != "before")]
    keys: list[str] = []
    for line in lines:
        keys += [k for k in line if k not in keys and not isinstance(line[k], (dict, list))]
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_cell(line.get(k))}</td>" for k in keys) + "</tr>" for line in lines)
    title = html.escape(f"polyrl report: {run.name}")
    note = f"<p><b>Not finished:</b> {html.escape(run.unfinished)}</p>" if run.unfinished else ""
    note += warnings_html(run.warnings)
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"{PAGE_STYLE}</head><body>"
            f"<h1>{title}</h1>{note}<img alt=\"curves\" style=\"max-width:100%\" src=\"data:image/png;base64,{image}\">"
            f"<h2>metrics.jsonl ({len(run.lines)} steps)</h2><div class=\"t\"><table><tr>{head}</tr>{body}"
            "</table></div></body></html>\n")
    out = Path(output)
    with _writing(out, "--html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return out
