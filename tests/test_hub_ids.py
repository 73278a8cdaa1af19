"""``model.path`` as a Hugging Face Hub id: found in a real HF cache layout, offline, on torch and
MLX; an uncached id is one ``error:`` line naming the field and the download command."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyrl.errors import ConfigError
from polyrl.hub import looks_like_hub_id
from polyrl.registry import get_registry

REVISION = "0123456789abcdef0123456789abcdef01234567"


def populate_hf_cache(hub_cache: Path, repo_id: str, source: str) -> Path:
    """Lay ``source``'s files out as huggingface_hub does: content-addressed ``blobs/``, a
    ``snapshots/<revision>/`` of relative symlinks to them, and ``refs/main`` naming the revision."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for f in sorted(Path(source).iterdir()):
        if f.is_file() and not f.name.startswith("."):
            data = f.read_bytes()
            blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            (snapshot / f.name).symlink_to(Path("..", "..", "blobs", blob.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def _cli(hf_home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-m", "polyrl.cli", *args], capture_output=True, text=True,
                          env=env, timeout=240)


def test_hub_id_shapes():
    assert looks_like_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert looks_like_hub_id("google/gemma-3-270m@main")
    for local in ("./org/name", "/abs/path", "~/models/x", "model.gguf", "tiny-llama", "a/b/c"):
        assert not looks_like_hub_id(local)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
@pytest.mark.slow
def test_a_cached_hub_id_generates_offline(tiny_model_dir, tmp_path, backend):
    reg = get_registry()
    if backend not in reg.names() or not reg.status(backend).available:
        pytest.skip(f"{backend} not usable here")
    populate_hf_cache(tmp_path / "hf" / "hub", "tiny-org/tiny-llama", tiny_model_dir)
    done = _cli(tmp_path / "hf", "generate", "--model", "tiny-org/tiny-llama", "--backend", backend,
                "What is 2 + 3?", "--max-new-tokens", "4", "--seed", "0", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert len(out) == 1 and 1 <= len(out[0]["completion_ids"]) <= 4


@pytest.mark.faults
def test_an_uncached_hub_id_is_one_error_line(tmp_path):
    done = _cli(tmp_path / "empty-hf", "generate", "--model", "nobody/not-cached", "hi")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and "Traceback" not in done.stderr
    assert "nobody/not-cached" in lines[-1] and "hf download nobody/not-cached" in done.stderr
    with pytest.raises(ConfigError) as err:
        get_registry().resolve_model("nobody/not-cached", field="model.reference_path")
    assert err.value.field == "model.reference_path"
