"""``polyrl bench``'s arguments, checked before anything runs: a nonsense workload, a backend that
does not exist or cannot be benched, or an output that cannot be written is one ``error:`` line
naming the flag, not a table of zeros (or a traceback) after minutes of measuring."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from polyrl.errors import BackendUnavailable, ConfigError
from polyrl.path_loops import LOOP_FIX, symlink_loop
from polyrl.registry import Registry
from polyrl.remote import NAME as REMOTE
from polyrl.validators import Rule

#: Each workload flag's range; the group's lower bound depends on what is timed (``check_workload``).
_RULES = {
    "--prompts": Rule(integer=True, low=1, fix="e.g. --prompts 8"),
    # generation.max_new_tokens' bound: past it every side failed after the matmul peak was measured
    "--max-new-tokens": Rule(integer=True, low=1, high=1048576, fix="e.g. --max-new-tokens 32"),
    "--threads": Rule(integer=True, low=1, high=4096, fix="e.g. --threads 1 (CPU threads per side)"),
    "--steps": Rule(integer=True, low=1, fix="e.g. --steps 3 (the first is left out of the medians when there are more)"),
    "--few-shot": Rule(integer=True, low=0, high=10000, fix="e.g. --few-shot 20 (~340-token prompts with SmolLM2's tokenizer; 0: the short ones)"),
}


def check_workload(prompts: int, group_size: int, max_new_tokens: int, threads: int, steps: int,
                   generate_only: bool, trains_baseline: bool = False, few_shot: int = 0) -> None:
    """Refuse a workload with nothing to time. A train step needs a group of at least 2 (GRPO
    compares completions within a group; TRL refuses fewer); timing generation alone
    (``generate_only`` with no training baseline, ``trains_baseline``) may sample one per prompt."""
    for flag, value in (("--prompts", prompts), ("--max-new-tokens", max_new_tokens), ("--threads", threads),
                        ("--steps", steps), ("--few-shot", few_shot)):
        _RULES[flag].check(value, flag)
    alone = generate_only and not trains_baseline
    fix = ("e.g. --group-size 4" if alone else
           "e.g. --group-size 4; 1 is for timing generation alone (--generate-only, without --trl/--mlx-lm-lora)")
    Rule(integer=True, low=1 if alone else 2, high=65536, fix=fix).check(group_size, "--group-size")


def check_interleave(interleave: bool, trl: bool, generate_only: bool) -> None:
    """``--interleave`` pairs each backend's steps with TRL's: it needs ``--trl`` and whole steps."""
    if interleave and not trl:
        raise ConfigError("--interleave runs the backends and TRL stepping in turn, but --trl is not given",
                          field="--interleave", fix="add --trl, or drop --interleave")
    if interleave and generate_only:
        raise ConfigError("--interleave pairs whole GRPO steps with TRL's; --generate-only times no step",
                          field="--interleave", fix="drop --generate-only or --interleave")


def bench_backends(reg: Registry, backends: Sequence[str] | None) -> list[str]:
    """The backends to bench: the named ones, each known and benchable, or by default every usable
    one but ``remote`` (it generates on servers named in ``backends.options.servers``, which
    ``polyrl bench`` has no flag for: it would only ever fail)."""
    if backends is not None and not backends:  # `--backends $NAMES` with NAMES unset benched every backend
        raise ConfigError("names no backend", field="--backends",
                          fix="name one or more (e.g. --backends torch; `polyrl backends` lists them), or leave "
                              "--backends out to bench every usable one")
    if backends is None:
        return [name for name in reg.available() if name != REMOTE]
    for name in backends:
        try:
            reg.spec(name)
        except BackendUnavailable:
            raise ConfigError(f"unknown backend {name!r} (known: {', '.join(reg.names()) or 'none installed'})",
                              field="--backends", fix="name known backends (`polyrl backends` lists them), or "
                              "install the plugin that provides it") from None
        if name == REMOTE:
            raise ConfigError(f"{REMOTE!r} generates on servers named in backends.options.servers, which "
                              "polyrl bench cannot set", field="--backends",
                              fix="bench the backend those servers run (e.g. --backends torch) on their machine")
    return list(backends)


def check_output(output: str | os.PathLike[str] | None) -> None:
    """Refuse a report path (``X.json``, the chart beside it as ``X.png``) that cannot be written,
    before any benchmark runs; folders that do not exist yet are created when the report is
    written, so the nearest existing one must take a file. Probing leaves nothing behind."""
    if output is None:
        return
    from polyrl.path_text import check_path_text, refuse_empty_path

    refuse_empty_path(os.fspath(output), "--output", "--output bench/results.json")
    check_path_text(os.fspath(output), "--output")  # is_dir() raises on a name past 255 bytes or a path past PATH_MAX
    path = Path(output)
    # the path itself first: "." or "/" has no name to change the suffix of (a ValueError traceback)
    for target in (path, *([] if path.is_dir() else [path.with_suffix(".png")])):
        # a symlink loop, or a link to a folder that does not exist, failed the write after the whole bench;
        # a link to nowhere else wrote the report where it points, outside the folder named
        loop = symlink_loop(target)
        if loop:
            raise ConfigError(f"{str(target)!r} cannot be followed: {loop}", field="--output", fix=LOOP_FIX)
        if target.is_symlink() and not target.exists():
            raise ConfigError(f"{str(target)!r} is a symlink to {os.readlink(target)!r}, which does not exist",
                              field="--output", fix="give a file path that is no dangling link, e.g. --output "
                                                    "bench/results.json, or repoint the link")
        if target.is_dir():
            raise ConfigError(f"{str(target)!r} is a directory", field="--output",
                              fix=f"give a file path, e.g. --output {path / 'results.json'}")
        if target.exists() and not target.is_file():  # /dev/full, a FIFO: the report failed after the whole bench
            raise ConfigError(f"{str(target)!r} is not a regular file (a device, a FIFO)", field="--output",
                              fix="give a file path, e.g. --output bench/results.json")
    folder = next(p for p in path.absolute().parents if p.exists())
    if not folder.is_dir():
        raise ConfigError(f"{str(folder)!r} is a file, not a folder", field="--output",
                          fix="choose a path under a folder, e.g. --output bench/results.json")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write in {str(folder)!r}: {exc.strerror or exc}", field="--output",
                          fix="choose a writable path, e.g. --output bench/results.json") from None


def resolve_bench_model(reg: Registry, model: str) -> str:
    """``--model`` as a path every side can load. Why: a mistyped one ran the matmul peak, failed
    on every backend alike, wrote a results file of failures and exited 0."""
    resolved = reg.resolve_model(model, field="--model")
    if not Path(resolved).exists():
        raise ConfigError(f"model {model!r} is neither a local path nor a known alias", field="--model",
                          fix="give an existing HF model folder or .gguf file, or an alias like tiny-llama "
                          "or smollm2-135m-instruct")
    # a FIFO, a device or a folder with no model in it passed: the matmul peak ran, every side failed alike
    path = Path(resolved)
    fix = "give an HF model folder (with config.json) or a .gguf file, or an alias like tiny-llama"
    if not (path.is_dir() or path.is_file()):
        raise ConfigError(f"model {model!r} is neither a folder nor a regular file (a FIFO, socket or device)",
                          field="--model", fix=fix)
    if path.is_dir() and not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
        raise ConfigError(f"model folder {model!r} has no config.json (nor a .gguf file)", field="--model", fix=fix)
    if path.is_file() and path.suffix != ".gguf":
        raise ConfigError(f"model {model!r} is a file but not a .gguf file", field="--model", fix=fix)
    return resolved
