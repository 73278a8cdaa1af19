"""examples/backend_plugin works as its README says, without installing it into this environment.

A ``*.dist-info`` folder on PYTHONPATH beside the example's source is what ``pip install -e``
leaves behind, so ``importlib.metadata`` finds the example's entry point exactly as after an
install; the entry points and requirements are read from the example's own pyproject.toml, so a
wrong one there fails here. Each check runs the documented command in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from toy_dist import write_dist

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "backend_plugin"
#: the kit's checks the example may skip: features it does not declare, and no comparison backend
ALLOWED_SKIPS = ("does not declare ignore_eos", "does not declare concurrent_generate", "no comparison backend",
                 "does not implement the optional entropies hook")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The environment of a shell in which ``pip install -e examples/backend_plugin`` was run."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    site = tmp_path_factory.mktemp("site")
    write_dist(site, project["name"], project["version"], project["entry-points"])
    metadata = next(site.glob("*.dist-info")) / "METADATA"
    metadata.write_text(metadata.read_text() + "".join(f"Requires-Dist: {r}\n" for r in project["dependencies"]))
    out = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLE), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out.pop("POLYRL_LOAD_PLUGINS", None)
    out.pop("POLYRL_DISABLE_PLUGINS", None)
    return out


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def test_polyrl_backends_lists_the_example_as_usable(env, tmp_path):
    proc = _run([sys.executable, "-m", "polyrl.cli", "backends", "--json"], env, tmp_path, 120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    example = {b["name"]: b for b in data["backends"]}["example"]
    assert example["available"] is True, example["reason"]
    assert example["distribution"] == "polyrl-example-backend" and example["version"] == "0.1.0"
    assert example["capabilities"]["train_step"] and example["capabilities"]["token_prompts"]
    assert not [e for e in data["load_errors"] if e["distribution"] == "polyrl-example-backend"]


@pytest.mark.slow  # the example's whole conformance kit in a subprocess: ~10 s
def test_the_examples_conformance_tests_pass(env):
    """``pytest`` in the example's folder: every check passes, and the only skips are the
    features the example does not declare (episodes' checks run: it declares them)."""
    proc = _run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"], env, EXAMPLE, 600)
    tail = proc.stdout[-4000:]
    assert proc.returncode == 0, tail + proc.stderr[-2000:]
    assert re.search(r"\b\d\d+ passed", tail), tail
    skips = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    unexpected = [line for line in skips if not any(reason in line for reason in ALLOWED_SKIPS)]
    assert not unexpected, unexpected


EVEN_IDS = """
def even_ids(completion_ids, **kwargs):
    return [sum(i % 2 == 0 for i in ids) / max(len(ids), 1) for ids in completion_ids]
"""


def test_polyrl_train_runs_the_examples_config(env, tiny_model_dir, tmp_path):
    """``polyrl train examples/backend_plugin/train.toml`` with model and output folder moved to temp
    (``--set``) and, appended to a copy, a reward the random tiny model's completions differ on (its
    arithmetic answers all score 0, so nothing would move): the run trains and ships a changed model."""
    from safetensors.numpy import load_file

    (tmp_path / "even.py").write_text(EVEN_IDS)
    config = tmp_path / "train.toml"
    config.write_text((EXAMPLE / "train.toml").read_text() + f'\n[[rewards]]\nfunction = "{tmp_path}/even.py:even_ids"\n')
    out = tmp_path / "run"
    proc = _run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--no-progress",
                 "--set", f'model.path="{tiny_model_dir}"', "--set", f'train.output_dir="{out}"'], env, tmp_path, 300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr, proc.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(math.isfinite(s["loss"]) and s["lr"] > 0 and not s["skipped"] for s in steps), steps
    assert any(s["grad_norm"] > 0 for s in steps), steps
    before, after = load_file(f"{tiny_model_dir}/model.safetensors"), load_file(str(out / "model" / "model.safetensors"))
    assert sorted(after) == sorted(before)
    assert any(not np.array_equal(before[k], after[k]) for k in before), "training left every weight as it was"
