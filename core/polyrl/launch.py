"""``polyrl launch``: run ``polyrl train`` under torchrun without remembering torchrun's flags.

Why a wrapper and not our own launcher: torchrun (``torch.distributed.run``) already does process
spawning, rendezvous, restarts and multi-node; polyrl only has to build its command line. The core
never imports torch here: the command is executed with the current interpreter, and a missing torch
is reported before anything starts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from polyrl.errors import ConfigError


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
        cmd += ["--nnodes", str(args.nnodes), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", args.rdzv_endpoint, "--rdzv-id", args.rdzv_id]
    cmd += ["-m", "polyrl.cli"]
    if args.log_json:
        cmd.append("--log-json")
    cmd += ["train", args.config, "--no-progress"]
    if args.resume is not None:
        cmd += ["--resume"] + ([args.resume] if args.resume else [])
    if args.steps is not None:
        cmd += ["--steps", str(args.steps)]
    if args.output_dir is not None:
        cmd += ["--output-dir", args.output_dir]
    for assignment in args.set:
        cmd += ["--set", assignment]
    return cmd


def cmd_launch(args: argparse.Namespace) -> int:
    """Replace this process by torchrun (signals then reach torchrun, which forwards them)."""
    if importlib.util.find_spec("torch") is None:
        raise ConfigError("torchrun comes with torch, which is not installed", field="polyrl launch",
                          fix="pip install 'polyrl[torch]'")
    cmd = torchrun_command(args)
    if args.dry_run:
        print(" ".join(cmd))
        return 0
    env = dict(os.environ)
    # torchrun defaults OMP_NUM_THREADS to 1 per process; train.threads in the config still wins
    env.setdefault("OMP_NUM_THREADS", "1")
    os.execvpe(cmd[0], cmd, env)
    return 0  # pragma: no cover - execvpe does not return


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="the run's TOML config (the same file a single process uses)")
    p.add_argument("--nproc-per-node", type=int, default=2, help="training processes per machine")
    p.add_argument("--nnodes", type=int, default=1, help="machines taking part")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of node 0 (multi-node)")
    p.add_argument("--rdzv-id", default="polyrl", help="job id shared by the nodes of one run")
    p.add_argument("--resume", nargs="?", const="", default=None,
                   help="continue from the newest complete checkpoint (any world size)")
    p.add_argument("--steps", type=int, help="override train.steps")
    p.add_argument("--output-dir", help="override train.output_dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key on every process (see polyrl train --set)")
    p.add_argument("--dry-run", action="store_true", help="print the torchrun command instead")
