"""Builds real (on-disk) distributions with entry points for the registry tests.

A ``*.dist-info`` folder on ``sys.path`` is exactly what ``pip install`` leaves behind, so
``importlib.metadata`` discovers these plugins the same way it discovers installed ones.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
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


def write_plugin(root: Path, module: str, source: str, dist: tuple[str, str], backend: str) -> None:
    """A one-module plugin: ``module``.py holding ``source``, shipped as distribution ``dist``
    (name, version) whose ``polyrl.backends`` entry point ``backend`` names it."""
    (root / f"{module}.py").write_text(source)
    write_dist(root, *dist, {"polyrl.backends": {backend: module}})


_HOOKIMPL = "from polyrl.hookspecs import hookimpl\n@hookimpl\n"


def _registers_backend(name: str) -> str:
    """A plugin module's source registering a backend ``name`` that loads a bare object."""
    return ("from polyrl.hookspecs import hookimpl\nfrom polyrl.types import BackendSpec\n@hookimpl\n"
            f"def polyrl_register_backends(register):\n    register(BackendSpec(name={name!r}, load=lambda config: object()))\n")


#: (module, source, (distribution, version), backend entry point): a plugin whose import fails,
#: and one whose registration raises.
_BROKEN = (
    ("polyrl_broken_import", "raise ImportError('libfoo.so: cannot open shared object')\n", ("polyrl-broken", "9.9"),
     "broken"),
    ("polyrl_broken_register", _HOOKIMPL + "def polyrl_register_backends(register):\n"
     "    raise RuntimeError('registration exploded')\n", ("polyrl-badreg", "1.0"), "badreg"),
)


def install_toy_dists(root: Path) -> Path:
    """The toy backend plus two broken plugins, as three distributions under ``root``."""
    shutil.copytree(HERE / "third_party" / "polyrl_toy", root / "polyrl_toy", dirs_exist_ok=True)
    write_dist(root, "polyrl-toy", "0.0.1", {"polyrl.backends": {"toy": "polyrl_toy"}})
    for plugin in _BROKEN:
        write_plugin(root, *plugin)
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


@contextlib.contextmanager
def toy_site(tmp_path: Path, monkeypatch) -> Iterator[tuple[Path, list[str]]]:
    """The toy distributions active under ``tmp_path / "site"`` (the two broken ones disabled) and
    the registry to be built anew; yields the site and a list the caller adds the modules it writes
    there to, dropped from ``sys.modules`` on exit."""
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "broken,badreg")
    site = tmp_path / "site"
    deactivate = activate(install_toy_dists(site))
    monkeypatch.setattr("polyrl.registry._registry", None)
    modules: list[str] = []
    try:
        yield site, modules
    finally:
        deactivate()
        for module in modules:
            sys.modules.pop(module, None)


HOSTILE_MODULES = ("polyrl_typo", "polyrl_toy_fork", "polyrl_bad_alias")


#: The same for ``install_hostile_dists``: a misspelt hook, a second "toy", a raising alias hook.
_HOSTILE = (
    ("polyrl_typo", _registers_backend("typo") + "@hookimpl\ndef generat(engine, prompts, sampling):\n    return None\n",
     ("polyrl-typo", "0.1"), "typo"),
    ("polyrl_toy_fork", _registers_backend("toy"), ("polyrl-toy-fork", "2.0"), "toyfork"),
    ("polyrl_bad_alias", _HOOKIMPL + "def polyrl_resolve_model(name):\n"
     "    if name == 'explode':\n        raise KeyError('alias table corrupt')\n    return None\n",
     ("polyrl-bad-alias", "0.3"), "badalias"),
)


def install_hostile_dists(root: Path) -> Path:
    """Plugins an outside author might ship by mistake, as real distributions under ``root``:
    a misspelt hook name, a second distribution claiming the backend name "toy", and a model
    alias hook that raises."""
    for plugin in _HOSTILE:
        write_plugin(root, *plugin)
    return root


def activate_hostile(root: Path):
    deactivate_toy = activate(install_toy_dists(install_hostile_dists(root)))

    def deactivate() -> None:
        deactivate_toy()
        for mod in HOSTILE_MODULES:
            sys.modules.pop(mod, None)

    return deactivate
