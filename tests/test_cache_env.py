"""``POLYRL_CACHE`` that cannot hold the cache (a file, a path inside a file): one ``error:`` line
naming the variable and the fix, from every place that first writes there. Each was an
``OSError`` traceback (or a "report it to the plugin's authors" about polyrl's own alias) before."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.cli import main
from polyrl.errors import ConfigError, RewardError

CONFIG = """
[model]
path = "tiny-llama"
[data]
task = "arithmetic"
[algorithm]
name = "grpo"
[[rewards]]
name = "numeric_match"
"""


@pytest.fixture(params=["a file", "inside a file"])
def bad_cache(request, tmp_path, monkeypatch) -> Path:
    """POLYRL_CACHE set to a regular file, or to a folder path below one (tests run as root here,
    so a read-only folder would still be writable)."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    cache = blocker if request.param == "a file" else blocker / "cache"
    monkeypatch.setenv("POLYRL_CACHE", str(cache))
    return blocker


def _one_cache_error_line(err: str, blocker: Path) -> None:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: POLYRL_CACHE (")
    assert f"'{blocker}' is a file, not a folder" in err and "Fix: point POLYRL_CACHE at a writable folder" in err


def test_train_on_the_tiny_alias_names_polyrl_cache(bad_cache, tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    code = main(["train", str(config), "--steps", "1", "--output-dir", str(tmp_path / "out")])
    _one_cache_error_line(capsys.readouterr().err, bad_cache)
    assert code == 2


def test_bench_names_polyrl_cache_before_measuring(bad_cache, tmp_path, capsys):
    output = tmp_path / "bench.json"
    code = main(["bench", "--model", "tiny-llama", "--output", str(output)])
    _one_cache_error_line(capsys.readouterr().err, bad_cache)
    assert code == 2 and not output.exists()


def test_speed_records_name_polyrl_cache(bad_cache):
    from polyrl.bench import speed_records

    with pytest.raises(ConfigError, match=r"^POLYRL_CACHE \(.*is a file, not a folder\. Fix: point POLYRL_CACHE"):
        speed_records.record("m", [{"backend": "torch", "generate_tokens_per_s": 3.0}], threads=1)


def test_the_judges_default_cache_names_polyrl_cache(bad_cache):
    from polyrl.rewards.judge import JudgeCache, judge_options

    opts = judge_options({"base_url": "http://127.0.0.1:9/v1", "model": "m"})
    with pytest.raises(RewardError, match=r"cannot open the judge cache .*Fix: point POLYRL_CACHE \(now '"):
        JudgeCache(opts.cache_path)  # type: ignore[arg-type]


def test_a_judge_cache_path_inside_a_file_names_the_option(tmp_path):
    from polyrl.rewards.judge import JudgeCache

    (tmp_path / "f").write_text("x")
    with pytest.raises(RewardError, match=r"cannot open the judge cache .*Fix: point options\.cache_path"):
        JudgeCache(str(tmp_path / "f" / "judge.sqlite3"))


def test_the_smollm2_conversion_names_polyrl_cache(bad_cache):
    models = pytest.importorskip("polyrl_torch.models")
    with pytest.raises(ConfigError, match=r"^POLYRL_CACHE \(.*is a file, not a folder"):
        models.smollm2_135m_instruct()
