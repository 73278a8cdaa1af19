"""polyrl.trl.GRPOTrainer's save_metrics()/save_state() when the output_dir holds another run's
or another trainer's results: nothing of theirs is overwritten or merged into, nothing lost."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("polyrl_torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from polyrl.run_lock import LOCK_FILE, OutputDirBusy  # noqa: E402
from polyrl.trl import GRPOTrainer  # noqa: E402


def _trainer(model: str, tmp_path: Path, max_steps: int = 1) -> GRPOTrainer:
    args = trl.GRPOConfig(output_dir=str(tmp_path / "run"), max_steps=max_steps, num_generations=2,
                          per_device_train_batch_size=4, max_completion_length=6, use_cpu=True, report_to="none",
                          disable_tqdm=True, bf16=False)
    rows = [{"prompt": f"What is {i} + 1?"} for i in range(4)]
    return GRPOTrainer(model=model, reward_funcs=[_short], args=args, train_dataset=datasets.Dataset.from_list(rows))


def _short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def _read(path: Path) -> object:
    return json.loads(path.read_text())


def test_a_baseline_saved_before_train_leaves_the_earlier_runs_results_whole(tiny_model_dir, tmp_path):
    """An earlier run's results are in the output_dir; a new trainer saves a baseline evaluation
    before its train(). transformers' save_metrics (which polyrl's followed) overwrote the earlier
    run's eval_results.json and merged into its all_results.json, and the fresh start then set
    those aside as the earlier run's. The earlier run's files are moved aside whole first, and
    join that run in previous/<time>/ when the fresh start sets its model aside."""
    run = tmp_path / "run"
    first = _trainer(tiny_model_dir, tmp_path)
    first.train()
    first.save_metrics("eval", {"eval_loss": 1.0})
    first.save_metrics("train", {"train_loss": 0.5})
    second = _trainer(tiny_model_dir, tmp_path)
    second.save_metrics("eval", {"eval_loss": 9.0, "baseline": 1.0})  # before its own train()
    assert _read(run / "eval_results.json") == {"eval_loss": 9.0, "baseline": 1.0}  # as transformers: right there
    assert _read(run / "all_results.json") == {"eval_loss": 9.0, "baseline": 1.0}  # old code: train_loss merged in
    second.train()
    (aside,) = [p for p in (run / "previous").iterdir()]  # the earlier run, whole: no results-<time>/ beside it
    assert (aside / "model").is_dir()
    assert _read(aside / "eval_results.json") == {"eval_loss": 1.0}  # old code: the baseline, A's overwritten
    assert _read(aside / "all_results.json") == {"eval_loss": 1.0, "train_loss": 0.5}
    second.save_metrics("train", {"train_loss": 0.25})
    assert _read(run / "all_results.json") == {"eval_loss": 9.0, "baseline": 1.0, "train_loss": 0.25}


def test_a_never_trained_trainer_saving_beside_another_trainers_run_mixes_nothing(tiny_model_dir, tmp_path):
    """Two trainers, one output_dir: A has trained there, B has not. B's save_metrics() merged into
    A's all_results.json and B's save_state() replaced A's trainer_state.json, and A's later saves
    merged into B's. Each save moves what is not its trainer's aside whole (previous/results-<time>/)
    and A's run keeps all of its own results; B's train() then sets A's run aside with them and
    keeps B's own."""
    run = tmp_path / "run"
    first = _trainer(tiny_model_dir, tmp_path)
    first.train()
    first.save_metrics("train", {"train_loss": 1.0, "only_a": 7.0})
    first.save_state()
    second = _trainer(tiny_model_dir, tmp_path)
    second.save_metrics("eval", {"eval_loss": 3.0})
    second.save_state()
    # old code: {"train_loss": 1.0, "only_a": 7.0, "eval_loss": 3.0}
    assert _read(run / "all_results.json") == {"eval_loss": 3.0}
    first.save_metrics("test", {"test_loss": 2.0})
    assert _read(run / "all_results.json") == {"train_loss": 1.0, "only_a": 7.0, "test_loss": 2.0}
    assert _read(run / "train_results.json") == {"train_loss": 1.0, "only_a": 7.0}
    assert not (run / "eval_results.json").exists()
    assert _read(run / "trainer_state.json")["global_step"] == first.state.global_step == 1
    kept = [_read(p / "all_results.json") for p in sorted((run / "previous").glob("results-*"))]
    assert kept == [{"eval_loss": 3.0}]  # B's, whole (A's, back in the output_dir, not copied aside too)
    second.train()
    (aside,) = [p for p in (run / "previous").iterdir() if not p.name.startswith("results-")]
    assert _read(aside / "all_results.json") == {"train_loss": 1.0, "only_a": 7.0, "test_loss": 2.0}
    assert _read(aside / "test_results.json") == {"test_loss": 2.0}
    assert _read(run / "eval_results.json") == {"eval_loss": 3.0}  # B's own, back in its output_dir
    assert _read(run / "all_results.json") == {"eval_loss": 3.0}
    assert _read(run / "trainer_state.json")["global_step"] == 0
    # each trainer's files another's save moved into previous/results-<time>/ came back to the output_dir
    # with that trainer's next save or start: no copy of them stays there (old code: A's first results,
    # a stale copy beside A's run in previous/, and B's whole, each in a results-<time>/)
    assert not list((run / "previous").glob("results-*"))


def test_results_a_save_before_a_resumed_train_moved_aside_come_back_with_the_run(tiny_model_dir, tmp_path):
    """A trainer saves a baseline before train(resume_from_checkpoint=True) in the output_dir of
    the run it resumes: that run's results go into previous/results-<time>/ (not its own), and
    stayed there once the resume continued the run (a fresh start puts them back with their run).
    They come back now: what the baseline did not replace returns, all_results.json holds both,
    and only the file the baseline replaced stays aside, with the earlier all_results.json whose
    eval_loss it replaced."""
    run = tmp_path / "run"
    first = _trainer(tiny_model_dir, tmp_path)
    first.train()
    first.save_metrics("train", {"train_loss": 0.5, "only_a": 7.0})
    first.save_metrics("eval", {"eval_loss": 1.0})
    second = _trainer(tiny_model_dir, tmp_path, max_steps=2)
    second.save_metrics("eval", {"eval_loss": 9.0})
    assert not (run / "train_results.json").exists()  # set aside as another run's, for now
    second.train(resume_from_checkpoint=True)
    assert second.state.global_step == 2
    assert _read(run / "train_results.json") == {"train_loss": 0.5, "only_a": 7.0}  # old code: still aside
    assert _read(run / "eval_results.json") == {"eval_loss": 9.0}
    assert _read(run / "all_results.json") == {"train_loss": 0.5, "only_a": 7.0, "eval_loss": 9.0}
    (aside,) = (run / "previous").glob("results-*")
    assert sorted(p.name for p in aside.iterdir() if not p.name.startswith(".")) == \
        ["all_results.json", "eval_results.json"]
    assert _read(aside / "eval_results.json") == {"eval_loss": 1.0}
    second.save_metrics("test", {"test_loss": 2.0})  # the run's files are its own: nothing more moves
    assert _read(run / "all_results.json") == {"train_loss": 0.5, "only_a": 7.0, "eval_loss": 9.0, "test_loss": 2.0}
    assert len(list((run / "previous").glob("results-*"))) == 1


def test_a_save_into_the_output_dir_of_a_running_run_is_refused(tiny_model_dir, tmp_path):
    """A run of another process holds the output_dir (its lock): a save there replaced that run's
    files before anything said so. It is one error now, and nothing there is touched."""
    run = tmp_path / "run"
    trainer = _trainer(tiny_model_dir, tmp_path)
    (run / "all_results.json").write_text('{"theirs": 1.0}')
    fd = os.open(run / LOCK_FILE, os.O_RDWR | os.O_CREAT)  # another open file: another holder to flock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OutputDirBusy, match="in use by another trainer"):
            trainer.save_metrics("eval", {"eval_loss": 1.0})
        with pytest.raises(OutputDirBusy):
            trainer.save_state()
    finally:
        os.close(fd)
    assert _read(run / "all_results.json") == {"theirs": 1.0}  # old code: {"theirs": 1.0, "eval_loss": 1.0}
    assert not (run / "eval_results.json").exists() and not (run / "trainer_state.json").exists()


def test_only_the_main_process_saves_metrics_and_state(tiny_model_dir, tmp_path):
    """Under a launcher every rank runs the script's ``save_metrics()``/``save_state()``;
    transformers writes on the main process only. polyrl wrote on every rank, so rank 0's save,
    finding rank 1's copy there (not its own), moved it aside into previous/results-<time>/ as
    another run's results, with a warning, on every such save."""
    run = tmp_path / "run"
    other_rank = _trainer(tiny_model_dir, tmp_path)
    other_rank.accelerator.process_index, other_rank.accelerator.is_main_process = 1, False
    main = _trainer(tiny_model_dir, tmp_path)
    other_rank.save_metrics("eval", {"eval_loss": 1.0})
    other_rank.save_state()
    written = sorted(p.name for p in run.glob("*.json")) if run.is_dir() else []
    main.save_metrics("eval", {"eval_loss": 1.0})
    main.save_state()
    assert not (run / "previous").exists()  # old code: rank 1's files moved aside as another run's
    assert written == []  # as transformers: nothing of rank 1's
    assert _read(run / "all_results.json") == {"eval_loss": 1.0}
    assert (run / "trainer_state.json").is_file()
