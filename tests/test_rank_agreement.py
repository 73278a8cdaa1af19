"""Ranks of a launched run agree on a reward failure and on what they loaded (no process group here:
the gathered values are given as a gather returns them, in rank order)."""

from __future__ import annotations

import os

import pytest

from polyrl.errors import CollectiveTimeout, ConfigError, RewardError
from polyrl.launch_errors import ENV, OWNER_ENV, PREFIX, first_error, new_folder, report
from polyrl.rank_fingerprint import (BLOCK_BYTES, BLOCKS, HEAD_BYTES, check_same, fingerprint, model_files,
                                     reward_code)
from polyrl.reward_agreement import agreed_reward_failure, reward_outcome
from polyrl.rewards.guard import RewardCancelled


def test_every_rank_raises_the_failing_ranks_error_and_an_error_beats_a_cancellation():
    outcomes = [None, reward_outcome(RewardCancelled("stop")), reward_outcome(RewardError("grader down"))]
    for rank in range(3):
        failed = agreed_reward_failure(outcomes, rank)
        assert isinstance(failed, RewardError) and str(failed).startswith("on rank 2 of 3")
        assert "grader down" in str(failed)
    cancelled = agreed_reward_failure([None, reward_outcome(RewardCancelled("stop"))], 0)
    assert isinstance(cancelled, RewardCancelled) and "on rank 1 of 2" in str(cancelled)
    assert agreed_reward_failure([None, None], 1) is None


def _score_one(prompts, completions, **kw):
    return [1.0] * len(completions)


def _score_zero(prompts, completions, **kw):
    return [0.0] * len(completions)


def test_a_rank_with_other_reward_code_or_rows_is_named_in_one_config_error():
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    same = fingerprint({"train.steps": 3}, [reward_code(_score_one)], rows, None)
    assert fingerprint({"train.steps": 3}, [reward_code(_score_one)], list(rows), None) == same
    check_same([same, dict(same)])
    for other, part in [
        (fingerprint({"train.steps": 3}, [reward_code(_score_zero)], rows, None), "reward code"),
        (fingerprint({"train.steps": 3}, [reward_code(_score_one)], rows[:1], None), "train data"),
        (fingerprint({"train.steps": 4}, [reward_code(_score_one)], rows, None), "config"),
    ]:
        with pytest.raises(ConfigError) as refused:
            check_same([same, same, other])
        assert f"rank(s) 2 loaded another {part} than rank 0 (of 3 ranks)" in str(refused.value)


def bytes_read_to_hash(monkeypatch, tmp_path) -> int:
    """The bytes ``model_files`` reads of a 1 GiB weights file (sparse: no disk used). Counted, not
    timed: "cheaply" is a fixed sample of each file, whatever its size."""
    from polyrl import rank_fingerprint

    read: list[int] = []

    class Counted:
        def __init__(self, f) -> None:  # type: ignore[no-untyped-def]
            self._f = f

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

        def seek(self, *args: int) -> int:
            return self._f.seek(*args)

        def read(self, n: int = -1) -> bytes:
            data = self._f.read(n)
            read.append(len(data))
            return data

    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as f:
        f.truncate(1 << 30)
    with monkeypatch.context() as patched:
        patched.setattr(rank_fingerprint, "open", lambda *a, **k: Counted(open(*a, **k)), raising=False)
        model_files(big)
    return sum(read)


def test_another_checkpoint_at_the_same_model_path_is_named_and_the_same_files_agree(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    """Ranks compared config, code and data but never the weights: a model.path holding another
    checkpoint on one node trained silently wrong. The sampled file hash tells a copy from a model
    whose every tensor moved slightly (as one training step leaves it), cheaply."""
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    same, other = tmp_path / "same", tmp_path / "other"
    shutil.copytree(tiny_model_dir, same)
    shutil.copytree(tiny_model_dir, other)
    weights = load_file(str(other / "model.safetensors"))
    save_file({k: (v + np.float32(1e-3)).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in weights.items()},
              str(other / "model.safetensors"), metadata={"format": "pt"})
    theirs = model_files(tiny_model_dir)
    assert 0 < bytes_read_to_hash(monkeypatch, tmp_path) <= HEAD_BYTES + BLOCKS * BLOCK_BYTES
    assert model_files(same) == theirs and model_files(other) != theirs
    assert model_files(tiny_model_dir + "/model.safetensors") != model_files(other / "model.safetensors")
    rows = [{"prompt": "a"}]
    prints = [fingerprint({}, [], rows, None, weights=model_files(p)) for p in (tiny_model_dir, same, other)]
    check_same(prints[:2])
    with pytest.raises(ConfigError) as refused:
        check_same(prints)
    assert "rank(s) 2 loaded another model checkpoint than rank 0" in str(refused.value)
    assert "model.path" in str(refused.value)


def test_ranks_error_lines_reach_the_launcher_once_naming_the_rank_only_when_they_differ(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert not report("not under polyrl launch: the rank prints it itself")
    monkeypatch.setenv(ENV, str(tmp_path))
    monkeypatch.setenv(OWNER_ENV, str(os.getppid()))  # the launcher is the rank's parent
    for rank, text in (("1", "train.steps: must be >= 1"), ("0", "train.steps: must be >= 1")):
        monkeypatch.setenv("RANK", rank)
        assert report(text)
    assert first_error(tmp_path) == "train.steps: must be >= 1"
    monkeypatch.setenv("RANK", "0")
    assert report("another failure on rank 0, later")
    said = first_error(tmp_path)
    assert said is not None and said.startswith("rank 1 failed first: train.steps: must be >= 1")
    assert first_error(tmp_path / "nothing") is None


def test_a_killed_launchers_folder_is_never_written_or_read_again(tmp_path, monkeypatch):
    """A launcher killed with -9 left its folder in the temp dir: its ranks still handed their
    lines to it (no one read them; the run ended silently), and nothing ever deleted them."""
    import subprocess
    import sys
    import tempfile

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = tmp_path / f"{PREFIX}{gone.stdout.strip()}-abc"
    dead.mkdir()
    (dead / "rank-0.json").write_text('{"rank": 0, "time": 1, "message": "old failure"}')
    (dead / "torchrun.log").write_text("its log, named by the message it printed")
    monkeypatch.setenv(ENV, str(dead))
    monkeypatch.setenv(OWNER_ENV, gone.stdout.strip())  # not this process's parent: gone
    assert not report("a rank whose launcher was killed prints its line itself")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fresh = new_folder()
    assert fresh.parent == tmp_path and fresh.name.startswith(f"{PREFIX}{os.getpid()}-") and fresh != dead
    assert first_error(fresh) is None and first_error(dead) is None
    assert (dead / "torchrun.log").exists()  # only the error lines go


def test_a_collective_timeout_names_the_phase_and_the_setting_to_raise():
    exc = CollectiveTimeout("all_gather", 5.0, rank=0, world_size=2).during("step 3")
    text = str(exc)
    assert exc.field == "train.collective_timeout_s" and "\n" not in text
    assert "rank 0 of 2 waited 5 s in all_gather during step 3" in text
    assert "--set train.collective_timeout_s=600" in text
    assert "during step 3" in str(exc.during("the checkpoint of step 4"))  # the first phase named stays
