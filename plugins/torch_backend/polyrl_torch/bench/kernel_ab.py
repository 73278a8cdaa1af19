"""The flags of the decode-kernel A/B benches (``bench/decode_kernel_ab.py``, ``bench/native_ops_ab.py``).

Why here and not in ``polyrl.bench.ab_workload``: the check that the kernel runs is the torch
backend's (``decode_kernel``), and the core imports no backend.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from polyrl.bench import ab_workload


def kernel_args(description: str, argv: list[str] | None) -> argparse.Namespace | None:
    """The flags of an A/B of two ways of sampling with polyrl's decode kernel; None, with the
    ``error:`` line printed, where the workload has nothing to time or the kernel cannot run here:
    nothing to compare. The workload is checked first, so a bad flag is told before the kernel builds."""
    args = ab_workload.parser(description).parse_args(argv)
    if error := ab_workload.workload_error(args):
        print(error, file=sys.stderr)
        return None
    from polyrl_torch import decode_kernel  # torch loads after the flags are checked

    if reason := decode_kernel.unavailable_reason():
        print(f"error: polyrl's decode kernel cannot run here ({reason}); nothing to compare", file=sys.stderr)
        return None
    return args


def kernel_engine(args: argparse.Namespace, decode_kernel: str = "on") -> Any:
    """The engine these benches sample with: ``args.model`` on the CPU in float32 at ``args.threads``,
    room for the workload's tokens, ``backends.options.decode_kernel`` as asked."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    registry = get_registry()
    return Engine(registry, "torch", EngineConfig(
        model=registry.resolve_model(args.model), role="train", threads=args.threads, device="cpu",
        max_length=args.max_new_tokens + 256, options={"decode_kernel": decode_kernel}))
