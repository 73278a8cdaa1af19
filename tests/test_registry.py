"""Registry and hook dispatch, with real entry points of distributions built by the test."""

from __future__ import annotations

import json

import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.errors import BackendUnavailable, PluginError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec, EngineConfig, SamplingParams, TokenSequence

from toy_dist import activate, install_toy_dists, write_plugin


@pytest.fixture()
def toy_dists(tmp_path, monkeypatch):
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    deactivate = activate(install_toy_dists(tmp_path))
    yield tmp_path
    deactivate()


def test_third_party_backend_is_discovered_with_its_distribution(toy_dists):
    reg = Registry()
    assert "toy" in reg.names()
    status = reg.status("toy")
    assert status.available and status.reason is None
    assert status.distribution == "polyrl-toy"
    assert status.version == "0.0.1"
    assert status.capabilities["train_step"] is True
    assert "toy_sevens" in reg.reward_names()


def test_broken_plugins_are_recorded_not_fatal(toy_dists):
    reg = Registry()
    errors = {e.name: e for e in reg.load_errors}
    assert errors["broken"].distribution == "polyrl-broken"
    assert "libfoo.so" in errors["broken"].error
    assert errors["badreg"].distribution == "polyrl-badreg"
    assert "registration exploded" in errors["badreg"].error
    assert "toy" in reg.names()  # the healthy plugin still works


def test_a_plugin_failing_at_import_gets_a_fix_like_every_other_load_error(toy_dists, monkeypatch):
    """A module that raises while imported (a SyntaxError, its own code, a missing dependency) was
    listed as the bare exception: no "Fix:", so nobody could tell whose fault it was or that
    disabling it lets polyrl run."""
    import sys

    for module, source, ep in (("polyrl_p85_syntax", "def f(:\n", "syntaxbad"),
                               ("polyrl_p85_code", "TABLE = {}['k']\n", "codebad"),
                               ("polyrl_p85_dep", "import libp85notthere\n", "depbad")):
        write_plugin(toy_dists, module, source, (f"polyrl-{ep}", "1.0"), ep)
        monkeypatch.delitem(sys.modules, module, raising=False)
    errors = {e.name: e.error for e in Registry().load_errors}
    for ep, said in (("syntaxbad", "SyntaxError"), ("codebad", "KeyError"), ("broken", "libfoo.so"),
                     ("depbad", "Fix: install 'libp85notthere', which polyrl-depbad imports")):
        assert said in errors[ep] and f"POLYRL_DISABLE_PLUGINS={ep}" in errors[ep]
        assert errors[ep].count("Fix:") == 1
    assert "Fix: report it to polyrl-badreg's authors" in errors["badreg"]  # a register hook that raised
    with pytest.raises(BackendUnavailable) as caught:  # and a run naming it: still one Fix
        Registry().spec("syntaxbad")
    assert str(caught.value).count("Fix:") == 1


def test_allow_and_deny_lists(toy_dists, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "broken,badreg")
    reg = Registry()
    assert reg.load_errors == [] and "toy" in reg.names()
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS")
    monkeypatch.setenv("POLYRL_LOAD_PLUGINS", "broken")
    reg = Registry()
    assert "toy" not in reg.names()
    assert [e.name for e in reg.load_errors] == ["broken"]


def test_unknown_backend_error_names_known_ones_and_fix(toy_dists):
    reg = Registry()
    with pytest.raises(BackendUnavailable) as info:
        reg.spec("tpu9000")
    assert "tpu9000" in str(info.value) and "toy" in str(info.value) and "pip install" in str(info.value)


class _Unavailable:
    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="needs-gpu", load=lambda c: None, probe=lambda: "no CUDA device found",
                             install_hint="run on a machine with an NVIDIA GPU"))


def test_unusable_backend_reports_reason_and_refuses_to_load():
    reg = Registry(get_plugin_manager(extra=[_Unavailable()], entry_points=False))
    status = reg.status("needs-gpu")
    assert not status.available and status.reason == "no CUDA device found"
    with pytest.raises(BackendUnavailable, match="no CUDA device found.*NVIDIA GPU"):
        reg.load("needs-gpu", EngineConfig(model="x"))


def test_hook_dispatch_goes_to_the_plugin_that_owns_the_engine(toy_dists):
    reg = Registry()
    engine = Engine(reg, "toy", EngineConfig(model="toy-model"))
    out = engine.generate(["ab", "cd"], SamplingParams(max_new_tokens=5, n=3, seed=1))
    assert len(out) == 6 and [c.prompt_index for c in out] == [0, 0, 0, 1, 1, 1]
    recomputed = engine.logprobs([TokenSequence.of(c) for c in out], 1.0)
    for c, lp in zip(out, recomputed):
        np.testing.assert_allclose(c.logprobs, lp, atol=1e-6)


class _WrongType:
    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="liar", load=lambda c: object()))

    @hookimpl
    def generate(self, engine, prompts, sampling):
        return "not a list of completions"


def test_plugin_returning_wrong_type_is_named():
    reg = Registry(get_plugin_manager(extra=[_WrongType()], entry_points=False))
    engine = Engine(reg, "liar", EngineConfig(model="x"))
    with pytest.raises(PluginError, match="liar.*generate.*expected list"):
        engine.generate(["p"], SamplingParams(max_new_tokens=2))


def test_cli_backends_json_lists_backends_and_errors(toy_dists, capsys):
    from polyrl import registry
    from polyrl.cli import main

    registry.get_registry(refresh=True)
    try:
        assert main(["backends", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
    finally:
        registry.get_registry(refresh=True)
    names = {b["name"]: b for b in data["backends"]}
    assert names["toy"]["available"] is True
    assert {e["name"] for e in data["load_errors"]} == {"broken", "badreg"}
    assert "numeric_match" in {r["name"] for r in data["rewards"]}
