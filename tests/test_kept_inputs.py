"""A checkpoint keeps its own copy of the folders the run started from (``polyrl.kept_inputs``):
``backends.options.initial_adapter`` and a KL reference inside output_dir (a TRL PeftModel's
``initial_adapter`` and ``initial_reference``). A resume after they were deleted trains exactly as
the uninterrupted run did; before, it stopped at the engine load (no adapter there)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("polyrl_torch")
peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")

from small_runs import small_run_settings  # noqa: E402

from polyrl.config import RunConfig  # noqa: E402

REWARD = "def length(completions, **kwargs):\n    return [float(len(c)) for c in completions]\n"


def _start_folders(model_dir: str, adapter: Path, reference: Path) -> None:
    """A PeftModel's adapter (B nonzero: another start shows) and base + adapter merged."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(7)
    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                                peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    model.save_pretrained(str(adapter))
    model.merge_and_unload().save_pretrained(str(reference))
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(str(reference))


def _settings(model_dir: str, tmp_path: Path, steps: int) -> dict[str, Any]:
    out = tmp_path / "run"
    settings = small_run_settings(
        model_dir, tmp_path, REWARD, "length", steps=steps, prompts_per_step=2,
        train={"checkpoint_every": 1, "output_dir": str(out)},
        algorithm={"beta": 0.5}, lora={"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj"]},
        backends={"options": {"initial_adapter": str(tmp_path / "adapter")}})
    settings["model"]["reference_path"] = str(out / "initial_reference")
    return settings


def _weights(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def _step_lines(out: Path) -> list[str]:
    import json

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [json.dumps({k: v for k, v in row.items() if "kl" in k or k in ("step", "loss")}, sort_keys=True)
            for row in lines if "step" in row and "loss" in row]


def test_a_resume_after_the_start_folders_were_deleted_trains_as_the_run_would(tiny_model_dir, tmp_path):
    from polyrl.trainer import Trainer

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for root in (whole, cut):
        root.mkdir()
        _start_folders(tiny_model_dir, root / "adapter", root / "run" / "initial_reference")
    Trainer(RunConfig.from_dict(_settings(tiny_model_dir, whole, steps=2))).run()

    Trainer(RunConfig.from_dict(_settings(tiny_model_dir, cut, steps=1))).run()
    shutil.rmtree(cut / "adapter")  # the script's temporary folder, gone
    shutil.rmtree(cut / "run" / "initial_reference")
    trainer = Trainer(RunConfig.from_dict(_settings(tiny_model_dir, cut, steps=2)), resume="")
    trainer.run()

    ours, theirs = _weights(cut / "run" / "model"), _weights(whole / "run" / "model")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    lines = _step_lines(whole / "run")
    assert len(lines) == 2 and all('kl' in line for line in lines), lines
    assert _step_lines(cut / "run") == lines
    step = cut / "run" / "checkpoints" / "step-00000001"
    assert (step / "initial_reference" / "config.json").is_file()
    # the resumed run's own checkpoint keeps them too (its start was the first checkpoint's copy)
    assert (cut / "run" / "checkpoints" / "step-00000002" / "initial_adapter" / "adapter_config.json").is_file()


def test_a_reference_still_there_but_changed_is_still_refused_on_a_full_resume(tiny_model_dir, tmp_path):
    """The copy stands in for a folder that is gone, not for one the user changed: a reference
    rebuilt in place is refused as before (``--resume-weights-only`` takes it)."""
    from polyrl.errors import ConfigError
    from polyrl.trainer import Trainer

    _start_folders(tiny_model_dir, tmp_path / "adapter", tmp_path / "run" / "initial_reference")
    Trainer(RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, steps=1))).run()
    shutil.rmtree(tmp_path / "run" / "initial_reference")
    shutil.copytree(tiny_model_dir, tmp_path / "run" / "initial_reference")  # another model, same path
    with pytest.raises(ConfigError) as err:
        Trainer(RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, steps=2)), resume="")
    assert err.value.field == "model.reference_path"


def test_the_copies_outlive_the_checkpoint_a_resume_read_them_from(tiny_model_dir, tmp_path):
    """A resume reads the start folders from its checkpoint's copies; once that checkpoint was
    pruned (``keep_checkpoints``), the next checkpoints kept no copy (the folders were gone and so
    was the checkpoint holding them), and a resume of those failed at the engine load, as before
    the copies. Each checkpoint reads them from the newest one that holds them."""
    from polyrl.trainer import Trainer

    _start_folders(tiny_model_dir, tmp_path / "adapter", tmp_path / "run" / "initial_reference")

    def settings(steps: int) -> dict[str, Any]:
        out = _settings(tiny_model_dir, tmp_path, steps)
        out["train"]["keep_checkpoints"] = 1
        return out

    Trainer(RunConfig.from_dict(settings(1))).run()
    shutil.rmtree(tmp_path / "adapter")
    shutil.rmtree(tmp_path / "run" / "initial_reference")
    Trainer(RunConfig.from_dict(settings(3)), resume="").run()  # step-1 pruned once step-2 is saved
    (last,) = (tmp_path / "run" / "checkpoints").iterdir()
    assert last.name == "step-00000003"
    assert (last / "initial_adapter" / "adapter_config.json").is_file()  # old code: no copy in step 3
    assert (last / "initial_reference" / "config.json").is_file()
    Trainer(RunConfig.from_dict(settings(4)), resume="").run()  # old code: the adapter folder is gone
    assert (tmp_path / "run" / "checkpoints" / "step-00000004" / "initial_adapter").is_dir()


def test_later_checkpoints_do_not_read_the_unchanged_reference_again_and_a_changed_one_is_refused(
        tiny_model_dir, tmp_path, monkeypatch):
    """Each checkpoint hard-links the merged reference; every save read (SHA-256) and fsynced it
    whole again, seconds per GB each save. The first reads it; a later one takes the digest its
    predecessor's manifest recorded for the same unchanged file (``checkpoint._unchanged_links``).
    A resume still reads it: the file altered in place is refused."""
    from polyrl import checkpoint as ckpt
    from polyrl.errors import ConfigError
    from polyrl.trainer import Trainer

    _start_folders(tiny_model_dir, tmp_path / "adapter", tmp_path / "run" / "initial_reference")
    read: list[Path] = []
    real = ckpt.sha256
    monkeypatch.setattr(ckpt, "sha256", lambda path: read.append(Path(path)) or real(path))
    Trainer(RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, steps=2))).run()
    weights = [p for p in read if p.parent.name == "initial_reference" and p.suffix == ".safetensors"]
    assert [p.parent.parent.name for p in weights] == [".tmp-step-00000001"], weights
    monkeypatch.setattr(ckpt, "sha256", real)
    kept = tmp_path / "run" / "checkpoints" / "step-00000002" / "initial_reference" / weights[0].name
    with open(kept, "r+b") as fh:  # the same file as the reference the run reads, and step 1's
        fh.seek(kept.stat().st_size // 2)
        fh.write(b"\x7f" * 8)
    assert ckpt.verify(kept.parent.parent) == (
        f"initial_reference/{weights[0].name} does not match its checksum (a hard link of the KL reference, "
        "model.reference_path: that model's file was changed in place since; put it back as it was, or resume "
        "with --resume-weights-only to take the new one)")  # before: as if the checkpoint were damaged
    with pytest.raises(ConfigError) as refused:  # as before: both checkpoints hold the altered file
        Trainer(RunConfig.from_dict(_settings(tiny_model_dir, tmp_path, steps=3)), resume="")
    assert f"step-00000002: initial_reference/{weights[0].name} does not match its checksum" in str(refused.value)


def _outside_settings(model_dir: str, root: Path, reference: Path, steps: int) -> dict[str, Any]:
    """A run under ``root/run`` whose KL reference is a model of the user's outside output_dir."""
    settings = small_run_settings(model_dir, root, REWARD, "length", steps=steps, prompts_per_step=2,
                                  train={"checkpoint_every": 1, "output_dir": str(root / "run")},
                                  algorithm={"beta": 0.5})
    settings["model"]["reference_path"] = str(reference)
    return settings


def _user_reference(model_dir: str, folder: Path) -> None:
    """A reference other than the policy (KL > 0 from the first step), read-only as a shared model is."""
    _start_folders(model_dir, folder.parent / "unused-adapter", folder)
    for path in folder.iterdir():
        path.chmod(0o444)


def test_a_reference_outside_output_dir_is_linked_and_a_resume_after_it_was_deleted_trains_as_the_run_would(
        tiny_model_dir, tmp_path):
    """Before, a reference outside output_dir was not kept: a resume after it was deleted was
    refused as a changed reference (and ``--resume-weights-only`` failed at the engine load). Each
    checkpoint now hard-links it (no space spent), leaving the user's files and modes as they were."""
    from polyrl.trainer import Trainer

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    for root in (whole, cut):
        root.mkdir()
        _user_reference(tiny_model_dir, root / "reference")
    Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, whole, whole / "reference", steps=2))).run()

    Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, cut, cut / "reference", steps=1))).run()
    weights = cut / "reference" / "model.safetensors"
    kept = cut / "run" / "checkpoints" / "step-00000001" / "initial_reference" / "model.safetensors"
    assert kept.stat().st_ino == weights.stat().st_ino  # a link, not a copy
    assert oct(weights.stat().st_mode & 0o777) == "0o444"  # the user's file keeps its mode
    shutil.rmtree(cut / "reference")
    Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, cut, cut / "reference", steps=2)),
            resume="").run()

    ours, theirs = _weights(cut / "run" / "model"), _weights(whole / "run" / "model")
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    lines = _step_lines(whole / "run")
    assert len(lines) == 2 and all(json.loads(line)["kl"] > 0 for line in lines), lines  # another model
    assert _step_lines(cut / "run") == lines


def test_a_reference_on_another_file_system_is_not_copied_and_its_loss_is_one_error(tiny_model_dir, tmp_path):
    """A full model is not copied into every checkpoint: one warning says so, and a resume after
    the reference was deleted is one error naming model.reference_path and the ways on (before:
    "changed since ... (same path, other contents)", and "restore the folder as it was")."""
    from structlog.testing import capture_logs

    from polyrl.errors import ConfigError
    from polyrl.trainer import Trainer

    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's folder")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as elsewhere:
        reference = Path(elsewhere) / "reference"
        _user_reference(tiny_model_dir, reference)
        with capture_logs() as logs:
            Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, tmp_path, reference, steps=2))).run()
        said = [e for e in logs if "keep no copy of the KL reference" in e["event"]]
        assert len(said) == 1 and said[0]["reference"] == str(reference), said  # once, not at each save
        assert "it is on another file system than train.output_dir" in said[0]["event"], said
        assert not (tmp_path / "run" / "checkpoints" / "step-00000002" / "initial_reference").exists()
    with pytest.raises(ConfigError) as err:
        Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, tmp_path, reference, steps=3)), resume="")
    assert err.value.field == "model.reference_path"
    assert f"the KL reference {reference} is gone since" in str(err.value)
    assert "--resume-weights-only and model.reference_path set to a model that exists" in str(err.value)


def test_a_private_reference_outside_output_dir_keeps_its_mode_when_linked(tiny_model_dir, tmp_path):
    """The user's own model, readable by its owner and group alone (0640), linked into each
    checkpoint: the checkpoint's umask modes were given to the link, and so to the user's file (one
    inode), which became world-readable (0644 under umask 022) outside output_dir."""
    import os

    from polyrl.trainer import Trainer

    reference = tmp_path / "reference"
    shutil.copytree(tiny_model_dir, reference)
    for path in reference.iterdir():
        path.chmod(0o640)
    before = os.umask(0o022)  # the run's checkpoints get 0644 files
    try:
        Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, tmp_path, reference, steps=1))).run()
    finally:
        os.umask(before)
    weights = reference / "model.safetensors"
    kept = tmp_path / "run" / "checkpoints" / "step-00000001" / "initial_reference" / "model.safetensors"
    assert kept.stat().st_ino == weights.stat().st_ino  # a link, not a copy
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in reference.iterdir()}
    assert set(modes.values()) == {"0o640"}, modes  # old code: 0o644, the user's file widened


def test_a_reference_whose_files_cannot_be_linked_is_named_so_not_as_on_another_file_system(tiny_model_dir, tmp_path):
    """On the same file system the kernel also refuses a hard link: to another user's files
    (fs.protected_hardlinks: a shared model folder) or immutable ones, here an immutable weights
    file. The warning said "it is on another file system" and advised moving the model there,
    where it already was."""
    import subprocess

    from structlog.testing import capture_logs

    from polyrl.trainer import Trainer

    reference = tmp_path / "reference"
    shutil.copytree(tiny_model_dir, reference)
    weights = reference / "model.safetensors"
    try:
        made = subprocess.run(["chattr", "+i", str(weights)], capture_output=True).returncode == 0
    except OSError:
        made = False
    if not made:
        pytest.skip("needs chattr +i (root, a file system with file attributes)")
    try:
        with capture_logs() as logs:
            Trainer(RunConfig.from_dict(_outside_settings(tiny_model_dir, tmp_path, reference, steps=1))).run()
    finally:
        subprocess.run(["chattr", "-i", str(weights)], check=True)
    said = [e for e in logs if "keep no copy of the KL reference" in e["event"]]
    assert len(said) == 1, said
    assert "the system refuses a hard link to its files in train.output_dir (Operation not permitted" in \
        said[0]["event"] and "another file system" not in said[0]["event"], said
    assert "a copy of the model of your own on output_dir's file system" in said[0]["fix"], said


@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT"])
def test_a_full_disk_while_linking_the_reference_fails_the_checkpoint_not_warns(tmp_path, monkeypatch, code):
    """A full disk (or quota) met while linking the reference is the checkpoint's failure, as any
    full disk is (``CheckpointWriteError``, a disk problem): it was read as a reference the system
    refuses to link, warned once for the run ("a file system without hard links") and advised
    copying the whole model, onto the full disk."""
    import errno
    import os
    from types import SimpleNamespace

    from polyrl import kept_inputs

    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "model.safetensors").write_bytes(b"weights")
    config = SimpleNamespace(backends=SimpleNamespace(options={}), model=SimpleNamespace(reference_path=str(reference)),
                             train=SimpleNamespace(output_dir=str(tmp_path / "run")))

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(kept_inputs.os, "link", full)
    checkpoint = tmp_path / "run" / "checkpoints" / "step-00000001"
    checkpoint.mkdir(parents=True)
    with pytest.raises(OSError) as err:
        kept_inputs.save(config, checkpoint)
    assert err.value.errno == getattr(errno, code)
    assert not (checkpoint / kept_inputs.REFERENCE).exists()  # nothing half-linked left behind
    monkeypatch.setattr(kept_inputs.os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EPERM, "no")))
    assert [e.errno for _, e in kept_inputs.save(config, checkpoint)] == [errno.EPERM]  # a refusal still warns
