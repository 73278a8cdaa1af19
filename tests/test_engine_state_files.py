"""A checkpoint's backend files, damaged by hand and re-signed (whoever can edit the folder can
rewrite its manifest), are each one ``error: --resume: <file>: ... Fix: ...`` line on resume: what
is cheap to see (presence, size, engine.json's fields, archive and header integrity) before any
model loads, the rest as the backend reads the file; never a ``PluginError`` blaming the backend,
a silent misreading, nor torch's multi-line unpickling text breaking the line in two."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from small_runs import small_run_settings

from polyrl import checkpoint as ckpt
from polyrl.config import RunConfig
from polyrl.errors import ConfigError

pytestmark = pytest.mark.faults

REWARD = "def length(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n"
ROOT = Path(__file__).resolve().parents[1]


def _settings(model: str, tmp_path: Path, **sections: Any) -> dict[str, Any]:
    return small_run_settings(model, tmp_path, REWARD, "length", steps=1, prompts_per_step=2,
                              train={"checkpoint_every": 1}, **sections)


def _trained(model: str, tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """The settings of a finished 1-step torch run (its checkpoint step-00000001 as polyrl wrote it)."""
    from polyrl.trainer import Trainer

    settings = _settings(model, tmp_path, **sections)
    Trainer(RunConfig.from_dict(settings)).run()
    return settings


@pytest.fixture(scope="module")
def full_run(tiny_model_dir, tmp_path_factory) -> dict[str, Any]:
    return _trained(tiny_model_dir, tmp_path_factory.mktemp("full"))


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory) -> dict[str, Any]:
    return _trained(tiny_model_dir, tmp_path_factory.mktemp("lora"), lora={"rank": 4, "alpha": 8.0})


def _copy(settings: dict[str, Any], tmp_path: Path) -> tuple[RunConfig, Path]:
    """(the run's config on a copy of its output_dir under ``tmp_path``, the copy's checkpoint)."""
    out = tmp_path / "copy"
    shutil.copytree(settings["train"]["output_dir"], out)
    config = RunConfig.from_dict({**settings, "train": {**settings["train"], "output_dir": str(out)}})
    return config, out / "checkpoints" / "step-00000001"


def resign(found: Path) -> None:
    """Rewrite ``found``'s manifest and marker over its files as they are now."""
    (found / ckpt.MANIFEST).write_text(json.dumps(ckpt._manifest(found)))
    (found / ckpt.MARKER).write_text(json.dumps({"step": 1, "manifest_sha256": ckpt.sha256(found / ckpt.MANIFEST)}))


def _refused_before_loading(config: RunConfig, found: Path, file: str, *expected: str,
                            weights_only_fix: bool = True) -> str:
    """The error a resume of ``found`` gives as the trainer is built, before any model loads."""
    from polyrl.trainer import Trainer

    resign(found)
    with pytest.raises(ConfigError) as err:
        Trainer(config, resume=str(found))
    return _one_line(err.value, found / file, *expected, weights_only_fix=weights_only_fix)


def _refused_at_resume(config: RunConfig, found: Path, file: str, *expected: str,
                       weights_only_fix: bool = True) -> str:
    """The error the resume itself gives (only reading the file can tell)."""
    from polyrl.trainer import Trainer

    resign(found)
    trainer = Trainer(config, resume=str(found))
    try:
        with pytest.raises(ConfigError) as err:
            trainer.run()
    finally:
        trainer.lock.release()
    return _one_line(err.value, found / file, *expected, weights_only_fix=weights_only_fix)


def _one_line(exc: ConfigError, file: Path, *expected: str, weights_only_fix: bool = True) -> str:
    text = str(exc)
    assert exc.field == "--resume" and text.startswith(f"--resume: {file}: "), text
    assert "\n" not in text and "Fix: " in text, text
    assert ("--resume-weights-only" in text) == weights_only_fix, text
    for part in expected:
        assert part in text, (part, text)
    return text


def _torch_save(file: Path, value: Any) -> None:
    import torch

    torch.save(value, file)


# --- torch: engine.json --------------------------------------------------------------------------


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda meta: {**meta, "lora": "yes"}, '"lora" is a string'),  # was: read as LoRA, optimizer skipped
    (lambda meta: {**meta, "optimizer": None}, '"optimizer" is null'),
    (lambda meta: {**meta, "format": 7}, '"format" is 7'),
    (lambda meta: [meta], "holds a list"),
    (lambda meta: json.dumps(meta)[:20], "not valid JSON"),  # truncated
    (None, "missing"),  # was: read as {}, so the optimizer state was silently dropped
], ids=["lora-string", "optimizer-null", "format", "list", "truncated", "missing"])
def test_torch_engine_json(full_run, tmp_path, damage, expected):
    config, found = _copy(full_run, tmp_path)
    file = found / "engine_state" / "engine.json"
    if damage is None:
        file.unlink()
    else:
        changed = damage(json.loads(file.read_text()))
        file.write_text(changed if isinstance(changed, str) else json.dumps(changed))
    _refused_before_loading(config, found, "engine_state/engine.json", expected)


def _toml(settings: dict[str, Any]) -> str:
    """``settings`` as a TOML config file (tables of plain values; a list of tables as ``[[name]]``)."""
    lines = []
    for name, value in settings.items():
        for table in value if isinstance(value, list) else [value]:
            lines.append(f"[[{name}]]" if isinstance(value, list) else f"[{name}]")
            lines += [f"{key} = {json.dumps(item)}" for key, item in table.items()]
    return "\n".join(lines) + "\n"


def test_polyrl_launch_resume_refuses_a_damaged_engine_file_before_any_rank_starts(full_run, tmp_path):
    """The launcher checked trainer_state.json alone: a damaged engine.json passed, and each rank
    torchrun started then loaded the models before refusing it."""
    config, found = _copy(full_run, tmp_path)
    file = found / "engine_state" / "engine.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), "lora": "yes"}))
    resign(found)
    toml = tmp_path / "run.toml"
    toml.write_text(_toml({**full_run, "train": {**full_run["train"], "output_dir": config.train.output_dir}}))
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", str(toml), "--nproc-per-node", "1",
                           "--dry-run", "--resume"], capture_output=True, text=True, timeout=180)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr and not done.stdout.strip(), done.stderr
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]], lines
    assert lines[-1].startswith(f"error: --resume: {file}: ") and '"lora" is a string' in lines[-1], lines


# --- torch: rng.pt -------------------------------------------------------------------------------


def test_torch_rng_truncated_or_missing_before_any_model_loads(full_run, tmp_path):
    config, found = _copy(full_run, tmp_path)
    file = found / "engine_state" / "rng.pt"
    file.write_bytes(file.read_bytes()[:-100])
    _refused_before_loading(config, found, "engine_state/rng.pt", "not a complete torch.save archive")
    file.unlink()
    text = _refused_before_loading(config, found, "engine_state/rng.pt", "no RNG state")
    assert "restore the file" in text, text


def test_torch_rng_of_another_pickle_or_tensors_of_the_wrong_shape(full_run, tmp_path):
    """A pickle torch.save wrote of something else was torch's multi-line UnpicklingError inside a
    PluginError; a state of the wrong size was set_rng_state's RuntimeError after the weights loaded."""
    import argparse

    import torch

    config, found = _copy(full_run, tmp_path)
    file = found / "engine_state" / "rng.pt"
    saved = torch.load(file, weights_only=True)
    _torch_save(file, argparse.Namespace(torch=saved["torch"]))
    text = _refused_at_resume(config, found, "engine_state/rng.pt", "cannot be read as the RNG state",
                              "UnpicklingError")
    assert "Weights only load failed" in text, text  # torch's own words kept, on one line
    _torch_save(file, {**saved, "torch": saved["torch"][:100]})
    _refused_at_resume(config, found, "engine_state/rng.pt", "'torch' is a tensor of shape [100]")
    _torch_save(file, {**saved, "sampler": saved["sampler"].float()})
    _refused_at_resume(config, found, "engine_state/rng.pt", "'sampler' is a tensor", "torch.float32")
    _torch_save(file, [saved["torch"], saved["sampler"]])
    _refused_at_resume(config, found, "engine_state/rng.pt", "not the RNG states polyrl saves")


# --- torch: optimizer.pt -------------------------------------------------------------------------


def test_torch_optimizer_state_damaged(full_run, tmp_path):
    """A moment of another shape or an integer dtype was taken as it was (torch casts and
    broadcasts); a truncated archive was a PluginError after the models loaded."""
    import torch

    config, found = _copy(full_run, tmp_path)
    file = found / "engine_state" / "optimizer.pt"
    saved = torch.load(file, weights_only=True)
    first = saved["state"][0]
    _torch_save(file, {**saved, "state": {**saved["state"], 0: {**first, "exp_avg": first["exp_avg"][:1]}}})
    _refused_at_resume(config, found, "engine_state/optimizer.pt", "parameter 0's 'exp_avg' has shape")
    _torch_save(file, {**saved, "state": {**saved["state"], 0: {**first, "exp_avg_sq": first["exp_avg_sq"].long()}}})
    _refused_at_resume(config, found, "engine_state/optimizer.pt", "'exp_avg_sq' has dtype torch.int64")
    group = {**saved["param_groups"][0], "maximize": "yes"}  # a truthy string: gradient ascent
    _torch_save(file, {**saved, "param_groups": [group, *saved["param_groups"][1:]]})
    _refused_at_resume(config, found, "engine_state/optimizer.pt", "group option 'maximize' is str")
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    _refused_before_loading(config, found, "engine_state/optimizer.pt", "not a complete torch.save archive")


# --- torch: model.safetensors --------------------------------------------------------------------


def test_torch_model_weights_damaged(full_run, tmp_path):
    """Read by every resume, weights-only included: the fix is another copy or checkpoint."""
    from safetensors.torch import load_file, save_file

    config, found = _copy(full_run, tmp_path)
    file = found / "model" / "model.safetensors"
    weights = load_file(file)
    name = next(n for n in weights if n.endswith("q_proj.weight"))
    save_file({**weights, name: weights[name][:3]}, file, metadata={"format": "pt"})
    _refused_at_resume(config, found, "model/model.safetensors", "does not fit this model", name,
                       weights_only_fix=False)
    file.write_bytes(file.read_bytes()[:-64])
    _refused_before_loading(config, found, "model/model.safetensors", "not a complete safetensors file",
                            weights_only_fix=False)


# --- torch: adapter/ and the LoRA base -----------------------------------------------------------


def test_torch_lora_files_damaged(lora_run, tmp_path):
    """A deleted adapter folder was silently a fresh start of the adapters on the merged weights."""
    from safetensors.torch import load_file, save_file

    config, found = _copy(lora_run, tmp_path)
    adapter = found / "model" / "adapter" / "adapter_model.safetensors"
    tensors = load_file(adapter)
    name = sorted(tensors)[0]
    save_file({**tensors, name: tensors[name][:1]}, adapter)
    _refused_at_resume(config, found, "model/adapter/adapter_model.safetensors", f"holds {name} of shape")
    shutil.rmtree(adapter.parent)
    _refused_before_loading(config, found, "model/adapter/adapter_model.safetensors", "is missing")
    base = found / "engine_state" / "base_model.safetensors"
    base.write_bytes(base.read_bytes()[:100])
    _refused_before_loading(config, found, "engine_state/base_model.safetensors", "not a complete safetensors")


# --- MLX -----------------------------------------------------------------------------------------


def _mlx_checkpoint(model: str, tmp_path: Path, **overrides: Any) -> tuple[Any, Path, Path]:
    """(an MLX train engine, its checkpoint's model and state folders); skipped without MLX."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, OptimizerConfig

    status = get_registry().status("mlx") if "mlx" in get_registry().names() else None
    if status is None or not status.available:
        pytest.skip(f"backend 'mlx' not usable here: {status.reason if status else 'not installed'}")
    engine = Engine(get_registry(), "mlx", EngineConfig(model=model, role="train", threads=1,
                                                        optimizer=OptimizerConfig(lr=1e-2), **overrides))
    model_dir, state_dir = tmp_path / "model", tmp_path / "state"
    engine.save_checkpoint(str(model_dir), str(state_dir))
    return engine, model_dir, state_dir


def _mlx_refused(engine: Any, model_dir: Path, state_dir: Path, file: Path, *expected: str,
                 before_loading: bool = True) -> None:
    from polyrl.registry import get_registry

    with pytest.raises(ConfigError) as err:
        engine.load_checkpoint(str(model_dir), str(state_dir))
    _one_line(err.value, file, *expected, weights_only_fix="model.safetensors" not in file.name)
    if before_loading:  # the same from the files alone, as the trainer asks before any model loads
        check = get_registry().spec("mlx").check_checkpoint
        with pytest.raises(ConfigError) as err:
            check(str(model_dir), str(state_dir), False)
        _one_line(err.value, file, *expected, weights_only_fix="model.safetensors" not in file.name)


def test_mlx_engine_json(tiny_model_dir, tmp_path):
    engine, model_dir, state_dir = _mlx_checkpoint(tiny_model_dir, tmp_path)
    file = state_dir / "engine.json"
    meta = json.loads(file.read_text())
    file.write_text(json.dumps({**meta, "lora": "no"}))
    _mlx_refused(engine, model_dir, state_dir, file, '"lora" is a string')
    file.write_text(json.dumps(meta)[:15])
    _mlx_refused(engine, model_dir, state_dir, file, "not valid JSON")
    file.unlink()
    _mlx_refused(engine, model_dir, state_dir, file, "is missing")


def test_mlx_rng_key(tiny_model_dir, tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    engine, model_dir, state_dir = _mlx_checkpoint(tiny_model_dir, tmp_path)
    file = state_dir / "rng.safetensors"
    save_file({"sampler_key": np.zeros(3, np.float32)}, str(file))
    _mlx_refused(engine, model_dir, state_dir, file, "sampler_key of dtype F32 and shape [3]")
    file.write_bytes(b"\x00" * 7)
    _mlx_refused(engine, model_dir, state_dir, file, "not a complete safetensors file")


def _mlx_moment_cut(engine: Any, model_dir: Path, state_dir: Path) -> Path:
    """The checkpoint's optimizer file, one 2-D first moment cut to its first row (a shape the
    model's parameter does not have)."""
    from safetensors.numpy import load_file, save_file

    engine.raw.optimizer.init(engine.raw.model.trainable_parameters())
    engine.save_checkpoint(str(model_dir), str(state_dir))
    file = state_dir / "optimizer.safetensors"
    saved = load_file(str(file))
    name = next(n for n in saved if n.endswith(".m") and saved[n].ndim == 2)
    save_file({**saved, name: saved[name][:1]}, str(file))
    return file


def test_mlx_optimizer_state(tiny_model_dir, tmp_path):
    engine, model_dir, state_dir = _mlx_checkpoint(tiny_model_dir, tmp_path)
    file = _mlx_moment_cut(engine, model_dir, state_dir)
    _mlx_refused(engine, model_dir, state_dir, file, "has shape", before_loading=False)
    file.write_bytes(file.read_bytes()[:-8])
    _mlx_refused(engine, model_dir, state_dir, file, "not a complete safetensors file")


def test_mlx_optimizer_state_refused_before_any_weight_is_replaced(tiny_model_dir, tmp_path):
    """The moments' shapes were checked after the checkpoint's weights were imported: the refused
    resume left the engine holding the checkpoint's weights instead of its own."""
    import numpy as np

    engine, model_dir, state_dir = _mlx_checkpoint(tiny_model_dir, tmp_path)
    file = _mlx_moment_cut(engine, model_dir, state_dir)
    own = {k: np.asarray(v) + 1.0 for k, v in engine.export_weights().items()}
    engine.import_weights(own)
    _mlx_refused(engine, model_dir, state_dir, file, "has shape", before_loading=False)
    after = engine.export_weights()
    assert all(np.array_equal(own[k], np.asarray(after[k])) for k in own)


def test_mlx_model_weights(tiny_model_dir, tmp_path):
    engine, model_dir, state_dir = _mlx_checkpoint(tiny_model_dir, tmp_path)
    file = model_dir / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-64])
    _mlx_refused(engine, model_dir, state_dir, file, "not a complete safetensors file")


def test_mlx_adapter(tiny_model_dir, tmp_path):
    from polyrl.types import LoraConfig

    engine, model_dir, state_dir = _mlx_checkpoint(tiny_model_dir, tmp_path, lora=LoraConfig(rank=4, alpha=8.0))
    file = model_dir / "adapter" / "adapters.safetensors"
    file.write_bytes(file.read_bytes()[:-16])
    _mlx_refused(engine, model_dir, state_dir, file, "not a complete safetensors file")
    file.unlink()  # was: a fresh start of the adapters on the merged weights
    _mlx_refused(engine, model_dir, state_dir, file, "is missing")


# --- the CLI: one error line, whatever the message holds ------------------------------------------


def test_a_multi_line_error_message_is_one_error_line(tiny_model_dir, tmp_path):
    """A reward module whose import raises a multi-line message: `polyrl train` printed it as an
    `error:` line and then its other lines, the `Fix:` among them."""
    settings = _settings(tiny_model_dir, tmp_path)
    (tmp_path / "rewards.py").write_text('raise RuntimeError("first line\\n    second line\\n\\nlast line")\n')
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[data]\npath = "{settings["data"]["path"]}"\n'
                      f'[[rewards]]\nfunction = "{tmp_path / "rewards.py"}:length"\n'
                      f'[train]\noutput_dir = "{tmp_path / "run"}"\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--no-progress"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "first line second line last line. Fix: fix the error in that file" in errors[0], errors[0]
    assert not any("second line" in line or "Fix:" in line for line in lines if line != errors[0]), result.stderr


def test_a_rank_hands_the_launcher_one_line_and_its_full_text(tmp_path, monkeypatch):
    """Under `polyrl launch` the launcher prints the rank's line: one line, the text as raised kept
    for torchrun's log; a line left with newlines (another polyrl version's rank) is made one."""
    from polyrl import launch_errors

    monkeypatch.setenv(launch_errors.ENV, str(tmp_path))
    monkeypatch.setenv(launch_errors.OWNER_ENV, str(os.getppid()))
    monkeypatch.setenv("RANK", "0")
    assert launch_errors.report("bad file: line one line two. Fix: x", full="bad file: line one\n  line two. Fix: x")
    assert launch_errors.first_error(tmp_path) == "bad file: line one line two. Fix: x"
    assert launch_errors.full_text(tmp_path) == "bad file: line one\n  line two. Fix: x"
    (tmp_path / "rank-0.json").write_text(json.dumps({"rank": 0, "time": 1.0, "message": "a\nb. Fix: c"}))
    assert launch_errors.first_error(tmp_path) == "a b. Fix: c" and launch_errors.full_text(tmp_path) is None
