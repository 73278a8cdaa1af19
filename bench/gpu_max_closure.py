"""Which packages MAX's import path needs that the GPU machines lack and no carried wheel brings.

Why: the GPU machines reach no registry, so everything polyrl-max imports must already be in their
image or travel as wheels. A GPU session once carried MAX's 179 MB there in four calls only to stop
at ``No module named 'pydantic'``, then ``'av'`` (imported by ``max.pipelines`` at load, from MAX's
``serve`` extra, which MAX's own requirements leave out). This check runs here, at no device time:
it imports what the ``max`` section imports (in a fresh child process, so that only those imports'
modules count), maps each loaded top-level module to its distributions,
and names those found neither in the image's package list (``bench/gpu_image_packages.txt``, the
device tool's last reading) nor among the carried wheels (``.whl/``, ``.maxstage/wheels/``).

Importing is not running: MAX imports more lazily while it builds the pipeline, compiles the graph,
loads the tokenizer and samples. ``--run`` also does that here, on the CPU, in a child process (so
its ``sys.modules`` holds only what the run needed): a tiny random Llama (``polyrl.testing``) loaded
through polyrl's ``max`` backend, a few tokens generated, and the child's modules checked the same
way, those only the run brought named apart. Measured on the 2-core VM (2026-12-04, shared with
other jobs): 382 s when MAX compiles the tiny model (the first time per compile cache), 45 s in all
once its graph is cached (~30 s of it the child). The GPU's own code paths (CUDA kernels, bfloat16)
cannot run here; for them a scan of MAX's source (every ``import``, inside functions too, outside
its server, benchmarks, CLIs and experiments) prints a ``note:`` for each package installed here,
missing there, that neither the imports nor the run loaded (the scan cannot tell a dead path).

    python bench/gpu_max_closure.py          # exit 1 and the missing names when something would fail there
    python bench/gpu_max_closure.py --run    # the same after a real load + compile + generate (minutes cold)
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE_LIST = ROOT / "bench" / "gpu_image_packages.txt"
WHEEL_FOLDERS = (ROOT / ".whl", ROOT / ".maxstage" / "wheels")
#: what the max section loads: the plugin's engine, MAX's pipeline registry and its architectures
MAX_IMPORTS = ("polyrl_max.engine", "max.pipelines", "max.pipelines.architectures", "max.driver", "max.engine")
#: distributions their importers try and go on without (a guarded ``import``): a machine may lack them
OPTIONAL = {
    "brotli": "urllib3 and httpx decode brotli only when it imports",
    "sniffio": "anyio falls back to asyncio without it",
}
#: this tree's own distributions: the suite installs them there from the working tree
OWN = {"polyrl", "polyrl-torch", "polyrl-max", "polyrl-mlx"}
#: MAX's subfolders the scan of its code leaves out: its server, benchmarks, CLIs and experiments,
#: which polyrl never runs
SCAN_SKIP = ("serve", "benchmark", "experimental", "_entrypoints")
#: new tokens the ``--run`` child generates: enough to run MAX's sampler and its decode step
RUN_TOKENS = 4
#: seconds the ``--run`` child may take: a cold compile on 2 busy cores, with room
RUN_TIMEOUT_S = 900


def normalize(name: str) -> str:
    """PEP 503 name: ``Pydantic_Core`` and ``pydantic-core`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_names(folders: Iterable[Path]) -> set[str]:
    """Distribution names of the ``*.whl`` files in ``folders`` (the name is the file's first field)."""
    return {normalize(p.name.split("-")[0]) for folder in folders if folder.is_dir() for p in folder.glob("*.whl")}


def image_names(path: Path) -> set[str]:
    """One package name per line; blank lines and ``#`` comments skipped."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {normalize(line) for line in lines if line}


def missing(modules: Iterable[str], owners: Mapping[str, list[str]], present: set[str]) -> dict[str, list[str]]:
    """Top-level module -> its distributions, for each module none of whose distributions is present.

    A namespace package (``google``) maps to several distributions: one of them there is enough."""
    gaps: dict[str, list[str]] = {}
    for module in sorted(set(modules)):
        dists = sorted({normalize(d) for d in owners.get(module, [])})
        if not dists or set(dists) <= OPTIONAL.keys() or set(dists) & (present | OWN):
            continue  # the standard library, a guarded import, or there
        gaps[module] = dists
    return gaps


def run_only(imported: Iterable[str], ran: Iterable[str], owners: Mapping[str, list[str]],
             present: set[str]) -> dict[str, list[str]]:
    """The gaps of the ``--run`` child's modules that importing ``MAX_IMPORTS`` did not show: what
    MAX imports only while it loads, compiles or generates (a later, costlier surprise there)."""
    seen = set(imported)
    return missing((m for m in ran if m not in seen), owners, present)


def loaded_modules(imports: Iterable[str], timeout: float = 300) -> set[str]:
    """Top-level names in ``sys.modules`` of a fresh child after importing ``imports`` (a fresh one:
    this process's own modules, a test runner's say, are not MAX's)."""
    return child_modules(["--probe-imports", *imports], "importing MAX", timeout)[0]


def probe_imports(out: Path, imports: list[str]) -> None:
    """In the child of ``loaded_modules``: import ``imports``, write the top-level modules to ``out``."""
    for name in imports:
        importlib.import_module(name)
    out.write_text(json.dumps({"modules": sorted({name.split(".")[0] for name in sys.modules})}))


def probe_run(out: Path) -> None:
    """In the ``--run`` child: load a tiny Llama through polyrl's ``max`` backend on the CPU, generate
    ``RUN_TOKENS`` tokens, write the top-level modules then loaded (and the token count) to ``out``."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.testing.tiny_model import build_tiny_llama
    from polyrl.types import EngineConfig, SamplingParams

    with tempfile.TemporaryDirectory(prefix="polyrl-max-closure-") as tmp:
        model = build_tiny_llama(Path(tmp) / "tiny-llama")  # the tests' model: their compile cache serves it
        engine = Engine(get_registry(), "max", EngineConfig(model=model, role="generate", threads=1, device="cpu"))
        (done,) = engine.generate([[{"role": "user", "content": "What is 2 + 3?"}]],
                                  SamplingParams(max_new_tokens=RUN_TOKENS, ignore_eos=True, seed=0))
    modules = sorted({name.split(".")[0] for name in sys.modules})
    out.write_text(json.dumps({"modules": modules, "tokens": len(done.completion_ids)}))


def child_modules(args: list[str], what: str, timeout: float) -> tuple[set[str], float, dict]:
    """Run this script with ``args`` (a ``--probe-*`` mode) in a child; its top-level modules, its
    seconds and its report. A failed child exits here with one ``error:`` line (its last output
    line), never a traceback."""
    with tempfile.TemporaryDirectory(prefix="polyrl-max-closure-") as tmp:
        out = Path(tmp) / "modules.json"
        start = time.perf_counter()
        try:
            # env given: the Mojo runtime, once imported, rewrites the process environment behind
            # os.environ's back (PYTHONHOME and the like), which a child would inherit
            done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe-out", str(out), *args],
                                  capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
        except subprocess.TimeoutExpired:
            raise SystemExit(f"error: {what} in a child process took over {timeout:.0f} s. Fix: run it again when "
                             "the machine is quieter (MAX's compile cache keeps what it compiled)") from None
        seconds = time.perf_counter() - start
        if done.returncode != 0 or not out.exists():
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise SystemExit(f"error: {what} in a child process failed: {last}. Fix: make `polyrl backends` show "
                             "max usable here (MAX and polyrl-max installed), then re-run")
        report = json.loads(out.read_text())
    return set(report["modules"]), seconds, report


def run_modules(timeout: float = RUN_TIMEOUT_S) -> tuple[set[str], float]:
    """Top-level modules of a child that ran ``probe_run`` (MAX load, compile, generate), its seconds."""
    modules, seconds, report = child_modules(["--probe-run"], "MAX's run (load, compile, generate on the CPU)",
                                             timeout)
    if report["tokens"] != RUN_TOKENS:
        raise SystemExit(f"error: MAX's run generated {report['tokens']} tokens, not {RUN_TOKENS}. "
                         "Fix: check `polyrl generate` with the max backend on a tiny model")
    return modules, seconds


def code_imports(package: Path, skip: Iterable[str] = SCAN_SKIP) -> dict[str, set[str]]:
    """Top-level module -> the files (relative to ``package``) whose code imports it anywhere, inside
    functions too, from every ``.py`` under ``package`` but the ``skip`` subfolders. Why: what a
    run imports lazily on a path not run here (a GPU's) shows only in the source."""
    skipped = tuple(skip)
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if where.split("/")[0] in skipped:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(where)
    return found


def unrun_gaps(code: Mapping[str, set[str]], seen: set[str], owners: Mapping[str, list[str]],
               present: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Module -> (its distributions, the files importing it) for each module MAX's code imports that
    neither the imports nor the run loaded and that is installed here but missing there (a module
    installed nowhere is a guarded import: this machine has run without it)."""
    gaps = missing((m for m in code if m not in seen), owners, present)
    return {m: (dists, sorted(code[m])) for m, dists in gaps.items()}


def describe(gaps: Mapping[str, list[str]]) -> str:
    """``module (dist/dist), ...`` for an error line."""
    return ", ".join(f"{m} ({'/'.join(d)})" for m, d in gaps.items())


def max_package() -> Path | None:
    """The installed ``max`` package's folder (a namespace package: its first path), if any."""
    spec = importlib.util.find_spec("max")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=IMAGE_LIST, help="the GPU image's package list")
    parser.add_argument("--wheels", type=Path, nargs="*", default=list(WHEEL_FOLDERS),
                        help="folders of the wheels that travel there")
    parser.add_argument("--run", action="store_true",
                        help="also load a tiny Llama through polyrl's max backend on the CPU and generate "
                             f"{RUN_TOKENS} tokens, in a child process, and check what that imported (minutes cold)")
    # the children's own entries (child_modules)
    parser.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--probe-imports", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--probe-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_out is not None:
        if args.probe_run:
            probe_run(args.probe_out)
        else:
            probe_imports(args.probe_out, args.probe_imports)
        return 0
    present = image_names(args.image) | wheel_names(args.wheels)
    owners = md.packages_distributions()
    imported = loaded_modules(MAX_IMPORTS)
    gaps = missing(imported, owners, present)
    late: dict[str, list[str]] = {}
    ran: set[str] = set()
    if args.run:
        ran, seconds = run_modules()
        late = run_only(imported, ran, owners, present)
        print(f"MAX's run (tiny Llama loaded, compiled, {RUN_TOKENS} tokens generated on the CPU, in a child) took "
              f"{seconds:.0f} s and loaded {len(ran - imported)} top-level modules its imports did not")
    if not gaps and not late:
        print("MAX's imports" + (" and its run" if args.run else "")
              + ": every package is in the GPU image or carried")
    else:
        names = sorted({d for dists in (*gaps.values(), *late.values()) for d in dists})
        found = [f"at import: {describe(gaps)}"] if gaps else []
        found += [f"only while loading, compiling or generating: {describe(late)}"] if late else []
        print("error: MAX imports packages the GPU machines lack and no carried wheel brings: " + "; ".join(found)
              + f". Fix: add {' '.join(names)} (pinned) to bench/gpu_max_wheels.sh, then re-run it")
    package = max_package()
    if package is not None:  # after the verdict: notes, which never fail the check
        for module, (dists, files) in unrun_gaps(code_imports(package), imported | ran, owners, present).items():
            print(f"note: MAX's code imports {module} ({'/'.join(dists)}), missing there, in "
                  f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''}: not run here (a GPU path may); "
                  "carry it if a GPU run stops at it")
    return 1 if gaps or late else 0


if __name__ == "__main__":
    sys.exit(main())
