"""A backend's ``check_model`` / ``check_checkpoint`` that fails with anything but a ``ConfigError``
is one ``error:`` line naming backend, distribution and check, never a traceback.

Why: ``polyrl train`` called them bare; a ``KeyError`` from a plugin's ``check_model`` ended the
run in a traceback, and ``sys.exit()`` there ended it with the plugin's code and no word. The
plugin is a real distribution with an entry point (the toy backend plus a variant of it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.cli import main
from polyrl.config import RunConfig
from polyrl.errors import ConfigError, PluginError
from polyrl.registry import Registry
from polyrl.resume_point import check_backend_files

from toy_dist import toy_site, write_dist

pytestmark = pytest.mark.faults

_VARIANT = """
import sys
from polyrl.errors import ConfigError
from polyrl.hookspecs import hookimpl
from polyrl.types import BackendSpec
from polyrl_toy import ToyEngine, ToyPlugin

HOW = {how!r}

def _check(*args):
    if HOW == "raises":
        raise KeyError("lora_targets")
    if HOW == "exits":
        sys.exit(4)
    raise ConfigError("names no layer", field="lora.target_modules", fix="name a layer")

class Checks(ToyPlugin):
    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="checks", load=ToyEngine.load, capabilities=self.capabilities,
                             distribution="polyrl-checks", check_model=_check, check_checkpoint=_check))

plugin = Checks("checks")
"""


@pytest.fixture()
def checks(tmp_path, monkeypatch):
    """Installs the toy backend and backend "checks" whose checks act as told (call with how)."""
    with toy_site(tmp_path, monkeypatch) as (site, names):
        def install(how: str) -> None:
            module = f"polyrl_checks_{how}"
            (site / f"{module}.py").write_text(_VARIANT.format(how=how))
            write_dist(site, f"polyrl-checks-{how}", "1.0", {"polyrl.backends": {"checks": f"{module}:plugin"}})
            names.append(module)

        yield install


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f"""
[model]
path = "toy-model"
[backends]
train = "checks"
generate = "toy"
[data]
task = "arithmetic"
[[rewards]]
name = "numeric_match"
[train]
steps = 1
prompts_per_step = 2
output_dir = "{tmp_path / 'run'}"
""")
    return path


@pytest.mark.parametrize(("how", "said"), [("raises", "raised KeyError: 'lora_targets'"),
                                           ("exits", "raised SystemExit: 4")])
def test_a_check_model_failing_is_one_error_line_naming_the_plugin(checks, tmp_path, capsys, how, said):
    checks(how)
    code = main(["train", str(_config_file(tmp_path))])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert f"error: backend 'checks' (polyrl-checks) hook check_model: {said}" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_check_models_config_error_stays_the_users(checks, tmp_path, capsys):
    checks("config")
    assert main(["train", str(_config_file(tmp_path))]) != 0
    err = capsys.readouterr().err
    assert "error: lora.target_modules: names no layer" in err and "checks" not in err


@pytest.mark.parametrize(("how", "error", "said"), [
    ("raises", PluginError, r"backend 'checks' \(polyrl-checks\) hook check_checkpoint: raised KeyError"),
    ("exits", PluginError, r"backend 'checks' \(polyrl-checks\) hook check_checkpoint: raised SystemExit: 4"),
    ("config", ConfigError, r"lora.target_modules: names no layer"),
])
def test_a_check_checkpoint_failing_is_the_plugins_error_and_a_config_error_the_users(checks, tmp_path, how,
                                                                                     error, said):
    checks(how)
    config = RunConfig.from_dict({"model": {"path": "toy-model"}, "backends": {"train": "checks"},
                                  "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})
    with pytest.raises(error, match=said):
        check_backend_files(Registry(), config, (tmp_path, {}), weights_only=False)
