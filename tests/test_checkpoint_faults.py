"""Checkpoints that never lie (`make test-faults`): kills at random moments, damaged and
incomplete checkpoints, two trainers on one output_dir, config changes at resume, a full disk,
a read-only output_dir, strict JSON, earlier runs kept in previous/. Runs the real CLI and the
real torch backend on the tiny model; a run killed and resumed must end bitwise where an
uninterrupted run ends. The kills, signals and second processes run ``polyrl train`` in a
subprocess (``train``); runs that only need the program's exit code and output (resumes of a
damaged copy, an error line) call the same ``polyrl.cli.main`` in this process (``train_here``),
which spares each the ~5 s of a fresh interpreter's torch and transformers imports.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from crash_util import (
    POLYRL,
    assert_same_weights,
    checkpoint_weights,
    final_weights,
    metric_steps,
    strict_loads,
    train,
    train_here,
    write_config,
)
from polyrl import checkpoint as ckpt
from polyrl import strict_json
from polyrl.config import RunConfig
from polyrl.errors import ConfigError
from polyrl.run_lock import OutputDirBusy, OutputDirLock
from polyrl.trainer import OutputWriteError, Trainer

pytestmark = pytest.mark.faults


def errors_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def one_clear_error(result: subprocess.CompletedProcess, *expected: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = errors_in(result.stderr)
    assert len(errors) == 1, result.stderr[-3000:]
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def clean_run(tiny_model_dir, tmp_path_factory):
    """An uninterrupted 8-step run (checkpoint every step): the reference every crash must match."""
    tmp = tmp_path_factory.mktemp("clean")
    out = tmp / "clean"
    result = train(write_config(tmp, tiny_model_dir, out, steps=8))
    assert result.returncode == 0, result.stderr
    return out


def crash_config(tmp_path: Path, tiny_model_dir: str, clean: Path | None = None,
                 **settings) -> tuple[Path, Path]:
    """The clean run's config, writing into ``tmp_path/crash``; ``clean``: share its reward file
    (a copy of the clean run then resumes with an unchanged config)."""
    out = tmp_path / "crash"
    reward_dir = clean.parent if clean else None
    return write_config(tmp_path, tiny_model_dir, out, reward_dir=reward_dir, **{"steps": 8, **settings}), out


def assert_matches_clean(out: Path, clean: Path) -> None:
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 9))  # each step exactly once
    assert [m["reward_mean"] for m in metric_steps(out)] == [m["reward_mean"] for m in metric_steps(clean)]
    assert_same_weights(final_weights(clean), final_weights(out))
    assert ckpt.latest_checkpoint(out / "checkpoints").name == "step-00000008"


# --- kill -9 at random moments, including during checkpoint writes ---------------------------------


@pytest.mark.slow  # dozens of kill -9 / resume rounds: make test-slow (CI runs it)
def test_kill_9_at_random_moments_in_a_loop_then_resume_equals_the_clean_run(tiny_model_dir, tmp_path, clean_run):
    """Checkpoints every step. Several kills, each followed by --resume: every other one lands
    while a checkpoint is being written (its temp dir exists), the others at a random moment.
    The finished run has every step once in metrics.jsonl and the clean run's weights, bitwise."""
    config, out = crash_config(tmp_path, tiny_model_dir)
    root = out / "checkpoints"
    rng = random.Random()
    kills = mid_write = 0
    for attempt in range(4):
        done_before = len(ckpt.complete_checkpoints(root))
        if done_before >= 7:
            break
        args = [*POLYRL, "train", str(config), "--no-progress", *(["--resume"] if attempt else [])]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180
        if attempt % 2 == 0:  # the moment a checkpoint write is under way
            while not any(root.glob(".tmp-step-*")) and proc.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.002)
        else:  # past start-up (a new checkpoint), then a random moment
            while len(ckpt.complete_checkpoints(root)) <= done_before and proc.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            time.sleep(rng.uniform(0, 0.4))
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.communicate()[1][-3000:]
            break  # it finished first: nothing to kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        mid_write += any(root.glob(".tmp-step-*"))  # the write was cut short
    assert kills >= 2 and mid_write >= 1, (kills, mid_write)
    resumed = train(config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not any(root.glob(".tmp-step-*"))  # cleaned up by the next successful save
    assert_matches_clean(out, clean_run)


@pytest.mark.slow  # two or three CLI runs (20-30 s): make test-slow (CI) runs it
def test_kill_9_before_the_first_checkpoint_then_resume_starts_over_without_duplicates(
        tiny_model_dir, tmp_path, clean_run):
    config, out = crash_config(tmp_path, tiny_model_dir, checkpoint_every=0)
    proc = subprocess.Popen([*POLYRL, "train", str(config), "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not (out / "metrics.jsonl").exists() or len((out / "metrics.jsonl").read_text().splitlines()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not ckpt.complete_checkpoints(out / "checkpoints")
    resumed = train(config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "no complete checkpoint found in" in resumed.stderr and "; starting from the first step" in resumed.stderr
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 9))
    assert [m["reward_mean"] for m in metric_steps(out)] == [m["reward_mean"] for m in metric_steps(clean_run)]
    assert_same_weights(final_weights(clean_run), final_weights(out))


# --- damaged checkpoints --------------------------------------------------------------------------


def _copy_run(src: Path, dst: Path, upto: int) -> None:
    """A copy of a finished run as a run killed right after checkpoint ``upto`` would leave it."""
    import shutil

    shutil.copytree(src, dst)
    for path in (dst / "checkpoints").glob("step-*"):
        if int(path.name.split("-")[1]) > upto:
            shutil.rmtree(path)
    shutil.rmtree(dst / "model")


@pytest.mark.slow
def test_truncated_newest_model_falls_back_to_the_previous_checkpoint(tiny_model_dir, tmp_path, clean_run, capfd):
    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=6)
    model = out / "checkpoints" / "step-00000006" / "model" / "model.safetensors"
    with open(model, "r+b") as fh:
        fh.truncate(model.stat().st_size // 2)
    resumed = train_here(capfd, config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    skipped = [line for line in resumed.stderr.splitlines() if "checkpoint skipped" in line]
    assert len(skipped) == 1 and "step-00000006" in skipped[0] and "model/model.safetensors" in skipped[0]
    assert "step=5" in next(line for line in resumed.stderr.splitlines() if "resumed" in line)
    assert_matches_clean(out, clean_run)


def test_unmarked_step_folders_of_an_earlier_polyrl_are_removed_or_skipped_never_resumed(
        tiny_model_dir, tmp_path, clean_run, capfd):
    """An earlier polyrl's pruning, killed part-way, left ``step-1`` without its marker and half
    its files: it stayed on disk for good. Now the resume deletes it, with a warning; an unmarked
    ``step-6`` newer than every complete checkpoint is skipped (never resumed, not deleted before
    the resumed run writes step 6 again) and the run ends as the clean one."""
    import shutil

    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=6)
    root = out / "checkpoints"
    (root / "step-00000001" / ckpt.MARKER).unlink()
    shutil.rmtree(root / "step-00000001" / "model")
    (root / "step-00000006" / ckpt.MARKER).unlink()
    resumed = train_here(capfd, config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    deleted = [line for line in resumed.stderr.splitlines() if "without its COMPLETE marker" in line]
    assert len(deleted) == 1 and "step-00000001" in deleted[0], resumed.stderr[-3000:]
    skipped = [line for line in resumed.stderr.splitlines() if "checkpoint skipped" in line]
    assert len(skipped) == 1 and "step-00000006" in skipped[0]
    assert "step=5" in next(line for line in resumed.stderr.splitlines() if "] resumed " in line)
    assert not (root / "step-00000001").exists() and not any(root.glob(f"{ckpt.DELETING}*"))
    assert [p.name for p in ckpt.complete_checkpoints(root)] == [f"step-{n:08d}" for n in range(2, 9)]
    assert_matches_clean(out, clean_run)


def test_a_completions_line_cut_inside_a_character_is_dropped_at_resume(tiny_model_dir, tmp_path, clean_run, capfd):
    """Completions are written unescaped (UTF-8), so a kill or a full disk can cut the last line
    inside a character: the resume drops that line like any cut-short one (it raised
    UnicodeDecodeError, a traceback) and the run ends where the clean run ends."""
    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=6)
    record = strict_json.dumps({"step": 7, "prompt": "2+2?", "completion": "quatre \u00e9crit"}, ensure_ascii=False)
    cut = record.encode("utf-8")[: record.encode("utf-8").index("\u00e9".encode("utf-8")) + 1]
    with open(out / "completions.jsonl", "ab") as fh:
        fh.write(cut)  # the first byte of the two of "\u00e9": not UTF-8 on its own
    resumed = train_here(capfd, config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_matches_clean(out, clean_run)
    assert (out / "completions.jsonl").read_bytes() == (clean_run / "completions.jsonl").read_bytes()


def test_a_line_cut_inside_a_character_reads_as_a_damaged_line(tmp_path):
    path = tmp_path / "eval_completions.jsonl"
    strict_json.append_lines(path, [{"text": "caf\u00e9"}])
    with open(path, "ab") as fh:
        fh.write('{"text": "caf\u00e9'.encode("utf-8")[:-1] + b"\n" + b'{"text": "\xff"}\n')
    assert [record for _, record in strict_json.read_lines(path)] == [{"text": "caf\u00e9"}, None, None]


def test_disk_full_while_rewinding_completions_at_resume_is_one_error(tiny_model_dir, tmp_path, clean_run,
                                                                     monkeypatch):
    """The resume rewrites metrics.jsonl, then completions.jsonl: a full disk at the second was
    an OSError traceback, at the first one error line."""
    import polyrl.tracking.completions as completions_log

    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=6)
    real_rewrite = strict_json.rewrite_lines

    def full_disk(path, lines):
        if path.name == "completions.jsonl":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_rewrite(path, lines)

    monkeypatch.setattr(completions_log.strict_json, "rewrite_lines", full_disk)
    trainer = Trainer(RunConfig.from_toml(config), resume="")
    try:
        with pytest.raises(OutputWriteError, match="rewound completions.jsonl.*No space left on device.*--resume"):
            trainer.resume()
    finally:
        trainer.lock.release()
    assert ckpt.verify(out / "checkpoints" / "step-00000006") is None  # the checkpoint it resumes is kept


def test_a_checkpoints_folder_that_cannot_be_made_is_a_write_error_before_the_backend_saves(tmp_path):
    """``checkpoints`` a file (or a full disk at its mkdir): an OSError traceback, and under a
    launcher that rank left no error line while its peers sat in the backend's save."""
    root = tmp_path / "checkpoints"
    root.write_text("not a folder")
    called = []
    with pytest.raises(ckpt.CheckpointWriteError) as err:
        ckpt.write_checkpoint(root, 1, {"step": 1}, lambda model, state: called.append(model))
    assert err.value.step == 1 and err.value.disk_problem and called == []
    # the file is named as what is in the way, and the fix moves it (it was "File exists", fix: free space)
    assert f"{root} is in the way" in err.value.reason and err.value.fix == f"move or delete the file {root}"


def test_a_checkpoint_path_past_the_system_limit_says_to_shorten_output_dir(tmp_path):
    """A ``train.output_dir`` short enough to make (every name short, the whole under PATH_MAX) whose
    checkpoint files lie past PATH_MAX: ENAMETOOLONG. It said "File name too long" with the fix
    "free space or make train.output_dir writable" (neither helps), after the whole run trained."""
    limit = os.pathconf("/", "PC_PATH_MAX")
    deep = tmp_path
    while len(os.fsencode(str(deep))) < limit - 40:  # room for checkpoints/, not for what lies below it
        deep = deep / ("d" * min(200, limit - 40 - len(os.fsencode(str(deep)))))
    deep.mkdir(parents=True)
    root = deep / "c"

    def writer(model, state):
        Path(model).mkdir(parents=True)
        (Path(model) / "model.safetensors").write_bytes(b"\0" * 8)

    with pytest.raises(ckpt.CheckpointWriteError) as err:
        ckpt.write_checkpoint(root, 1, {"step": 1}, writer)
    assert err.value.disk_problem and "longer than the system allows" in err.value.reason, err.value.reason
    assert err.value.fix is not None and "shorter path" in err.value.fix, err.value.fix
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())  # the partial folder is gone


def test_a_bit_flip_is_caught_by_the_checksum(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2):
        ckpt.write_checkpoint(root, step, {"step": step},
                              lambda model, state: (Path(model).mkdir(), (Path(model) / "w.bin").write_bytes(b"\0" * 64)))
    target = root / "step-00000002" / "model" / "w.bin"
    target.write_bytes(b"\0" * 63 + b"\1")  # same size, one bit differs
    found, skipped = ckpt.newest_verified(root)
    assert found.name == "step-00000001"
    assert skipped == [(root / "step-00000002", "model/w.bin does not match its checksum")]


def test_a_state_rewrite_keeps_a_verified_checkpoint_and_an_interrupt_between_its_renames_loses_neither(
        tmp_path, monkeypatch):
    """``rewrite_state`` (the evaluation after training's new best, written into the last
    checkpoint): the weights are the same inodes, the manifest and marker match the new state file;
    one interrupted after ``step-N`` was set aside leaves a whole one for the next run."""
    root = tmp_path / "checkpoints"
    path = ckpt.write_checkpoint(root, 2, {"step": 2, "observers": {"trl": {"best_metric": 3.0}}},
                                 lambda model, state: (Path(model).mkdir(), (Path(model) / "w.bin").write_bytes(b"\0" * 64)))
    inode = (path / "model" / "w.bin").stat().st_ino
    ckpt.rewrite_state(path, 2, {"step": 2, "observers": {"trl": {"best_metric": 4.0}}})
    assert ckpt.verify(path) is None and ckpt.read_state(path)["observers"]["trl"]["best_metric"] == 4.0
    assert (path / "model" / "w.bin").stat().st_ino == inode
    assert sorted(p.name for p in root.iterdir()) == ["step-00000002"]
    # interrupted between the renames (step-N set aside, the new copy not yet in place): the next
    # run's finish_interrupted_replacements puts a whole one back (here the old: the new copy was
    # removed on the way out, as write_checkpoint's is)
    real_replace, calls = os.replace, []

    def interrupted_at_the_second(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", interrupted_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        ckpt.rewrite_state(path, 2, {"step": 2, "observers": {"trl": {"best_metric": 5.0}}})
    monkeypatch.undo()
    assert not path.exists()
    assert ckpt.finish_interrupted_replacements(root) == [path]
    assert ckpt.verify(path) is None and ckpt.read_state(path)["observers"]["trl"]["best_metric"] == 4.0


def test_weights_only_is_suggested_only_where_the_weights_verify(tmp_path):
    from polyrl.resume_point import resume_fix

    def write(model, state):
        for folder in (model, state):
            Path(folder).mkdir()
            (Path(folder) / "w.bin").write_bytes(b"\0" * 64)

    root = tmp_path / "checkpoints"
    state_only, both = (ckpt.write_checkpoint(root, step, {"step": step}, write) for step in (1, 2))
    (state_only / "engine_state" / "w.bin").write_bytes(b"\1")
    for folder in ("engine_state", "model"):
        (both / folder / "w.bin").write_bytes(b"\1")
    assert "--resume-weights-only" in resume_fix(False, [state_only])
    assert "--resume-weights-only" in resume_fix(False, [both, state_only])  # the older one's weights load
    for fix in (resume_fix(False, [both]), resume_fix(True, [state_only])):
        assert "--resume-weights-only" not in fix and "model/ weights are damaged too" in fix, fix


def test_a_deleted_or_edited_manifest_does_not_pass_and_old_checkpoints_still_load(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        ckpt.write_checkpoint(root, step, {"step": step}, lambda model, state: Path(model).mkdir())
    (root / "step-00000003" / ckpt.MANIFEST).unlink()
    manifest = root / "step-00000002" / ckpt.MANIFEST
    manifest.write_text(manifest.read_text().replace('"format": 1', '"format": 1 '))
    assert ckpt.verify(root / "step-00000003") == "MANIFEST.json is missing"
    assert ckpt.verify(root / "step-00000002") == "MANIFEST.json does not match the checksum in COMPLETE"
    legacy = root / "step-00000001"  # as polyrl wrote it before manifests: marker without checksum
    (legacy / ckpt.MARKER).write_text('{"step": 1}')
    (legacy / ckpt.MANIFEST).unlink()
    assert ckpt.is_unverifiable(legacy) and ckpt.verify(legacy) is None
    assert ckpt.newest_verified(root)[0] == legacy


@pytest.mark.slow
def test_missing_optimizer_state_is_an_error_unless_weights_only(tiny_model_dir, tmp_path, clean_run):
    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=3)
    for path in (out / "checkpoints").glob("step-*"):
        (path / "engine_state" / "optimizer.pt").unlink()
    one_clear_error(train(config, "--resume"), "optimizer.pt is missing", "--resume-weights-only", "step-00000003")

    resumed = train(config, "--resume-weights-only")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed weights only: optimizer and RNG start fresh" in resumed.stderr
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 9))  # continued at step 3, once each
    assert metric_steps(out)[:3] == metric_steps(clean_run)[:3]


def test_the_backend_refuses_a_checkpoint_without_optimizer_or_rng_state(tiny_model_dir, tmp_path):
    """The same rule one level down: a backend asked for an exact load names the missing piece."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, threads=1))
    engine.save_checkpoint(str(tmp_path / "model"), str(tmp_path / "state"))
    assert not (tmp_path / "model" / "torch_state").exists()  # nothing but the model in model/
    (tmp_path / "state" / "rng.pt").unlink()
    with pytest.raises(ConfigError, match="no RNG state.*--resume-weights-only"):
        engine.load_checkpoint(str(tmp_path / "model"), str(tmp_path / "state"))
    engine.load_checkpoint(str(tmp_path / "model"), str(tmp_path / "state"), weights_only=True)


# --- config changes at resume ---------------------------------------------------------------------


def test_changed_lr_at_resume_is_applied_to_the_restored_optimizer(tiny_model_dir, tmp_path, clean_run):
    _, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=4)
    config = write_config(tmp_path, tiny_model_dir, out, lr="2e-3", steps=8, reward_dir=clean_run.parent)
    trainer = Trainer(RunConfig.from_toml(config))
    assert trainer.resume()
    groups = trainer.train_engine.raw.optimizer.param_groups
    assert groups and all(g["lr"] == 2e-3 for g in groups)  # not the saved optimizer's 1e-3
    assert len(trainer.train_engine.raw.optimizer.state) > 0  # Adam moments were restored
    trainer.lock.release()


def test_changed_lr_and_steps_at_resume_are_logged_by_the_cli(tiny_model_dir, tmp_path, clean_run, capfd):
    _, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=4)
    config = write_config(tmp_path, tiny_model_dir, out, lr="2e-3", steps=5, reward_dir=clean_run.parent)
    resumed = train_here(capfd, config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "config changed at resume: optimizer.lr 0.001 -> 0.002" in resumed.stderr
    assert "config changed at resume: train.steps 8 -> 5" in resumed.stderr
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 6))


def test_a_resume_past_train_steps_and_stray_metrics_lines_are_warned_about(tiny_model_dir, tmp_path, clean_run, capfd):
    _, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=4)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join([lines[0], "my note", *lines[1:]]) + "\n")
    config = write_config(tmp_path, tiny_model_dir, out, steps=3, reward_dir=clean_run.parent)
    resumed = train_here(capfd, config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the checkpoint is at step 4, at or past train.steps = 3: nothing is left to train" in resumed.stderr
    assert "--steps 14" in resumed.stderr
    assert "1 line(s) of metrics.jsonl are not step records polyrl wrote; dropped" in resumed.stderr
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 5))


def test_a_resume_into_a_folder_that_does_not_exist_says_so(tiny_model_dir, tmp_path, clean_run, capfd):
    config, _ = crash_config(tmp_path, tiny_model_dir, clean_run)
    nowhere = tmp_path / "typo"
    resumed = train_here(capfd, config, "--resume", "--output-dir", str(nowhere), "--steps", "1")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"no complete checkpoint found in {nowhere} (the folder did not exist); starting from the first step. "
            "If a run should be there, check train.output_dir / --output-dir") in resumed.stderr


@pytest.mark.parametrize(("field", "old", "new"), [
    ("generation.group_size", "group_size = 4", "group_size = 2"),
    ("algorithm.beta", "[train]\n", "[algorithm]\nbeta = 0.1\n[train]\n"),
    ("data.options", 'task = "arithmetic"', 'task = "arithmetic"\noptions = {seed = 3}'),
    ("model.path", "", ""),  # the same weights in another folder: still another model.path
])
def test_a_config_change_that_breaks_exactness_is_refused(tiny_model_dir, tmp_path, clean_run, field, old, new):
    import shutil

    _, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=2)
    config = write_config(tmp_path, tiny_model_dir, out, steps=8, reward_dir=clean_run.parent)
    if field == "model.path":
        shutil.copytree(tiny_model_dir, tmp_path / "copy")
        old, new = f'path = "{tiny_model_dir}"', f'path = "{tmp_path / "copy"}"'
    config.write_text(config.read_text().replace(old, new, 1))
    trainer = Trainer(RunConfig.from_toml(config))
    with pytest.raises(ConfigError, match=r"config changed at resume.*--resume-weights-only") as caught:
        trainer.resume()
    assert caught.value.field == field and caught.value.message.count(" -> ") == 1  # that change alone
    trainer.lock.release()
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 9))  # nothing was touched (copied run)


def test_a_reward_model_rebuilt_in_place_since_the_checkpoint_is_refused_at_resume(tiny_model_dir, tmp_path, capfd):
    """The policy's folder was compared at resume, a reward model's not: one retrained at the same
    path scored the resumed steps with another model, without a word."""
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    folder = tmp_path / "rm"
    build_tiny_reward_model(folder, seed=0)
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=1, extra=(
        f'[[rewards]]\nname = "reward_model"\noptions = {{path = "{folder}"}}\n'))
    assert train_here(capfd, config).returncode == 0
    build_tiny_reward_model(folder, seed=1)  # the same path, other weights
    one_clear_error(train_here(capfd, config, "--resume", "--steps", "2"), "rewards[1].options.path: the files of "
                    "rewards[1].options.path changed since", "step-00000001", "another reference model, tokenizer "
                    "or reward model", "Fix: restore the folder as it was, or continue from the weights with "
                    "--resume-weights-only")


def test_a_refused_config_change_is_one_error_line_from_the_cli(tiny_model_dir, tmp_path, clean_run, capfd):
    _, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=2)
    config = write_config(tmp_path, tiny_model_dir, out, steps=8, seed=7, reward_dir=clean_run.parent)
    one_clear_error(train_here(capfd, config, "--resume"), "config changed at resume", "train.seed 0 -> 7",
                    "--resume-weights-only")


def test_a_resume_on_another_train_backend_is_refused_before_any_engine_loads(tiny_model_dir, tmp_path, clean_run,
                                                                              monkeypatch, capfd):
    """A torch checkpoint resumed with backends.train = "mlx": the saved config decides the
    refusal, so it comes before the engines load (it used to come after both models had loaded)."""
    from polyrl.registry import get_registry

    status = get_registry().status("mlx")
    if not status.available:
        pytest.skip(f"mlx not usable here: {status.reason}")
    _, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=2)
    config = write_config(tmp_path, tiny_model_dir, out, backend="mlx", steps=8, reward_dir=clean_run.parent)
    result = train_here(capfd, config, "--resume")
    one_clear_error(result, "config changed at resume", "backends.train 'torch' -> 'mlx'", "--resume-weights-only")
    assert "checkpoint skipped" not in result.stderr

    def no_engines(*args, **kwargs):
        raise AssertionError("the engines loaded before the resume was refused")

    monkeypatch.setattr("polyrl.trainer.load_engines", no_engines)
    with pytest.raises(ConfigError, match=r"backends.train 'torch' -> 'mlx'") as caught:
        Trainer(RunConfig.from_toml(config), resume="")
    assert caught.value.field == "backends.train"
    import fcntl

    from polyrl.run_lock import LOCK_FILE

    with open(out / LOCK_FILE, "a") as lock:  # the early check let go of the output_dir
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 9))  # nothing was touched (copied run)


# --- one trainer per output_dir -------------------------------------------------------------------


HOLDER = """
import sys, time
from pathlib import Path
from polyrl.run_lock import OutputDirLock
OutputDirLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_second_trainer_is_refused_and_a_killed_holder_does_not_block(tiny_model_dir, tmp_path, capfd):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = train_here(capfd, write_config(tmp_path, tiny_model_dir, out, steps=1))  # the holder: another process
        one_clear_error(result, "in use by another trainer", f"pid {holder.pid}", "train.output_dir")
        assert not (out / "metrics.jsonl").exists()
        with pytest.raises(OutputDirBusy, match=f"pid {holder.pid}"):
            OutputDirLock(out).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / ".polyrl.lock").read_text().strip() == str(holder.pid)  # the stale note stays...
    trainer = Trainer(RunConfig.from_toml(write_config(tmp_path, tiny_model_dir, out, steps=1)))
    assert trainer.run(progress=False)["steps"] == 1  # ... and does not block
    assert not trainer.lock.held


@pytest.mark.slow  # three CLI runs (~30 s on two cores)
def test_two_training_processes_on_one_output_dir_the_second_is_refused_and_a_killed_first_blocks_nothing(
        tiny_model_dir, tmp_path):
    """Two real ``polyrl train`` processes (not a bare lock holder): while the first trains, the
    second is one error naming the first's pid and writes nothing there; the first killed with
    SIGKILL mid-run, ``--resume`` continues its checkpoints."""
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=400)
    out = tmp_path / "run"
    first = subprocess.Popen([*POLYRL, "train", str(config), "--no-progress"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ckpt.complete_checkpoints(out / "checkpoints"):  # training, a step checkpointed
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
            time.sleep(0.05)
        (tmp_path / "other").mkdir()
        second = train(write_config(tmp_path / "other", tiny_model_dir, out, steps=1))
        one_clear_error(second, f"output_dir {out} is in use by another trainer (pid {first.pid})",
                        "Fix: wait for that run to finish (or stop it), or give this run another output_dir")
        assert first.poll() is None  # still training, its files its own
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    steps = [m["step"] for m in metric_steps(out)]
    assert steps == list(range(1, len(steps) + 1))
    write_config(tmp_path, tiny_model_dir, out, steps=steps[-1] + 1)  # one step more than the killed run took
    resumed = train(config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [m["step"] for m in metric_steps(out)] == list(range(1, steps[-1] + 2))


# --- full disk, read-only output_dir --------------------------------------------------------------


@contextmanager
def tmpfs(path: Path, size_kib: int):
    """A small tmpfs at ``path`` (needs root and mount rights; the test is skipped without)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _dir_kib(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) // 1024


def test_disk_full_during_a_checkpoint_is_one_error_and_keeps_the_last_good_one(
        tiny_model_dir, tmp_path, clean_run, capfd):
    one = _dir_kib(clean_run / "checkpoints" / "step-00000001")
    with tmpfs(tmp_path / "disk", size_kib=int(one * 1.6)) as disk:  # room for one checkpoint, not two
        out = disk / "run"
        result = train_here(capfd, write_config(tmp_path, tiny_model_dir, out, steps=8, keep_checkpoints=1))
        one_clear_error(result, "No space left on device", "step-00000001", "--resume")
        assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-00000001"]  # no temp dir left
        assert ckpt.verify(out / "checkpoints" / "step-00000001") is None
        assert_same_weights(checkpoint_weights(clean_run / "checkpoints" / "step-00000001"),
                            checkpoint_weights(out / "checkpoints" / "step-00000001"))
        assert [m["step"] for m in metric_steps(out)] == [1, 2]


@pytest.mark.slow  # two or three CLI runs (20-30 s): make test-slow (CI) runs it
@pytest.mark.parametrize("writer", ["torch.save", "safetensors"])
def test_a_file_size_limit_hit_during_a_checkpoint_is_one_error_naming_the_limit(tiny_model_dir, tmp_path, writer):
    """RLIMIT_FSIZE (ulimit -f; a quota-like limit on one file) reached while the backend writes:
    torch.save said only "unexpected pos 798720 vs 798612" and safetensors "I/O error: File too
    large (os error 27)", as a failure of the backend, with no fix. SIGXFSZ is ignored in the
    child (as Python itself does), so the write fails with EFBIG instead of killing it."""
    import resource

    out = tmp_path / "run"
    assert train(write_config(tmp_path, tiny_model_dir, out, steps=2)).returncode == 0
    step2 = out / "checkpoints" / "step-00000002"
    weights = (step2 / "model" / "model.safetensors").stat().st_size
    optimizer = (step2 / "engine_state" / "optimizer.pt").stat().st_size
    assert weights < optimizer
    limit = (weights + optimizer) // 2 if writer == "torch.save" else weights // 2

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run([*POLYRL, "train", str(write_config(tmp_path, tiny_model_dir, out, steps=4)),
                             "--no-progress", "--resume"], capture_output=True, text=True, timeout=240,
                            preexec_fn=limited)
    error = one_clear_error(result, "checkpoint of step 3", "file-size limit", f"{limit} bytes", str(step2),
                            "ulimit -f", "--resume")
    assert "unexpected pos" not in error and "os error" not in error, error
    assert [p.name for p in sorted((out / "checkpoints").iterdir())] == ["step-00000001", "step-00000002"]
    assert ckpt.verify(step2) is None


@pytest.mark.slow  # two or three CLI runs (20-30 s): make test-slow (CI) runs it
def test_a_file_size_limit_hit_while_appending_metrics_is_one_error_naming_the_limit(tiny_model_dir, tmp_path):
    """metrics.jsonl reaching RLIMIT_FSIZE (ulimit -f) was "File too large ... Fix: free space or
    make train.output_dir writable", which frees nothing: the limit and its fix, as a checkpoint
    says them. The file keeps whole lines (the cut-short write is undone) and the run resumes."""
    import resource

    out = tmp_path / "run"
    config = write_config(tmp_path, tiny_model_dir, out, steps=2, extra="[logging]\ncompletions_per_step = 0\n")
    assert train(config).returncode == 0
    limit = (out / "metrics.jsonl").stat().st_size + 16  # step 3's line goes past it, before its checkpoint

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run([*POLYRL, "train", str(config), "--no-progress", "--resume", "--steps", "4"],
                            capture_output=True, text=True, timeout=240, preexec_fn=limited)
    error = one_clear_error(result, "metrics of step 3", f"file-size limit of {limit} bytes (RLIMIT_FSIZE)",
                            "Fix: raise the file-size limit (`ulimit -f unlimited`", "step-00000002", "--resume")
    assert "free space" not in error, error
    assert [m["step"] for m in metric_steps(out)] == [1, 2]
    assert train(config, "--resume", "--steps", "4").returncode == 0
    assert [m["step"] for m in metric_steps(out)] == [1, 2, 3, 4]


@pytest.mark.parametrize(("raised", "reason", "fix"), [
    # torch's zip writer reports a short write only so; safetensors puts the errno in its message
    (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 798720 vs 798612"),
     "the writer stopped part-way", "raise the disk quota or the file-size limit"),
    (RuntimeError("Error while serializing: I/O error: Disk quota exceeded (os error 122)"),
     "Disk quota exceeded", "free space within your disk quota"),
    (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "Disk quota exceeded", "free space within your disk quota"),
])
def test_a_write_cut_short_by_a_quota_is_the_disks_problem_with_its_fix(tmp_path, raised, reason, fix):
    """Not a backend failure without a fix (the quota leaves statvfs's free space untouched)."""
    def engine(model_dir: str, state_dir: str) -> None:
        raise RuntimeError("hook save_checkpoint failed") from raised

    with pytest.raises(ckpt.CheckpointWriteError) as info:
        ckpt.write_checkpoint(tmp_path, 3, {"step": 3}, engine)
    assert info.value.disk_problem and reason in info.value.reason and fix in (info.value.fix or "")
    assert list(tmp_path.iterdir()) == []


def test_disk_full_while_writing_metrics_is_one_error(tiny_model_dir, tmp_path, monkeypatch):
    """The fault injected at the write itself (any machine): open() of metrics.jsonl fails ENOSPC."""
    import builtins

    import polyrl.strict_json as writer_module  # every JSON-lines file of a run is written there

    real_open = builtins.open

    def full_disk_open(file, mode="r", *args, **kwargs):
        if str(file).endswith("metrics.jsonl") and "a" in mode:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(writer_module, "open", full_disk_open, raising=False)
    config = RunConfig.from_toml(write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=3))
    trainer = Trainer(config)
    with pytest.raises(OutputWriteError, match="No space left on device.*Fix: free space"):
        trainer.run(progress=False)
    assert not trainer.lock.held  # released on the way out


def test_read_only_output_dir_is_one_error(tiny_model_dir, tmp_path, capfd):
    with tmpfs(tmp_path / "ro", size_kib=1024) as disk:
        (disk / "run").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        result = train_here(capfd, write_config(tmp_path, tiny_model_dir, disk / "run", steps=2))
        one_clear_error(result, "Read-only file system", "train.output_dir")


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_lock_path_that_is_no_file_is_one_error_naming_it(tiny_model_dir, tmp_path, capfd, kind):
    """A folder where ``.polyrl.lock`` goes was "cannot write to output_dir ...: Is a directory. Fix:
    free space or make it writable": neither the entry nor the cure; a FIFO there took the lock."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".polyrl.lock").mkdir() if kind == "folder" else os.mkfifo(out / ".polyrl.lock")
    result = train_here(capfd, write_config(tmp_path, tiny_model_dir, out, steps=1))
    one_clear_error(result, "train.output_dir", f"holds .polyrl.lock, {'a folder' if kind == 'folder' else 'not a regular file'}",
                    f"Fix: remove '{out / '.polyrl.lock'}'")
    assert sorted(p.name for p in out.iterdir()) == [".polyrl.lock"]  # nothing else made or moved


# --- strict JSON ----------------------------------------------------------------------------------


def test_every_output_file_is_strict_json_with_null_for_nan(tmp_path):
    from polyrl import strict_json

    text = strict_json.dumps({"loss": float("nan"), "x": [float("inf"), 1.5], "n": __import__("numpy").float32(2)})
    assert strict_loads(text) == {"loss": None, "x": [None, 1.5], "n": 2.0}


def test_json_lines_are_read_back_whole_whatever_a_record_holds(tmp_path):
    """Records are split at newlines only (a completion may hold U+2028 or U+0085, which
    ``splitlines`` also breaks at), and a line nested past the parser's depth is a damaged line,
    not a RecursionError that stops a resume."""
    from polyrl import strict_json

    path = tmp_path / "completions.jsonl"
    records = [{"text": "one\u2028two\x85three"}, {"text": "plain"}]
    strict_json.append_lines(path, records)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
    pairs = strict_json.read_lines(path)
    assert [record for _, record in pairs] == [*records, None]


def test_a_skipped_step_writes_null_not_nan(tmp_path, monkeypatch):
    """DAPO drops every group of equal rewards: loss is NaN in memory, null in every file."""
    from toy_dist import activate, install_toy_dists

    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "broken,badreg")
    deactivate = activate(install_toy_dists(tmp_path / "site"))
    try:
        (tmp_path / "const.py").write_text("def const(prompts, completions, **kw):\n    return [1.0] * len(completions)\n")
        config = RunConfig.from_dict({
            "model": {"path": "toy-model"}, "backends": {"train": "toy"},
            "generation": {"group_size": 4, "max_new_tokens": 8},
            "algorithm": {"name": "dapo", "overlong_buffer": None},
            "data": {"task": "arithmetic", "options": {"count": 16}},
            "rewards": [{"function": f"{tmp_path / 'const.py'}:const"}],
            "train": {"steps": 2, "prompts_per_step": 2, "output_dir": str(tmp_path / "run")},
        })
        Trainer(config).run(progress=False)
    finally:
        deactivate()
    lines = metric_steps(tmp_path / "run")
    assert [m["loss"] for m in lines] == [None, None] and all(m["skipped"] for m in lines)
    newest = ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints")
    for name in (ckpt.STATE_FILE, ckpt.MANIFEST, ckpt.MARKER):
        strict_loads((newest / name).read_text())


def test_changed_lr_at_resume_reaches_the_mlx_optimizer_too(tiny_model_dir, tmp_path):
    """MLX keeps the learning rate inside its optimizer state: the restored state must not win."""
    from polyrl.registry import get_registry

    status = get_registry().status("mlx")
    if not status.available:
        pytest.skip(f"mlx not usable here: {status.reason}")
    out = tmp_path / "run"
    first = Trainer(RunConfig.from_toml(write_config(tmp_path, tiny_model_dir, out, backend="mlx", steps=2)))
    first.run(progress=False)
    resumed = Trainer(RunConfig.from_toml(write_config(tmp_path, tiny_model_dir, out, backend="mlx",
                                                       lr="2e-3", steps=3)))
    assert resumed.resume() and resumed.step == 2
    optimizer = resumed.train_engine.raw.optimizer
    assert float(optimizer.learning_rate) == pytest.approx(2e-3)
    assert int(optimizer.state["step"]) == 2  # the Adam state itself was restored
    resumed.lock.release()


@pytest.mark.parametrize(("target", "words"), [
    ("missing", ["does not exist", "the newest checkpoint there is", "step-00000008"]),
    ("config", ["is a file, not a checkpoint folder"]),
    ("checkpoints", ["is a folder of checkpoints, not one checkpoint", "step-00000008"]),
    ("run", ["is a folder of checkpoints, not one checkpoint", "step-00000008"]),
    ("empty", ["is not a polyrl checkpoint"]),
])
def test_a_resume_path_that_is_not_a_checkpoint_says_so_before_anything_loads(clean_run, tmp_path, tiny_model_dir,
                                                                            target, words, capfd):
    """A mistyped or wrong path used to read as a damaged checkpoint ("no valid COMPLETE marker"),
    with a fix inviting the user to delete checkpoints, and only after the engines had loaded."""
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "out", steps=8)
    (tmp_path / "empty").mkdir()
    path = {"missing": clean_run / "checkpoints" / "step-00000099", "config": config,
            "checkpoints": clean_run / "checkpoints", "run": clean_run, "empty": tmp_path / "empty"}[target]
    result = train_here(capfd, config, "--resume", str(path))
    error = one_clear_error(result, "--resume", *words)
    assert "delete" not in error
    assert not (tmp_path / "out").exists()  # refused before the run started


# --- earlier runs set aside in previous/ (train.keep_previous_runs) ---------------------------------


def _trainer_in(tmp_path: Path, tiny_model_dir: str, out: Path, **train_settings) -> Trainer:
    return Trainer(RunConfig.from_toml(write_config(tmp_path, tiny_model_dir, out, steps=1, **train_settings)))


def _leave_a_finished_run(out: Path, tag: str) -> None:
    """What a finished run leaves in ``out`` (checkpoint, final model, metrics), marked ``tag``."""
    for folder in (out / "checkpoints" / "step-00000001" / "model", out / "model"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "weights").write_text(tag)
        (folder / "config.json").write_text("{}")  # an exported model is a HF model folder
    (out / "metrics.jsonl").write_text(f'{{"step": 1, "tag": "{tag}"}}\n')


def _set_aside(out: Path) -> list[str]:
    """The tags of the runs in ``out/previous``, oldest folder first (by name)."""
    from polyrl.previous_runs import earlier_runs

    return [(p / "model" / "weights").read_text() for p in earlier_runs(out / "previous")]


def test_fresh_starts_keep_only_the_newest_previous_runs(tiny_model_dir, tmp_path):
    from structlog.testing import capture_logs

    out = tmp_path / "run"
    trainer = _trainer_in(tmp_path, tiny_model_dir, out, keep_previous_runs=2)
    folders = []
    with capture_logs() as logs:
        for tag in ("first", "second", "third"):  # three fresh starts, likely within one second
            _leave_a_finished_run(out, tag)
            trainer._start_over()
            folders.append(sorted(p.name for p in (out / "previous").iterdir()))
    assert _set_aside(out) == ["second", "third"]
    assert [len(names) for names in folders] == [1, 2, 2]  # one folder each, none merged
    first = folders[0][0]  # the folder that held "first"
    assert first not in folders[2]
    deleted = [e for e in logs if e["event"].startswith("older runs in previous/ deleted")]
    assert len(deleted) == 1 and deleted[0]["log_level"] == "warning"
    assert deleted[0]["deleted"] == [str(out / "previous" / first)]
    assert "train.keep_previous_runs" in deleted[0]["fix"] and "keep more" in deleted[0]["fix"]
    assert trainer.run(progress=False)["steps"] == 1  # the current run's own files are untouched
    assert ckpt.latest_checkpoint(out / "checkpoints").name == "step-00000001"
    assert _set_aside(out) == ["second", "third"]


def test_starts_within_one_second_get_their_own_folder(tmp_path):
    from polyrl.previous_runs import earlier_runs, new_aside_dir

    made = [new_aside_dir(tmp_path, now=1_700_000_000) for _ in range(11)]
    assert [p.name for p in made] == ["20231114T221320Z"] + [f"20231114T221320Z-{n}" for n in range(2, 12)]
    assert earlier_runs(tmp_path) == made  # oldest first: -10 after -9
    later = new_aside_dir(tmp_path, now=1_700_000_001)
    assert earlier_runs(tmp_path)[-1] == later


def test_keep_previous_runs_0_deletes_the_earlier_run_once_this_run_saved_a_trained_step(tiny_model_dir, tmp_path):
    from structlog.testing import capture_logs

    out = tmp_path / "run"
    (out / "previous" / "20200101T000000Z" / "model").mkdir(parents=True)  # set aside by an older setting
    (out / "previous" / "20200101T000000Z" / "model" / "weights").write_text("older")
    _leave_a_finished_run(out, "earlier")
    trainer = _trainer_in(tmp_path, tiny_model_dir, out, keep_previous_runs=0)
    with capture_logs() as logs:
        assert trainer.run(progress=False)["steps"] == 1
    assert list((out / "previous").iterdir()) == []
    assert [m["step"] for m in metric_steps(out)] == [1] and "tag" not in metric_steps(out)[0]
    assert (out / "model" / "model.safetensors").exists()  # this run's own model
    started = [e for e in logs if "moved aside and is deleted" in e["event"]]
    assert len(started) == 1 and "train.keep_previous_runs = 0" in started[0]["event"]
    assert "train.keep_previous_runs >= 1" in started[0]["fix"]
    deleted = [e for e in logs if "set aside at the start was deleted" in e["event"]]
    assert len(deleted) == 1 and deleted[0]["deleted"] == started[0]["moved_to"]
    saved = [e for e in logs if e["event"] == "checkpoint saved"]
    assert [e["step"] for e in saved] == [1]  # the run it replaced waited for this run's trained checkpoint
    assert logs.index(started[0]) < logs.index(saved[0]) < logs.index(deleted[0])


def _failing_start(tmp_path: Path, tiny_model_dir: str, out: Path, keep: int) -> subprocess.CompletedProcess:
    """A fresh start whose reward returns one score for eight completions: it stops on step 0."""
    (tmp_path / "bad.py").write_text("def wrong(prompts):\n    return [1.0]\n")
    config = write_config(tmp_path, tiny_model_dir, out, steps=1, keep_previous_runs=keep)
    return train(config, "--set", f'rewards.0.function="{tmp_path / "bad.py"}:wrong"')


@pytest.mark.parametrize("keep", [0, 1])
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_starts_that_fail_before_training_never_cost_a_finished_run(tiny_model_dir, tmp_path, keep):
    out = tmp_path / "run"
    assert train(write_config(tmp_path, tiny_model_dir, out, steps=1)).returncode == 0
    finished = final_weights(out)
    for _ in range(2):  # each leaves a step-0 checkpoint; counted as a run, the second pushed the first out
        one_clear_error(_failing_start(tmp_path, tiny_model_dir, out, keep), "returned 1 scores")
    from polyrl.previous_runs import earlier_runs

    kept = earlier_runs(out / "previous")
    assert len(kept) == 1
    assert_same_weights(finished, final_weights(kept[0]))
    assert [m["step"] for m in metric_steps(kept[0])] == [1] and (kept[0] / "model" / "model.safetensors").exists()


def test_files_polyrl_did_not_write_are_never_moved_aside(tiny_model_dir, tmp_path, capfd):
    out = tmp_path / "run"
    (out / "model").mkdir(parents=True)
    (out / "model" / "notes.txt").write_text("mine")
    (out / "checkpoints" / "best").mkdir(parents=True)
    result = train_here(capfd, write_config(tmp_path, tiny_model_dir, out, steps=1, keep_previous_runs=0))
    one_clear_error(result, str(out / "checkpoints" / "best"), str(out / "model"), "did not write",
                    "Fix: move those files out")
    assert (out / "model" / "notes.txt").read_text() == "mine"
    assert (out / "checkpoints" / "best").is_dir() and not (out / "previous").exists()


@pytest.mark.slow
def test_a_fresh_start_does_not_move_aside_the_model_it_trains(tiny_model_dir, tmp_path):
    import shutil

    out = tmp_path / "run"
    _leave_a_finished_run(out, "earlier")
    shutil.rmtree(out / "model")
    shutil.copytree(tiny_model_dir, out / "model")  # model.path points into the earlier run's model/
    config = write_config(tmp_path, str(out / "model"), out, steps=1)
    one_clear_error(train(config), "is inside the earlier run", "Fix: copy that model out")
    assert (out / "model" / "config.json").exists() and not (out / "previous").exists()


def test_an_empty_output_dir_is_one_error_line(tiny_model_dir, tmp_path, capfd):
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=1, output_dir='" "')
    one_clear_error(train_here(capfd, config), "train.output_dir: must name a folder", "Fix:")


def test_only_our_timestamp_folders_in_previous_are_ever_deleted(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    previous = out / "previous"
    (previous / "my-best-run").mkdir(parents=True)
    (previous / "my-best-run" / "weights").write_text("mine")
    (previous / "20200101T000000Z.bak").mkdir()
    (previous / "notes.txt").write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "weights").write_text("mine")
    (previous / "20200101T000001Z").symlink_to(elsewhere, target_is_directory=True)
    _leave_a_finished_run(out, "earlier")
    trainer = _trainer_in(tmp_path, tiny_model_dir, out, keep_previous_runs=0)
    assert trainer.run(progress=False)["steps"] == 1
    assert sorted(p.name for p in previous.iterdir()) == [
        "20200101T000000Z.bak", "20200101T000001Z", "my-best-run", "notes.txt"]
    assert (previous / "my-best-run" / "weights").read_text() == "mine"
    assert (elsewhere / "weights").read_text() == "mine"


def test_a_previous_run_that_cannot_be_deleted_is_a_warning_not_a_crash(tiny_model_dir, tmp_path, monkeypatch):
    import shutil

    from structlog.testing import capture_logs

    out = tmp_path / "run"
    stuck = out / "previous" / "20200101T000000Z"
    (stuck / "model").mkdir(parents=True)
    (stuck / "model" / "weights").write_text("stuck")
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path) == stuck:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    _leave_a_finished_run(out, "earlier")
    trainer = _trainer_in(tmp_path, tiny_model_dir, out)  # the default keeps 1
    with capture_logs() as logs:
        assert trainer.run(progress=False)["steps"] == 1
    assert _set_aside(out) == ["stuck", "earlier"]  # kept, and the run went on
    failed = [e for e in logs if "could not be deleted" in e["event"]]
    assert len(failed) == 1 and failed[0]["path"] == str(stuck) and "Permission denied" in failed[0]["error"]


@pytest.mark.parametrize(("value", "words"), [
    ("-1", ["must be an integer >= 0, got -1"]),
    ("1.5", ["expected int, got float 1.5", "whole number"]),
    ('"2"', ["expected int, got str '2'"]),
    ("true", ["expected int, got bool True"]),
])
def test_a_bad_keep_previous_runs_is_one_error_line(tiny_model_dir, tmp_path, value, words):
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=1, keep_previous_runs=value)
    with pytest.raises(ConfigError) as err:
        RunConfig.from_toml(config)
    assert err.value.field == "train.keep_previous_runs"
    for text in words:
        assert text in str(err.value), str(err.value)
    assert "Fix:" in str(err.value)


def test_a_negative_keep_previous_runs_stops_the_cli_before_anything_runs(tiny_model_dir, tmp_path, capfd):
    result = train_here(capfd, write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=1, keep_previous_runs=-1))
    one_clear_error(result, "train.keep_previous_runs", "must be an integer >= 0", "Fix:")
    assert not (tmp_path / "run").exists()


def test_the_model_and_checkpoints_get_the_umask_modes_not_owner_only(tiny_model_dir, tmp_path, capfd):
    out = tmp_path / "run"
    config = write_config(tmp_path, tiny_model_dir, out, steps=1)
    before = os.umask(0o027)  # the run's (in this process): files 0640, folders 0750 (safetensors alone wrote 0600)
    try:
        assert train_here(capfd, config).returncode == 0
    finally:
        os.umask(before)
    written = [p for folder in (out / "model", out / "checkpoints") for p in [folder, *folder.rglob("*")]]
    assert any(p.name == "model.safetensors" for p in written)
    modes = {p.relative_to(out).as_posix(): oct(p.stat().st_mode & 0o777) for p in written}
    wrong = {name: mode for name, mode in modes.items()
             if mode != oct(0o750 if (out / name).is_dir() else 0o640)}
    assert not wrong, wrong


def _digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_weights_only_resume_with_nothing_left_to_train_leaves_the_checkpoint_as_it_was(
        tiny_model_dir, tmp_path, clean_run, capfd):
    """It re-saved the same step: a fresh optimizer went into the run's last checkpoint, and a later
    exact --resume from it went off the run's numbers, silently."""
    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=8)
    before = _digest(out / "checkpoints" / "step-00000008")
    resumed = train_here(capfd, config, "--resume-weights-only")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "nothing is left to train" in resumed.stderr
    assert _digest(out / "checkpoints" / "step-00000008") == before
    assert_same_weights(final_weights(clean_run), final_weights(out))


@pytest.mark.parametrize("new_copy_complete", [True, False])
def test_a_same_step_re_save_killed_between_its_renames_is_put_back_at_resume(
        tiny_model_dir, tmp_path, clean_run, new_copy_complete, capfd):
    """A kill between ``step-N -> .old-step-N`` and ``.tmp-step-N -> step-N`` left no ``step-N``:
    the next --resume started over at step 0 though both copies were whole."""
    import shutil

    config, out = crash_config(tmp_path, tiny_model_dir, clean_run)
    _copy_run(clean_run, out, upto=8)
    root = out / "checkpoints"
    shutil.copytree(root / "step-00000008", root / ".tmp-step-00000008")
    if not new_copy_complete:  # killed before the new copy's marker was written
        (root / ".tmp-step-00000008" / ckpt.MARKER).unlink()
    (root / "step-00000008").rename(root / ".old-step-00000008")
    resumed = train_here(capfd, config, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "re-save was cut short: put back" in resumed.stderr
    assert "starting from the first step" not in resumed.stderr and "nothing is left to train" in resumed.stderr
    assert ckpt.latest_checkpoint(root).name == "step-00000008"
    assert not any(root.glob(".old-step-*"))
    assert [m["step"] for m in metric_steps(out)] == list(range(1, 9))
    assert_same_weights(final_weights(clean_run), final_weights(out))


def test_json_lines_reach_the_disk_before_the_checkpoint_after_them(tmp_path, monkeypatch):
    """metrics.jsonl was flushed, not fsynced, while the checkpoint after it is: after a power loss
    the file could lack steps the checkpoint holds, and the resume's rewind would not notice."""
    from polyrl import strict_json

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    strict_json.append_lines(tmp_path / "metrics.jsonl", [{"step": 0, "loss": 1.0}])
    assert len(synced) == 1
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0, "loss": 1.0}\n'
