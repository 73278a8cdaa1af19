"""The hooks every plugin is asked in turn (``polyrl_resolve_model``, ``polyrl_convert_model``)
name the plugin that fails, as one ``error:`` line, never a traceback or a silent exit.

Why: a third-party plugin's alias hook calling ``sys.exit(2)`` ended every ``polyrl train`` with
exit code 2 and no word (``SystemExit`` was not caught), and ``polyrl convert`` called the
convert hooks bare, so a plugin raising for a format it does not handle (instead of returning
None) ended ``polyrl convert --to onnx`` in a traceback. Real distributions with entry points.
"""

from __future__ import annotations

import sys

import pytest

from polyrl.cli import main

from toy_dist import write_dist

pytestmark = pytest.mark.faults

_SOURCE = """
import sys
from polyrl.hookspecs import hookimpl

@hookimpl
def {hook}(**kwargs):
    {body}
"""


@pytest.fixture()
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    monkeypatch.setattr("polyrl.registry._registry", None)
    modules: list[str] = []

    def install(name: str, hook: str, body: str) -> None:
        args = "name" if hook == "polyrl_resolve_model" else "src, dst, to, quantize_bits"
        (root / f"{name}.py").write_text(_SOURCE.format(hook=hook, body=body).replace("**kwargs", args))
        write_dist(root, name.replace("_", "-"), "1.0", {"polyrl.backends": {name: name}})
        modules.append(name)

    yield install
    for module in modules:
        sys.modules.pop(module, None)


def test_an_alias_hook_calling_sys_exit_is_one_error_naming_the_plugin(site, tmp_path, capsys):
    site("polyrl_alias_exits", "polyrl_resolve_model", "sys.exit(2)")
    code = main(["generate", "--backend", "torch", "--model", "tiny-llama", "hi"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert ("error: plugin 'polyrl_alias_exits' (polyrl-alias-exits) hook polyrl_resolve_model raised "
            "SystemExit: 2") in err
    assert "POLYRL_DISABLE_PLUGINS=polyrl_alias_exits" in err


@pytest.mark.parametrize(("body", "said"), [
    ("raise NotImplementedError(f'cannot convert to {to}')", "raised NotImplementedError: cannot convert to onnx"),
    ("sys.exit(7)", "raised SystemExit: 7"),
])
def test_a_convert_hook_failing_is_one_error_naming_the_plugin(site, tmp_path, capsys, body, said):
    site("polyrl_convert_fails", "polyrl_convert_model", body)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    code = main(["convert", str(model), str(tmp_path / "out"), "--to", "onnx"])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert f"error: plugin 'polyrl_convert_fails' (polyrl-convert-fails) hook polyrl_convert_model {said}" in err
