"""The paths a user names a run and its resume by, through the real CLI (`polyrl train`, in this
process): ``~`` quoted (no shell expanded it), another working folder, a moved run folder, a
symbolic link. Each resumes the run in its own folder and says only what really changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoint_states import checkpoint_with_state, rewrite_state
from crash_util import train_here, write_config

from polyrl.config import RunConfig

STEP = "checkpoints/step-{:08d}"


def said_changes(stderr: str) -> list[str]:
    return [line.split("config changed at resume: ", 1)[1].split(" applied")[0]
            for line in stderr.splitlines() if "config changed at resume: " in line]


def steps_logged(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


def test_home_folder_paths_in_a_config_are_expanded_as_output_dir_is(home):
    """train.output_dir and data.path read "~" as the home folder, but model.path, the reference,
    the generator's file and a reward function's file did not: "~/models/m" was "neither a local
    path nor a known alias" and "~/rewards.py" "not found", though the README says "~" is the home
    folder for the config's paths."""
    config = RunConfig.from_dict({
        "model": {"path": "~/models/m", "reference_path": "~/models/ref"},
        "generation": {"max_model_path": "~/models/m.gguf"}, "algorithm": {"beta": 0.04},
        "data": {"task": "arithmetic"}, "rewards": [{"function": "~/rewards.py:score"}, {"function": "my_rewards:other"}],
        "train": {"output_dir": "~/runs/x"}})
    assert config.model.path == str(home / "models" / "m")
    assert config.model.reference_path == str(home / "models" / "ref")
    assert config.generation.max_model_path == str(home / "models" / "m.gguf")
    assert config.rewards[0].function == f"{home}/rewards.py:score"
    assert config.rewards[0].label == "score"
    assert config.rewards[1].function == "my_rewards:other"  # a module, not a path: as written
    assert config.train.output_dir == str(home / "runs" / "x")


@pytest.fixture()
def one_step(tiny_model_dir, tmp_path, monkeypatch, capfd) -> tuple[Path, Path]:
    """(the config, the project folder) of a finished 1-step run started in ``tmp_path/project``
    with the relative ``output_dir = "runs/x"`` (its reward file lives outside the project)."""
    project = tmp_path / "project"
    project.mkdir()
    config = write_config(project, tiny_model_dir, Path("runs/x"), reward_dir=tmp_path, steps=1)
    monkeypatch.chdir(project)
    result = train_here(capfd, config)
    assert result.returncode == 0, result.stderr[-3000:]
    return config, project


def test_a_quoted_home_resume_path_resumes(one_step, home, capfd):
    """`polyrl train CONFIG --resume "~/runs/x/checkpoints/step-1"` (quoted, or from a script, so no
    shell expanded it) was "error: --resume: ~/runs/x/... does not exist", while --output-dir and
    train.output_dir read the same "~" as the home folder."""
    config, project = one_step
    shutil.copytree(project / "runs" / "x", home / "runs" / "x")
    result = train_here(capfd, config, "--output-dir", "~/runs/x", "--resume", f"~/runs/x/{STEP.format(1)}",
                        "--steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (home / "runs" / "x" / STEP.format(2)).is_dir()
    assert steps_logged(home / "runs" / "x") == [1, 2]
    assert said_changes(result.stderr) == ["train.steps 1 -> 2"]  # the copy goes on in its own folder

    from polyrl.trainer import Trainer  # the Python API reads "~" as the CLI does

    api = RunConfig.from_toml(config, overrides=['train.output_dir="~/runs/x"', "train.steps=3"])
    trainer = Trainer(api, resume=f"~/runs/x/{STEP.format(2)}", check_only=True)
    trainer.lock.release()
    assert trainer._kept_from == home / "runs" / "x" / STEP.format(2)


def test_a_run_goes_on_in_its_folder_wherever_it_is_named_from_and_says_no_output_dir_change(one_step, tmp_path,
                                                                                              monkeypatch, capfd):
    """The checkpoint stores output_dir absolute (anchored where the run started): the project moved
    elsewhere (the same relative ``runs/x``) was resumed with "config changed at resume:
    train.output_dir '<old>' -> '<new>' applied", though the run went on in its own folder. Named
    through another working folder, a ``..`` or a symbolic link, it is the same folder too. A
    resume into another folder (a fork) is a change, and says so."""
    config, project = one_step
    moved = tmp_path / "moved"
    project.rename(moved)
    config = moved / config.name
    monkeypatch.chdir(moved)
    result = train_here(capfd, config, "--resume", "--steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert said_changes(result.stderr) == ["train.steps 1 -> 2"], result.stderr[-3000:]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "run").symlink_to(moved / "runs" / "x")
    monkeypatch.chdir(tmp_path / "elsewhere")
    for steps, given in ((3, "../moved/runs/../runs/x"), (4, "../links/run")):
        result = train_here(capfd, config, "--output-dir", given, "--resume", "--steps", str(steps))
        assert result.returncode == 0, result.stderr[-3000:]
        assert said_changes(result.stderr) == [f"train.steps {steps - 1} -> {steps}"], result.stderr[-3000:]
    assert steps_logged(moved / "runs" / "x") == [1, 2, 3, 4]

    result = train_here(capfd, config, "--output-dir", "fork", "--resume", str(moved / "runs" / "x" / STEP.format(4)),
                        "--steps", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    [where, steps_change] = said_changes(result.stderr)  # from the folder step 4 named (through the link)
    assert where == f"train.output_dir '{tmp_path / 'elsewhere' / '../links/run'}' -> '{tmp_path / 'elsewhere' / 'fork'}'"
    assert steps_change == "train.steps 4 -> 5"
    assert (tmp_path / "elsewhere" / "fork" / STEP.format(5)).is_dir()


def test_a_relative_stored_output_dir_is_the_folder_its_checkpoint_is_in(tmp_path, monkeypatch):
    """A checkpoint from before output_dir was anchored stores it as written ("run"): it was read
    from today's working folder, so a resume started in another folder logged the run's own folder
    as changed; a resume of it into another folder is still a change."""
    from structlog.testing import capture_logs

    from polyrl.resume_point import resume_point

    def config(output_dir: Path) -> RunConfig:
        return RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"},
                                    "rewards": [{"name": "numeric_match"}], "train": {"output_dir": str(output_dir)}})

    run = tmp_path / "project" / "run"
    found = checkpoint_with_state(run / "checkpoints", 2, config=config(run))
    state = json.loads((found / "trainer_state.json").read_text())
    state["config"]["train.output_dir"] = "run"
    rewrite_state(found, json.dumps(state))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    def said(output_dir: Path, path: Path | None) -> list[str]:
        with capture_logs() as logs:
            assert resume_point(config(output_dir), path, weights_only=False) is not None
        return [e["event"] for e in logs if "config changed at resume" in e["event"]]

    assert said(run, None) == []
    assert said(run, found) == []
    assert said(tmp_path / "fork", found) == [f"config changed at resume: train.output_dir 'run' -> '{tmp_path / 'fork'}'"]


def test_a_checkpoint_that_stored_home_paths_as_written_resumes_with_the_same_config(tmp_path, home):
    """A run with model.path = "~/models/m" (the backend expanded "~") stored the text in its
    checkpoint; the config now expands it at reading, so resuming with the same config was refused
    as "config changed at resume in a way that breaks exact resumption: model.path ...". A real
    change of those paths is still refused."""
    from polyrl.errors import ConfigError
    from polyrl.resume_point import resume_point

    def config(model: str) -> RunConfig:
        return RunConfig.from_dict({"model": {"path": model, "reference_path": "~/models/ref"},
                                    "generation": {"max_model_path": "~/models/m.gguf"}, "algorithm": {"beta": 0.04},
                                    "data": {"task": "arithmetic"}, "rewards": [{"function": "~/rewards.py:score"}],
                                    "train": {"output_dir": str(tmp_path / "run")}})

    found = checkpoint_with_state(tmp_path / "run" / "checkpoints", 2, config=config("~/models/m"))
    state = json.loads((found / "trainer_state.json").read_text())
    state["config"].update({"model.path": "~/models/m", "model.reference_path": "~/models/ref",
                            "generation.max_model_path": "~/models/m.gguf"})
    state["config"]["rewards"][0]["function"] = "~/rewards.py:score"
    rewrite_state(found, json.dumps(state))
    assert resume_point(config("~/models/m"), found, weights_only=False) is not None
    with pytest.raises(ConfigError, match="breaks exact resumption: model.path"):
        resume_point(config("~/models/other"), found, weights_only=False)


def _move_project(project: Path, to: Path, config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Moves ``project`` (and its config) to ``to``, edits the config's reward path to the new
    place, as a user would, and works from there; returns the moved config."""
    project.rename(to)
    config = to / config.name
    config.write_text(config.read_text().replace(str(project / "reward.py"), str(to / "reward.py")))
    monkeypatch.chdir(to)
    return config


def test_a_moved_project_whose_config_names_its_reward_file_at_the_new_place_resumes(tiny_model_dir, tmp_path,
                                                                                    monkeypatch, capfd):
    """A project moved to another folder, whose config names its reward file by absolute path, was
    refused at resume ("config changed at resume in a way that breaks exact resumption: rewards")
    even after the path was edited to the new place, the code the same. The code is compared by
    content: the move resumes and says so; other code at the new place is still refused."""
    project = tmp_path / "project"
    project.mkdir()
    config = write_config(project, tiny_model_dir, Path("runs/x"), steps=1)  # reward.py inside the project
    monkeypatch.chdir(project)
    assert train_here(capfd, config).returncode == 0
    moved = tmp_path / "moved"
    config = _move_project(project, moved, config, monkeypatch)
    result = train_here(capfd, config, "--resume", "--steps", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert said_changes(result.stderr) == [
        "train.steps 1 -> 2", f"rewards[0].function '{project}/reward.py:digits' -> '{moved}/reward.py:digits' "
        "(the same file moved: its code is compared by content)"], result.stderr[-3000:]
    assert steps_logged(moved / "runs" / "x") == [1, 2]

    (moved / "reward.py").write_text((moved / "reward.py").read_text() + "\nEDITED = True\n")
    elsewhere = tmp_path / "again"
    config = _move_project(moved, elsewhere, config, monkeypatch)
    result = train_here(capfd, config, "--resume", "--steps", "3")
    assert result.returncode != 0
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "the code of reward function(s) digits changed since" in line, result.stderr[-3000:]
    assert steps_logged(elsewhere / "runs" / "x") == [1, 2]


def test_launch_dry_run_prints_a_quoted_home_resume_path_expanded(one_step, home, capfd):
    """`polyrl launch CONFIG --resume "~/runs/x/checkpoints/step-1" --dry-run` printed
    `--resume '~/runs/x/...'` (the shell-quoted "~" no shell expands on paste), while the launch
    itself checked and resumed the home folder's checkpoint: the printed command is the one run."""
    pytest.importorskip("torch", reason="polyrl launch runs torchrun, which comes with torch")
    import shlex

    from polyrl.cli import main

    config, project = one_step
    shutil.copytree(project / "runs" / "x", home / "runs" / "x")
    capfd.readouterr()
    code = main(["launch", str(config), "--nproc-per-node", "1", "--resume", f"~/runs/x/{STEP.format(1)}",
                 "--output-dir", "~/runs/x", "--dry-run"])
    out = capfd.readouterr()
    assert code == 0, out.err
    argv = shlex.split(out.out.strip().splitlines()[-1])
    assert argv[argv.index("--resume") + 1] == str(home / "runs" / "x" / STEP.format(1))
    assert argv[argv.index("--output-dir") + 1] == str(home / "runs" / "x")
