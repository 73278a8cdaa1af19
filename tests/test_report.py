"""``polyrl report``: a real tiny-model run drawn as a PNG and a self-contained HTML page."""

from __future__ import annotations

import base64
import json
import re

import pytest

from polyrl.cli import main
from polyrl.report import load_run, panels_for, series

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    """Three steps of GRPO with a KL term and evaluation every step, trained through the CLI."""
    root = tmp_path_factory.mktemp("report")
    config = root / "run.toml"
    config.write_text(f"""
[model]
path = "{tiny_model_dir}"
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
output_dir = "{root / 'run'}"
""")
    code = main(["train", str(config), "--no-progress", "--set", "train.steps=3", "--set", "algorithm.beta=0.04",
                 "--set", "eval.every=1", "--set", "eval.samples=2", "--set", "eval.pass_k=2"])
    assert code == 0
    return root / "run"


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
    assert text.count("<tr>") == 1 + len(lines) == 4
    assert "eval/pass@2" in text and "perf/peak_rss_mb" in text
    assert f"page: {page}" in capsys.readouterr().out


def test_panels_follow_the_metrics_the_run_has(run_dir):
    lines, records = load_run(run_dir)
    data = series(lines, records)
    titles = [p.title for p, _ in panels_for(data)]
    for wanted in ("reward", "evaluation", "KL to reference", "entropy", "completion length (tokens)",
                   "throughput (tokens/s)"):
        assert wanted in titles
    accuracy = data["eval/accuracy"]
    assert [x for x, _ in accuracy] == [0.0, 1.0, 2.0, 3.0]  # before training, then after each update
    before = [r for r in records if r["phase"] == "before"]
    assert accuracy[0][1] == pytest.approx(sum(r["reward"] for r in before if r["greedy"]) / 2)
    for key in ("eval/pass@1", "eval/pass@2", "eval/sampled_reward_mean"):
        assert data[key][0][0] == 0.0 and len(data[key]) == 4  # recomputed from the records
    throughput = next(keys for p, keys in panels_for(data) if p.title.startswith("throughput"))
    assert "perf/generate_tokens_per_s" in throughput and "tokens_per_s" not in throughput  # no duplicate
    # dropping a series drops its panel: skipped, not drawn empty
    stripped = [{k: v for k, v in line.items() if k != "kl" and not k.startswith("entropy")} for line in lines]
    left = [p.title for p, _ in panels_for(series(stripped, records))]
    assert "KL to reference" not in left and "entropy" not in left


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
