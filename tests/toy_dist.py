"""Builds real (on-disk) distributions with entry points for the registry tests.

A ``*.dist-info`` folder on ``sys.path`` is exactly what ``pip install`` leaves behind, so
``importlib.metadata`` discovers these plugins the same way it discovers installed ones.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).parent


def write_dist(root: Path, name: str, version: str, entry_points: dict[str, dict[str, str]]) -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in eps.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text("")


def install_toy_dists(root: Path) -> Path:
    """The toy backend plus two broken plugins, as three distributions under ``root``."""
    shutil.copytree(HERE / "third_party" / "polyrl_toy", root / "polyrl_toy", dirs_exist_ok=True)
    write_dist(root, "polyrl-toy", "0.0.1", {"polyrl.backends": {"toy": "polyrl_toy"}})
    (root / "polyrl_broken_import.py").write_text("raise ImportError('libfoo.so: cannot open shared object')\n")
    write_dist(root, "polyrl-broken", "9.9", {"polyrl.backends": {"broken": "polyrl_broken_import"}})
    (root / "polyrl_broken_register.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    raise RuntimeError('registration exploded')\n"
    )
    write_dist(root, "polyrl-badreg", "1.0", {"polyrl.backends": {"badreg": "polyrl_broken_register"}})
    return root


def activate(root: Path):
    sys.path.insert(0, str(root))
    import importlib

    importlib.invalidate_caches()

    def deactivate() -> None:
        sys.path.remove(str(root))
        for mod in ("polyrl_toy", "polyrl_broken_import", "polyrl_broken_register"):
            sys.modules.pop(mod, None)

    return deactivate


HOSTILE_MODULES = ("polyrl_typo", "polyrl_toy_fork", "polyrl_bad_alias")


def install_hostile_dists(root: Path) -> Path:
    """Plugins an outside author might ship by mistake, as real distributions under ``root``:
    a misspelt hook name, a second distribution claiming the backend name "toy", and a model
    alias hook that raises."""
    (root / "polyrl_typo.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='typo', load=lambda config: object()))\n"
        "@hookimpl\n"
        "def generat(engine, prompts, sampling):\n"
        "    return None\n"
    )
    write_dist(root, "polyrl-typo", "0.1", {"polyrl.backends": {"typo": "polyrl_typo"}})
    (root / "polyrl_toy_fork.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='toy', load=lambda config: object()))\n"
    )
    write_dist(root, "polyrl-toy-fork", "2.0", {"polyrl.backends": {"toyfork": "polyrl_toy_fork"}})
    (root / "polyrl_bad_alias.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def polyrl_resolve_model(name):\n"
        "    if name == 'explode':\n"
        "        raise KeyError('alias table corrupt')\n"
        "    return None\n"
    )
    write_dist(root, "polyrl-bad-alias", "0.3", {"polyrl.backends": {"badalias": "polyrl_bad_alias"}})
    return root


def activate_hostile(root: Path):
    deactivate_toy = activate(install_toy_dists(install_hostile_dists(root)))

    def deactivate() -> None:
        deactivate_toy()
        for mod in HOSTILE_MODULES:
            sys.modules.pop(mod, None)

    return deactivate
