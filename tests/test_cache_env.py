"""``POLYRL_CACHE`` that cannot hold the cache (a file, a path inside a file): one ``error:`` line
naming the variable and the fix, from every place that first writes there. Each was an
``OSError`` traceback (or a "report it to the plugin's authors" about polyrl's own alias) before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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


# --- a read-only POLYRL_CACHE ----------------------------------------------------------------------

READ_ONLY_PROBE = """
import json, os, sys
from polyrl.errors import ConfigError
from polyrl.testing.aliases import polyrl_resolve_model
from polyrl_torch import models

seen = {"tiny": polyrl_resolve_model("tiny-llama"), "smollm2": models.smollm2_135m_instruct()}
os.environ["POLYRL_CACHE"] = sys.argv[1]  # read-only and empty: what is asked must be written there
for name, make in (("tiny_empty", lambda: polyrl_resolve_model("tiny-llama")),
                   ("smollm2_empty", models.smollm2_135m_instruct)):
    try:
        seen[name] = make()
    except ConfigError as exc:
        seen[name] = "error: " + str(exc)
print(json.dumps(seen))
"""


def _read_only_run(code: str, *folders: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a python that sees ``folders`` as read-only bind mounts of themselves, in a mount
    namespace of its own (tests run as root, for whom chmod takes no write right away); skipped
    where that namespace or those mounts cannot be made."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    mounts = " && ".join(f'mount --bind "{f}" "{f}" && mount -o remount,ro,bind "{f}"' for f in folders)
    script = f'({mounts}) || exit 77; exec "$0" -c "$1" "$2"'
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, code, *map(str, folders[1:])],
                            capture_output=True, text=True, timeout=120)
    if result.returncode == 77 or "unshare failed" in result.stderr:
        pytest.skip(f"cannot make read-only mounts here: {result.stderr.strip()}")
    return result


def test_a_read_only_polyrl_cache_serves_what_it_holds_and_names_itself_for_what_it_lacks(tmp_path, monkeypatch):
    """A read-only POLYRL_CACHE (a shared cache, one baked into an image) that holds the tiny model
    and the converted SmolLM2 was refused ("Read-only file system") though nothing needed writing:
    each is read as it is. One that lacks them is one error naming POLYRL_CACHE and the fix."""
    models = pytest.importorskip("polyrl_torch.models")
    from polyrl.testing.aliases import polyrl_resolve_model

    cache, empty = tmp_path / "cache", tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("POLYRL_CACHE", str(cache))
    tiny = polyrl_resolve_model("tiny-llama")  # built while the cache is writable
    converted = cache / "models" / models.SMOLLM2_NAME
    converted.mkdir()
    for name in (models.MARKER, "config.json"):  # what marks a finished conversion
        (converted / name).write_text("{}")
    result = _read_only_run(READ_ONLY_PROBE, cache, empty)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["tiny"] == tiny and seen["smollm2"] == str(converted)
    for name in ("tiny_empty", "smollm2_empty"):
        assert seen[name] == (f"error: POLYRL_CACHE ({str(empty)!r}) cannot hold polyrl's cache folder "
                              f"'{empty / 'models'}': Read-only file system: {empty / 'models'}. "
                              "Fix: point POLYRL_CACHE at a writable folder (not a file), e.g. POLYRL_CACHE=~/.cache/polyrl")
    assert not any(empty.iterdir())


MAX_CACHE_PROBE = """
import json, os, sys
from polyrl.errors import ConfigError
from polyrl_max.engine import configure_environment

seen = {"held": str(configure_environment({}))}  # read-only, its compiled graphs present
os.environ.pop("MODULAR_CACHE_DIR")  # set by the call above: a user's own would win over POLYRL_CACHE
os.environ["POLYRL_CACHE"] = sys.argv[1]  # read-only and empty: MAX would compile on every load
try:
    seen["empty"] = str(configure_environment({}))
except ConfigError as exc:
    seen["empty"] = "error: " + str(exc)
print(json.dumps(seen))
"""


def test_a_read_only_polyrl_cache_holding_max_graphs_serves_them(tmp_path, monkeypatch):
    """MAX reads a read-only compile cache (measured with 26.7: "readOnly=true", cache hits), but
    the backend refused one holding its compiled graphs ("Read-only file system"), as it refused
    a read-only cache holding the torch backend's models before. An empty one is still one error
    naming POLYRL_CACHE."""
    pytest.importorskip("polyrl_max.engine")
    cache, empty = tmp_path / "cache", tmp_path / "empty"
    graphs = cache / "max" / ".max_cache" / "mof" / "mef" / "26.7.0"
    graphs.mkdir(parents=True)
    (graphs / "a-compiled-graph").write_bytes(b"\0" * 16)
    empty.mkdir()
    monkeypatch.setenv("POLYRL_CACHE", str(cache))
    monkeypatch.delenv("MODULAR_CACHE_DIR", raising=False)
    result = _read_only_run(MAX_CACHE_PROBE, cache, empty)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["held"] == str(cache / "max")
    assert "max_cache_read_only" in result.stderr and "POLYRL_CACHE at a writable folder" in result.stderr
    # MAX prints its own "cache directory ... is not writable" lines as it loads (libmax.so, no setting
    # silences them): polyrl's line says they are expected, so nobody chases them
    assert 'the "cache directory ... is not writable" warnings MAX prints' in result.stderr, result.stderr
    assert seen["empty"].startswith(f"error: POLYRL_CACHE ({str(empty)!r}) cannot hold polyrl's cache folder "
                                    f"'{empty / 'max'}'"), seen["empty"]
