"""Which packages MAX's import path needs that the GPU machines lack and no carried wheel brings.

Why: the GPU machines reach no registry, so everything polyrl-max imports must already be in their
image or travel as wheels. A GPU session once carried MAX's 179 MB there in four calls only to stop
at ``No module named 'pydantic'``, then ``'av'`` (imported by ``max.pipelines`` at load, from MAX's
``serve`` extra, which MAX's own requirements leave out). This check runs here, at no device time:
it imports what the ``max`` section imports, maps each loaded top-level module to its distributions,
and names those found neither in the image's package list (``bench/gpu_image_packages.txt``, the
device tool's last reading) nor among the carried wheels (``.whl/``, ``.maxstage/wheels/``).

    python bench/gpu_max_closure.py        # exit 1 and the missing names when something would fail there
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import re
import sys
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


def loaded_modules(imports: Iterable[str]) -> set[str]:
    """Top-level names in ``sys.modules`` after importing ``imports``."""
    for name in imports:
        importlib.import_module(name)
    return {name.split(".")[0] for name in sys.modules}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=IMAGE_LIST, help="the GPU image's package list")
    parser.add_argument("--wheels", type=Path, nargs="*", default=list(WHEEL_FOLDERS),
                        help="folders of the wheels that travel there")
    args = parser.parse_args(argv)
    present = image_names(args.image) | wheel_names(args.wheels)
    gaps = missing(loaded_modules(MAX_IMPORTS), md.packages_distributions(), present)
    if not gaps:
        print("MAX's imports: every package is in the GPU image or carried")
        return 0
    names = sorted({d for dists in gaps.values() for d in dists})
    print("error: MAX imports packages the GPU machines lack and no carried wheel brings: "
          + ", ".join(f"{m} ({'/'.join(d)})" for m, d in gaps.items())
          + f". Fix: add {' '.join(names)} (pinned) to bench/gpu_max_wheels.sh, then re-run it")
    return 1


if __name__ == "__main__":
    sys.exit(main())
