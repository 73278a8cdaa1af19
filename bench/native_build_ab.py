"""The sampler on the C library built from this checkout's sources against one built from another
checkout's (an earlier commit's), on one engine, taking turns.

    git worktree add /tmp/polyrl-before <commit>
    python bench/native_build_ab.py --against /tmp/polyrl-before/plugins/torch_backend/polyrl_torch \\
        --threads 1 --rounds 6 --output bench/results/native_build_ab.json

Why: a change to the sampler's C code (``polyrl_torch.decode_kernel``: the matmul, the shared-prompt
attention, the elementwise ops) is worth what whole generate calls gain, and two runs of
``polyrl bench`` minutes apart differ by more than such a change on a shared VM. Here one engine
samples the same prompts with the same seeds, its library swapped between calls (who goes first
alternating), so only the C code differs; a change that keeps each sum's order gives the same
log-probs bit for bit (the largest gap is reported).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path
from typing import Any

from polyrl.bench import ab_workload
from polyrl.bench.workload import bench_prompts
from polyrl.types import SamplingParams
from polyrl_torch.bench.kernel_ab import kernel_args, kernel_engine

WAYS = ("against", "this")


def _against(argv: list[str] | None) -> tuple[Path | None, list[str]]:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--against", type=Path)
    known, rest = pre.parse_known_args(argv)
    return known.against, rest


def _build(folder: Path, into: Path) -> Any:
    """The library from ``folder``'s C files, built as this checkout's is for this CPU."""
    from polyrl_torch import decode_kernel

    built = into / "against.so"
    decode_kernel.build([folder / path.name for path in decode_kernel.SOURCES], built)
    return decode_kernel.load(built)


def _use(lib: Any) -> None:
    """Every later call of the sampler's C code goes to ``lib``."""
    _use_function(lambda: lib)


def _use_function(library: Any) -> None:
    from polyrl_torch import decode_attention, decode_kernel, decode_ops

    decode_kernel._library = library
    decode_attention._function.cache_clear()
    decode_ops._functions.cache_clear()


def main(argv: list[str] | None = None) -> int:
    from polyrl_torch import decode_kernel

    folder, rest = _against(argv)
    if folder is None or not all((folder / path.name).is_file() for path in (*decode_kernel.SOURCES,
                                                                             *decode_kernel.HEADERS)):
        given = "is missing" if folder is None else f"{folder} holds no polyrl_torch C sources"
        print(f"error: --against {given}. Fix: name the polyrl_torch folder of another checkout "
              "(plugins/torch_backend/polyrl_torch)", file=sys.stderr)
        return 2
    args = kernel_args(__doc__.split("\n\n")[0], rest)
    if args is None:
        return 2
    own = decode_kernel._library
    libs = {"this": own()}
    try:
        return _compare(args, folder, libs)
    finally:
        _use_function(own)


def _compare(args: argparse.Namespace, folder: Path, libs: dict[str, Any]) -> int:
    import torch

    from polyrl_torch import decode_kernel

    with tempfile.TemporaryDirectory() as scratch:
        try:
            libs["against"] = _build(folder, Path(scratch))
        except OSError as err:
            print(f"error: building --against's sources failed: {str(err).strip()[-300:]}", file=sys.stderr)
            return 1
        if libs["against"].polyrl_decode_panel() != libs["this"].polyrl_decode_panel():
            print("error: --against's build packs panels of another width; the engine's packed weights fit one",
                  file=sys.stderr)
            return 1
        engine = kernel_engine(args)
        prompts = bench_prompts(args.prompts)

        def sample(way: str, sampling: SamplingParams) -> Any:
            _use(libs[way])
            return engine.generate(prompts, sampling)

        for way in WAYS:  # warm-up: the sampler's copy in panels, each library loaded
            sample(way, SamplingParams(max_new_tokens=4, n=args.group_size, seed=0, ignore_eos=True))
        seconds, rounds = ab_workload.alternating_rounds(
            args, {way: functools.partial(sample, way) for way in WAYS}, digits=3)
        report = ab_workload.two_way_report(args, seconds, rounds, "against", "this",
                                            args.prompts * args.group_size, 1e-3, torch=torch.__version__,
                                            kernel_build=decode_kernel.instruction_set(), against=str(folder))
    return 1 if report is None else 0


if __name__ == "__main__":
    sys.exit(main())
