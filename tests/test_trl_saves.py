"""trl_saves: a GRPOTrainer knows its trained model by its files' stats, also where a later run
copied it into a previous/ on another filesystem that keeps coarser mtimes; and a trainer with no
record of its model says so rather than blame a later run."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from polyrl import trl_saves
from polyrl.errors import ConfigError
from polyrl.previous_runs import set_aside


def _export(out: Path, weights: str = "trained weights A", when: int = 1_700_000_000_123_456_789) -> Path:
    """A run's exported model/ with these mtimes (ns, sub-second parts kept)."""
    model = out / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin").write_text(weights)
    for i, path in enumerate((model / "config.json", model / "sub" / "weights.bin")):
        os.utime(path, ns=(when + i, when + i))
    return model


def _cross_device(monkeypatch: pytest.MonkeyPatch, out: Path) -> None:
    """Renames out of ``out`` fail as between filesystems (EXDEV, faked): set_aside copies."""
    real_replace = os.replace

    def replace(src, dst):
        if Path(src).parent == out:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def _coarse_mtimes(folder: Path) -> None:
    """What a filesystem keeping 2-second mtimes (FAT, some network mounts) makes of the copy's."""
    for path in folder.rglob("*"):
        if path.is_file():
            mtime = path.stat().st_mtime_ns // 2_000_000_000 * 2_000_000_000
            os.utime(path, ns=(mtime, mtime))


def test_a_model_copied_to_a_filesystem_with_coarse_mtimes_is_still_found(tmp_path, monkeypatch):
    out = tmp_path / "run"
    identity = trl_saves.model_identity(_export(out))
    _cross_device(monkeypatch, out)
    aside = set_aside(out, [out / "model"], keep=1)
    _coarse_mtimes(aside / "model")
    assert trl_saves.model_identity(aside / "model") != identity  # what old code compared, and refused
    _export(out, "trained weights B", when=1_700_000_100_000_000_000)  # the later run's own, same sizes
    assert trl_saves.trained_model(out / "model", identity, "save_model") == aside / "model"
    assert trl_saves.run_folder(out / "model", identity, "save_state") == aside


def test_a_recorded_copy_whose_files_differ_is_not_taken_for_the_model(tmp_path, monkeypatch):
    out = tmp_path / "run"
    identity = trl_saves.model_identity(_export(out))
    _cross_device(monkeypatch, out)
    aside = set_aside(out, [out / "model"], keep=1)
    (aside / "model" / "sub" / "weights.bin").write_text("cut")  # the record no longer describes the copy
    with pytest.raises(ConfigError) as err:
        trl_saves.trained_model(out / "model", identity, "save_model")
    assert "was replaced by a later run" in str(err.value)


def test_no_recorded_identity_is_said_as_such(tmp_path):
    """An empty identity (the model folder could not be listed when train() returned): old code
    said a later run had replaced the model, with no later run at all."""
    model = _export(tmp_path / "run")
    with pytest.raises(ConfigError) as err:
        trl_saves.trained_model(model, (), "evaluate")
    assert err.value.field == "evaluate"
    assert str(err.value).startswith(f"evaluate: this trainer could not list the files of the model its run "
                                     f"exported ({model})")
    assert "later run" not in str(err.value) and "readable" in err.value.fix


def _write(folder: Path, name: str, content: object) -> None:
    import json

    (folder / name).write_text(json.dumps(content, indent=4, sort_keys=True))


def test_split_results_an_older_polyrl_wrote_without_a_record_go_aside_with_its_run(tmp_path):
    """A polyrl before .polyrl-results.json (or transformers' Trainer) wrote validation_results.json
    and merged it into all_results.json, listing it nowhere: a fresh start set aside
    all_results.json and left validation_results.json beside the next run's files as if that
    run's. A split file every item of which all_results.json holds goes with it; a user's own
    *_results.json (other values, or empty) stays, and so does everything when all_results.json
    is this trainer's own."""
    _write(tmp_path, "validation_results.json", {"validation_loss": 1.5, "nan_metric": float("nan")})
    _write(tmp_path, "all_results.json", {"validation_loss": 1.5, "nan_metric": float("nan"), "train_loss": 1.0})
    _write(tmp_path, "train_results.json", {"train_loss": 1.0})
    _write(tmp_path, "my_results.json", {"validation_loss": 2.0})
    _write(tmp_path, "empty_results.json", {})
    found = sorted(p.name for p in trl_saves.leftover_run_files(tmp_path, {}))
    assert found == ["all_results.json", "train_results.json", "validation_results.json"]
    # this trainer's own (a NaN read back is still its own), with its own train split: nothing goes
    own = {"all_results.json": {"validation_loss": 1.5, "nan_metric": float("nan"), "train_loss": 1.0},
           "train_results.json": {"train_loss": 1.0}}
    assert trl_saves.leftover_run_files(tmp_path, own) == []


def test_only_copies_of_own_results_the_output_dir_holds_as_they_are_are_removed(tmp_path):
    """``drop_own_copies``: a previous/results-<time>/ holding nothing but this trainer's own saves,
    which the output_dir holds as they are, is a duplicate and goes; one whose file the output_dir
    holds otherwise (another trainer's save there since) is the only copy and stays, and so does
    one holding anything else."""
    import json

    own = {"eval_results.json": {"eval_loss": 9.0}, "all_results.json": {"eval_loss": 9.0}}
    aside = tmp_path / "previous"

    def folder(name: str, files: dict) -> Path:
        path = aside / name
        path.mkdir(parents=True)
        for file, content in files.items():
            (path / file).write_text(json.dumps(content))
        (path / trl_saves.RESULTS_RECORD).write_text('["eval_results.json"]')
        return path

    duplicate = folder("results-20250101T000000Z", own)
    other = folder("results-20250101T000001Z", {**own, "train_results.json": {"train_loss": 1.0}})
    for file, content in own.items():
        (tmp_path / file).write_text(json.dumps(content))
    trl_saves.drop_own_copies(tmp_path, own)
    assert not duplicate.exists() and other.is_dir()
    only = folder("results-20250101T000002Z", own)
    (tmp_path / "eval_results.json").write_text('{"eval_loss": 5.0}')  # another trainer's, since
    trl_saves.drop_own_copies(tmp_path, own)
    assert only.is_dir()


def test_a_failed_runs_weights_no_checkpoint_holds_or_a_later_run_replaced_are_one_error(tmp_path):
    """After a train() that raised past its first step, save_model reads the checkpoint of its last
    trained step; where none holds those weights (an error mid-update), or that checkpoint changed
    since, it is one error naming save_model, never the untrained model saved in their place."""
    from polyrl.trl_failed_run import FailedRun

    with pytest.raises(ConfigError) as err:
        FailedRun(2, None).model("save_model")
    assert err.value.field == "save_model" and "2 step(s)" in err.value.message
    assert "resume_from_checkpoint=True" in (err.value.fix or "")
    folder = _export(tmp_path / "ckpt")
    kept = FailedRun(1, folder, trl_saves.model_identity(folder))
    assert kept.model("save_model") == folder
    (folder / "sub" / "weights.bin").write_text("a later run's weights")
    with pytest.raises(ConfigError, match="changed or removed"):
        kept.model("save_model")
