"""A checkpoint's trainer_state.json (and its marker and manifest) as a user may have edited them:
each malformed field is one error naming the file and the field before any model loads, never a
traceback after minutes of loading and never a value silently read as another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from checkpoint_states import SAMPLER, checkpoint_with_state, rewrite_state, well_formed_state

from polyrl import checkpoint as ckpt
from polyrl import resume_config
from polyrl.errors import ConfigError
from polyrl.resume_config import snapshot

pytestmark = pytest.mark.faults


def _config(tiny_model_dir: str, tmp_path: Path):
    from polyrl.config import RunConfig

    return RunConfig.from_dict({"model": {"path": tiny_model_dir, "device": "cpu"}, "data": {"task": "arithmetic"},
                                "rewards": [{"name": "numeric_match"}],
                                "train": {"prompts_per_step": 2, "output_dir": str(tmp_path / "run")}})


def _edited(tmp_path: Path, **fields) -> Path:
    """A step-2 checkpoint of ``tmp_path/run`` whose state has ``fields`` replaced."""
    return checkpoint_with_state(tmp_path / "run" / "checkpoints", 2, json.dumps({**well_formed_state(2), **fields}))


def _refused(tiny_model_dir: str, tmp_path: Path, weights_only: bool = False) -> str:
    from polyrl.resume_point import resume_point

    with pytest.raises(ConfigError) as err:
        resume_point(_config(tiny_model_dir, tmp_path), None, weights_only)
    assert err.value.field == "--resume" and "Fix:" in str(err.value)
    return str(err.value)


def _accepted(tiny_model_dir: str, tmp_path: Path, weights_only: bool = False) -> dict:
    from polyrl.resume_point import resume_point

    point = resume_point(_config(tiny_model_dir, tmp_path), None, weights_only)
    assert point is not None
    return point[1]


def test_a_well_formed_state_resumes(tiny_model_dir, tmp_path):
    _edited(tmp_path, config=snapshot(_config(tiny_model_dir, tmp_path)))
    assert _accepted(tiny_model_dir, tmp_path)["step"] == 2


@pytest.mark.parametrize(("saved", "words"), [({}, "config is empty"), (None, "lacks config")])
def test_a_state_without_its_saved_config_is_refused_unless_weights_only(tiny_model_dir, tmp_path, saved, words):
    """An empty (or missing) saved config resumed with no check at all: a changed model, seed or
    reward went on as if it were the checkpointed run."""
    state = well_formed_state(2, _config(tiny_model_dir, tmp_path))
    if saved is None:
        del state["config"]
    else:
        state["config"] = saved
    found = checkpoint_with_state(tmp_path / "run" / "checkpoints", 2, json.dumps(state))
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: {words}: the run's saved settings" in text, text
    assert "--resume-weights-only" in text, text
    assert _accepted(tiny_model_dir, tmp_path, weights_only=True)["step"] == 2  # a new experiment: nothing to keep
    with pytest.raises(ConfigError, match="no saved config"):  # the comparison itself never skips it either
        resume_config.check(saved, _config(tiny_model_dir, tmp_path), weights_only=False)


def test_a_full_saved_config_still_refuses_a_changed_setting(tiny_model_dir, tmp_path):
    _edited(tmp_path, config={**snapshot(_config(tiny_model_dir, tmp_path)), "train.seed": 7})
    with pytest.raises(ConfigError, match="train.seed 7 -> 0"):
        _accepted(tiny_model_dir, tmp_path)


@pytest.mark.parametrize("weights_only", [False, True])
def test_a_state_that_is_not_an_object_is_refused(tiny_model_dir, tmp_path, weights_only):
    """Weights only: an AttributeError traceback (``state.get`` on a list)."""
    found = checkpoint_with_state(tmp_path / "run" / "checkpoints", 2, json.dumps([well_formed_state(2)]))
    text = _refused(tiny_model_dir, tmp_path, weights_only)
    assert f"{found / ckpt.STATE_FILE}: is list, not an object" in text, text


@pytest.mark.parametrize("step", ["2", 2.5, 2.0, -2, 10**30, True, None])
def test_a_step_that_is_not_the_checkpoints_own_integer_is_refused(tiny_model_dir, tmp_path, step):
    """"2" and 2.5 were read as step 2, 10**30 and -2 as themselves; null was a TypeError traceback."""
    found = _edited(tmp_path)
    state = well_formed_state(2)
    state["step"] = step
    rewrite_state(found, json.dumps(state))
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: step is {step!r}, not the checkpoint's step 2" in text, text


def test_a_bare_nan_is_not_json_and_is_refused(tiny_model_dir, tmp_path):
    """Python's parser reads a bare NaN (polyrl never writes one): the KL coefficient resumed as nan."""
    found = _edited(tmp_path)
    rewrite_state(found, json.dumps(well_formed_state(2)).replace('"kl_coef": 0.0', '"kl_coef": NaN'))
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: is not readable JSON" in text and "NaN" in text, text


@pytest.mark.parametrize(("sampler", "words"), [
    ([0, 0], "sampler is list, not an object"),
    ({**SAMPLER, "seed": "0"}, "sampler.seed is '0', not an integer >= 0"),
    ({**SAMPLER, "position": 4.5}, "sampler.position is 4.5, not an integer >= 0"),
    ({**SAMPLER, "position": 99}, "sampler.position is 99, past its size 16"),
    ({**SAMPLER, "shuffle": "false"}, "sampler.shuffle is 'false', not true or false"),
    ({k: v for k, v in SAMPLER.items() if k != "fingerprint"}, "sampler lacks fingerprint"),
])
def test_a_malformed_sampler_state_is_refused_even_weights_only(tiny_model_dir, tmp_path, sampler, words):
    """A string seed was a ValueError traceback after the models loaded; "false" shuffled."""
    found = _edited(tmp_path, sampler=sampler)
    for weights_only in (False, True):  # a weights-only resume continues the data position too
        text = _refused(tiny_model_dir, tmp_path, weights_only)
        assert f"{found / ckpt.STATE_FILE}: {words}" in text, text


@pytest.mark.parametrize(("key", "edit", "words"), [
    ("python_random", lambda s: None, "python_random is not an object"),
    ("python_random", lambda s: {**s, "internal": s["internal"][:-1]}, "python_random is refused by random.setstate"),
    ("python_random", lambda s: {**s, "internal": [1.5, *s["internal"][1:]]}, "python_random.internal is not a list"),
    ("numpy_random", lambda s: {**s, "keys": [1.5, *s["keys"][1:]]}, "numpy_random.keys is not a list of 624"),
    ("numpy_random", lambda s: {**s, "pos": 10**6}, "numpy_random.pos is 1000000, not an integer from 0 to 624"),
    ("numpy_random", lambda s: {**s, "name": "PCG64"}, "numpy_random is refused by numpy.random.set_state"),
])
def test_a_malformed_rng_state_is_refused_unless_weights_only(tiny_model_dir, tmp_path, key, edit, words):
    """null was skipped silently (the RNG not restored); a float key was truncated into another
    stream; a wrong length was a ValueError traceback after the models loaded."""
    found = _edited(tmp_path, **{key: edit(well_formed_state(2)[key])})
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: {words}" in text and "--resume-weights-only" in text, text
    assert _accepted(tiny_model_dir, tmp_path, weights_only=True)["step"] == 2  # it reads no RNG state


@pytest.mark.parametrize(("kl", "shown"), [('"0.1"', "'0.1'"), ("null", "None"), ("-1.0", "-1.0"), ("1e400", "inf")])
def test_a_malformed_kl_coefficient_is_refused(tiny_model_dir, tmp_path, kl, shown):
    """"0.1" was read as 0.1 and 1e400 as inf; null was a TypeError traceback after the models loaded."""
    found = _edited(tmp_path)
    rewrite_state(found, json.dumps(well_formed_state(2)).replace('"kl_coef": 0.0', f'"kl_coef": {kl}'))
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: kl_coef is {shown}, not a finite number >= 0" in text, text


@pytest.mark.parametrize("key", ["num_tokens", "updates_applied"])
@pytest.mark.parametrize(("tokens", "shown"), [("-3", "-3"), ("2.5", "2.5"), ('"12"', "'12'"), ("true", "True")])
def test_a_malformed_token_count_is_refused(tiny_model_dir, tmp_path, key, tokens, shown):
    """num_tokens (TRL's cumulative count, continued by a resume) and updates_applied (where the
    lr schedule is, for a skipped step's lr) are whole counts or nothing."""
    found = _edited(tmp_path, **{key: 0})
    rewrite_state(found, json.dumps({**well_formed_state(2), key: "X"}).replace('"X"', tokens))
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: {key} is {shown}, not an integer >= 0" in text, text


def test_a_saved_config_that_is_not_an_object_is_refused(tiny_model_dir, tmp_path):
    """It was an AttributeError traceback in the config comparison."""
    found = _edited(tmp_path, config=[["model.path", "x"]])
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: config is list, not an object" in text, text


def test_a_pending_rollouts_sampler_state_is_checked_too(tiny_model_dir, tmp_path):
    from polyrl.rollouts import Rollout
    from polyrl.types import Completion

    completions = [Completion(i // 2, [5, 6], [8], [-0.5]) for i in range(4)]
    pending = Rollout(2, [], completions, 2, 0.5, {**SAMPLER, "epoch": -1}).as_state()
    found = _edited(tmp_path, pending_rollout=json.loads(json.dumps(pending)))
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: pending_rollout.sampler_before.epoch is -1" in text, text


def test_a_state_larger_than_the_run_can_write_is_refused_unread(tiny_model_dir, tmp_path, monkeypatch):
    """A 2 GB file was parsed whole (minutes, and the memory of several copies); the bound is this
    run's largest pending rollout (lowered here, so the test writes kilobytes)."""
    from polyrl import checkpoint_state

    monkeypatch.setattr(checkpoint_state, "_BASE_BYTES", 0)
    monkeypatch.setattr(checkpoint_state, "_BYTES_PER_TOKEN", 1)
    limit = checkpoint_state.max_bytes(_config(tiny_model_dir, tmp_path))
    found = _edited(tmp_path)
    rewrite_state(found, json.dumps(well_formed_state(2)) + " " * limit)
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: is {limit + len(json.dumps(well_formed_state(2)))} bytes" in text, text


def test_a_state_nested_past_the_parsers_depth_does_not_verify(tiny_model_dir, tmp_path):
    """Listing the checkpoints was a RecursionError traceback."""
    found = _edited(tmp_path)
    rewrite_state(found, json.dumps(well_formed_state(2))[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert ckpt.verify(found) is not None and ckpt.complete_checkpoints(found.parent) == []
    assert "no checkpoint under" in _refused(tiny_model_dir, tmp_path)


@pytest.mark.parametrize("marker", ['{"step": "two"}', '{"step": 2.5}', '{"step": [2]}', '{"step": "2"}'])
def test_a_malformed_marker_is_an_incomplete_checkpoint(tmp_path, marker):
    """A step of "two" was a ValueError traceback from listing the checkpoints; "2" and 2.5 passed as 2."""
    found = checkpoint_with_state(tmp_path / "checkpoints", 2)
    (found / ckpt.MARKER).write_text(marker)
    assert not ckpt.is_complete(found) and ckpt.verify(found) is not None


@pytest.mark.parametrize("files", [["model/w.bin"], {"model/w.bin": {"sha256": "0"}},
                                   {"model/w.bin": {"sha256": "0", "size": "1"}}])
def test_a_malformed_manifest_does_not_verify(tmp_path, files):
    """A list was an AttributeError traceback; an entry without its size a KeyError; a size of
    "1" was reported as a truncated file."""
    found = checkpoint_with_state(tmp_path / "checkpoints", 2)
    (found / ckpt.MANIFEST).write_text(json.dumps({"format": 1, "files": files}))
    (found / ckpt.MARKER).write_text(json.dumps({"step": 2, "manifest_sha256": ckpt.sha256(found / ckpt.MANIFEST)}))
    problem = ckpt.verify(found)
    assert problem is not None and problem.startswith("MANIFEST.json is not"), problem


def test_trainer_with_resume_refuses_before_loading(tiny_model_dir, tmp_path):
    from polyrl.trainer import Trainer

    found = _edited(tmp_path, step="2")
    with pytest.raises(ConfigError, match="step is '2'") as err:
        Trainer(_config(tiny_model_dir, tmp_path), resume="")
    assert str(found / ckpt.STATE_FILE) in str(err.value)


@pytest.mark.parametrize("command", [["train"], ["launch", "--nproc-per-node", "1", "--dry-run"]])
def test_polyrl_train_and_launch_say_it_in_one_error_line(tiny_model_dir, tmp_path, command):
    found = _edited(tmp_path, sampler={**SAMPLER, "seed": "0"})
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n[data]\ntask = "arithmetic"\n'
                      f'[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\nprompts_per_step = 2\noutput_dir = "{tmp_path / "run"}"\n')
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", command[0], str(config), *command[1:], "--resume"],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]], done.stderr
    assert f"{found / ckpt.STATE_FILE}: sampler.seed is '0'" in lines[-1]


@pytest.mark.parametrize("data", [b"", b"not a zip", b"PK\x03\x04cut short"])
def test_a_damaged_reference_archive_is_one_error_naming_it(tmp_path, data):
    """A checkpoint from before manifests is resumed unverified: a damaged reference/weights.npz
    was an EOFError or BadZipFile traceback after the models loaded."""
    from polyrl.ref_sync import REFERENCE_DIR, WEIGHTS_FILE, ReferenceSync

    (tmp_path / REFERENCE_DIR).mkdir()
    (tmp_path / REFERENCE_DIR / WEIGHTS_FILE).write_bytes(data)
    with pytest.raises(ConfigError, match="is not the reference weights polyrl wrote") as err:
        ReferenceSync(train_engine=None, ref_engine=object(), every=1, alpha=0.5).load(tmp_path)
    assert err.value.field == "--resume" and str(tmp_path / REFERENCE_DIR / WEIGHTS_FILE) in str(err.value)


@pytest.mark.parametrize("in_a_row", [[1], {"cut": -1}, {"cut": 1.5}, {"cut": True}])
def test_a_malformed_streak_count_is_refused(in_a_row):
    """in_a_row (the steps in a row train.max_consecutive_skips counts, continued by a resume)
    is an object of whole counts; an older checkpoint without it resumes from 0."""
    from polyrl.checkpoint_state import problem

    why = problem({**well_formed_state(2), "in_a_row": in_a_row}, 2, weights_only=False, prompts=64)
    assert why is not None and why[0].startswith("in_a_row is "), why
    assert problem(well_formed_state(2), 2, weights_only=True, prompts=64) is None  # (no saved config: weights)


@pytest.mark.parametrize(("observers", "words"), [([1], "observers is list, not an object of objects"),
                                                  ({"trl": 3}, "observers is dict, not an object of objects")])
def test_malformed_observer_state_is_refused_unless_weights_only(tiny_model_dir, tmp_path, observers, words):
    """The observers' state (a TRL run's best_metric and callback states) is restored by a full
    resume only: a malformed one is refused before the models load, a weights-only resume reads none."""
    found = _edited(tmp_path, observers=observers)
    text = _refused(tiny_model_dir, tmp_path)
    assert f"{found / ckpt.STATE_FILE}: {words}" in text and "--resume-weights-only" in text, text
    assert _accepted(tiny_model_dir, tmp_path, weights_only=True)["step"] == 2
