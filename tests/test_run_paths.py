"""A run's relative paths name files from the folder it started in, wherever the working folder goes.

Plugin code in the trainer's process (a reward, a tool, an environment) may ``os.chdir`` at any
time, and one abandoned past its time limit can do it after its call was given up: the run's
files must stay where a relative ``train.output_dir`` named them at the start.
"""

from __future__ import annotations

import json
import os

import pytest

from polyrl.config import RunConfig


def config(model: str, **train) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": model}, "generation": {"group_size": 2, "max_new_tokens": 4},
        "data": {"task": "arithmetic", "options": {"count": 16}},
        "rewards": [{"name": "length_penalty", "options": {"target": 2, "unit": "chars"}}],
        "train": {"steps": 2, "prompts_per_step": 2, "threads": 1, "checkpoint_every": 1, "output_dir": "out",
                  **train}})


def test_a_run_writes_where_it_started_after_the_working_folder_moved(tiny_model_dir, tmp_path, monkeypatch):
    from polyrl.trainer import Trainer

    monkeypatch.chdir(tmp_path)
    trainer = Trainer(config(tiny_model_dir))
    (tmp_path / "elsewhere").mkdir()
    os.chdir(tmp_path / "elsewhere")  # as plugin code left it (monkeypatch goes back after the test)
    summary = trainer.run(progress=False)
    out = tmp_path / "out"
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (out / "checkpoints" / "step-00000002" / "COMPLETE").exists()
    assert (out / "model").is_dir()
    assert not (tmp_path / "elsewhere" / "out").exists()
    assert summary["output_dir"] == str(out)  # said as the absolute path it is


def test_only_local_start_inputs_are_anchored(tmp_path, monkeypatch):
    """A relative model folder becomes absolute; a Hub id or an alias no folder here holds is left
    for the registry to resolve, and an absolute path is left as it is."""
    from polyrl import run_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "ref").mkdir(parents=True)
    given = RunConfig.from_dict({"model": {"path": "models/ref", "reference_path": "org/not-here"},
                                 "data": {"task": "arithmetic"}, "algorithm": {"beta": 0.04},
                                 "rewards": [{"name": "numeric_match"}]})
    anchored = run_paths.with_start_inputs(given, run_paths.start_folder())
    assert anchored.model.path == str(tmp_path / "models" / "ref")
    assert anchored.model.reference_path == "org/not-here"
    assert run_paths.with_output_dir(given, str(tmp_path)).train.output_dir == str(tmp_path / "runs" / "polyrl")
    assert run_paths.anchored("/abs/x", str(tmp_path)) == "/abs/x"

    assert run_paths.anchored("out", None) == "out"  # no start folder (deleted): left for its own error


def test_a_checkpoint_naming_its_output_dir_relatively_resumes_without_a_changed_config_warning(tmp_path, monkeypatch):
    """A checkpoint written before output_dir was made absolute stored it as given: the same folder
    named absolutely now is no change; another folder still is (applied, and said)."""
    from polyrl import resume_config, run_paths

    monkeypatch.chdir(tmp_path)
    given = RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"},
                                 "rewards": [{"name": "numeric_match"}], "train": {"output_dir": "out"}})
    saved = resume_config.snapshot(given)
    assert resume_config.check(saved, run_paths.with_output_dir(given, str(tmp_path)), weights_only=False) == []
    moved = run_paths.with_output_dir(given, str(tmp_path / "elsewhere"))
    [said] = resume_config.check(saved, moved, weights_only=False)
    assert "train.output_dir" in said


def test_a_trl_run_named_by_its_relative_output_dir_still_names_its_model_artifact_by_run_id(tmp_path, monkeypatch):
    """transformers names a run by its output_dir as given ("run"); the trainer holds it absolute:
    still the default name, so the W&B model artifact is ``model-<run id>`` as WandbCallback names it."""
    from types import SimpleNamespace

    from polyrl.tracking.spec import TrackerContext, TrlRun
    from polyrl.tracking.wandb import model_artifact_name

    monkeypatch.chdir(tmp_path)
    run = SimpleNamespace(name="run", id="abc123")
    context = TrackerContext(tmp_path / "run", "run", "p", {}, trl=True, trl_run=TrlRun(run_name="run"))
    assert model_artifact_name(run, context) == "model-abc123"
    named = TrackerContext(tmp_path / "run", "mine", "p", {}, trl=True, trl_run=TrlRun(run_name="mine"))
    assert model_artifact_name(SimpleNamespace(name="mine", id="abc123"), named) == "model-mine"


def test_ranks_started_in_other_folders_agree_on_a_relative_output_dir(tiny_model_dir, tmp_path, monkeypatch):
    """The run anchors train.output_dir at its start folder, but ranks (nodes of one launch) may start
    in other folders: they compare the config as written, so the same relative output_dir agrees,
    and another one is still named."""
    pytest.importorskip("polyrl_torch")
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    def config_print(folder, output_dir="runs/x"):
        (tmp_path / folder).mkdir(exist_ok=True)
        monkeypatch.chdir(tmp_path / folder)
        config = RunConfig.from_dict({
            "model": {"path": tiny_model_dir}, "rewards": [{"name": "numeric_match"}], "backends": {"train": "torch"},
            "data": {"rows": [{"prompt": f"{i} + 1 =", "answer": str(i + 1)} for i in range(4)]},
            "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": output_dir}})
        trainer = Trainer(config, check_only=True)
        assert trainer.config.train.output_dir == str(tmp_path / folder / output_dir)
        return trainer._fingerprint()["config"]

    assert config_print("node0") == config_print("node1")
    assert config_print("node0") != config_print("node1", output_dir="runs/y")


def test_a_trl_trainers_own_writes_stay_with_its_run_after_the_working_folder_moved(tiny_model_dir, tmp_path,
                                                                                     monkeypatch):
    """polyrl.trl.GRPOTrainer's own writes (save_model, save_state) named the run's folder by TRL's
    relative output_dir when called, while the run inside wrote its files from its start: code
    that moved the working folder (here a callback; a reward's helper thread, or one abandoned
    past its time limit, alike) sent them elsewhere, or save_model found no trained model."""
    pytest.importorskip("polyrl_torch")
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from trl_util import grpo_args, prompts_dataset, short

    from polyrl.trl import GRPOTrainer

    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()

    class Wander(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            os.chdir(tmp_path / "elsewhere")

    trainer = GRPOTrainer(model=tiny_model_dir, reward_funcs=[short], args=grpo_args(tmp_path, output_dir="run"),
                          train_dataset=prompts_dataset(), callbacks=[Wander()])
    trainer.train()
    assert os.getcwd() == str(tmp_path / "elsewhere")  # the callback's move stands: it is the script's own code
    trainer.save_model()
    trainer.save_state()
    run = tmp_path / "run"
    assert (run / "trainer_state.json").exists() and (run / "model.safetensors").exists()
    assert not (tmp_path / "elsewhere" / "run").exists()
