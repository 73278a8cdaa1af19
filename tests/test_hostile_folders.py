"""Downloaded folders are hostile: a model or checkpoint folder cannot make polyrl read outside it
(a link to another file, a FIFO that blocks), name files outside it in its manifest, or run the
folder's own Python behind a question on stdin."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from polyrl import checkpoint as ckpt
from polyrl.errors import ConfigError, RewardError
from polyrl.registry import get_registry

pytestmark = pytest.mark.faults


def _copy_model(tiny_model_dir: str, dst: Path) -> Path:
    shutil.copytree(tiny_model_dir, dst)
    return dst


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- not yours\n")
    return secret


def test_a_model_file_linked_outside_the_folder_is_refused(tiny_model_dir, tmp_path):
    """``chat_template.jinja -> ~/.ssh/id_rsa``: transformers would render the key into every prompt."""
    model = _copy_model(tiny_model_dir, tmp_path / "downloaded")
    (model / "chat_template.jinja").symlink_to(_secret(tmp_path))
    with pytest.raises(ConfigError) as err:
        get_registry().resolve_model(str(model))
    assert err.value.field == "model.path"
    assert "chat_template.jinja" in str(err.value) and "id_rsa" in str(err.value)


def test_a_linked_folder_inside_a_model_folder_is_refused_too(tiny_model_dir, tmp_path):
    model = _copy_model(tiny_model_dir, tmp_path / "downloaded")
    (model / "additional_chat_templates").symlink_to(_secret(tmp_path).parent, target_is_directory=True)
    with pytest.raises(ConfigError, match="additional_chat_templates"):
        get_registry().resolve_model(str(model), field="model.reference_path")


def test_links_inside_the_folder_and_a_linked_model_folder_are_fine(tiny_model_dir, tmp_path):
    model = _copy_model(tiny_model_dir, tmp_path / "downloaded")
    (model / "weights").mkdir()
    os.replace(model / "model.safetensors", model / "weights" / "model.safetensors")
    (model / "model.safetensors").symlink_to(Path("weights", "model.safetensors"))
    (tmp_path / "alias").symlink_to(model, target_is_directory=True)  # the user named the link
    assert get_registry().resolve_model(str(tmp_path / "alias")) == str(tmp_path / "alias")


def test_a_fifo_in_a_model_folder_is_refused_not_read(tiny_model_dir, tmp_path):
    """Reading a FIFO blocks until someone writes to it: the load would hang forever."""
    model = _copy_model(tiny_model_dir, tmp_path / "downloaded")
    (model / "tokenizer.json").unlink()
    os.mkfifo(model / "tokenizer.json")
    with pytest.raises(ConfigError, match="tokenizer.json.*not a regular file"):
        get_registry().resolve_model(str(model))


def test_a_gguf_whose_tokenizer_beside_it_links_outside_is_refused(tmp_path):
    folder = tmp_path / "downloads"
    folder.mkdir()
    (folder / "model.gguf").write_bytes(b"GGUF")
    (folder / "tokenizer_config.json").symlink_to(_secret(tmp_path))
    (folder / "unrelated-link").symlink_to("/etc")  # not a file a loader reads: left alone
    with pytest.raises(ConfigError, match="tokenizer_config.json"):
        get_registry().resolve_model(str(folder / "model.gguf"))


def test_polyrl_generate_says_it_in_one_error_line(tiny_model_dir, tmp_path):
    model = _copy_model(tiny_model_dir, tmp_path / "downloaded")
    (model / "chat_template.jinja").unlink(missing_ok=True)
    (model / "chat_template.jinja").symlink_to(_secret(tmp_path))
    done = subprocess.run([sys.executable, "-m", "polyrl.cli", "generate", "--model", str(model), "hi"],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and "Traceback" not in done.stderr
    # named by the flag the user typed (it said model.path, a config key `polyrl generate` has none of)
    assert lines[-1].startswith("error: --model: ") and "chat_template.jinja" in lines[-1]


# --- checkpoints ----------------------------------------------------------------------------------


def _checkpoint(root: Path, write_model) -> Path:
    state = {"step": 1, "sampler": {}, "python_random": None, "numpy_random": None}
    return ckpt.write_checkpoint(root, 1, state, lambda model, _state: (Path(model).mkdir(), write_model(Path(model))))


def test_a_checkpoint_weight_linked_outside_does_not_verify(tmp_path):
    """The manifest is no defence: whoever made the folder wrote it (here polyrl itself hashed the
    link's target). A link out of the checkpoint is refused whatever the manifest says."""
    secret = _secret(tmp_path)
    found = _checkpoint(tmp_path / "checkpoints", lambda model: (model / "model.safetensors").symlink_to(secret))
    problem = ckpt.verify(found)
    assert problem is not None and "model/model.safetensors" in problem and "outside" in problem
    assert ckpt.newest_verified(tmp_path / "checkpoints")[0] is None


def test_a_manifest_naming_a_file_outside_the_checkpoint_does_not_verify(tmp_path):
    found = _checkpoint(tmp_path / "checkpoints", lambda model: (model / "w.bin").write_bytes(b"\0" * 8))
    secret = _secret(tmp_path)
    manifest = json.loads((found / ckpt.MANIFEST).read_text())
    rel = os.path.relpath(secret, found / "model")
    manifest["files"][f"model/{rel}"] = {"sha256": ckpt.sha256(secret), "size": secret.stat().st_size}
    (found / ckpt.MANIFEST).write_text(json.dumps(manifest))
    (found / ckpt.MARKER).write_text(json.dumps({"step": 1, "manifest_sha256": ckpt.sha256(found / ckpt.MANIFEST)}))
    problem = ckpt.verify(found, only=ckpt.MODEL_DIR)
    assert problem is not None and "outside the checkpoint" in problem


def test_a_fifo_as_a_checkpoint_state_file_is_skipped_not_read(tmp_path):
    """Listing or verifying checkpoints reads their state files: a FIFO there blocked forever."""
    found = _checkpoint(tmp_path / "checkpoints", lambda model: (model / "w.bin").write_bytes(b"\0" * 8))
    (found / ckpt.STATE_FILE).unlink()
    os.mkfifo(found / ckpt.STATE_FILE)
    results: list[tuple[Path | None, list[tuple[Path, str]]]] = []
    worker = threading.Thread(target=lambda: results.append(ckpt.newest_verified(tmp_path / "checkpoints")),
                              daemon=True)
    worker.start()
    worker.join(10)
    assert results, "listing the checkpoints blocked on a FIFO"
    newest, skipped = results[0]
    assert newest is None and skipped and "not a regular file" in skipped[0][1]
    assert ckpt.complete_checkpoints(tmp_path / "checkpoints") == []


# --- a reward model's own Python ------------------------------------------------------------------


def test_a_reward_model_folder_cannot_run_its_own_code_even_if_stdin_says_yes(tmp_path, monkeypatch):
    """``auto_map`` in config.json names Python in the folder; with trust_remote_code unset,
    transformers asked "Do you wish to run the custom code? [y/N]" on stdin in the middle of a run
    (a piped "y" ran it). polyrl never runs a reward model's code: the load is refused."""
    import transformers.dynamic_module_utils as dynamic

    from polyrl_torch.reward_model import load_reward_model

    marker = tmp_path / "ran"
    folder = tmp_path / "evil-rm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "polyrl-evil-rm",
        "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForSequenceClassification": "evil.EvilModel"},
    }))
    (folder / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('pwned')\n"
        "from transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'polyrl-evil-rm'\n")
    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\ny\ny\n"))
    with pytest.raises(RewardError, match="cannot load"):
        load_reward_model(str(folder))
    assert not marker.exists()
