"""``polyrl report``: a real tiny-model run drawn as a PNG and a self-contained HTML page."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from polyrl.cli import main
from polyrl.report import load_run, panels_for, series

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _train(model: str, root: Path, *sets: str, name: str = "run") -> Path:
    """A real tiny-model GRPO run trained through the CLI into ``root / name``, ``--set`` as given."""
    config = root / "run.toml"
    config.write_text(f"""
[model]
path = "{model}"
max_length = 256
[generation]
group_size = 2
max_new_tokens = 6
[data]
task = "arithmetic"
options = {{count = 16, digits = 1}}
[[rewards]]
name = "numeric_match"
[eval]
count = 2
[train]
steps = 1
prompts_per_step = 2
threads = 1
output_dir = "{root / name}"
""")
    assert main(["train", str(config), "--no-progress", *(a for s in sets for a in ("--set", s))]) == 0
    return root / name


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    """Three steps of GRPO with a KL term and evaluation every step, trained through the CLI."""
    return _train(tiny_model_dir, tmp_path_factory.mktemp("report"), "train.steps=3", "algorithm.beta=0.04",
                  "eval.every=1", "eval.samples=2", "eval.pass_k=2")


def test_report_png_and_html_of_a_real_run(run_dir, tmp_path, capsys):
    png, page = tmp_path / "out" / "report.png", tmp_path / "report.html"
    assert main(["report", str(run_dir), "--output", str(png), "--html", str(page)]) == 0
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and 20_000 < len(data) < 2_000_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width == 1080 and 500 < height < 3000  # 12 inches at 90 dpi; several rows of panels
    text = page.read_text()
    embedded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', text)
    assert embedded and base64.b64decode(embedded.group(1)) == data
    assert "http" not in text.replace("http-equiv", "")  # self-contained: nothing fetched
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert text.count("<tr>") == 1 + len(lines) == 5  # the evaluation before training, then 3 steps
    assert "eval/pass@2" in text and "perf/peak_rss_mb" in text
    assert f"page: {page}" in capsys.readouterr().out


def test_panels_follow_the_metrics_the_run_has(run_dir):
    run = load_run(run_dir)
    lines, records = run.lines, run.records
    data = series(lines, records, run.evals)
    titles = [p.title for p, _ in panels_for(data)]
    for wanted in ("reward", "evaluation", "KL to reference", "entropy", "completion length (tokens)",
                   "throughput (tokens/s)"):
        assert wanted in titles
    accuracy = data["eval/accuracy"]
    assert [x for x, _ in accuracy] == [0.0, 1.0, 2.0, 3.0]  # before training, then after each step
    assert records == [] and [line["phase"] for line in run.evals] == ["before"]  # metrics.jsonl has them all
    saved = [json.loads(x) for x in (run_dir / "eval_completions.jsonl").read_text().splitlines()]
    before = [r for r in saved if r["phase"] == "before"]
    assert accuracy[0][1] == pytest.approx(sum(r["reward"] for r in before if r["greedy"]) / 2)
    for key in ("eval/pass@1", "eval/pass@2", "eval/sampled_reward_mean"):
        assert data[key][0] == (0.0, run.evals[0][key]) and len(data[key]) == 4
    throughput = next(keys for p, keys in panels_for(data) if p.title.startswith("throughput"))
    assert "perf/generate_tokens_per_s" in throughput and "tokens_per_s" not in throughput  # no duplicate
    # dropping a series drops its panel: skipped, not drawn empty
    stripped = [{k: v for k, v in line.items() if k != "kl" and not k.startswith("entropy")} for line in lines]
    left = [p.title for p, _ in panels_for(series(stripped, records, run.evals))]
    assert "KL to reference" not in left and "entropy" not in left


def test_a_run_that_stopped_before_its_planned_steps_says_so(run_dir, tmp_path, capsys):
    """The report of a run stopped at step 2 of 50 (Ctrl-C, SIGTERM, a crash) drew its curves and
    said nothing: the chart read as a whole run. The newest checkpoint records train.steps; a run
    whose metrics.jsonl stops short of it says so, on the terminal and on the page; a finished
    run says nothing of the kind."""
    import shutil

    assert main(["report", str(run_dir), "--output", str(tmp_path / "whole.png")]) == 0
    assert "not finished" not in capsys.readouterr().out.lower()
    stopped = tmp_path / "stopped"
    shutil.copytree(run_dir, stopped)
    lines = (stopped / "metrics.jsonl").read_text().splitlines(keepends=True)
    (stopped / "metrics.jsonl").write_text("".join(lines[:-1]))  # its last step (3) never logged
    page = tmp_path / "stopped.html"
    assert main(["report", str(stopped), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "not finished: the run logged 2 of its 3 steps (train.steps)" in out, out
    assert "Not finished:</b> the run logged 2 of its 3 steps" in page.read_text()


def test_default_output_is_inside_the_run(run_dir, capsys):
    assert main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.faults
@pytest.mark.parametrize("content", [None, "", '{"step": 0, "loss"', "[1, 2]\n"])
def test_a_run_dir_without_metrics_is_one_error_line(tmp_path, capsys, content):
    if content is not None:
        (tmp_path / "metrics.jsonl").write_text(content)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: RUN_DIR: ") and "metrics" in err[0]
    assert not (tmp_path / "report.png").exists()


@pytest.mark.faults
def test_a_missing_run_dir_is_one_error_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a directory" in err[0]


def _report(capfd, run: Path) -> subprocess.CompletedProcess:
    """The real ``polyrl report`` command on ``run``, as a user runs it, through ``polyrl.cli.main``
    in this process (a fresh interpreter only added its imports): its exit code and output."""
    capfd.readouterr()
    code = main(["report", str(run)])
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["report", str(run)], code, out, err)


def _steps(*steps: int) -> list[str]:
    return [json.dumps({"step": s, "loss": 1.0 + s, "reward_mean": 0.1 * s}) for s in steps]


@pytest.mark.faults
def test_a_deeply_nested_line_is_skipped_and_counted_not_a_traceback(tmp_path, capfd):
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "metrics.jsonl").write_text("\n".join([*_steps(1), deep, *_steps(2), "not json", *_steps(3)]) + "\n")
    (tmp_path / "eval_completions.jsonl").write_text(deep + "\n" + json.dumps(
        {"phase": "before", "greedy": True, "reward": 1.0, "after_steps": 0}) + "\n")
    out = _report(capfd, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "RecursionError" not in out.stderr
    warned = [x for x in out.stderr.splitlines() if "warning" in x]
    assert len(warned) == 2, out.stderr  # one line per file and kind of fault
    metrics = next(x for x in warned if "metrics.jsonl" in x)
    assert "2 unreadable lines" in metrics and "line 2" in metrics  # the count and where to look first
    assert "eval_completions.jsonl" in next(x for x in warned if x is not metrics) and "line 1" in out.stderr
    assert (tmp_path / "report.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.faults
def test_a_cut_short_last_line_is_named_as_a_run_stopped_mid_write(tmp_path, capfd):
    (tmp_path / "metrics.jsonl").write_text("\n".join([*_steps(1, 2), '{"step": 3, "lo']))
    out = _report(capfd, tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    warned = [x for x in out.stderr.splitlines() if "warning" in x]
    assert len(warned) == 1 and "line 3" in warned[0] and "stopped" in warned[0], out.stderr
    assert "unreadable" not in warned[0]  # normal for a killed run, not called corruption
    assert "or is writing it now" in warned[0]  # a running run's line read half written: it had "stopped"


@pytest.mark.faults
def test_steps_logged_twice_keep_the_later_line_and_bad_steps_are_counted(tmp_path, capfd):
    """A resumed run's steps after its checkpoint are logged again: the later line is this lineage's."""
    lines = [*_steps(1, 2), json.dumps({"step": 2, "loss": 9.0}), json.dumps({"step": "2", "loss": 3.0}),
             json.dumps({"step": True, "loss": 3.0}), json.dumps({"step": 1.5, "loss": 3.0}), "[1, 2]", *_steps(3)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    run = load_run(tmp_path)
    assert [(x["step"], x["loss"]) for x in run.lines] == [(1, 2.0), (2, 9.0), (3, 4.0)]
    out = _report(capfd, tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    warned = [x for x in out.stderr.splitlines() if "warning" in x]
    assert len(warned) == 2, out.stderr
    assert any("1 step logged more than once" in x and "line 3" in x for x in warned)
    assert any("4 lines without a step number" in x and "line 4" in x for x in warned)


def test_the_page_says_what_the_report_left_out_of_a_damaged_or_running_run(tmp_path):
    """Once: lines left out (a damaged line, a last line a running or killed run had not finished)
    were said on the terminal alone; the HTML page, shared or opened later, showed the chart and
    table of the steps read as the whole run, and ``--json`` had no word of them either."""
    from polyrl import report_compare
    from polyrl.report import write_html

    (tmp_path / "metrics.jsonl").write_text("\n".join([*_steps(1), "{garbled", *_steps(2), '{"step": 3, "lo']))
    png = tmp_path / "chart.png"
    png.write_bytes(PNG_MAGIC)  # the page embeds the chart's bytes as they are
    run = load_run(tmp_path)
    assert len(run.warnings) == 2
    page = write_html(run, png, tmp_path / "page.html").read_text()
    assert "1 unreadable line left out (first: line 2)" in page and "line 4, the last, is cut short" in page
    table = report_compare.summary([run, run], ["a", "b"])
    both = report_compare.write_html([run, run], ["a", "b"], table, png, tmp_path / "both.html").read_text()
    assert both.count("is cut short") == 2 and "Left out (b):" in both


def test_report_json_lists_what_it_left_out(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    (tmp_path / "metrics.jsonl").write_text("\n".join([*_steps(1, 2), '{"step": 3, "lo']))
    assert main(["report", str(tmp_path), "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["runs"]
    assert got["steps"] == 2 and len(got["left_out"]) == 1 and "line 3, the last, is cut short" in got["left_out"][0]


def test_a_line_separator_inside_a_completion_does_not_split_its_record(tmp_path):
    """JSON written with ensure_ascii=False keeps U+2028 raw; only "\\n" ends a JSON line."""
    (tmp_path / "metrics.jsonl").write_text("\n".join(_steps(1)) + "\n")
    record = {"phase": "before", "greedy": True, "reward": 1.0, "completion": "a\u2028b\x85c\u2029d"}
    after = {"phase": "after", "after_steps": 1, "greedy": True, "reward": 0.0}
    (tmp_path / "eval_completions.jsonl").write_text(json.dumps(record, ensure_ascii=False) + "\n"
                                                     + json.dumps(after) + "\n", encoding="utf-8")
    run = load_run(tmp_path)
    assert run.records == [{"phase": "before", "greedy": True, "reward": 1.0}, after] and not run.warnings


@pytest.mark.faults
@pytest.mark.parametrize(("flags", "words"), [
    (["--output", "{run}/out.txt"], "--output: '{run}/out.txt' does not end in .png"),
    (["--output", "{run}/metrics.jsonl/r.png"], "--output: '{run}/metrics.jsonl' is a file, not a folder"),
    (["--html", "{run}"], "--html: '{run}' does not end in .html"),
    (["--html", "{run}/page.html"], "--html: '{run}/page.html' is a directory"),
])
def test_an_output_path_that_cannot_be_written_is_one_error_line_before_drawing(tmp_path, capsys, flags, words):
    (tmp_path / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n")
    (tmp_path / "page.html").mkdir()
    args = [f.format(run=tmp_path) for f in flags]
    assert main(["report", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words.format(run=tmp_path) in err[0], err
    assert "Fix:" in err[0]
    assert not (tmp_path / "report.png").exists()  # nothing drawn


@pytest.mark.faults
@pytest.mark.parametrize(("flags", "words"), [
    (["--output", "/proc/polyrl-report.png"], "error: --output: cannot write '/proc/polyrl-report.png'"),
    (["--html", "/proc/polyrl-report.html"], "error: --html: cannot write '/proc/polyrl-report.html'"),
])
def test_a_write_that_fails_while_drawing_is_one_error_line(tmp_path, capsys, flags, words):
    """/proc takes no new files: the write itself fails (as in a read-only folder or on a full
    disk), past the path checks; matplotlib's or the HTML write's OSError was a traceback."""
    (tmp_path / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n")
    assert main(["report", str(tmp_path), *flags]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("error:")]
    assert len(err) == 1 and err[0].startswith(words) and "Fix: give" in err[0], err


@pytest.mark.faults
def test_an_integer_past_float_range_is_left_out_not_a_traceback(tmp_path, capfd):
    """JSON allows any integer: one past float range in metrics.jsonl was an OverflowError
    traceback from the chart and the HTML table."""
    lines = [*_steps(1), json.dumps({"step": 2, "loss": 10 ** 400, "reward_mean": 0.2}), *_steps(3)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert series(load_run(tmp_path).lines, [])["loss"] == [(1.0, 2.0), (3.0, 4.0)]
    capfd.readouterr()
    code = main(["report", str(tmp_path), "--html", str(tmp_path / "r.html")])  # the CLI, in this process
    err = capfd.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert str(10 ** 400) in (tmp_path / "r.html").read_text()  # the table shows it as written


@pytest.mark.faults
@pytest.mark.parametrize("name", ["metrics.jsonl", "eval_completions.jsonl"])
def test_a_folder_where_a_metrics_file_belongs_is_named_as_a_folder(tmp_path, capsys, name):
    (tmp_path / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n") if name != "metrics.jsonl" else None
    (tmp_path / name).mkdir()
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{name}' is a directory, not the file polyrl writes" in err[0], err
    assert "FIFO" not in err[0]


def test_the_evaluations_before_and_after_training_are_drawn_without_eval_every(tmp_path):
    """With eval.every = 0 (the demo) the report drew no evaluation at all: the one before and the
    one after training have no step line, only their completion records."""
    from polyrl.report import load_run, series

    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 5)))
    records = [{"phase": "before", "after_steps": 0, "greedy": True, "reward": r, "completion": "x"} for r in (1, 0, 0, 0)]
    records += [{"phase": "after", "after_steps": 4, "greedy": True, "reward": r, "completion": "y"} for r in (1, 1, 1, 0)]
    (tmp_path / "eval_completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(tmp_path)
    assert series(run.lines, run.records)["eval/accuracy"] == [(0.0, 0.25), (4.0, 0.75)]


@pytest.mark.faults
def test_dollar_signs_lone_surrogates_and_huge_steps_are_drawn_as_text_not_a_traceback(tmp_path, capsys):
    """A folder named as an unexpanded ``${VAR}`` in output_dir leaves (``run_$MODEL_$SEED``) and a
    metric key matplotlib reads as math were a mathtext traceback; a lone surrogate in a key made
    the font raise; a step past float range an OverflowError."""
    run = tmp_path / "run_$MODEL_$SEED"
    run.mkdir()
    lines = [json.dumps({"step": s, "loss": 1.0 + s, "time/$\\frac{a$": 0.5, "reward/\ud800/mean": 0.1 * s,
                         "reward_mean": 0.1 * s}) for s in range(1, 4)]
    lines.append(json.dumps({"step": 10 ** 400, "loss": 9.0}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    assert (run / "report.png").stat().st_size > 0
    assert [line["step"] for line in load_run(run).lines] == [1, 2, 3]


@pytest.mark.faults
def test_a_report_that_cannot_be_written_keeps_the_previous_one(tmp_path, capsys, monkeypatch):
    """The chart was written in place: a full disk left the previous report.png cut short."""
    import errno

    import matplotlib.figure

    (tmp_path / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n")
    assert main(["report", str(tmp_path)]) == 0
    previous = (tmp_path / "report.png").read_bytes()
    capsys.readouterr()

    def full_disk(self, path, **kwargs):
        with open(path, "wb") as fh:
            fh.write(b"\x89PNG cut")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Fix: free space on that disk (the previous file is kept)" in err
    assert (tmp_path / "report.png").read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "report.png"]


def test_pass_at_k_is_drawn_when_no_step_line_names_k():
    """With eval.every = 0 only the evaluations before and after training exist: the report drew
    no pass@k at all (it took k from the step lines), where the trackers had it."""
    from polyrl.report import series

    def records(phase, after, correct):
        greedy = [{"phase": phase, "after_steps": after, "greedy": True, "reward": 1.0, "prompt_index": i}
                  for i in range(2)]
        sampled = [{"phase": phase, "after_steps": after, "greedy": False, "reward": float(c), "correct": c,
                    "prompt_index": i} for i, pair in enumerate(correct) for c in pair]
        return greedy + sampled

    data = series([{"step": 0, "loss": 0.1}, {"step": 1, "loss": 0.2}],
                  records("before", 0, [(False, False), (True, False)]) + records("after", 2, [(True, True), (True, False)]))
    assert data["eval/pass@1"] == [(0.0, 0.25), (2.0, 0.75)]
    assert data["eval/pass@2"] == [(0.0, 0.5), (2.0, 1.0)]


def test_device_memory_is_drawn_beside_the_hosts(tmp_path):
    """A CUDA run's memory/device_peak_mb (torch's max_memory_allocated) was in metrics.jsonl and in
    no panel: the report showed the host's peak alone, rarely what runs out on a GPU."""
    from polyrl.report import write_png

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward_mean": 0.1 * s, "perf/peak_rss_mb": 2000.0 + s,
                    "memory/device_peak_mb": 30000.0 + 10 * s}) + "\n" for s in range(1, 4)))
    data = load_run(run)
    chosen = dict((p.title, keys) for p, keys in panels_for(series(data.lines, data.records)))
    assert chosen["peak memory (MiB)"] == ["memory/device_peak_mb", "perf/peak_rss_mb"]
    assert write_png(data, tmp_path / "r.png").read_bytes().startswith(PNG_MAGIC)


def test_a_run_numbered_from_0_by_an_earlier_polyrl_is_drawn_counting_the_steps_taken(tmp_path):
    """Its line of step s held what today's line of step s + 1 holds (its evaluation after s + 1
    steps included), and its evaluations before and after training were only completion records."""
    lines = [{"step": s, "loss": 1.0 + s, **({"eval/accuracy": 0.5} if s == 1 else {})} for s in range(3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    records = [{"phase": "before", "after_steps": 0, "greedy": True, "reward": 0.25},
               {"phase": "after", "after_steps": 3, "greedy": True, "reward": 1.0}]
    (tmp_path / "eval_completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(tmp_path)
    assert [line["step"] for line in run.lines] == [1, 2, 3] and run.evals == []
    assert len(run.warnings) == 1 and "numbered from 0" in run.warnings[0]
    data = series(run.lines, run.records, run.evals)
    assert data["loss"] == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]
    assert data["eval/accuracy"] == [(0.0, 0.25), (2.0, 0.5), (3.0, 1.0)]


def test_evaluation_lines_are_drawn_at_their_steps_beside_the_step_lines(tmp_path):
    """The evaluations before and after training are lines of metrics.jsonl: the after one shares
    the last step's number without replacing its line, and eval_completions.jsonl is not needed."""
    lines = [{"step": 0, "phase": "before", "eval/accuracy": 0.25}, *({"step": s, "loss": 1.0 * s} for s in (1, 2)),
             {"step": 2, "phase": "after", "eval/accuracy": 0.75}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "eval_completions.jsonl").write_text(json.dumps({"phase": "before", "greedy": True, "reward": 9}) + "\n")
    run = load_run(tmp_path)
    assert run.lines == lines[1:3] and run.evals == [lines[0], lines[3]] and run.records == [] and not run.warnings
    data = series(run.lines, run.records, run.evals)
    assert data["eval/accuracy"] == [(0.0, 0.25), (2.0, 0.75)] and data["loss"] == [(1.0, 1.0), (2.0, 2.0)]


def test_a_run_killed_before_its_first_checkpoint_says_it_did_not_finish(toy, tmp_path, capsys):
    """A run SIGKILLed after step 1 of 400 with the default checkpoint_every = 0 (its only
    checkpoint due at the end) left no checkpoint recording train.steps, so its report drew one
    step as a whole run and said nothing. The run records its planned steps at its start
    (run_plan.json); the report reads them. A real toy-backend run in its own process."""
    import os
    import signal
    import time

    from test_step_numbering import toy_run

    data = toy_run(tmp_path, steps=400, checkpoint_every=0)
    data["eval"] = {"count": 0}
    out = tmp_path / "run"
    code = ("import json, sys\nfrom polyrl.config import RunConfig\nfrom polyrl.trainer import Trainer\n"
            "Trainer(RunConfig.from_dict(json.loads(sys.argv[1]))).run(progress=False)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *sys.path])}
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(data)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text().strip():
            assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "no step logged within 120 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    logged = max(json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines())
    assert logged < 400
    assert main(["report", str(out), "--output", str(tmp_path / "killed.png")]) == 0
    said = capsys.readouterr().out
    assert (f"not finished: the run logged {logged} of its 400 steps (train.steps): it was killed (SIGKILL, "
            "the OOM killer, a lost machine), crashed, or is still running") in said, said


def test_a_run_that_failed_in_its_first_step_says_how_it_ended_in_its_one_error_line(tiny_model_dir, tmp_path, capfd):
    """A run whose reward failed in step 1 logged no metrics; its report said only that the folder
    had none and to "pass a run's train.output_dir after at least one training step", as if the
    folder were the wrong one, though the run recorded how it ended (run_plan.json). The one
    ``error:`` line now says that, and how to continue. A real CLI run of the tiny model (through
    ``main`` in this process: a fresh interpreter only added its torch imports)."""
    (tmp_path / "rewards.py").write_text("def inf(completions, **kw):\n    return [float('inf')] * len(completions)\n")
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"Count to {i}:"}) + "\n" for i in range(4)))
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 2\n'
                      f'[data]\npath = "{tmp_path / "prompts.jsonl"}"\n[[rewards]]\nfunction = "{tmp_path / "rewards.py"}:inf"\n'
                      f'[train]\nsteps = 3\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{out}"\n')
    capfd.readouterr()
    code = main(["train", str(config), "--no-progress"])
    stderr = capfd.readouterr().err
    assert code != 0 and "returned inf" in stderr, stderr[-2000:]
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text().strip()
    assert main(["report", str(out)]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: RUN_DIR: "), err
    assert ("the run logged 0 of its 3 steps (train.steps): it stopped with an error before its first step ended "
            "(RewardError: reward 'inf'") in err[0], err[0]
    assert err[0].endswith("Fix: fix the cause, then continue it with polyrl train CONFIG --resume"), err[0]
    assert not (out / "report.png").exists()


@pytest.mark.parametrize(("ended", "said"), [
    (None, "it was killed (SIGKILL, the OOM killer, a lost machine), crashed, or is still running. "
           "Fix: continue it with polyrl train CONFIG --resume"),
    ({"how": "stopped by a signal", "step": 0},
     "it was stopped by a signal (Ctrl-C, SIGTERM) before its first step ended. Fix: continue it with"),
    ({"how": "stopped by its code", "step": 0, "by": "EarlyStopping"},
     "its own code asked it to stop before its first step ended (EarlyStopping). Fix: polyrl train CONFIG --resume "
     "trains the rest"),
])
def test_a_run_that_logged_no_step_says_how_it_ended(tmp_path, capsys, ended, said):
    """Each ending ``run_plan.json`` records (SIGKILLed in step 1: no end recorded) is named in the
    one error line of a run that logged no step, with its advice as the fix."""
    from polyrl import run_plan

    run_plan.write(tmp_path, 50, ended=ended)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the run logged 0 of its 50 steps (train.steps): " + said in err[0], err


def test_the_step_axis_has_whole_steps_only(run_dir, tmp_path, monkeypatch):
    """A short run's x axis was ticked 0.0, 0.5, 1.0, ... 3.0: half steps no run takes, which a
    TensorBoard user reads as a logging bug. Every panel's step ticks are whole numbers. The figure
    is read as matplotlib saves it (``savefig`` wrapped to keep it, then called as it is)."""
    saved = _drawn(monkeypatch)
    assert main(["report", str(run_dir), "--output", str(tmp_path / "r.png")]) == 0
    drawn = [ax for ax in saved[0].axes if ax.axison]
    assert len(drawn) >= 4
    for ax in drawn:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)


def _drawn(monkeypatch) -> list:
    """The figures ``polyrl report`` saves, kept as matplotlib saves them (``savefig`` wrapped)."""
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    original = Figure.savefig

    def keep(self: Figure, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def _keys(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Each numeric metric of a run's metrics.jsonl as (step, value), read here apart from polyrl."""
    out: dict[str, list[tuple[int, float]]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.setdefault(key, []).append((record["step"], value))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in out.items()}


def test_two_real_runs_are_compared_side_by_side(run_dir, tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Two runs could only be read as two reports, side by side by eye. ``polyrl report A B``
    tables each metric's first, last and best value per run and draws one line per run, labelled
    by folder name; runs of different lengths and metrics compare, a metric one run lacks is
    missing in its columns (the other run: 2 steps, no KL term, no evaluation between steps)."""
    other = _train(tiny_model_dir, tmp_path, "train.steps=2", "algorithm.beta=0", name="short")
    capsys.readouterr()  # the training's own output
    mine, theirs = _keys(run_dir), _keys(other)
    only_mine = sorted(set(mine) - set(theirs))
    assert "kl" in only_mine and "eval/pass@2" in only_mine  # the metric sets differ for real
    png, page = tmp_path / "cmp.png", tmp_path / "cmp.html"
    saved = _drawn(monkeypatch)
    assert main(["report", str(run_dir), str(other), "--json", "--output", str(png), "--html", str(page)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["steps"]) for r in got["runs"]] == [("run", 3), ("short", 2)]
    table = got["metrics"]
    for name, keys in (("run", mine), ("short", theirs)):
        steps = keys["loss"]
        assert table["loss"][name] == {"first": steps[0][1], "last": steps[-1][1], "best": None}  # no better loss
        rewards = [v for _, v in keys["reward_mean"]]
        assert table["reward_mean"][name] == {"first": rewards[0], "last": rewards[-1], "best": max(rewards)}
        timing = next(k for k in keys if k.startswith("time/"))  # lower is better
        assert table[timing][name]["best"] == min(v for _, v in keys[timing])
    for key in only_mine:
        assert table[key]["short"] is None and table[key]["run"] is not None, key
    assert png.read_bytes().startswith(PNG_MAGIC) and got["chart"] == str(png)
    # the chart: one line per run, labelled by its folder, each run's own steps
    reward = next(ax for ax in saved[0].axes if ax.get_title() == "reward")
    lines = {line.get_label(): list(line.get_xdata()) for line in reward.get_lines()}
    assert lines["run: reward_mean"] == [1, 2, 3] and lines["short: reward_mean"] == [1, 2]
    kl = next(ax for ax in saved[0].axes if ax.get_title() == "KL to reference")
    assert [t.get_text() for t in kl.get_legend().get_texts()] == ["run"]  # drawn for the run that has it
    assert "run (3 steps) vs short (2 steps)" in saved[0].get_suptitle()
    text = page.read_text()
    assert "<th>short best</th>" in text and base64.b64encode(png.read_bytes()).decode() in text
    assert re.search(r"<td>kl</td><td>[^<]+</td><td>[^<]+</td><td>-</td><td>missing</td>", text)
    # the text table, as a user reads it
    assert main(["report", str(run_dir), str(other), "--output", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["metric", *(x for n in ("run", "short") for w in ("first", "last", "best") for x in (n, w))]
    kl_row = next(line.split() for line in out if line.startswith("kl "))
    assert kl_row[-3:] == ["missing"] * 3 and float(kl_row[1]) == mine["kl"][0][1]
    assert out[-1] == f"chart: {png}"


def test_comparing_with_a_folder_that_is_not_a_run_is_its_one_error_line(run_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    assert main(["report", str(run_dir), "empty"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: RUN_DIR: 'empty' has no step metrics"), err
    assert not (tmp_path / "compare.png").exists()


@pytest.mark.parametrize("second", ["a", "./a/"])
def test_one_run_given_twice_is_refused_not_one_column_for_two(tmp_path, capsys, monkeypatch, second):
    """`polyrl report a a --json` listed two runs and one entry of metrics for both (the table's
    name for each was "a"), without a word; `a ./a/` compared the run with itself."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    monkeypatch.chdir(tmp_path)
    assert main(["report", "a", second, "--json"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"error: RUN_DIR: {second!r} is given twice") and "Fix: name each run folder once" in line
    assert captured.out == "" and not (tmp_path / "compare.png").exists()


def test_matplotlib_warnings_are_polyrl_log_lines_not_raw_text(tmp_path):
    """A run folder or metric named in Chinese printed matplotlib's raw ``UserWarning: Glyph ...
    missing from font(s)`` with a line of polyrl's source, four times per character, and an
    unwritable MPLCONFIGDIR its bare logging text: both between polyrl's structlog lines. Now each
    is one structlog line; the chart is still drawn."""
    run = tmp_path / "运行"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "reward_mean": 0.1 * s, "reward/正确/mean": 0.2 * s}) + "\n" for s in (1, 2, 3)))
    (tmp_path / "not_a_folder").write_text("")
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "not_a_folder")}
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "report", str(run)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout == f"chart: {run / 'report.png'}\n", done
    lines = done.stderr.splitlines()
    logged = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z \[(warning|info) *\] ")
    assert lines and all(logged.match(line) for line in lines), done.stderr
    glyphs = [line for line in lines if "has no glyph" in line]
    assert len(glyphs) == 1 and all(c in glyphs[0] for c in "运行正确"), glyphs
    assert any("matplotlib: Matplotlib created a temporary cache directory" in line for line in lines), lines


def test_a_failure_while_drawing_still_raises_with_what_matplotlib_said_logged(capsys):
    """Routing matplotlib's words hides no error: an exception passes through, and an error
    record is logged at error level (after the warning filters as they were)."""
    import logging
    import warnings

    from polyrl.plot_warnings import routed

    with pytest.raises(ValueError, match="drawing failed"), routed():
        logging.getLogger("matplotlib.font_manager").error("font file unreadable")
        warnings.warn("tight layout not applied", UserWarning, stacklevel=1)
        raise ValueError("drawing failed")
    err = capsys.readouterr().err
    assert re.search(r"\[error +\] matplotlib: font file unreadable", err), err
    assert re.search(r"\[warning +\] matplotlib: tight layout not applied category=UserWarning", err), err
    assert logging.getLogger("matplotlib").propagate  # put back as it was


def test_a_metric_named_with_a_leading_underscore_keeps_its_legend_entry(tmp_path, capsys, monkeypatch):
    """matplotlib leaves labels starting with "_" out of legends: a metric ``_entropy`` was drawn
    unnamed, and matplotlib logged "No artists with labels found" raw on the terminal."""
    (tmp_path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "_entropy": 0.5 * s, "loss": 1.0}) + "\n" for s in (1, 2)))
    saved = _drawn(monkeypatch)
    assert main(["report", str(tmp_path)]) == 0
    entropy = next(ax for ax in saved[0].axes if ax.get_title() == "entropy")
    assert [t.get_text().strip() for t in entropy.get_legend().get_texts()] == ["_entropy"]
    assert "No artists" not in capsys.readouterr().err


def test_runs_whose_folders_share_a_name_are_told_apart_by_their_paths(tmp_path, capsys, monkeypatch):
    """Two runs in folders both named ``run`` were one legend entry twice; each is its path as given."""
    monkeypatch.chdir(tmp_path)
    for parent, rewards in (("a", (0.1, 0.2)), ("b", (0.5, 0.4, 0.3))):
        (tmp_path / parent / "run").mkdir(parents=True)
        (tmp_path / parent / "run" / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "reward_mean": r}) + "\n" for s, r in enumerate(rewards, start=1)))
    assert main(["report", "a/run", "b/run", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in got["runs"]] == ["a/run", "b/run"]
    assert got["metrics"]["reward_mean"] == {"a/run": {"first": 0.1, "last": 0.2, "best": 0.2},
                                             "b/run": {"first": 0.5, "last": 0.3, "best": 0.5}}
    assert (tmp_path / "compare.png").read_bytes().startswith(PNG_MAGIC) and got["chart"] == "compare.png"


def _cell_ends(line: str) -> list[int]:
    """The terminal cell each space-separated word of ``line`` ends at (a wide character: two cells)."""
    import unicodedata

    ends, at, inside = [], 0, False
    for char in line:
        if char == " " and inside:
            ends.append(at)
        inside = char != " "
        at += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return ends + ([at] if inside else [])


def test_compared_runs_and_metrics_named_in_wide_characters_keep_the_columns_aligned(tmp_path, capsys, monkeypatch):
    """The text table padded by characters: a run named 运行 or a metric reward/正确/mean (two
    terminal cells a character) pushed that row's columns right of the others'. Padded by cells,
    each column ends at one cell on every row."""
    for name, scale in (("运行", 1.0), ("b🙂", 2.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(
            {"step": s, "loss": scale * s, "reward/正确/mean": 0.25 * s, "reward_mean": 0.5 * s}) + "\n" for s in (1, 2)))
    _drawn(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "运行", "b🙂", "--output", str(tmp_path / "cmp.png")]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("chart: ")]
    header, rows = out[0], out[1:]
    assert [row.split()[0] for row in rows] == ["loss", "reward/正确/mean", "reward_mean"]
    columns = _cell_ends(header)[2::2]  # "运行 first" is one column: it ends where "first" does
    assert len(columns) == 6
    for row in rows:
        assert _cell_ends(row)[1:] == columns, (row, header)


def test_values_near_float_max_are_left_out_of_the_chart_with_a_warning_not_a_traceback(tmp_path, capsys):
    """A reward of 1e308 is a finite score polyrl trains on, so its reward_mean (and a loss of
    -1e308) reach metrics.jsonl; matplotlib's axis layout overflowed on them: ``ValueError: arange:
    cannot compute length`` out of ``polyrl report``, for one run and for a comparison."""
    huge, plain = tmp_path / "huge", tmp_path / "plain"
    huge.mkdir(), plain.mkdir()
    (huge / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "loss": 1e308, "reward_mean": 1e308, "reward_std": 1e308}) + "\n"
        + json.dumps({"step": 2, "loss": -1e308, "reward_mean": 0.5, "reward_std": 1e308}) + "\n")
    (plain / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n")
    assert main(["report", str(huge), "--output", str(tmp_path / "one.png"), "--html", str(tmp_path / "one.html")]) == 0
    err = capsys.readouterr().err
    assert "left out of the chart (the table keeps them): loss, reward_mean, reward_std" in err, err
    assert "1e+308" in (tmp_path / "one.html").read_text()  # the table keeps the values as logged
    assert main(["report", str(huge), str(plain), "--output", str(tmp_path / "two.png"), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["metrics"]["loss"]["huge"] == {"first": 1e308, "last": -1e308, "best": None}
    assert "left out of the chart (the table keeps them): loss, reward_mean, reward_std run=huge" in out.err, out.err
    assert (tmp_path / "one.png").stat().st_size and (tmp_path / "two.png").stat().st_size


def test_an_evaluation_record_with_a_list_for_prompt_index_is_left_out_not_a_traceback(tmp_path):
    """pass@k groups an earlier polyrl's eval records by ``prompt_index``: one that is a list or an
    object (a damaged or edited eval_completions.jsonl) was ``TypeError: unhashable type``."""
    (tmp_path / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n")
    records = [{"phase": "after", "after_steps": 2, "greedy": False, "reward": 1.0, "correct": True, "prompt_index": 0},
               {"phase": "after", "after_steps": 2, "greedy": False, "reward": 0.0, "prompt_index": [1]},
               {"phase": "after", "after_steps": 2, "greedy": False, "reward": 0.0, "prompt_index": {"i": 1}}]
    (tmp_path / "eval_completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(tmp_path)
    drawn = series(run.lines, run.records, run.evals)
    assert drawn["eval/sampled_reward_mean"] == [(2.0, 1.0)] and drawn["eval/pass@1"] == [(2.0, 1.0)]
    assert any("2 lines that are not a record left out (first: line 2)" in w for w in run.warnings), run.warnings


def test_metrics_that_logged_no_number_are_named_not_dropped_silently(tmp_path, capsys, monkeypatch):
    """A NaN loss is written ``null`` (and a hand-made file may hold ``NaN``/``Infinity``): the chart
    left those points out without a word, and a comparison took the last number before them for
    the run's ``last`` loss, so a run whose loss went NaN at its end compared as a healthy one."""
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join([*_steps(1, 2), '{"step": 3, "loss": null, "reward_mean": NaN}', '{"step": 4, "loss": Infinity}'])
        + "\n")
    run = load_run(tmp_path)
    assert [w.split(": ", 1)[1] for w in run.warnings] == [
        "2 metrics logged no number at some steps (null: NaN or inf when the run logged it), left out of the chart "
        "there (and of a comparison's first, last and best): loss (2 steps, first: step 3), reward_mean (1 step, "
        "first: step 3)"]
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "metrics.jsonl").write_text("\n".join(_steps(1, 2)) + "\n")
    monkeypatch.setattr("polyrl.report_compare.write_png", lambda runs, names, output: Path(output))  # no drawing
    assert main(["report", str(tmp_path), str(plain), "--json"]) == 0
    err = capsys.readouterr().err
    assert "logged no number at some steps" in err and "loss (2 steps, first: step 3)" in err, err


def test_evaluation_means_near_float_max_stay_finite_and_json_output_is_strict(tmp_path, capsys):
    """Two greedy rewards of 1e308 in an earlier polyrl's eval records: their mean was summed to inf
    and ``polyrl report --json`` printed it as the bare token ``Infinity``, which jq and every strict
    JSON reader refuse."""
    from polyrl import cli

    records = [{"phase": "after", "after_steps": 2, "greedy": True, "reward": 1e308}] * 2
    assert series([], records)["eval/accuracy"] == [(2.0, 1e308)]
    cli._print_json({"first": float("inf"), "last": float("nan"), "best": 0.5})
    assert json.loads(capsys.readouterr().out, parse_constant=lambda token: pytest.fail(token)) == {
        "first": None, "last": None, "best": 0.5}
