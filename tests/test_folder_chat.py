"""``trainer.check_run`` (``polyrl launch`` and its ``--dry-run``) asks the model folder's tokenizer
three questions before any weight loads: how the template shows a tool's result, which prompt roles
it drops, and whether later episode turns see a context it never shows. Each loaded the tokenizer
again (three loads, about a second each on SmolLM2's); one ``FolderChat`` now loads it once.

Real tokenizers and templates; the load is counted by wrapping the real loader, which still runs.
"""

from __future__ import annotations

import pytest

from polyrl.config import RunConfig

pytest.importorskip("transformers")


def _tools_config(model: str, tmp_path) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": model, "device": "cpu", "max_length": 512},
        "data": {"task": "arithmetic", "options": {"count": 8}}, "rewards": [{"name": "numeric_match"}],
        "environment": {"tools": ["calculator"], "max_turns": 2, "max_episode_tokens": 64},
        "train": {"steps": 1, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")}})


def _counted_loads(monkeypatch) -> list[str]:
    from polyrl import remote_tokenizer

    loads: list[str] = []
    real = remote_tokenizer.folder_tokenizer

    def counting(model_path: str):
        loads.append(model_path)
        return real(model_path)

    monkeypatch.setattr(remote_tokenizer, "folder_tokenizer", counting)
    return loads


def test_the_startup_checks_load_the_folder_tokenizer_once(tiny_model_dir, tmp_path, monkeypatch):
    """A run with tools asks all three questions of the same folder: one load, not three."""
    from polyrl.trainer import check_run

    loads = _counted_loads(monkeypatch)
    check_run(_tools_config(tiny_model_dir, tmp_path))
    assert loads == [tiny_model_dir]


def test_a_folder_without_a_tokenizer_leaves_the_checks_to_the_run(tiny_model_dir, tmp_path):
    """No tokenizer files: no answer (the run's own checks stand); with them, it renders and decodes."""
    import shutil

    from polyrl.folder_chat import FolderChat

    bare = tmp_path / "bare"
    shutil.copytree(tiny_model_dir, bare, ignore=shutil.ignore_patterns("tokenizer*", "special_tokens*"))
    folder = FolderChat(str(bare))
    assert folder.chat() is None and folder.chat() is None
    chat = FolderChat(tiny_model_dir).chat()
    assert chat is not None
    encode, decode = chat
    ids = encode([{"role": "user", "content": "2+2?"}], None, True)
    assert "2+2?" in decode(ids)
