"""Hostile data: broken files give one `error:` line from `polyrl train`; a run on a Parquet dataset
killed with SIGKILL and resumed draws exactly the rows an uninterrupted run draws."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polyrl import checkpoint as ckpt
from polyrl.data import PromptSampler, load_dataset
from polyrl.errors import ConfigError
from polyrl.testing.chat_templates import with_chat_template

pytestmark = pytest.mark.faults

POLYRL = [sys.executable, "-m", "polyrl.cli"]


def _bad_files(d: Path) -> dict[str, tuple[str, str, str]]:
    """case -> (data table lines, field the error names, text it contains)."""
    pq.write_table(pa.table({"prompt": [f"question {i}" for i in range(2000)]}), d / "good.parquet")
    good = (d / "good.parquet").read_bytes()
    (d / "truncated.parquet").write_bytes(good[: len(good) // 2])
    middle = bytearray(good)
    middle[200:1200] = np.random.default_rng(0).bytes(1000)  # footer intact, pages garbage (fixed: no flakes)
    (d / "scrambled.parquet").write_bytes(bytes(middle))
    (d / "nocol.csv").write_text("question,answer\n2+2?,4\n")
    (d / "empty.csv").write_text("")
    (d / "header-only.csv").write_text("prompt,answer\n")
    (d / "latin1.jsonl").write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    cache = f'cache_dir = "{d / "cache"}"'
    return {
        "truncated parquet": (f'path = "{d / "truncated.parquet"}"', "data.path", "not a readable Parquet file"),
        "scrambled parquet": (f'path = "{d / "scrambled.parquet"}"\n{cache}', "data.path", "scrambled.parquet"),
        "csv without the prompt column": (f'path = "{d / "nocol.csv"}"\n{cache}', "data.prompt_column",
                                          "no column 'prompt' (its columns: question, answer)"),
        "empty csv": (f'path = "{d / "empty.csv"}"', "data.path", "is empty"),
        "header-only csv": (f'path = "{d / "header-only.csv"}"\n{cache}', "data.path", "hold no rows"),
        "invalid utf-8 jsonl": (f'path = "{d / "latin1.jsonl"}"', "data.path", "latin1.jsonl:2 is not valid UTF-8"),
        "missing path": (f'path = "{d / "nope.parquet"}"', "data.path", "not found"),
        "glob matching nothing": (f'path = "{d / "shards" / "*.parquet"}"', "data.path", "matches no file"),
        "name not cached": (f'name = "nobody/never-downloaded"\n{cache}', "data.name",
                            "not in the local datasets cache"),
    }


CASES = ["truncated parquet", "scrambled parquet", "csv without the prompt column", "empty csv", "header-only csv",
         "invalid utf-8 jsonl", "missing path", "glob matching nothing", "name not cached"]


@pytest.mark.parametrize("case", CASES)
def test_bad_data_is_one_config_error(tmp_path, case):
    table, field, text = _bad_files(tmp_path)[case]
    keys = dict(line.split(" = ", 1) for line in table.splitlines())
    kwargs = {k: v.strip('"') for k, v in keys.items()}
    with pytest.raises(ConfigError) as info:
        load_dataset(**kwargs)
    assert info.value.field == field and text in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("case", ["scrambled parquet", "csv without the prompt column", "invalid utf-8 jsonl",
                                  "glob matching nothing", "name not cached"])
def test_bad_data_from_the_cli_is_one_error_line(tiny_model_dir, tmp_path, case, capfd, monkeypatch):
    table, field, text = _bad_files(tmp_path)[case]
    config = tmp_path / "bad.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[data]\n{table}\n[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\nsteps = 1\nprompts_per_step = 1\noutput_dir = "{tmp_path / "out"}"\n')
    result = _train_here(capfd, monkeypatch, config)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and field in errors[0] and text in errors[0], result.stderr[-2000:]


# --- kill -9 and --resume on a Parquet dataset -------------------------------------------------

REWARD = """
def tag(prompts, completions, tag, **kwargs):
    # the reward is the drawn row's random tag: each step's reward_mean names the rows it drew
    return [float(t) for t in tag]
"""


def _parquet_config(tmp_path: Path, model: str, out: Path, steps: int) -> Path:
    rng = np.random.default_rng(0)
    data = tmp_path / "prompts.parquet"
    if not data.exists():
        pq.write_table(pa.table({"prompt": [f"Say {i}." for i in range(40)], "tag": rng.random(40)}), data)
        (tmp_path / "reward.py").write_text(REWARD)
    config = tmp_path / f"{out.name}.toml"
    config.write_text(
        f'[model]\npath = "{model}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n[optimizer]\nlr = 1e-3\n'
        f'[data]\npath = "{data}"\ncache_dir = "{tmp_path / "cache"}"\noptions = {{count = 36}}\n'
        f'[[rewards]]\nfunction = "{tmp_path / "reward.py"}:tag"\n'
        f'[train]\nsteps = {steps}\nprompts_per_step = 3\nthreads = 1\ncheckpoint_every = 1\nkeep_checkpoints = 10\n'
        f'seed = 7\noutput_dir = "{out}"\n')
    return config


def _rewards(out: Path) -> list[float]:
    import json

    return [json.loads(line)["reward_mean"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def _train(config: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*POLYRL, "train", str(config), "--no-progress", *extra], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "POLYRL_DISABLE_PLUGINS": "mlx,max"})


def _train_here(capfd, monkeypatch, config: Path, *extra: str) -> subprocess.CompletedProcess:
    """``_train`` through ``polyrl.cli.main`` in this process (``crash_util.train_here``): the runs
    that only need the exit code and the output spare a fresh interpreter's torch and transformers
    imports; the kill -9 run keeps the subprocess."""
    from crash_util import train_here

    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "mlx,max")
    return train_here(capfd, config, *extra)


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_kill_9_then_resume_on_parquet_draws_the_same_rows(tiny_model_dir, tmp_path):
    steps = 24  # several epochs of 36 training rows at 3 per step, long enough to kill mid-run
    clean_out, crash_out = tmp_path / "clean", tmp_path / "crash"
    clean = _train(_parquet_config(tmp_path, tiny_model_dir, clean_out, steps))
    assert clean.returncode == 0, clean.stderr[-3000:]

    # the rows drawn are the sampler's, from the memory-mapped Parquet rows, step by step
    train = load_dataset(path=str(tmp_path / "prompts.parquet"), cache_dir=str(tmp_path / "cache"),
                         options={"count": 36})
    assert train.arrow_backed
    sampler = PromptSampler(train, 3, seed=7)
    expected = [float(np.mean([r["tag"] for r in sampler.next_batch()])) for _ in range(steps)]
    np.testing.assert_allclose(_rewards(clean_out), expected, rtol=1e-6)

    config = _parquet_config(tmp_path, tiny_model_dir, crash_out, steps)
    proc = subprocess.Popen([*POLYRL, "train", str(config), "--no-progress"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "POLYRL_DISABLE_PLUGINS": "mlx,max"})
    wanted = random.Random().randint(2, 6)
    deadline = time.monotonic() + 180
    while len(ckpt.complete_checkpoints(crash_out / "checkpoints")) < wanted:
        assert proc.poll() is None and time.monotonic() < deadline, "run ended before the kill"
        time.sleep(0.02)
    time.sleep(random.Random().uniform(0, 0.2))
    assert proc.poll() is None, "run ended before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = ckpt.latest_checkpoint(crash_out / "checkpoints")
    assert killed_at is not None and ckpt.read_state(killed_at)["step"] < steps

    resumed = _train(config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr
    assert _rewards(crash_out) == _rewards(clean_out)  # the same rows, step for step
    from safetensors.numpy import load_file

    def weights(out: Path) -> dict[str, np.ndarray]:
        return load_file(str(ckpt.latest_checkpoint(out / "checkpoints") / "model" / "model.safetensors"))

    a, b = weights(clean_out), weights(crash_out)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# --- an overlong prompt is found when the data loads, not when its batch is drawn ------------------


def _overlong_config(tmp_path: Path, model: str, extra: str = "") -> tuple[Path, Path, Path]:
    data = tmp_path / "huge_mid.jsonl"
    lines = [f'{{"prompt": "What is {i} + {i}?", "answer": "{2 * i}"}}' for i in range(10)]
    lines.insert(5, '{"prompt": "' + "many words " * 200 + '", "answer": "0"}')  # line 6 (row 5)
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    config = tmp_path / "long.toml"
    config.write_text(
        f'[model]\npath = "{model}"\nmax_length = 64\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        f'[data]\npath = "{data}"\n{extra}[[rewards]]\nname = "numeric_match"\n'
        f'[train]\nsteps = 1\nprompts_per_step = 1\nthreads = 1\noutput_dir = "{out}"\n')
    return config, data, out


def test_an_overlong_prompt_stops_the_run_before_step_0(tiny_model_dir, tmp_path, capfd, monkeypatch):
    config, data, out = _overlong_config(tmp_path, tiny_model_dir)
    # one step of one prompt: the long row is (almost surely) never drawn
    result = _train_here(capfd, monkeypatch, config)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert f"{data} line 6 (row 5)" in errors[0] and "max_length = 64" in errors[0], errors[0]
    assert "raise model.max_length" in errors[0] and "data.drop_overlong" in errors[0], errors[0]
    assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text().strip()


def test_an_overlong_eval_prompt_is_named_too(tiny_model_dir, tmp_path, capfd, monkeypatch):
    evals = tmp_path / "eval.jsonl"
    evals.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n{"prompt": "' + "x y " * 200 + '", "answer": "0"}\n')
    config, data, out = _overlong_config(tmp_path, tiny_model_dir, f'eval_path = "{evals}"\n')
    text = config.read_text().replace(f'path = "{data}"', f'path = "{tmp_path / "short.jsonl"}"')
    (tmp_path / "short.jsonl").write_text('{"prompt": "What is 2 + 2?", "answer": "4"}\n')
    config.write_text(text + "[eval]\ncount = 2\nreward = \"numeric_match\"\n")
    result = _train_here(capfd, monkeypatch, config)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{evals} line 2 (row 1)" in errors[0], result.stderr[-3000:]


def test_drop_overlong_skips_those_rows_with_a_warning(tiny_model_dir, tmp_path, capfd, monkeypatch):
    config, data, out = _overlong_config(tmp_path, tiny_model_dir, "drop_overlong = true\n")
    result = _train_here(capfd, monkeypatch, config, "--set", "train.steps=3", "--set", "train.prompts_per_step=4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dropped 1 of 11" in result.stderr and "max_length" in result.stderr, result.stderr[-3000:]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


# --- what a user's data folder can hold ------------------------------------------------------------


def test_a_saved_dataset_with_a_column_format_still_gives_every_column(tmp_path):
    """set_format(columns=[...]) before save_to_disk hid the other columns from the rows while they
    passed every column check: a reward got answer=None for every sample, silently."""
    import datasets

    from polyrl.data_sources import load_files

    saved = datasets.Dataset.from_dict({"prompt": ["a", "b"], "answer": ["1", "2"]})
    saved.set_format(columns=["prompt"])
    saved.save_to_disk(str(tmp_path / "saved"))
    rows, _, _ = load_files(str(tmp_path / "saved"))
    assert rows.take([0, 1]) == [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": "2"}]


def test_a_fifo_or_an_unreachable_data_file_is_one_error_not_a_hang_or_a_traceback(tmp_path):
    from polyrl.data_sources import load_files

    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_files(str(tmp_path / "pipe.jsonl"))
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / "d.jsonl").write_text('{"prompt": "x"}\n')
    closed.chmod(0)
    try:
        if os.geteuid() == 0:  # root reads anything: drop to nobody for the check, in a child
            script = ("import os\nfrom polyrl.data_sources import load_files\nimport polyrl.errors\n"
                      "os.setgid(65534); os.setuid(65534)\n"  # after the imports: the stdlib may be under /root
                      f"load_files({str(closed / 'd.jsonl')!r})")
            done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
            assert "ConfigError" in done.stderr and "cannot be reached" in done.stderr, done.stderr[-2000:]
            assert "PermissionError" not in done.stderr
        else:
            with pytest.raises(ConfigError, match="cannot be reached"):
                load_files(str(closed / "d.jsonl"))
    finally:
        closed.chmod(0o755)


def test_a_chat_template_that_raises_on_a_row_is_one_error_naming_it(tiny_model_dir, tmp_path, capfd, monkeypatch):
    """Gemma's and Mistral's templates raise on roles that do not alternate or a system message: the
    startup prompt-length check was a jinja2 traceback."""
    model = with_chat_template(tiny_model_dir, tmp_path / "strict-template", (
        "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
        "{{ message['role'] + ': ' + message['content'] + '\n' }}{% endfor %}"))
    data = tmp_path / "two_users.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "1+1?"}], '
                    '"answer": "2"}\n')
    out = tmp_path / "out"
    toml = tmp_path / "run.toml"
    toml.write_text(f'[model]\npath = "{model}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
                    f'[data]\npath = "{data}"\n[[rewards]]\nname = "numeric_match"\n'
                    f'[train]\nsteps = 1\nprompts_per_step = 1\nthreads = 1\noutput_dir = "{out}"\n')
    result = _train_here(capfd, monkeypatch, toml)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{data} line 1 (row 0)" in errors[0], result.stderr[-3000:]
    assert "chat template refused the prompt" in errors[0] and "roles must alternate" in errors[0]


def test_task_and_eval_counts_are_bounded_and_output_dir_expands_home():
    """count = 10**20 built rows until 22 GB were taken; output_dir = "~/x" made a folder named "~"."""
    from polyrl.config import TrainSection
    from polyrl.data import load_dataset as load
    from polyrl.validators import RULES

    with pytest.raises(ConfigError, match=r"data.options.count: must be an integer in \[1, 1000000\]"):
        load(task="arithmetic", options={"count": 10 ** 20})
    assert not RULES["eval.count"].accepts(10 ** 9) and RULES["eval.count"].accepts(100)
    assert TrainSection(output_dir="~/runs/x").output_dir == os.path.expanduser("~/runs/x")
