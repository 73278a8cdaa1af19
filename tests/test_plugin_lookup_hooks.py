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


# --- the reward_model reward's options.path ------------------------------------------------------


def _score_with_reward_model(path: str):
    """A reward step as a run takes it: the reward computer calling polyrl-torch's reward_model."""
    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer
    from polyrl.types import Completion, RewardContext

    computer = RewardComputer(get_plugin_manager(), [("reward_model", 1.0, {"path": path})])
    return computer(["Name a colour."], [Completion(0, [1], [2], [0.0], text="red")],
                    RewardContext(rows=[{"prompt": "Name a colour."}], wanted=("reward_model",)))


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("models") / "tiny-rm")


@pytest.mark.parametrize(("body", "said"), [
    ("raise RuntimeError('alias table unreadable')", "raised RuntimeError: alias table unreadable"),
    ("sys.exit(2)", "raised SystemExit: 2"),
])
def test_a_reward_models_alias_hook_failing_is_one_error_naming_the_plugin(site, rm_path, body, said):
    """The reward model asked the alias hooks bare: a plugin's sys.exit read as the reward's own
    ("reward_model raised SystemExit(2) ... return scores"), a raise as "cannot load a
    sequence-classification model from 'my-reward-model'"; neither named the plugin."""
    from polyrl.errors import RewardError

    site("polyrl_rm_alias_fails", "polyrl_resolve_model", body)
    with pytest.raises(RewardError) as err:
        _score_with_reward_model("my-reward-model")
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    assert f"options.path: plugin 'polyrl_rm_alias_fails' (polyrl-rm-alias-fails) hook polyrl_resolve_model {said}" \
        in text, text
    assert "POLYRL_DISABLE_PLUGINS=polyrl_rm_alias_fails" in text


def test_a_reward_model_alias_a_plugin_resolves_is_scored(site, rm_path):
    site("polyrl_rm_alias", "polyrl_resolve_model", f"return {rm_path!r} if name == 'my-reward-model' else None")
    by_alias = _score_with_reward_model("my-reward-model").total
    assert by_alias.shape == (1,) and by_alias[0] == _score_with_reward_model(rm_path).total[0]
