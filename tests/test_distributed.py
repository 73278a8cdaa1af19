"""torchrun with gloo on CPU (NCCL on a GPU): ranks give the loss curve and weights of one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polyrl.launch import cpu_count

pytest.importorskip("torch")
SCRIPT = Path(__file__).parent / "distributed" / "ddp_fixed_batch.py"
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
TWO_RANKS = [str(TORCHRUN), "--standalone", "--nproc_per_node", "2"]
#: ``polyrl launch`` refuses more CPU ranks than CPUs (raw torchrun above does not)
TWO_CPUS = pytest.mark.skipif(cpu_count() < 2, reason="polyrl launch needs a CPU per rank")


def _checked(cmd: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _run(cmd: list[str], out: Path) -> dict:
    _checked(cmd)
    return json.loads(out.read_text())


def _launch_config(tmp_path: Path, model: str, prompts: int, sections: str) -> tuple[Path, Path]:
    """(config, output dir) of a 3-step tiny run on arithmetic with a digit-count reward;
    ``sections`` adds TOML tables (algorithm, optimizer, backends, eval)."""
    (tmp_path / "reward.py").write_text(
        "def digits(prompts, completions, **kw):\n"
        "    texts = [c[0]['content'] for c in completions]  # chat prompts: TRL's assistant messages\n"
        "    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]\n")
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{model}"\ndevice = "cpu"\n{sections}[generation]\ngroup_size = 4\nmax_new_tokens = 8\n'
        f'[data]\ntask = "arithmetic"\n[[rewards]]\nfunction = "{tmp_path / "reward.py"}:digits"\n'
        f'[train]\nsteps = 3\nprompts_per_step = {prompts}\nthreads = 1\ncheckpoint_every = 1\n'
        f'output_dir = "{out}"\n')
    return config, out


def _polyrl(*args: str) -> subprocess.CompletedProcess:
    return _checked([sys.executable, "-m", "polyrl.cli", *args])


def _metrics(out: Path) -> list[dict]:
    """The training steps' lines of metrics.jsonl (not the evaluation lines before and after training)."""
    return [m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "phase" not in m]


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean --masks",
                                         "seq_mean_token_mean --masks --normaliser",
                                         "token_mean --masks --normaliser"])
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_two_ranks_match_one_process_on_the_same_global_batch(tiny_model_dir, tmp_path, aggregation):
    """token_mean runs with episode loss masks (``--masks``, unevenly kept per rank): its global
    token normaliser must count masked-in tokens only (the single process equals the masked
    reference, two ranks equal the single process). ``--normaliser``: each rank's batch carries
    its part of the rows left out (``TrainBatch.normaliser_*``, uneven over the ranks); train_step
    sums them over ranks, so two ranks still equal one process and the reference's counts."""
    assert TORCHRUN, "torchrun comes with torch"
    args = ["--aggregation", *aggregation.split()]
    single = _run([sys.executable, str(SCRIPT), tiny_model_dir, "--out", str(tmp_path / "one.json"), *args],
                  tmp_path / "one.json")
    double = _run([*TWO_RANKS, str(SCRIPT), tiny_model_dir, "--out", str(tmp_path / "two.json"), *args],
                  tmp_path / "two.json")
    if "--masks" in args:
        kept = single["tokens"][0]  # masked-in tokens of the global batch, on both world sizes
        assert double["tokens"][0] == kept and 0 < kept < single["completion_tokens"]
        assert single["losses"][0] == pytest.approx(single["reference_loss"], rel=1e-4, abs=1e-6)
        np.testing.assert_allclose(double["clip_high_fraction"], single["clip_high_fraction"], atol=1e-9)
        # TRL's clip_ratio/low_min and high_max: over every rank's completions (a max-reduce), as one process
        np.testing.assert_allclose(double["clip_extremes"], single["clip_extremes"], atol=1e-9)
        assert max(high for _, high in single["clip_extremes"]) > 0
    assert single["world"] == 1 and double["world"] == 2
    np.testing.assert_allclose(double["losses"], single["losses"], rtol=1e-5, atol=1e-6)
    assert len(set(np.round(single["losses"], 6))) > 1  # the loss moves: the weights did change
    assert double["checksum"] == pytest.approx(single["checksum"], rel=1e-6)
    # step metrics are global: the mismatch (constant inputs) and the trainer's entropy
    np.testing.assert_allclose(double["mismatch_abs"], single["mismatch_abs"], rtol=1e-6)
    assert single["mismatch_abs"][0] > 0
    # TRL's sampling/... extremes and the NaN sampler token's share: over every rank's tokens
    np.testing.assert_allclose(double["sampling"], single["sampling"], rtol=1e-6)
    abs_max, unscored, ratio_min, _, ratio_max = single["sampling"][0]
    assert abs_max > 0 and unscored > 0 and ratio_min < 1.0 < ratio_max <= 1.02 + 1e-6
    np.testing.assert_allclose(double["entropy"], single["entropy"], rtol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_one_launched_rank_runs_the_collectives_and_matches_one_process(tiny_model_dir, tmp_path, device):
    """``torchrun --nproc_per_node 1`` joins a process group of one (gloo on the CPU, NCCL on CUDA:
    the collectives of a larger world, runnable on a one-GPU machine); plain and FSDP2 training
    there equal one process without a group."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: the NCCL variant runs where torch sees one")
    one_rank = [str(TORCHRUN), "--standalone", "--nproc_per_node", "1"]
    for fsdp in ([], ["--fsdp"]):
        args = [tiny_model_dir, "--device", device, "--masks", *fsdp]
        alone = _run([sys.executable, str(SCRIPT), *args, "--out", str(tmp_path / "alone.json")],
                     tmp_path / "alone.json")
        ranked = _run([*one_rank, str(SCRIPT), *args, "--out", str(tmp_path / "ranked.json")],
                      tmp_path / "ranked.json")
        assert alone["process_group"] is None
        assert ranked["process_group"] == ("nccl" if device == "cuda" else "gloo")
        assert ranked["device"].startswith(device) and alone["device"].startswith(device)
        np.testing.assert_allclose(ranked["losses"], alone["losses"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ranked["grad_norms"], alone["grad_norms"], rtol=1e-5)
        assert ranked["checksum"] == pytest.approx(alone["checksum"], rel=1e-6)
        assert len(set(np.round(alone["losses"], 6))) > 1


@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_fsdp_two_ranks_match_one_process_and_checkpoints_cross_world_sizes(tiny_model_dir, tmp_path):
    """FSDP2 (weights, gradients and AdamW state sharded over 2 gloo ranks, uneven micro-batch
    counts) trains exactly as one unsharded process; its checkpoint is the same full state, and a
    checkpoint of either kind resumes in the other. The batch carries episode loss masks: the
    sharded forward's log-probs are restricted to the sampled tokens as the plain one's are."""
    import torch
    from safetensors.torch import load_file

    def script(*args: str) -> list[str]:
        return [str(SCRIPT), tiny_model_dir, "--masks", *args]

    single = _run([sys.executable, *script("--out", str(tmp_path / "one.json"), "--save", str(tmp_path / "one"))],
                  tmp_path / "one.json")
    sharded = _run([*TWO_RANKS, *script("--out", str(tmp_path / "two.json"), "--fsdp",
                                        "--save", str(tmp_path / "two"))], tmp_path / "two.json")
    assert single["world"] == 1 and sharded["world"] == 2
    assert single["losses"][0] == pytest.approx(single["reference_loss"], rel=1e-4, abs=1e-6)
    assert sharded["tokens"] == single["tokens"] and single["tokens"][0] < single["completion_tokens"]
    np.testing.assert_allclose(sharded["losses"], single["losses"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sharded["grad_norms"], single["grad_norms"], rtol=1e-5)
    assert len(set(np.round(single["losses"], 6))) > 1
    assert sharded["checksum"] == pytest.approx(single["checksum"], rel=1e-6)
    assert sharded["generated"] == single["generated"]  # rank 0 decoded while rank 1 decoded longer

    full, gathered = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("one", "two"))
    assert sorted(full) == sorted(gathered)
    for name in full:
        torch.testing.assert_close(gathered[name], full[name], rtol=1e-4, atol=1e-4)
    opt_one, opt_two = (torch.load(tmp_path / d / "torch_state" / "optimizer.pt", weights_only=True)
                        for d in ("one", "two"))
    assert opt_two["param_groups"] == opt_one["param_groups"]
    for index, moments in opt_one["state"].items():
        torch.testing.assert_close(opt_two["state"][index]["exp_avg"], moments["exp_avg"], rtol=1e-3, atol=1e-6)

    # the sharded run continues from the unsharded checkpoint, and the other way round
    into_fsdp = _run([*TWO_RANKS, *script("--out", str(tmp_path / "r2.json"), "--fsdp", "--steps", "2",
                                          "--resume", str(tmp_path / "one"))], tmp_path / "r2.json")
    into_one = _run([sys.executable, *script("--out", str(tmp_path / "r1.json"), "--steps", "2",
                                             "--resume", str(tmp_path / "two"))], tmp_path / "r1.json")
    np.testing.assert_allclose(into_fsdp["losses"], into_one["losses"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(into_fsdp["grad_norms"], into_one["grad_norms"], rtol=1e-4)
    assert into_fsdp["checksum"] == pytest.approx(into_one["checksum"], rel=1e-6)
    assert into_fsdp["checksum"] != pytest.approx(sharded["checksum"], rel=1e-6)  # it trained on


@TWO_CPUS
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_polyrl_launch_with_fsdp_trains_evaluates_checkpoints_and_resumes_in_one_process(
        tiny_model_dir, tmp_path):
    """The whole trainer under FSDP: 3 prompts on 2 ranks (uneven shards), num_iterations=2 (old
    log-probs on sharded weights), evaluation sharded over the ranks, checkpoints gathered; then one
    plain process resumes the run."""
    config, out = _launch_config(tmp_path, tiny_model_dir, prompts=3, sections=(
        '[backends.options]\nfsdp = true\n[algorithm]\nname = "grpo"\nnum_iterations = 2\n'
        '[optimizer]\nlr = 1e-3\nmicro_batch_size = 4\n[eval]\ncount = 3\nreward = "numeric_match"\n'))
    launched = _polyrl("launch", "--nproc-per-node", "2", str(config))
    summary = json.loads(launched.stdout)  # printed once, by rank 0
    assert summary["steps"] == 3 and summary["eval_after"]["eval/count"] == 3
    assert launched.stderr.count("checkpoint saved") == 3  # once per step, the final one not twice
    lines = _metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert all(m["samples_kept"] == 12 and np.isfinite(m["loss"]) for m in lines)
    assert len({round(m["loss"], 6) for m in lines}) == 3
    _polyrl("train", str(config), "--resume", "--steps", "4", "--no-progress")
    assert [m["step"] for m in _metrics(out)] == [1, 2, 3, 4]


@TWO_CPUS
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_trls_evaluation_with_the_runs_rewards_is_gathered_over_the_ranks(tiny_model_dir, tmp_path):
    """eval.reward = "run", greedy = false (TRL's evaluation) on 2 ranks, 3 rows (uneven): every
    rank's sampled completions, each reward's scores and lengths reach one evaluation, and its
    loss (eval.loss, with the KL term) is computed from every rank's completions."""
    config, out = _launch_config(tmp_path, tiny_model_dir, prompts=2, sections=(
        '[algorithm]\nbeta = 0.1\n[eval]\ncount = 3\nreward = "run"\nsamples = 2\ngreedy = false\nbefore = false\n'
        'every = 1\nloss = true\n'))
    summary = json.loads(_polyrl("launch", "--nproc-per-node", "2", str(config)).stdout)
    records = [json.loads(line) for line in (out / "eval_completions.jsonl").read_text().splitlines()]
    assert {r["phase"] for r in records} == {"during"} and not any(r["greedy"] for r in records)
    for line in _metrics(out):
        done = [r for r in records if r["after_steps"] == line["step"]]
        assert sorted(r["prompt_index"] for r in done) == [0, 0, 1, 1, 2, 2]
        assert line["eval/sampled_reward_mean"] == pytest.approx(np.mean([r["reward"] for r in done]))
        assert line["eval/reward/digits/mean"] == pytest.approx(np.mean([r["rewards"]["digits"] for r in done]))
        assert line["eval/completion_len_mean"] > 0 and "eval/accuracy" not in line
        assert np.isfinite(line["eval/loss"]) and line["eval/kl"] >= 0
        # TRL's eval lengths and flat-group share over every rank's completions (their cut flags gathered)
        assert line["eval/completion_len_min"] <= line["eval/completion_len_mean"] <= line["eval/completion_len_max"]
        assert 0 <= line["eval/clipped_ratio"] <= 1 and 0 <= line["eval/frac_reward_zero_std"] <= 1
    assert summary["eval_after"] == {k: v for k, v in _metrics(out)[-1].items() if k.startswith("eval/")}


@TWO_CPUS
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_polyrl_launch_two_ranks_writes_once_and_resumes_on_one_process(tiny_model_dir, tmp_path):
    """``polyrl launch`` runs torchrun: two ranks shard the prompts; rank 0 alone writes metrics and checkpoints; a single process
    resumes the run (a different world size) and continues from the same step."""
    config, out = _launch_config(tmp_path, tiny_model_dir, prompts=4, sections=(
        '[algorithm]\nname = "reinforce"\n'  # a batch-wide baseline: needs the gathered rewards
        '[optimizer]\nlr = 1e-3\n'))
    _polyrl("launch", "--nproc-per-node", "2", str(config))
    lines = _metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3]  # written once, by rank 0
    assert all(m["samples_kept"] == 16 for m in lines)  # the global batch: 4 prompts x 4
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "step-00000002", "step-00000003"]  # keep_checkpoints = 2, no stray temp dirs
    _polyrl("train", str(config), "--resume", "--steps", "4", "--no-progress")
    assert [m["step"] for m in _metrics(out)] == [1, 2, 3, 4]


@TWO_CPUS
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_two_ranks_split_their_shards_into_the_same_minibatch_updates(tiny_model_dir, tmp_path):
    """algorithm.minibatches under a launcher: each rank splits its 4 samples into 5 parts; the
    fifth is empty on both and skipped on both, so every rank makes the same 4 train_step calls
    (collectives) a step, and the checkpoint counts 4 updates a step."""
    from polyrl import checkpoint as ckpt

    config, out = _launch_config(tmp_path, tiny_model_dir, prompts=2, sections=(
        '[algorithm]\nname = "grpo"\nminibatches = 5\n[optimizer]\nlr = 1e-3\n'))
    _polyrl("launch", "--nproc-per-node", "2", str(config))
    lines = _metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3] and not any(m.get("skipped") for m in lines)
    newest = ckpt.latest_checkpoint(out / "checkpoints")
    assert newest is not None and ckpt.read_state(newest)["updates_applied"] == 3 * 4


LAUNCH_CONFIG = ('[model]\npath = "tiny-llama"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
                 '[train]\nsteps = 2\nprompts_per_step = 2\n')


@pytest.fixture()
def launch_toml(tmp_path: Path) -> Path:
    """A valid config whose output_dir is ``tmp_path/run``: a rank that starts would create it."""
    path = tmp_path / "run.toml"
    path.write_text(LAUNCH_CONFIG + f'output_dir = "{tmp_path / "run"}"\n')
    return path


def _launch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_launch_builds_the_multi_node_torchrun_command_and_rejects_bad_flags(launch_toml, capsys, monkeypatch):
    import shlex

    from polyrl import launch
    from polyrl.cli import main

    monkeypatch.setattr(launch, "cuda_gpu_count", lambda: 0)
    monkeypatch.setattr(launch, "cpu_count", lambda: 8)
    assert main(["launch", str(launch_toml), "--nproc-per-node", "4", "--nnodes", "2",
                 "--rdzv-endpoint", "node0:29400", "--set", "train.prompts_per_step=8", "--resume", "--dry-run"]) == 0
    printed = shlex.split(capsys.readouterr().out)
    assert printed[1:4] == ["-m", "torch.distributed.run", "--nproc_per_node"] and printed[4] == "4"
    assert "--standalone" not in printed
    assert printed[printed.index("--rdzv-endpoint") + 1] == "node0:29400"
    assert printed[printed.index("--nnodes") + 1] == "2"
    assert printed[-6:] == ["train", str(launch_toml), "--no-progress", "--resume", "--set", "train.prompts_per_step=8"]
    assert main(["launch", str(launch_toml), "--nnodes", "2", "--dry-run"]) == 2
    assert "--rdzv-endpoint" in capsys.readouterr().err
    assert main(["launch", str(launch_toml), "--nproc-per-node", "0", "--dry-run"]) == 2
    assert "--nproc-per-node" in capsys.readouterr().err


@pytest.mark.parametrize(("endpoint", "says"), [("node0:99999", "has the port '99999'"), ("node0:abc", "has the port 'abc'"),
                                                (":29400", "names no host"), ("not a host", "names no host")])
def test_a_rendezvous_endpoint_torchrun_cannot_read_is_refused(endpoint, says):
    """--dry-run printed the command as checked, and the launch then stopped on every node with
    "torchrun failed: ValueError: The port number of the rendezvous endpoint ...", naming no flag."""
    from polyrl.errors import ConfigError
    from polyrl.launch import check_endpoint

    with pytest.raises(ConfigError) as info:
        check_endpoint(endpoint)
    assert info.value.field == "--rdzv-endpoint" and info.value.message.startswith(says), info.value
    for fine in ("node0", "10.0.0.1:29400", "[::1]:29400", "node0:0"):
        check_endpoint(fine)


def test_a_bad_rendezvous_endpoint_is_one_error_line_and_no_dry_run_command(launch_toml, capsys, monkeypatch):
    from polyrl import launch
    from polyrl.cli import main

    monkeypatch.setattr(launch, "cuda_gpu_count", lambda: 0)
    monkeypatch.setattr(launch, "cpu_count", lambda: 8)
    assert main(["launch", str(launch_toml), "--nproc-per-node", "1", "--nnodes", "2", "--rdzv-endpoint", "node0:99999",
                 "--dry-run"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: --rdzv-endpoint: has the port '99999'") and "Fix: pass HOST:PORT of node 0" in line
    assert not captured.out


@pytest.mark.faults
@pytest.mark.parametrize("device, gpus, nproc, says", [
    ("auto", 0, 9, "8 CPU"),  # no GPU: the ranks train on the CPU
    ("cpu", 2, 9, "8 CPU"),
    ("auto", 2, 3, "2 CUDA GPU"),  # as a rank would refuse it: one GPU per rank
    ("cuda", 0, 1, "0 CUDA GPU"),
])
def test_more_ranks_than_the_machine_holds_is_refused_naming_the_flag(
        launch_toml, capsys, monkeypatch, device, gpus, nproc, says):
    from polyrl import launch
    from polyrl.cli import main

    monkeypatch.setattr(launch, "cuda_gpu_count", lambda: gpus)
    monkeypatch.setattr(launch, "cpu_count", lambda: 8)
    sets = ["--set", f"model.device={device}", "--set", "train.prompts_per_step=16"]
    assert main(["launch", str(launch_toml), "--nproc-per-node", str(nproc), *sets, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --nproc-per-node: ") and says in err[0], err
    fits = main(["launch", str(launch_toml), "--nproc-per-node", str(max(1, nproc - 1)), *sets, "--dry-run"])
    assert fits == (2 if device == "cuda" else 0)  # one rank per GPU or CPU is the limit


@pytest.mark.faults
@pytest.mark.parametrize("args, says", [
    (["nope.toml"], "config file 'nope.toml' not found"),
    (["{config}", "--set", "x.y=1"], "unknown section [x]"),
    (["{config}", "--steps", "-5"], "train.steps: must be >= 1"),
    (["{config}", "--nproc-per-node", "100000"], "--nproc-per-node"),
    (["{config}", "--set", "train.prompts_per_step=1", "--dry-run"], "train.prompts_per_step"),
    (["nope.toml", "--dry-run"], "config file 'nope.toml' not found"),
    # what `polyrl train` refuses before loading a model: --dry-run said "fine" and every rank refused it
    (["{config}", "--set", "rewards.0.name=nosuch_reward", "--dry-run"], "unknown reward 'nosuch_reward'"),
    (["{config}", "--set", 'logging.report_to=["nosuch_tracker"]', "--dry-run"], "unknown tracker 'nosuch_tracker'"),
    (["{config}", "--set", "backends.options.packd_generation=true", "--dry-run"], "packd_generation"),
    (["{config}", "--set", "model.path=/nonexistent/model", "--dry-run"], "model.path"),
])
def test_a_bad_launch_is_one_error_line_before_any_rank_starts(launch_toml, tmp_path, args, says):
    """The launcher loads the config as every rank would, so a bad one is refused once, here,
    not once per rank under torchrun's ChildFailedError traceback."""
    out = _launch(*(a.replace("{config}", str(launch_toml)) for a in args), cwd=tmp_path)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(err) == 1 and err[0].startswith("error: ") and says in err[0], out.stderr
    assert not out.stdout and not (tmp_path / "run").exists()  # no rank started, no command printed


@pytest.mark.slow
def test_dry_run_prints_a_command_that_pastes_into_a_shell_as_these_arguments(launch_toml, tmp_path):
    import shlex

    out = _launch(str(launch_toml), "--dry-run", "--nproc-per-node", "1", "--nnodes", "2", "--rdzv-endpoint", "node0:29400",
                  "--rdzv-id", "$(touch pwned)", "--set", "train.output_dir=out dir; `touch pwned`",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    assert argv[argv.index("--rdzv-id") + 1] == "$(touch pwned)"
    assert argv[argv.index("--rdzv-endpoint") + 1] == "node0:29400"
    assert argv[-2:] == ["--set", "train.output_dir=out dir; `touch pwned`"]
    pasted = subprocess.run(["bash", "-c", "printf '%s\\n' " + out.stdout.strip()], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert pasted.stdout.splitlines() == argv and not (tmp_path / "pwned").exists()


def test_a_signal_landing_after_the_stop_gather_is_kept_for_the_next_gather() -> None:
    """The handler's flag is only read at the collective: a write-back of the gathered answer would erase a
    SIGTERM that arrived just after it, and that rank would train on while its peers left (both hang)."""
    from types import SimpleNamespace

    from polyrl.trainer import Trainer

    rank = SimpleNamespace(stop_requested=False)

    class PeerSawNothing:
        def all_gather(self, mine: object) -> list[object]:
            answers = [mine, False]
            rank.stop_requested = True  # the signal lands as the gather returns
            return answers

    rank.train_engine = PeerSawNothing()
    assert Trainer._agree_to_stop(rank) is False  # nobody had asked yet: train one more step
    assert rank.stop_requested is True  # ... and the late signal is still there
    assert Trainer._agree_to_stop(rank) is True  # so the next gather stops every rank


def test_a_stop_a_checkpoint_or_an_error_asked_on_one_rank_is_agreed_by_every_rank() -> None:
    """An observer (polyrl.trl's callbacks) on one rank only asking to stop or save, or raising: every rank
    acts on it after the same step (a rank saving or raising alone would leave its peer in a collective)."""
    from types import SimpleNamespace

    from polyrl.errors import CallbackError
    from polyrl.run_observer import StepAsk
    from polyrl.trainer import Trainer

    def peer_asked(theirs: StepAsk) -> SimpleNamespace:
        engine = SimpleNamespace(all_gather=lambda mine: [mine, (False, theirs.stop, theirs.save, theirs.why,
                                                                 theirs.failed, theirs.epoch_stop, theirs.cancel_save)])
        return SimpleNamespace(stop_requested=False, train_engine=engine)

    stop, agreed = Trainer._agree_after_step(peer_asked(StepAsk(stop=True, why="a callback")), StepAsk())
    assert stop and agreed.stop and agreed.why == "a callback" and not agreed.save
    stop, agreed = Trainer._agree_after_step(peer_asked(StepAsk(save=True)), StepAsk())
    assert not stop and agreed.save
    stop, agreed = Trainer._agree_after_step(peer_asked(StepAsk()), StepAsk())
    assert not stop and agreed == StepAsk()
    stop, agreed = Trainer._agree_after_step(peer_asked(StepAsk(epoch_stop=True)), StepAsk())
    assert not stop and agreed == StepAsk(epoch_stop=True)  # every rank's sampler starts the next epoch
    # a save_steps checkpoint a callback cancelled (should_save cleared) is skipped only where every rank cancelled it
    assert not Trainer._agree_after_step(peer_asked(StepAsk(cancel_save=True)), StepAsk())[1].cancel_save
    assert Trainer._agree_after_step(peer_asked(StepAsk(cancel_save=True)), StepAsk(cancel_save=True))[1].cancel_save
    with pytest.raises(CallbackError, match="Broken.on_log raised"):
        Trainer._agree_after_step(peer_asked(StepAsk(stop=True, failed="callback Broken.on_log raised X")), StepAsk())


@TWO_CPUS
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_sigterm_to_the_launcher_stops_every_rank_after_the_same_step_with_a_checkpoint(
        tiny_model_dir, tmp_path):
    """Slurm/Kubernetes stop a job with SIGTERM to the launcher; torchrun forwards it to the ranks,
    which agree on the step to stop after (a rank-local flag would deadlock the next collective)."""
    import signal
    import time

    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        '[optimizer]\nlr = 1e-3\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "numeric_match"\n'
        f'[train]\nsteps = 5000\nprompts_per_step = 2\nthreads = 1\noutput_dir = "{out}"\n')
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
    assert 2 <= len(steps) < 5000, err[-2000:]
    root = out / "checkpoints"
    checkpoints = sorted(p.name for p in root.iterdir()) if root.is_dir() else []  # the ranks' stderr if none
    assert checkpoints and checkpoints[-1] == f"step-{len(steps):08d}", (checkpoints, err[-2000:])
    assert "stop requested" in err


def test_fsdp_option_is_checked_and_a_no_op_in_one_process(tiny_model_dir, monkeypatch):
    """One config runs anywhere: fsdp=true alone trains unsharded; a non-boolean value, or LoRA
    together with FSDP, is refused naming the field."""
    from polyrl.engine import Engine
    from polyrl.errors import ConfigError
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig, LoraConfig
    from polyrl_torch import distributed, sharding

    engine = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", options={"fsdp": True}))
    assert engine.raw.fsdp is None and engine.raw.optimizer is not None
    with pytest.raises(ConfigError) as bad:
        Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", options={"fsdp": "yes"}))
    assert bad.value.field == "backends.options.fsdp"
    lora = Engine(get_registry(), "torch", EngineConfig(model=tiny_model_dir, role="train", lora=LoraConfig(rank=2)))
    monkeypatch.setattr(distributed, "active", lambda: True)  # as under torchrun, before any collective
    with pytest.raises(ConfigError) as both:
        sharding.shard(lora.raw)
    assert both.value.field == "backends.options.fsdp" and "LoRA" in str(both.value)


def _parent(proc_dir: Path) -> int:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _launch_until_done(cmd: list[str], limit_s: float = 150) -> subprocess.CompletedProcess:
    """Run a launch, killing its whole process group past ``limit_s`` (a deadlocked rank fails the test)."""
    import signal

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        ranks = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and _parent(d) == proc.pid]
        for pid in [proc.pid, *ranks]:  # torchrun starts its ranks in sessions of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"still running after {limit_s} s (a rank waits in a collective): {err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 12-20 s
def test_a_rank_leaving_while_its_peer_waits_in_a_collective_exits(tmp_path):
    """gloo's exit barrier never returned on a rank whose peer sat in another collective."""
    script = Path(__file__).parent / "distributed" / "rank_leaves_mid_collective.py"
    done = _launch_until_done([*TWO_RANKS, str(script)], limit_s=60)
    assert done.returncode != 0 and "exitcode  : 3" in done.stderr, done.stderr[-3000:]


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 12-20 s
def test_a_reward_failing_on_one_rank_stops_every_rank_together_with_the_state_saved(tiny_model_dir, tmp_path):
    """Rank 1's reward raises at step 2: both ranks stop there with the same error line (rank 0 sat
    in the next all_gather forever), and the state before step 2 is checkpointed collectively, as in
    one process. FSDP with an eval set of one row: rank 1 has no eval prompt but takes part in the
    sharded generator's weight gather (it skipped it: a gloo collective mismatch aborted the run)."""
    (tmp_path / "flaky.py").write_text(
        "import os\ncalls = []\n"
        "def flaky(prompts, completions, **kw):\n"
        "    calls.append(1)\n"
        "    if os.environ['RANK'] == '1' and len(calls) == 2:\n"
        "        raise ValueError('the grader is down on rank 1')\n"
        "    return [float(len(c[0]['content']) % 3) for c in completions]\n")
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n[backends.options]\nfsdp = true\n'
        '[generation]\ngroup_size = 2\nmax_new_tokens = 4\n[optimizer]\nlr = 1e-3\n[data]\ntask = "arithmetic"\n'
        f'[[rewards]]\nfunction = "{tmp_path / "flaky.py"}:flaky"\n[eval]\ncount = 1\nreward = "numeric_match"\n'
        f'[train]\nsteps = 3\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = 100\noutput_dir = "{out}"\n')
    done = _launch_until_done([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]  # one line, not one per rank
    assert "on rank 1 of 2" in errors[0] and "the grader is down on rank 1" in errors[0]
    assert "Traceback" not in done.stderr and "torchrun's own is in" in done.stderr
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m.get("phase")) for m in lines] == [(0, "before"), (1, None)]  # written once, by rank 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000001"]


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 30-60 s
def test_a_checkpoint_write_failing_on_rank_0_stops_every_rank_promptly(tiny_model_dir, tmp_path):
    """Rank 0's checkpoint write fails before the backend's save (checkpoints/ replaced by a file
    mid-run), while rank 1 sits in that save's collective (FSDP's gather): rank 0 waited a minute
    at its exit barrier for rank 1 (and its mkdir error was a traceback with no error line). Now
    it leaves at once, its closed connection stops rank 1, and the launcher prints rank 0's line."""
    import time

    (tmp_path / "breaker.py").write_text(
        "import os, shutil\nfrom pathlib import Path\ncalls = []\n"
        "def breaker(prompts, completions, **kw):\n"
        "    calls.append(1)\n"
        "    if os.environ['RANK'] == '0' and len(calls) == 1:  # during step 1, before its checkpoint\n"
        f"        (Path({str(tmp_path / 'run')!r}) / 'checkpoints').write_text('not a folder')\n"
        "    return [float(len(c[0]['content']) % 3) for c in completions]\n")
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n[backends.options]\nfsdp = true\n'
        '[generation]\ngroup_size = 2\nmax_new_tokens = 4\n[data]\ntask = "arithmetic"\n'
        f'[[rewards]]\nfunction = "{tmp_path / "breaker.py"}:breaker"\n'
        f'[train]\nsteps = 3\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = 1\n'
        f'output_dir = "{tmp_path / "run"}"\n')
    done = _launch_until_done([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)])
    ended = time.time()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]
    # rank 1 leaves its own line ("rank 0 failed first: ...") unless torchrun stops it before it
    # sees the closed connection (a loaded machine): then rank 0's line alone, as is
    said = errors[0].removeprefix("error: ").removeprefix("rank 0 failed first: ")
    assert said.startswith("cannot write the checkpoint of step 1"), errors[0]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    log_folder = Path(done.stderr.split("torchrun's own is in ")[1].split()[0]).parent
    failed_at = json.loads((log_folder / "rank-0.json").read_text())["time"]
    assert ended - failed_at < 30, f"the launch ended {ended - failed_at:.0f} s after rank 0 failed"  # was > 60


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 12-20 s
def test_ranks_that_loaded_other_reward_code_refuse_to_start_together(tiny_model_dir, tmp_path):
    """A reward file edited between the ranks' starts (here: code that differs by rank) is one error
    on every rank before step 0; they trained on one "global" batch scored two ways."""
    (tmp_path / "edited.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n    def score(prompts, completions, **kw):\n        return [0.0] * len(completions)\n"
        "else:\n    def score(prompts, completions, **kw):\n        return [1.0] * len(completions)\n")
    config, out = _launch_config(tmp_path, tiny_model_dir, prompts=2, sections="")
    config.write_text(config.read_text().replace(f'{tmp_path / "reward.py"}:digits', f'{tmp_path / "edited.py"}:score'))
    done = _launch_until_done([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and len(errors) == 1 and "rank(s) 1 loaded another reward code" in errors[0], \
        done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "ChildFailedError" not in done.stderr, done.stderr[-3000:]
    assert not (out / "metrics.jsonl").exists()


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 12-20 s
def test_an_output_dir_another_run_holds_is_refused_by_the_launcher_and_by_every_rank(launch_toml, tmp_path,
                                                                                     tiny_model_dir):
    """polyrl launch refuses it before any rank starts; ranks started by torchrun itself (as on many
    nodes) refuse together: rank 0 alone took the lock, and rank 1 waited for it in a collective."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom polyrl.run_lock import OutputDirLock\n"
                               f"OutputDirLock({str(tmp_path / 'run')!r}).acquire()\nprint('held', flush=True)\n"
                               "time.sleep(300)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        launched = _launch(str(launch_toml), "--nproc-per-node", "1", "--dry-run", cwd=tmp_path)
        err = launched.stderr.strip().splitlines()
        assert launched.returncode == 2 and len(err) == 1, launched.stderr
        assert err[0].startswith("error: train.output_dir: ") and f"pid {holder.pid}" in err[0]
        config, _ = _launch_config(tmp_path, tiny_model_dir, prompts=2, sections="")
        done = _launch_until_done([*TWO_RANKS, "-m", "polyrl.cli", "train", str(config), "--no-progress"])
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert done.returncode != 0 and len(errors) == 2, done.stderr[-3000:]
        assert all(e.startswith("error: train.output_dir: ") and "in use by another trainer" in e for e in errors)
    finally:
        holder.kill()
        holder.wait()


RANKED_ENV = '''
import os

from polyrl.agents import Observation


class Ranked:
    """Rank r's episodes take options["turns"][r] assistant turns, or with options["by_row"] 1 to 4 by
    the row (ranks holding other rows differ); options["broken_rank"]'s cannot start."""

    def __init__(self, options):
        rank = int(os.environ.get("RANK", "0"))
        self.by_row, self.broken = options.get("by_row", False), rank == options.get("broken_rank", -1)
        self.turns = 0 if self.by_row else options["turns"][rank]
        self.seen = 0

    def reset(self, row):
        if self.broken:
            raise ValueError("this rank's game server is down")
        if self.by_row:
            self.turns = 1 + sum(map(ord, str(row))) % 4
        self.seen = 0
        return [{"role": "user", "content": f"Say anything about {row['question']!r}."}]  # one prompt per row

    def step(self, message):
        self.seen += 1
        return Observation([{"role": "user", "content": "Go on."}], reward=float(len(message["content"]) % 3),
                           done=self.seen >= self.turns)


def make(options):
    return Ranked(options)
'''


@TWO_CPUS
@pytest.mark.slow  # two launched ranks: 10-20 s each
@pytest.mark.parametrize("sharding, environment, steps", [
    # rank 0's episodes go on for up to 4 turns, rank 1's end after 1; rank 1 has no eval row
    ("[backends.options]\nfsdp = true\n", "{ turns = [4, 1] }", 2),
    # rank 1's environment never starts: only rank 0 generates; the run goes on on both
    ("", "{ turns = [4, 1], broken_rank = 1 }", 3),
], ids=["fsdp", "ddp"])
def test_launched_episodes_whose_turns_differ_by_rank_train_to_the_end(tiny_model_dir, tmp_path, sharding,
                                                                        environment, steps):
    """Multi-turn episodes make each rank call generate a different number of times. Under FSDP every
    call gathered the sharded weights (a collective): rank 0's second turn waited for a rank 1 that
    had moved on to the rewards (a gloo mismatch, or a hang until its 30-min timeout). With DDP, an
    environment failing every episode on rank 1 alone stopped rank 1 alone after 3 rollouts, while
    rank 0, whose episodes worked, went on without it."""
    (tmp_path / "ranked_env.py").write_text(RANKED_ENV)
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n{sharding}'
        '[generation]\ngroup_size = 4\nmax_new_tokens = 16\nstop = ["a", "e", " "]\n[optimizer]\nlr = 1e-3\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "environment"\n'
        '[[rewards]]\nname = "length_penalty"\nweight = 0.5\noptions = { target = 2, unit = "chars" }\n'
        f'[environment]\nname = "{tmp_path / "ranked_env.py"}:make"\nmax_turns = 4\nmax_episode_tokens = 96\n'
        f'options = {environment}\n[eval]\ncount = 1\nreward = "environment"\n'
        f'[train]\nsteps = {steps}\nprompts_per_step = 2\nthreads = 1\ncheckpoint_every = 1\noutput_dir = "{out}"\n')
    done = _launch_until_done([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)],
                              limit_s=240)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 0 and not errors, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["steps"] == steps and summary["eval_after"]["eval/count"] == 1
    lines = _metrics(out)
    assert [m["step"] for m in lines] == list(range(1, steps + 1))
    trained = [m for m in lines if not m.get("skipped")]
    assert trained and all(np.isfinite(m["loss"]) for m in trained)
    assert max(m["episode/turns_mean"] for m in lines) > 1  # rank 0's (rank 1's are 1 turn, or none)
    assert (out / "checkpoints" / f"step-{steps:08d}" / "COMPLETE").exists()


STUCK_ENV = '''
import os
import time

from polyrl.agents import Observation


class Stuck:
    """Rank 1's episodes never start: its game server does not answer (no error, no end)."""

    def reset(self, row):
        if os.environ.get("RANK") == "1":
            time.sleep(900)
        return [{"role": "user", "content": "Say anything."}]

    def step(self, message):
        return Observation([{"role": "user", "content": "Done."}], reward=1.0, done=True)


def make(options):
    return Stuck()
'''


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 40-70 s (torchrun gives the stuck rank 30 s after SIGTERM)
def test_a_rank_stuck_outside_the_rewards_stops_the_launch_at_the_collective_timeout(tiny_model_dir, tmp_path):
    """Rank 1 hangs in its environment (under a 900 s environment timeout): rank 0 waited for it in
    the next collective until gloo's 30-minute default. train.collective_timeout_s bounds that wait,
    and the launch ends with one error line naming the step and the setting, no traceback."""
    import time

    (tmp_path / "stuck_env.py").write_text(STUCK_ENV)
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n[generation]\ngroup_size = 2\nmax_new_tokens = 4\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "environment"\n'
        f'[environment]\nname = "{tmp_path / "stuck_env.py"}:make"\nmax_turns = 1\nenv_timeout_s = 900\n'
        f'[train]\nsteps = 2\nprompts_per_step = 2\nthreads = 1\ncollective_timeout_s = 10\n'
        f'output_dir = "{tmp_path / "run"}"\n')
    t0 = time.monotonic()
    done = _launch_until_done([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)],
                              limit_s=170)
    assert time.monotonic() - t0 < 170
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith("error: train.collective_timeout_s: rank 0 of 2 waited 10 s in all_gather during step 1"), errors
    assert "--set train.collective_timeout_s=" in errors[0]
    assert "Traceback" not in done.stderr and "torchrun's own is in" in done.stderr


LATE_TRAIN_STEP = '''
import os

if os.environ.get("RANK") == "1":  # late into the update's forward: its peer waits in FSDP's all_gather
    import time

    from polyrl_torch.sharding import TrainingForward

    on_time = TrainingForward.per_sequence

    def late(self, *args, **kwargs):
        time.sleep(300)
        return on_time(self, *args, **kwargs)

    TrainingForward.per_sequence = late
'''


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 50-80 s (torchrun gives the late rank 30 s after SIGTERM)
def test_a_timeout_inside_fsdps_own_collectives_is_the_same_one_line_naming_the_phase(tiny_model_dir, tmp_path):
    """Rank 1 is late into the update's forward, so rank 0 waits in FSDP's all_gather (past polyrl's
    own all_reduce wrappers of train_step): gloo's raw "Timed out waiting ... ms" came back blamed on the backend's hook, naming
    neither the phase nor train.collective_timeout_s. The rank-1 delay is injected at interpreter
    start (sitecustomize); the collectives and the launch are real."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(LATE_TRAIN_STEP)
    config, _ = _launch_config(tmp_path, tiny_model_dir, prompts=2, sections='[backends.options]\nfsdp = true\n')
    config.write_text(config.read_text().replace("threads = 1\n", "threads = 1\ncollective_timeout_s = 10\n")
                      .replace(":digits", ":noise"))
    (tmp_path / "reward.py").write_text("import random\n\n\ndef noise(completions, **kw):\n"
                                        "    return [random.random() for _ in completions]  # never a skipped update\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(shim), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)],
                          capture_output=True, text=True, env=env, timeout=200)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith("error: train.collective_timeout_s: rank 0 of 2 waited 10 s in FSDP's all_gather/reduce_scatter of train_step "
                                "during step 1"), errors
    assert "--set train.collective_timeout_s=" in errors[0] and "Traceback" not in proc.stderr


@TWO_CPUS
@pytest.mark.faults
@pytest.mark.slow  # two launched ranks: 15-25 s
def test_ranks_whose_model_path_holds_other_weights_refuse_to_start(tiny_model_dir, tmp_path):
    """model.path = "model" read on each node's own disk (here: each rank's working folder), where
    node 1 holds another checkpoint: the ranks averaged gradients of two models without a word."""
    from safetensors.numpy import load_file, save_file

    for node in ("node0", "node1"):
        shutil.copytree(tiny_model_dir, tmp_path / node / "model")
    weights = tmp_path / "node1" / "model" / "model.safetensors"
    save_file({k: v * v.dtype.type(0.5) if v.dtype.kind == "f" else v for k, v in load_file(str(weights)).items()},
              str(weights), metadata={"format": "pt"})
    config, out = _launch_config(tmp_path, "model", prompts=2, sections="")
    train = f"cd {tmp_path}/node$RANK && exec {sys.executable} -m polyrl.cli train {config} --no-progress"
    done = _launch_until_done([*TWO_RANKS, "--no-python", "bash", "-c", train])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and errors, done.stderr[-3000:]
    assert all("rank(s) 1 loaded another model checkpoint than rank 0" in e for e in errors), errors
    assert not (out / "metrics.jsonl").exists()


@TWO_CPUS
@pytest.mark.slow  # two launched ranks: 15-30 s
def test_a_launched_run_logs_the_whole_batch_once_as_one_process_does(tiny_model_dir, tmp_path):
    """Metrics, completions.jsonl and TensorBoard of a launched run describe every rank's episodes:
    episode/* and the reward means were rank 0's half of the batch, and so were the completions
    log's samples, while reward_mean covered the whole batch. Rank 0 alone writes each series."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (tmp_path / "row_env.py").write_text(RANKED_ENV)
    out = tmp_path / "run"
    config = tmp_path / "run.toml"
    config.write_text(
        f'[model]\npath = "{tiny_model_dir}"\ndevice = "cpu"\n'
        '[generation]\ngroup_size = 2\nmax_new_tokens = 12\nstop = ["a", "e", " "]\n[optimizer]\nlr = 1e-3\n'
        '[data]\ntask = "arithmetic"\n[[rewards]]\nname = "environment"\n'
        f'[environment]\nname = "{tmp_path / "row_env.py"}:make"\nmax_turns = 4\nmax_episode_tokens = 96\n'
        'options = { by_row = true }\n[logging]\nreport_to = ["tensorboard"]\ncompletions_per_step = 8\n'
        f'[train]\nsteps = 2\nprompts_per_step = 4\nthreads = 1\noutput_dir = "{out}"\n')
    done = _launch_until_done([sys.executable, "-m", "polyrl.cli", "launch", "--nproc-per-node", "2", str(config)],
                              limit_s=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _metrics(out)
    assert [m["step"] for m in lines] == [1, 2]
    records = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    for m in lines:  # every completion of the step is in the log (8 = 4 prompts x 2)
        mine = [r for r in records if r["step"] == m["step"]]
        assert len(mine) == 8 and len({json.dumps(r["prompt"]) for r in mine}) == 4
        assert all(r["prompt"][0]["content"].startswith("Say anything about") for r in mine)  # reset's, not the row's
        turns = [sum(1 for msg in r["completion"] if msg["role"] == "assistant") for r in mine]
        assert m["episode/turns_mean"] == pytest.approx(np.mean(turns))
        scores = [r["rewards"]["environment"] for r in mine]
        assert m["reward/environment/mean"] == pytest.approx(np.mean(scores))
        assert m["reward_mean"] == pytest.approx(np.mean([r["reward"] for r in mine]))
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1  # one writer
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    for tag in ("episode/turns_mean", "reward_mean", "loss", "tokens_per_s", "num_tokens", "rewards/environment/mean"):
        assert [e.step for e in acc.Scalars(tag)] == [1, 2], tag
    # TRL's num_tokens counts every rank's prompt and sampled tokens, cumulatively
    assert 0 < lines[0]["num_tokens"] < lines[1]["num_tokens"] == acc.Scalars("num_tokens")[1].value
    assert acc.Scalars("episode/turns_mean")[1].value == pytest.approx(lines[1]["episode/turns_mean"], rel=1e-6)
    report = _polyrl("report", str(out))
    assert "warning" not in report.stderr.lower(), report.stderr[-2000:]
