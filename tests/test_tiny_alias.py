"""The ``tiny-llama`` alias is the core's: it resolves with no backend plugin loaded."""

from __future__ import annotations

import json
from pathlib import Path

from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry


def test_tiny_llama_resolves_without_any_backend_plugin(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "torch,mlx,max")
    reg = Registry(get_plugin_manager())
    assert not {"torch", "mlx", "max"} & set(reg.names())  # only the core's remote backend is left
    path = Path(reg.resolve_model("tiny-llama"))
    assert path == tmp_path / "cache" / "models" / "tiny-llama"
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert (path / "tokenizer.json").exists() and (path / "model.safetensors").exists()
    assert reg.resolve_model("smollm2-135m-instruct") == "smollm2-135m-instruct"  # torch's alias: unanswered
