"""torchrun with gloo on CPU: two ranks give the loss curve and weights of one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).parent / "distributed" / "ddp_fixed_batch.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")


def _run(cmd: list[str], out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean"])
def test_two_ranks_match_one_process_on_the_same_global_batch(tiny_model_dir, tmp_path, aggregation):
    assert TORCHRUN, "torchrun comes with torch"
    single = _run([sys.executable, str(SCRIPT), tiny_model_dir, str(tmp_path / "one.json"), aggregation],
                  tmp_path / "one.json")
    double = _run([TORCHRUN, "--standalone", "--nproc_per_node", "2", str(SCRIPT), tiny_model_dir,
                   str(tmp_path / "two.json"), aggregation], tmp_path / "two.json")
    assert single["world"] == 1 and double["world"] == 2
    np.testing.assert_allclose(double["losses"], single["losses"], rtol=1e-5, atol=1e-6)
    assert len(set(np.round(single["losses"], 6))) > 1  # the loss moves: the weights did change
    assert double["checksum"] == pytest.approx(single["checksum"], rel=1e-6)


def test_polyrl_launch_two_ranks_writes_once_and_resumes_on_one_process(tiny_model_dir, tmp_path):
    """``polyrl launch`` runs torchrun: two ranks shard the prompts; rank 0 alone writes metrics and checkpoints; a single process
    resumes the run (a different world size) and continues from the same step."""
    (tmp_path / "reward.py").write_text(
        "def digits(prompts, completions, **kw):\n"
        "    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]\n")
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[generation]\ngroup_size = 4\nmax_new_tokens = 8\n'
        '[algorithm]\nname = "reinforce"\n'  # a batch-wide baseline: needs the gathered rewards
        '[optimizer]\nlr = 1e-3\n[data]\ntask = "arithmetic"\n'
        f'[[rewards]]\nfunction = "{tmp_path / "reward.py"}:digits"\n'
        f'[train]\nsteps = 3\nprompts_per_step = 4\nthreads = 1\ncheckpoint_every = 1\noutput_dir = "{out}"\n')
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launched = subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2",
                               str(config)],
                              capture_output=True, text=True, timeout=300, env=env)
    assert launched.returncode == 0, launched.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2]  # written once, by rank 0
    assert all(m["samples_kept"] == 16 for m in lines)  # the global batch: 4 prompts x 4
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step-00000002", "step-00000003"]  # keep_checkpoints = 2, no stray temp dirs
    resumed = subprocess.run([sys.executable, "-m", "polyrl.cli", "train", str(config), "--resume",
                              "--steps", "4", "--no-progress"], capture_output=True, text=True,
                             timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [0, 1, 2, 3]


def test_launch_builds_the_multi_node_torchrun_command_and_rejects_bad_flags(capsys):
    from polyrl.cli import main

    assert main(["launch", "run.toml", "--nproc-per-node", "4", "--nnodes", "2",
                 "--rdzv-endpoint", "node0:29400", "--resume", "--dry-run"]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[1:4] == ["-m", "torch.distributed.run", "--nproc_per_node"] and printed[4] == "4"
    assert "--standalone" not in printed
    assert printed[printed.index("--rdzv-endpoint") + 1] == "node0:29400"
    assert printed[printed.index("--nnodes") + 1] == "2"
    assert printed[-4:] == ["train", "run.toml", "--no-progress", "--resume"]
    assert main(["launch", "run.toml", "--nnodes", "2", "--dry-run"]) == 2
    assert "--rdzv-endpoint" in capsys.readouterr().err
    assert main(["launch", "run.toml", "--nproc-per-node", "0", "--dry-run"]) == 2
    assert "--nproc-per-node" in capsys.readouterr().err


def test_sigterm_to_the_launcher_stops_every_rank_after_the_same_step_with_a_checkpoint(
        tiny_model_dir, tmp_path):
    """Slurm/Kubernetes stop a job with SIGTERM to the launcher; torchrun forwards it to the ranks,
    which agree on the step to stop after (a rank-local flag would deadlock the next collective)."""
    import signal
    import time

    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        '[optimizer]\nlr = 1e-3\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
        f'[train]\nsteps = 500\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{out}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2",
                             str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
    assert 2 <= len(steps) < 500, err[-2000:]
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert checkpoints[-1] == f"step-{len(steps):08d}", (checkpoints, err[-2000:])
    assert "stop requested" in err
