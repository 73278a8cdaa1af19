"""An entry point whose object implements no polyrl hook is listed as a plugin that did not
load, naming the entry point and the fix.

Why: one pointing at the package (``mine = mypkg``) instead of the module holding its hooks
(``mypkg.plugin``) was registered and added nothing without a word (``"load_errors": []``), and a
run naming its backend was told to "install its plugin", which is installed. One loading
``None`` was taken by pluggy as "block this name", silently too. Real distributions, as pip leaves them.
"""

from __future__ import annotations

import sys

import pytest

from polyrl.config import RunConfig
from polyrl.engines import check_backend_names
from polyrl.errors import ConfigError
from polyrl.registry import Registry

from toy_dist import write_dist

pytestmark = pytest.mark.faults

_HOOKS = ("from polyrl.hookspecs import hookimpl\nfrom polyrl.types import BackendSpec\n@hookimpl\n"
          "def polyrl_register_backends(register):\n"
          "    register(BackendSpec(name='mine', load=lambda config: object()))\n")


@pytest.fixture()
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    yield tmp_path
    for module in ("polyrl_mine_pkg", "polyrl_mine_pkg.plugin", "polyrl_mine_none"):
        sys.modules.pop(module, None)


def _config(train: str) -> RunConfig:
    return RunConfig.from_dict({"model": {"path": "m"}, "backends": {"train": train},
                                "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})


def test_an_entry_point_naming_the_package_not_its_plugin_module_is_a_load_error(site):
    (site / "polyrl_mine_pkg").mkdir()
    (site / "polyrl_mine_pkg" / "__init__.py").write_text('"""My backend (hooks in .plugin)."""\n')
    (site / "polyrl_mine_pkg" / "plugin.py").write_text(_HOOKS)
    write_dist(site, "polyrl-mine", "1.0", {"polyrl.backends": {"mine": "polyrl_mine_pkg"}})
    reg = Registry()
    error = next((e for e in reg.load_errors if e.name == "mine"), None)
    assert error is not None, reg.load_errors
    assert error.distribution == "polyrl-mine" and error.group == "polyrl.backends"
    assert "loads module 'polyrl_mine_pkg', which implements no polyrl hook" in error.error
    assert "e.g. polyrl_mine_pkg.plugin" in error.error
    assert not reg.pm.has_plugin("mine")
    assert "torch" in reg.names()  # the others load
    with pytest.raises(ConfigError, match=r"backend 'mine' is installed \(polyrl-mine\) but its plugin did not "
                                          r"load: entry point mine = polyrl_mine_pkg loads module"):
        check_backend_names(_config("mine"), reg)


def test_an_entry_point_loading_none_is_a_load_error(site):
    (site / "polyrl_mine_none.py").write_text("plugin = None\n")
    write_dist(site, "polyrl-mine-none", "1.0", {"polyrl.rewards": {"minenone": "polyrl_mine_none:plugin"}})
    reg = Registry()
    error = next((e for e in reg.load_errors_of("rewards") if e.name == "minenone"), None)
    assert error is not None, reg.load_errors
    assert "loads NoneType None, which implements no polyrl hook" in error.error
    assert "numeric_match" in reg.reward_names()
