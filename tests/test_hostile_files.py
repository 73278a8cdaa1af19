"""Downloaded files are hostile: a config.json claiming sizes its weights cannot back, a run folder
whose metrics file is a FIFO or huge, a checkpoint whose adapters or pending rollout were edited.
Each is one error line naming the file and the field, found cheaply, never a traceback, a hang or
a silent misreading."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from model_copies import edited_copy

from checkpoint_states import SAMPLER, checkpoint_with_state, well_formed_state

from polyrl import checkpoint as ckpt
from polyrl.errors import ConfigError

pytestmark = pytest.mark.faults


# --- config.json against the safetensors headers -------------------------------------------------


def _engine(path: str | Path, role: str = "generate", **extra):
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    return Engine(get_registry(), "torch", EngineConfig(model=str(path), role=role, threads=1, **extra))


def _edited_model(tiny_model_dir: str, dst: Path, **config) -> Path:
    return edited_copy(tiny_model_dir, dst, config)


@pytest.mark.parametrize(("key", "value", "words"), [
    ("num_hidden_layers", 200, "num_hidden_layers is 200, but the weights hold 2 numbered layers"),
    ("vocab_size", 100_000, "vocab_size is 100000, but the embedding in the weights has"),
    ("hidden_size", 4096, "hidden_size is 4096, a size no tensor in the weights has"),
])
def test_a_config_claiming_more_than_its_weights_is_refused_before_the_model_is_built(
        tiny_model_dir, tmp_path, key, value, words):
    """20000 layers over 2 layers of weights cost 89 s of CPU before the missing-tensor error;
    the headers say it at once."""
    model = _edited_model(tiny_model_dir, tmp_path / "downloaded", **{key: value})
    with pytest.raises(ConfigError) as err:
        _engine(model)
    assert err.value.field == "model.path"
    assert "config.json" in str(err.value) and words in str(err.value), str(err.value)


def test_a_familys_own_key_is_named(tmp_path):
    """GPT-2 spells the layer count ``n_layer``: the error names the key the file has."""
    from hf_families import build_family_model

    model = Path(build_family_model("gpt2", tmp_path / "gpt2"))
    data = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**data, "n_layer": 50}))
    with pytest.raises(ConfigError, match="n_layer is 50, but the weights hold 2 numbered layers"):
        _engine(model)


def _shard(model: Path) -> None:
    """``model.safetensors`` split into two shards and an index, as large models are published."""
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(model / "model.safetensors"))
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in halves.items():
        save_file({n: tensors[n] for n in part}, str(model / file), metadata={"format": "pt"})
    weight_map = {n: file for file, part in halves.items() for n in part}
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (model / "model.safetensors").unlink()


def test_a_sharded_checkpoint_loads_and_its_config_is_checked_against_every_shard(tiny_model_dir, tmp_path):
    model = _edited_model(tiny_model_dir, tmp_path / "sharded")
    _shard(model)
    from safetensors.numpy import load_file

    original = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    loaded = _engine(model).export_weights()  # every shard's header counted: the 2 layers are split
    assert all(np.array_equal(np.asarray(loaded[n]), original[n]) for n in original)
    data = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**data, "num_hidden_layers": 3}))
    with pytest.raises(ConfigError, match="num_hidden_layers is 3, but the weights hold 2 numbered layers"):
        _engine(model)


def test_an_index_naming_a_shard_outside_the_folder_is_refused(tiny_model_dir, tmp_path):
    model = _edited_model(tiny_model_dir, tmp_path / "sharded")
    _shard(model)
    index = json.loads((model / "model.safetensors.index.json").read_text())
    outside = tmp_path / "elsewhere.safetensors"
    os.replace(model / "model-00002-of-00002.safetensors", outside)
    index["weight_map"] = {n: ("../elsewhere.safetensors" if f.startswith("model-00002") else f)
                           for n, f in index["weight_map"].items()}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match=r"model.safetensors.index.json .*'../elsewhere.safetensors', outside"):
        _engine(model)


# --- polyrl report on a hostile run folder --------------------------------------------------------


def _steps(*steps: int) -> str:
    return "".join(json.dumps({"step": s, "loss": 1.0 + s}) + "\n" for s in steps)


def _report_error(run: Path, capsys) -> str:
    """``polyrl report RUN`` in a thread that must finish (a FIFO blocked the old one forever)."""
    from polyrl.cli import main

    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["report", str(run)])), daemon=True)
    worker.start()
    worker.join(20)
    assert codes, "polyrl report blocked"
    err = capsys.readouterr().err.strip().splitlines()
    assert codes == [2] and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("name", ["metrics.jsonl", "eval_completions.jsonl"])
def test_a_fifo_in_a_run_folder_is_refused_not_read_or_called_missing(tmp_path, capsys, name):
    (tmp_path / "metrics.jsonl").write_text(_steps(1, 2))
    (tmp_path / name).unlink(missing_ok=True)
    os.mkfifo(tmp_path / name)
    line = _report_error(tmp_path, capsys)
    assert name in line and "not a regular file" in line and "RUN_DIR" in line
    assert not (tmp_path / "report.png").exists()


def test_a_metrics_file_linked_to_a_device_is_refused(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").symlink_to("/dev/zero")  # endless: read_text never returned
    assert "not a regular file" in _report_error(tmp_path, capsys)


def test_a_metrics_file_past_the_limit_is_refused_with_its_size(tmp_path, capsys, monkeypatch):
    from polyrl import report

    monkeypatch.setattr(report, "MAX_METRICS_BYTES", 2**20)
    (tmp_path / "metrics.jsonl").write_text(_steps(*range(1, 40_001)))  # ~1.1 MiB
    line = _report_error(tmp_path, capsys)
    assert "metrics.jsonl" in line and "MiB, more than polyrl report reads (1 MiB" in line


def test_a_line_past_the_limit_is_counted_unreadable_without_being_held(tmp_path, monkeypatch):
    from polyrl import report

    monkeypatch.setattr(report, "MAX_LINE_BYTES", 1000)
    huge = json.dumps({"step": 2, "loss": 2.0, "pad": "x" * 5000})
    (tmp_path / "metrics.jsonl").write_text(_steps(1) + huge + "\n" + _steps(3))
    run = report.load_run(tmp_path)
    assert [line["step"] for line in run.lines] == [1, 3]
    assert len(run.warnings) == 1 and "1 unreadable line" in run.warnings[0] and "line 2" in run.warnings[0]


def test_only_the_scores_of_the_evaluations_before_and_after_training_are_kept(tmp_path):
    """The chart draws the before- and after-training points from eval_completions.jsonl: the
    texts of a file that grows with every evaluation are streamed past, not held."""
    from polyrl.report import load_run

    (tmp_path / "metrics.jsonl").write_text(_steps(1, 2))
    records = [{"phase": "before", "greedy": True, "reward": 1.0},
               *({"phase": "during", "greedy": True, "reward": 0.5, "completion": "z" * 100} for _ in range(50)),
               {"phase": "after", "after_steps": 2, "greedy": True, "reward": 0.0, "completion": "y" * 100},
               [1, 2]]
    (tmp_path / "eval_completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = load_run(tmp_path)
    assert run.records == [records[0], {"phase": "after", "after_steps": 2, "greedy": True, "reward": 0.0}]
    assert len(run.warnings) == 1 and "1 line that is not a record" in run.warnings[0] and "line 53" in run.warnings[0]


# --- a LoRA checkpoint missing adapter tensors -----------------------------------------------------


def test_a_lora_checkpoint_missing_adapter_tensors_is_refused_naming_them(tiny_model_dir, tmp_path):
    """peft loads an adapter file with strict=False: the tensors it lacks stayed at their initial
    values (B = 0) and the run went on as if resumed."""
    from safetensors.numpy import load_file, save_file

    from polyrl.types import LoraConfig, OptimizerConfig

    extra = dict(lora=LoraConfig(rank=4), optimizer=OptimizerConfig(lr=1e-2))
    saved = _engine(tiny_model_dir, "train", **extra)
    saved.save_checkpoint(str(tmp_path / "ck"))
    adapter_file = tmp_path / "ck" / "adapter" / "adapter_model.safetensors"
    tensors = load_file(str(adapter_file))
    dropped = sorted(n for n in tensors if "layers.1." in n and "lora_B" in n)
    assert dropped
    save_file({n: t for n, t in tensors.items() if n not in dropped}, str(adapter_file))
    fresh = _engine(tiny_model_dir, "train", **extra)
    before = {k: np.asarray(v) for k, v in fresh.export_weights().items()}
    with pytest.raises(ConfigError) as err:
        fresh.load_checkpoint(str(tmp_path / "ck"))
    text = str(err.value)
    assert err.value.field == "--resume" and str(adapter_file) in text and dropped[0] in text
    assert f"lacks {len(dropped)} of this model's" in text and "\n" not in text
    after = fresh.export_weights()
    assert all(np.array_equal(before[k], np.asarray(after[k])) for k in before)  # refused before any change


# --- a malformed pending rollout ----------------------------------------------------------------


def _pending() -> dict:
    """A pending rollout exactly as a checkpoint holds it (``Rollout.as_state``)."""
    from polyrl.rollouts import Rollout
    from polyrl.types import Completion

    completions = [Completion(i // 2, [5, 6, 7], [8, 9], [-0.5, -1.25], text="ab", finish_reason="stop")
                   for i in range(4)]
    state = Rollout(2, [], completions, 1, 0.5, dict(SAMPLER)).as_state()
    return json.loads(json.dumps(state))


def _config(tiny_model_dir: str, tmp_path: Path):
    from polyrl.config import RunConfig

    return RunConfig.from_dict({"model": {"path": tiny_model_dir}, "data": {"task": "arithmetic"},
                                "rewards": [{"name": "numeric_match"}],
                                "train": {"prompts_per_step": 2, "output_dir": str(tmp_path / "run")}})


def _checkpoint(tmp_path: Path, pending_text: str, tiny_model_dir: str = "") -> Path:
    """A step-2 checkpoint whose trainer_state.json holds ``pending_text`` as its pending rollout
    (and, given ``tiny_model_dir``, ``_config``'s settings), with a manifest that verifies (whoever
    edits the file can rewrite the manifest too)."""
    config = _config(tiny_model_dir, tmp_path) if tiny_model_dir else None
    text = json.dumps(well_formed_state(2, config)).replace('"pending_rollout": null',
                                                            f'"pending_rollout": {pending_text}')
    found = checkpoint_with_state(tmp_path / "run" / "checkpoints", 2, text)
    assert ckpt.verify(found) is None
    return found


def _edit(path: str, value):
    def apply(pending: dict) -> dict:
        *parents, last = path.split(".")
        here = pending
        for part in parents:
            here = here[int(part)] if part.isdigit() else here[part]
        here[int(last) if last.isdigit() else last] = value
        return pending
    return apply


@pytest.mark.parametrize(("edit", "words"), [
    (_edit("completions.1.logprobs", [-0.5]), "pending_rollout.completions[1].logprobs has 1 values for 2 completion_ids"),
    (_edit("completions.0.completion_ids", [8, "9"]), "pending_rollout.completions[0].completion_ids[1] is '9'"),
    (_edit("completions.2.logprobs", [-0.5, "Infinity"]), "pending_rollout.completions[2].logprobs[1] is 'Infinity'"),
    (_edit("completions.3.prompt_index", 7), "pending_rollout.completions[3].prompt_index is 7"),
    (_edit("completions.0.mask", [1]), "pending_rollout.completions[0].mask has 1 values for 2 completion_ids"),
    (_edit("completions.0.surprise", 1), "pending_rollout.completions[0] has an unknown key 'surprise'"),
    (_edit("completions", {"0": 1}), "pending_rollout.completions is not a non-empty list"),
    (_edit("step", 3), "pending_rollout.step is 3, not the checkpoint's step 2"),
    (_edit("sampler_before", [0]), "pending_rollout.sampler_before is list, not an object"),
    (lambda pending: [pending], "pending_rollout is list, not an object or null"),
])
def test_a_malformed_pending_rollout_is_one_error_naming_the_file_and_field(tiny_model_dir, tmp_path, edit, words):
    """It was a TypeError traceback from ``Rollout.from_state`` at resume (or trained on it)."""
    from polyrl.resume_point import resume_point

    found = _checkpoint(tmp_path, json.dumps(edit(_pending())))
    with pytest.raises(ConfigError) as err:
        resume_point(_config(tiny_model_dir, tmp_path), None, False)
    text = str(err.value)
    assert err.value.field == "--resume" and str(found / ckpt.STATE_FILE) in text and words in text, text


def test_a_non_finite_logprob_written_by_hand_is_refused(tiny_model_dir, tmp_path):
    """polyrl writes a NaN as null (read back as NaN, as before); a bare 1e400 was read as inf."""
    from polyrl.resume_point import resume_point

    pending = _pending()
    pending["completions"][0]["logprobs"] = [None, -1.0]
    assert resume_point(_config(tiny_model_dir, tmp_path), None, False) is None  # no checkpoint yet
    _checkpoint(tmp_path, json.dumps(pending), tiny_model_dir)
    assert resume_point(_config(tiny_model_dir, tmp_path), None, False) is not None  # null: accepted
    shutil.rmtree(tmp_path / "run")
    _checkpoint(tmp_path, json.dumps(pending).replace("null", "1e400"))
    with pytest.raises(ConfigError, match=r"completions\[0\].logprobs\[0\] is inf, not a finite float32 number"):
        resume_point(_config(tiny_model_dir, tmp_path), None, False)


def test_a_valid_pending_rollout_still_resumes(tiny_model_dir, tmp_path):
    from polyrl.resume_point import resume_point
    from polyrl.rollouts import Rollout

    _checkpoint(tmp_path, json.dumps(_pending()), tiny_model_dir)
    found, state = resume_point(_config(tiny_model_dir, tmp_path), None, False)
    rollout = Rollout.from_state(state["pending_rollout"], [{"prompt": "a"}, {"prompt": "b"}])
    assert rollout.step == 2 and [c.logprobs.tolist() for c in rollout.completions] == [[-0.5, -1.25]] * 4


def test_polyrl_train_resume_says_it_in_one_error_line(tiny_model_dir, tmp_path):
    import subprocess
    import sys

    pending = _pending()
    pending["completions"][1]["logprobs"] = [-0.5]
    found = _checkpoint(tmp_path, json.dumps(pending))
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tiny_model_dir}"\n[data]\ntask = "arithmetic"\n'
                      f'[[rewards]]\nname = "numeric_match"\n'
                      f'[train]\nprompts_per_step = 2\noutput_dir = "{tmp_path / "run"}"\n')
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--resume", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert lines[-1].startswith("error:") and str(found / ckpt.STATE_FILE) in lines[-1]
    assert "pending_rollout.completions[1].logprobs" in lines[-1]
