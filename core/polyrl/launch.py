"""``polyrl launch``: run ``polyrl train`` under torchrun without remembering torchrun's flags.

Why a wrapper and not our own launcher: torchrun (``torch.distributed.run``) already does process
spawning, rendezvous, restarts and multi-node; polyrl only has to build its command line. The core
imports torch only to run torchrun, after every check: a missing torch is reported before anything
starts. So is a bad config, more ranks than this machine holds, an
output_dir another run holds, or a ``--resume`` whose checkpoint another config wrote (model,
backends...) or whose backend files are damaged (engine.json, rng.pt...): the launcher loads the
config and checks that checkpoint as every rank would, so an
error is one line here, not one per rank under torchrun's ChildFailedError traceback. An error the
ranks meet later is one line too: torchrun runs quietly in this process (``polyrl.launch_torchrun``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

from polyrl.errors import ConfigError
from polyrl.resume_flag import ResumeFlag

#: How long the GPU count may take (torch's import on a cold disk is the slow part).
PROBE_TIMEOUT_S = 300


def check_endpoint(endpoint: str) -> None:
    """Refuse a ``--rdzv-endpoint`` torchrun cannot parse (``host:99999``, ``:29400``, ``host:abc``).
    Why: ``--dry-run`` printed a command for it as checked, and the launch then failed in torchrun,
    on every node, with "torchrun failed: ValueError: ..." naming neither the flag nor the fix."""
    text = endpoint.strip()
    if text.startswith("["):  # an IPv6 address: [::1]:29400
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else (None if not rest else rest)
    else:
        host, sep, port_text = text.rpartition(":")
        host, port = (host, port_text) if sep else (text, None)
    problem = None
    if not host or any(ch.isspace() for ch in host):
        problem = f"names no host ({endpoint!r})"
    elif port is not None and not (port.isascii() and port.isdigit() and int(port) <= 65535):
        problem = f"has the port {port!r}, not a number from 0 to 65535"
    if problem is not None:
        raise ConfigError(problem, field="--rdzv-endpoint",
                          fix="pass HOST:PORT of node 0, the same on every node, e.g. --rdzv-endpoint node0:29400")


def torchrun_command(args: argparse.Namespace) -> list[str]:
    """The ``python -m torch.distributed.run ... -m polyrl.cli train CONFIG ...`` argv."""
    if args.nproc_per_node < 1:
        raise ConfigError("must be at least 1", field="--nproc-per-node",
                          fix="give the number of training processes on this machine, e.g. 2")
    if args.nnodes < 1:
        raise ConfigError("must be at least 1", field="--nnodes", fix="give the number of machines")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.nproc_per_node)]
    if args.nnodes == 1 and not args.rdzv_endpoint:
        cmd.append("--standalone")  # a private rendezvous on a free local port
    else:
        if not args.rdzv_endpoint:
            raise ConfigError("a multi-node launch needs a rendezvous address", field="--rdzv-endpoint",
                              fix="pass --rdzv-endpoint HOST:PORT of node 0 (the same on every node)")
        check_endpoint(args.rdzv_endpoint)
        cmd += ["--nnodes", str(args.nnodes), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", args.rdzv_endpoint, "--rdzv-id", args.rdzv_id]
    cmd += ["-m", "polyrl.cli"]
    if args.log_json:
        cmd.append("--log-json")
    cmd += ["train", args.config, "--no-progress"]
    # "~" read as the home folder here, as the ranks read it: --dry-run printed `--resume '~/runs/..'`
    # shell-quoted, a "~" no shell expands when the line is pasted, naming another path than the one checked
    if args.resume is not None:
        cmd += ["--resume"] + ([os.path.expanduser(args.resume)] if args.resume else [])
    if args.resume_weights_only:
        cmd.append("--resume-weights-only")
    if args.steps is not None:
        cmd += ["--steps", str(args.steps)]
    if args.output_dir is not None:
        cmd += ["--output-dir", os.path.expanduser(args.output_dir)]
    for assignment in args.set:
        cmd += ["--set", assignment]
    return cmd


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask, as under taskset or Slurm)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def cuda_gpu_count() -> int:
    """The CUDA GPUs torch sees here, asked in a child process so the core never imports torch."""
    probe = [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"importing torch to count the GPUs took over {PROBE_TIMEOUT_S} s", field="polyrl launch",
                          fix="check that `python -c 'import torch'` works on this machine") from None
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"torch cannot be imported here ({last})", field="polyrl launch",
                          fix="pip install 'polyrl[torch]' in this environment")
    return int(done.stdout)


def check_ranks_fit(nproc: int, device: str) -> None:
    """At most one rank per GPU on a CUDA run (a rank past the GPU count is refused at its start,
    NCCL needs a GPU each) and one per CPU otherwise. ``auto`` is CUDA when torch sees a GPU, as
    the torch backend resolves it."""
    gpus = cuda_gpu_count() if device == "auto" or device.startswith("cuda") else 0
    if device.startswith("cuda") or gpus:
        if nproc > gpus:
            raise ConfigError(f"{nproc} rank(s) on {device}, but this machine has {gpus} CUDA GPU(s): NCCL needs "
                              "one GPU per rank", field="--nproc-per-node",
                              fix='start at most one process per GPU, or set model.device = "cpu" to train '
                                  "the ranks on the CPU (gloo)")
        return
    cpus = cpu_count()
    if nproc > cpus:
        raise ConfigError(f"{nproc} rank(s) on the CPU, but this machine has {cpus} CPU(s)", field="--nproc-per-node",
                          fix=f"start at most {cpus} processes here (one per CPU)")


def cmd_launch(args: argparse.Namespace) -> int:
    """Check the flags, the config and this machine, then run torchrun in this process (signals
    reach it, and it forwards them; ``polyrl.launch_torchrun``). ``--dry-run`` checks the same, then
    prints the command shell-quoted, so pasting it passes each argument as is and runs nothing else."""
    if importlib.util.find_spec("torch") is None:
        raise ConfigError("torchrun comes with torch, which is not installed", field="polyrl launch",
                          fix="pip install 'polyrl[torch]'")
    cmd = torchrun_command(args)
    from polyrl.cli import train_config
    from polyrl.config import check_world_size

    config = train_config(args)
    check_ranks_fit(args.nproc_per_node, config.model.device)
    check_world_size(config, args.nproc_per_node * args.nnodes)
    if args.nnodes == 1:  # another run's output_dir: refused here (on many nodes, the ranks agree on it)
        from polyrl.run_lock import check_free

        check_free(Path(config.train.output_dir))
    if args.resume is not None or args.resume_weights_only:  # refused: one line here, not one per rank
        from polyrl.engines import choose_generate_backend
        from polyrl.registry import get_registry
        from polyrl.resume_point import check_backend_files, resume_point

        registry = get_registry()
        config = choose_generate_backend(config, registry)
        point = resume_point(config, args.resume or None, weights_only=args.resume_weights_only,
                             announce=False)  # the rank says what is applied
        check_backend_files(registry, config, point, args.resume_weights_only)  # engine.json, rng.pt...
    from polyrl.trainer import check_run

    # what every rank would refuse: refused once, here; what rank 0 warns of once its models load
    # (episodes' later turns on a context the template never shows) only where no rank starts
    check_run(config, args.nproc_per_node * args.nnodes, warn_context=args.dry_run)
    if args.dry_run:
        print(shlex.join(cmd))
        return 0
    from polyrl.launch_torchrun import run

    return run(cmd[3:])  # after `python -m torch.distributed.run`


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="the run's TOML config (the same file a single process uses)")
    p.add_argument("--nproc-per-node", type=int, default=2, help="training processes per machine")
    p.add_argument("--nnodes", type=int, default=1, help="machines taking part")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of node 0 (multi-node)")
    p.add_argument("--rdzv-id", default="polyrl", help="job id shared by the nodes of one run")
    p.add_argument("--resume", action=ResumeFlag,
                   help="continue from the newest complete checkpoint (any world size)")
    p.add_argument("--resume-weights-only", action="store_true",
                   help="continue from a checkpoint's weights alone: fresh optimizer and RNG (see polyrl train)")
    p.add_argument("--steps", type=int, help="override train.steps")
    p.add_argument("--output-dir", help="override train.output_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key on every process (see polyrl train --set)")
    p.add_argument("--dry-run", action="store_true", help="check everything, then print the torchrun command (shell-quoted) instead")
