"""Each distribution ships a PEP 561 ``py.typed`` marker, so users' type checkers read our
annotations instead of treating polyrl and its backends as untyped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = [
    (ROOT, ROOT / "core", "polyrl"),
    (ROOT / "plugins/torch_backend", ROOT / "plugins/torch_backend", "polyrl_torch"),
    (ROOT / "plugins/mlx_backend", ROOT / "plugins/mlx_backend", "polyrl_mlx"),
    (ROOT / "plugins/max_backend", ROOT / "plugins/max_backend", "polyrl_max"),
]


@pytest.mark.parametrize(("project", "source", "package"), DISTRIBUTIONS, ids=[d[2] for d in DISTRIBUTIONS])
def test_the_marker_exists_and_is_package_data(project: Path, source: Path, package: str) -> None:
    assert (source / package / "py.typed").is_file()
    config = tomllib.loads((project / "pyproject.toml").read_text())
    # setuptools copies only declared data files into the wheel
    assert "py.typed" in config["tool"]["setuptools"]["package-data"][package]
