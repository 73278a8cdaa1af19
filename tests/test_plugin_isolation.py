"""One faulty plugin must never break the others, nor let an error blame the wrong party.

The hostile plugins are real distributions with entry points (``toy_dist.install_hostile_dists``),
discovered exactly as ``pip install`` would leave them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.errors import BackendUnavailable, ConfigError, PluginError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec, Capabilities, EngineConfig, SamplingParams, TokenSequence

from toy_dist import activate_hostile

pytestmark = pytest.mark.faults


@pytest.fixture()
def hostile(tmp_path, monkeypatch):
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    deactivate = activate_hostile(tmp_path)
    yield tmp_path
    deactivate()


def test_misspelt_hook_drops_only_that_plugin_naming_entry_point_and_fix(hostile, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    reg = Registry()
    errors = {e.name: e for e in reg.load_errors}
    typo = errors["typo"]
    assert typo.distribution == "polyrl-typo" and typo.group == "polyrl.backends"
    assert "'generat'" in typo.error and "POLYRL_DISABLE_PLUGINS=typo" in typo.error
    assert "generate" in typo.error  # the known hook names, so the typo is obvious
    assert "typo" not in reg.names()  # unregistered: none of its hooks run
    assert not reg.pm.has_plugin("typo")
    engine = Engine(reg, "toy", EngineConfig(model="toy-model"))  # the rest keep working
    assert len(engine.generate(["ab"], SamplingParams(max_new_tokens=3, n=2, seed=0))) == 2


def test_cli_lists_the_misspelt_plugin_and_still_works(hostile, monkeypatch, capsys):
    from polyrl import registry
    from polyrl.cli import main

    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    registry.get_registry(refresh=True)
    try:
        assert main(["backends", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
    finally:
        monkeypatch.delenv("POLYRL_DISABLE_PLUGINS")
        registry.get_registry(refresh=True)
    assert "toy" in {b["name"] for b in data["backends"]}
    typo = next(e for e in data["load_errors"] if e["name"] == "typo")
    assert typo["distribution"] == "polyrl-typo" and "generat" in typo["error"]


def test_duplicate_backend_name_is_an_error_naming_both_distributions(hostile):
    reg = Registry()
    status = reg.status("toy")
    assert not status.available
    assert "polyrl-toy" in status.reason and "polyrl-toy-fork" in status.reason
    with pytest.raises(BackendUnavailable, match="polyrl-toy.*polyrl-toy-fork|polyrl-toy-fork.*polyrl-toy"):
        reg.load("toy", EngineConfig(model="toy-model"))
    conflict = next(e for e in reg.load_errors if e.name == "toy")
    assert "POLYRL_DISABLE_PLUGINS" in conflict.error


def test_disabling_one_of_the_duplicates_makes_the_name_usable(hostile, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    reg = Registry()
    assert reg.status("toy").available and reg.status("toy").distribution == "polyrl-toy"


class _Hijacker:
    """Answers every compute hook for every engine, as a careless plugin would."""

    @hookimpl
    def generate(self, engine, prompts, sampling):
        raise RuntimeError("hijacker ran")

    @hookimpl
    def logprobs(self, engine, sequences, temperature, reference):
        return [np.zeros(len(s.completion_ids), np.float32) for s in sequences]


class _GenerateOnly:
    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="genonly", load=lambda c: object(), distribution="polyrl-genonly",
                             capabilities=Capabilities(generate=True, logprobs=False)))


def test_compute_hooks_are_answered_only_by_the_owning_plugin(hostile, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    reg = Registry(get_plugin_manager(extra=[_Hijacker(), _GenerateOnly()]))
    toy = Engine(reg, "toy", EngineConfig(model="toy-model"))
    out = toy.generate(["ab"], SamplingParams(max_new_tokens=4, n=2, seed=3))  # the hijacker is never asked
    scored = toy.logprobs([TokenSequence.of(c) for c in out])
    assert all(np.all(lp < 0) for lp in scored)  # the toy's, not the hijacker's zeros
    genonly = Engine(reg, "genonly", EngineConfig(model="x"))
    with pytest.raises(PluginError, match="'genonly' \\(polyrl-genonly\\) hook logprobs: its plugin does not"):
        genonly.logprobs([TokenSequence.of(out[0])])


def test_multi_rank_run_is_refused_for_a_backend_without_data_parallel(hostile, monkeypatch, tmp_path):
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    config = RunConfig.from_dict({
        "model": {"path": "toy-model"}, "backends": {"train": "toy"},
        "data": {"task": "arithmetic", "options": {"count": 16}}, "rewards": [{"name": "toy_sevens"}],
        "train": {"steps": 1, "prompts_per_step": 4, "output_dir": str(tmp_path / "run")},
    })
    with pytest.raises(ConfigError, match="'toy' does not train data-parallel, but WORLD_SIZE=2") as info:
        Trainer(config)
    assert info.value.field == "backends.train" and "torch" in info.value.fix
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_all_gather_answering_none_under_several_ranks_is_the_backends_fault(hostile, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    engine = Engine(Registry(), "toy", EngineConfig(model="toy-model"))
    assert engine.all_gather(5) == [5]
    with pytest.raises(PluginError, match="toy.*all_gather.*WORLD_SIZE=2"):
        engine.all_gather(5, world_size=2)


class _GathersWrong:
    """A data-parallel backend whose all_gather answers ``answer`` (not a list of the ranks' values)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.__name__ = f"gathers-{type(answer).__name__}"

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="gatherer", load=lambda config: object(),
                             capabilities=Capabilities(data_parallel=True)))

    @hookimpl
    def all_gather(self, engine, value):
        return self.answer


@pytest.mark.parametrize("answer", [5, "ab", {0: "a", 1: "b"}, np.array([1.0, 2.0])])
def test_all_gather_answering_no_list_is_the_backends_fault(answer):
    """An int raised TypeError out of ``list(out)`` (a traceback); a 2-character str or a 2-key
    dict under WORLD_SIZE=2 was read as the two ranks' values (its characters, its keys)."""
    reg = Registry(get_plugin_manager(entry_points=False, extra=[_GathersWrong(answer)]))
    engine = Engine(reg, "gatherer", EngineConfig(model="x"))
    with pytest.raises(PluginError, match=rf"'gatherer' .* hook all_gather: returned {type(answer).__name__}"
                                          r".*expected a list of every rank's value"):
        engine.all_gather("mine", world_size=2)


class _AliasReturns:
    def __init__(self, value) -> None:
        self.value = value
        self.__name__ = f"alias-returns-{type(value).__name__}"

    @hookimpl
    def polyrl_resolve_model(self, name):
        return self.value if name == "my-alias" else None


def test_model_alias_hook_that_raises_names_the_plugin(hostile, monkeypatch):
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "toyfork")
    reg = Registry()
    with pytest.raises(PluginError, match="'badalias' \\(polyrl-bad-alias\\).*KeyError.*POLYRL_DISABLE_PLUGINS=badalias"):
        reg.resolve_model("explode")
    assert reg.resolve_model("toy-model").endswith("polyrl_toy")  # other aliases still resolve
    assert reg.resolve_model(str(hostile)) == str(hostile)  # a plain path is the path


@pytest.mark.parametrize("garbage, complaint", [(42, "returned int"), ("/no/such/model/dir", "does not exist")])
def test_model_alias_hook_returning_garbage_blames_the_plugin_not_the_user(garbage, complaint):
    plugin = _AliasReturns(garbage)
    reg = Registry(get_plugin_manager(extra=[plugin], entry_points=False))
    with pytest.raises(PluginError, match=f"{plugin.__name__}.*{complaint}") as info:
        reg.resolve_model("my-alias")
    assert not isinstance(info.value, ConfigError)


def test_a_tracker_plugin_cannot_take_a_builtin_trackers_name(tmp_path, monkeypatch):
    """Once: a plugin registering "tensorboard" silently replaced the built-in (last one won), so
    report_to = ["tensorboard"] ran its code with the run config and every completion."""
    from toy_dist import write_dist

    from polyrl.tracking import TrackerSpec

    (tmp_path / "polyrl_shadow_tracker.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.tracking import TrackerSpec\n"
        "@hookimpl\n"
        "def polyrl_register_trackers(register):\n"
        "    register(TrackerSpec(name='tensorboard', create=lambda ctx: None, summary='shadow'))\n"
        "    register(TrackerSpec(name='shadowdash', create=lambda ctx: None, summary='its own'))\n")
    write_dist(tmp_path, "polyrl-shadow", "1.0", {"polyrl.trackers": {"shadow": "polyrl_shadow_tracker"}})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    reg = Registry()
    trackers = reg.trackers_by_name()
    assert isinstance(trackers["tensorboard"], TrackerSpec)
    assert trackers["tensorboard"].distribution == "polyrl" and trackers["tensorboard"].summary != "shadow"
    assert trackers["shadowdash"].distribution == "polyrl-shadow"  # its own name still works
    conflict = next(e for e in reg.load_errors if e.name == "tensorboard")
    assert conflict.group == "polyrl_register_trackers"
    assert "polyrl-shadow" in conflict.distribution and "polyrl-shadow" in conflict.error
    assert "'polyrl'" in conflict.error or "polyrl," in conflict.error
    assert "POLYRL_DISABLE_PLUGINS" in conflict.error


def test_a_plugin_requiring_another_polyrl_is_not_loaded_and_says_which(tmp_path, monkeypatch):
    """An editable or --no-deps install skips pip's requirement check: the core makes it."""
    import sys

    from polyrl.backend_kit.versions import installed_version

    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    (tmp_path / "polyrl_future.py").write_text("raise ImportError(\"cannot import name 'new_api' from 'polyrl'\")\n")
    (tmp_path / "polyrl_fine.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='fine', load=lambda config: object()))\n")
    for name, requires in (("polyrl-future", "polyrl>=99; python_version >= '3'"), ("polyrl-fine", "polyrl>=0.0.1")):
        info = tmp_path / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                       f"Requires-Dist: {requires}\nRequires-Dist: polyrl>=50; extra == 'old'\n")
        module = name.replace("-", "_")
        (info / "entry_points.txt").write_text(f"[polyrl.backends]\n{name[7:]} = {module}\n")
        (info / "RECORD").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reg = Registry()
    finally:
        for module in ("polyrl_future", "polyrl_fine"):
            sys.modules.pop(module, None)
    future = next(e for e in reg.load_errors if e.name == "future")
    core = installed_version("polyrl")
    assert future.distribution == "polyrl-future"
    assert future.error == (f"polyrl-future 1.0 requires polyrl>=99 but polyrl {core} is installed; it was not "
                            f"loaded. Fix: pip install 'polyrl>=99', or a polyrl-future release made for polyrl {core}")
    assert "fine" in reg.names() and not any(e.name == "fine" for e in reg.load_errors)


def test_a_backend_whose_plugin_did_not_import_is_named_as_broken_not_as_missing(tmp_path, monkeypatch):
    """`[backends] train = "broken"` when polyrl-broken is installed but fails to import: the error
    says so and why, instead of telling the user to install what is installed."""
    from polyrl.config import RunConfig
    from polyrl.engines import check_backend_names

    from toy_dist import activate, install_toy_dists

    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    deactivate = activate(install_toy_dists(tmp_path))
    try:
        reg = Registry()
    finally:
        deactivate()
    config = RunConfig.from_dict({"model": {"path": "toy-model"}, "backends": {"train": "broken"},
                                  "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})
    with pytest.raises(ConfigError) as info:
        check_backend_names(config, reg)
    assert info.value.field == "backends.train"
    assert str(info.value).startswith("backends.train: backend 'broken' is installed (polyrl-broken) but its plugin "
                                      "did not load: ImportError: libfoo.so: cannot open shared object")
    assert "pip install" not in str(info.value)
    unknown = RunConfig.from_dict({"model": {"path": "toy-model"}, "backends": {"train": "jax"},
                                   "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})
    with pytest.raises(ConfigError, match=r"unknown backend 'jax' \(installed: .*; plugins that did not load: "
                                          r".*broken"):
        check_backend_names(unknown, reg)


def test_generate_naming_a_backend_whose_plugin_did_not_import_says_so_not_install_it(tmp_path, monkeypatch,
                                                                                        capsys):
    """`polyrl generate --backend broken` (and ``Registry.spec``/``load``) said "unknown backend
    'broken' ... Fix: install its plugin" of an installed distribution whose import failed; only
    ``polyrl train``'s config check named the failure."""
    from polyrl import registry
    from polyrl.cli import main

    from toy_dist import activate, install_toy_dists

    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    deactivate = activate(install_toy_dists(tmp_path))
    try:
        registry.get_registry(refresh=True)
        code = main(["generate", "--backend", "broken", "--model", "tiny-llama", "hi"])
        with pytest.raises(BackendUnavailable) as info:
            Registry().spec("broken")
    finally:
        deactivate()
        registry.get_registry(refresh=True)
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert ("error: --backend: backend 'broken' is installed (polyrl-broken) but its plugin did not load: ImportError: "
            "libfoo.so: cannot open shared object") in err
    assert "pip install" not in err
    assert str(info.value).startswith("backend 'broken' is installed (polyrl-broken) but its plugin did not load")


class _RegistersThenRaises:
    """A backend plugin whose register hook raised (a driver check at registration)."""

    @hookimpl
    def polyrl_register_backends(self, register):
        raise RuntimeError("CUDA driver too old")


def test_a_backend_whose_register_hook_raised_is_named_as_broken_not_as_unknown():
    """The error said "unknown backend" with no word of a plugin whose register hook raised (only
    import failures were looked at): named by its plugin, it is the plugin's error, and otherwise
    it is listed among the plugins that did not load."""
    from polyrl.config import RunConfig
    from polyrl.engines import check_backend_names

    reg = Registry(get_plugin_manager(entry_points=False, extra=[_RegistersThenRaises()]))
    plugin = next(e.name for e in reg.load_errors if e.group == "polyrl_register_backends")

    def config(train: str) -> RunConfig:
        return RunConfig.from_dict({"model": {"path": "m"}, "backends": {"train": train},
                                    "data": {"task": "arithmetic"}, "rewards": [{"name": "numeric_match"}]})

    with pytest.raises(ConfigError, match=rf"backend '{plugin}' is installed \(.*\) but its plugin did not load: "
                                          "RuntimeError: CUDA driver too old"):
        check_backend_names(config(plugin), reg)
    with pytest.raises(ConfigError, match=rf"unknown backend 'jax' .*plugins that did not load: {plugin}"):
        check_backend_names(config("jax"), reg)


class _RegistersHalfThenRaises:
    """A plugin registering one backend, one tracker and one environment, then raising."""

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="half-backend", load=lambda config: None))
        raise RuntimeError("second backend failed")

    @hookimpl
    def polyrl_register_trackers(self, register):
        from polyrl.tracking.spec import TrackerSpec

        register(TrackerSpec(name="half-tracker", create=lambda context: None))
        raise RuntimeError("tracker setup failed")


def test_a_register_hook_that_raises_part_way_registers_nothing():
    """What a hook registered before raising stayed registered: a half-installed plugin whose
    missing pieces failed later, at run time. All or nothing now, as rewards already were; the
    failure is listed as a load error either way."""
    reg = Registry(get_plugin_manager(entry_points=False, extra=[_RegistersHalfThenRaises()]))
    assert "half-backend" not in reg.names()
    assert "half-tracker" not in reg.trackers_by_name()
    groups = {e.group for e in reg.load_errors}
    assert {"polyrl_register_backends", "polyrl_register_trackers"} <= groups
