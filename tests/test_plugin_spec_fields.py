"""A plugin registering a spec with a wrong field (a name that is no string, ``capabilities``
as a dict, ``Capabilities(dtypes=("bfloat16"))``: a str, not a tuple), or returning its specs instead of registering them, is listed as that plugin's load
error; every listing and the other plugins go on.

Why: such a spec was kept, and ``polyrl backends``, ``doctor``, ``rewards``, ``trackers`` and
``environments`` ended in a ``TypeError: '<' not supported between instances of 'int' and 'str'``
(or ``'dict' object has no attribute 'as_dict'``) traceback: one installed distribution's typo
took down every listing. The plugins are real distributions with entry points, as pip leaves them.
"""

from __future__ import annotations

import json
import sys

import pytest

from polyrl import cli
from polyrl.registry import Registry

from toy_dist import write_dist

pytestmark = pytest.mark.faults

_HEAD = ("from polyrl.hookspecs import hookimpl\n"
         "from polyrl.types import BackendSpec, Capabilities, RewardSpec\n"
         "from polyrl.tracking.spec import TrackerSpec\n"
         "from polyrl.agents.spec import EnvironmentSpec\n"
         "@hookimpl\n")

#: case -> (entry-point group, register hook's body, listing command, its --json list, what the error names)
CASES = {
    "backendint": ("polyrl.backends", "register(BackendSpec(name=5, load=lambda config: object()))",
                   "backends", "backends", "name is int 5, expected a non-empty str"),
    "backendcaps": ("polyrl.backends",
                    "register(BackendSpec(name='capsdict', load=lambda c: object(), capabilities={'generate': True}))",
                    "backends", "backends", "capabilities is dict {'generate': True}, expected polyrl.types.Capabilities"),
    # ("bfloat16") is a str: "float16" in "bfloat16" let an undeclared dtype pass the dtype check
    "backenddtype": ("polyrl.backends",
                     "register(BackendSpec(name='onedtype', load=lambda c: object(), "
                     "capabilities=Capabilities(dtypes=('bfloat16'))))",
                     "backends", "backends", "got the string 'bfloat16' where a tuple of names belongs. "
                                             "Fix: write ('bfloat16',)"),
    "backendsampling": ("polyrl.backends",
                        "register(BackendSpec(name='onefeature', load=lambda c: object(), "
                        "capabilities=Capabilities(sampling=('min_p'))))",
                        "backends", "backends", "got the string 'min_p' where a tuple of names belongs"),
    # ("scale") split into one-letter keys: the user's `scale` was then refused as a typo
    "backendoptions": ("polyrl.backends",
                       "register(BackendSpec(name='oneoption', load=lambda c: object(), options=('scale')))",
                       "backends", "backends", "got the string 'scale' where a tuple of names belongs"),
    "rewardint": ("polyrl.rewards", "register(RewardSpec(name=7))", "rewards", "rewards",
                  "name is int 7, expected a non-empty str"),
    "trackernone": ("polyrl.trackers", "register(TrackerSpec(name=None, create=print))", "trackers", "trackers",
                    "name is NoneType None, expected a non-empty str"),
    "envint": ("polyrl.environments", "register(EnvironmentSpec(name=3, create=print))", "environments",
               "environments", "name is int 3, expected a non-empty str"),
}
_HOOKS = {"polyrl.backends": "polyrl_register_backends", "polyrl.rewards": "polyrl_register_rewards",
          "polyrl.trackers": "polyrl_register_trackers", "polyrl.environments": "polyrl_register_environments"}


@pytest.fixture()
def installed(tmp_path, monkeypatch):
    """Installs the distribution of one case (call it with the case's name)."""
    modules: list[str] = []

    def install(case: str) -> None:
        group, body = CASES[case][:2]
        module = f"polyrl_badfield_{case}"
        (tmp_path / f"{module}.py").write_text(f"{_HEAD}def {_HOOKS[group]}(register):\n    {body}\n")
        write_dist(tmp_path, f"polyrl-badfield-{case}", "1.0", {group: {case: module}})
        modules.append(module)

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("polyrl.registry._registry", None)
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # one table line per error
    yield install
    for module in modules:
        sys.modules.pop(module, None)


@pytest.mark.parametrize("case", list(CASES))
def test_a_spec_with_a_wrong_field_is_a_load_error_and_the_listing_goes_on(installed, case, capsys):
    _, _, command, entries, named = CASES[case]
    installed(case)
    assert cli.main([command, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing[entries], listing  # polyrl's own entries are still listed
    assert all(isinstance(e["name"], str) for e in listing[entries])
    mine = {e["name"]: e for e in listing["load_errors"]}[case]
    assert mine["distribution"] == f"polyrl-badfield-{case}"
    assert named in mine["error"] and "Fix:" in mine["error"]

    assert cli.main([command]) == 0
    assert f"'{case}' (polyrl-badfield-{case}) failed to load" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["backendint", "backendcaps"])
def test_doctor_names_the_backend_plugin_with_a_wrong_field(installed, case, capsys):
    installed(case)
    cli.main(["doctor"])
    out = capsys.readouterr().out
    assert f"plugin {case} (polyrl-badfield-{case})" in out and CASES[case][4] in out


def test_a_hook_registering_a_good_and_a_bad_spec_registers_neither(installed, tmp_path):
    (tmp_path / "polyrl_badfield_half.py").write_text(
        f"{_HEAD}def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='halfgood', load=lambda c: object()))\n"
        "    register(BackendSpec(name='halfbad', load=lambda c: object(), summary=['not', 'text']))\n")
    write_dist(tmp_path, "polyrl-badfield-half", "1.0", {"polyrl.backends": {"half": "polyrl_badfield_half"}})
    try:
        reg = Registry()
        assert "halfgood" not in reg.names() and "halfbad" not in reg.names()
        error = next(e for e in reg.load_errors if e.name == "half")
        assert "summary is list ['not', 'text'], expected a str" in error.error
        assert "torch" in reg.names()
    finally:
        sys.modules.pop("polyrl_badfield_half", None)


@pytest.mark.parametrize("kind", ["backends", "rewards", "trackers", "environments"])
def test_a_register_hook_returning_its_specs_instead_of_registering_them_is_a_load_error(installed, tmp_path,
                                                                                         kind, capsys):
    """``return [BackendSpec(...)]`` (specs returned, ``register`` never called) was read as "this
    plugin registers nothing": the plugin vanished from every listing without a word."""
    spec = {"backends": "BackendSpec(name='returned', load=lambda c: object())",
            "rewards": "RewardSpec(name='returned')",
            "trackers": "TrackerSpec(name='returned', create=print)",
            "environments": "EnvironmentSpec(name='returned', create=print)"}[kind]
    module = f"polyrl_badfield_ret_{kind}"
    (tmp_path / f"{module}.py").write_text(f"{_HEAD}def polyrl_register_{kind}(register):\n    return [{spec}]\n")
    write_dist(tmp_path, f"polyrl-returns-{kind}", "1.0", {f"polyrl.{kind}": {f"ret{kind}": module}})
    try:
        assert cli.main([kind, "--json"]) == 0
        listing = json.loads(capsys.readouterr().out)
    finally:
        sys.modules.pop(module, None)
    assert "returned" not in {e["name"] for e in listing[kind]}
    mine = {e["name"]: e for e in listing["load_errors"]}[f"ret{kind}"]
    assert mine["distribution"] == f"polyrl-returns-{kind}"
    assert f"polyrl_register_{kind} returned a list instead of None" in mine["error"]
    assert "Fix: call register(spec) once for each spec" in mine["error"]


def test_a_hook_registering_one_name_twice_is_a_load_error_not_the_last_silently_winning(installed, tmp_path):
    (tmp_path / "polyrl_badfield_twice.py").write_text(
        f"{_HEAD}def polyrl_register_trackers(register):\n"
        "    register(TrackerSpec(name='twice', create=print, summary='the one meant'))\n"
        "    register(TrackerSpec(name='twice', create=repr, summary='a copy-paste slip'))\n")
    write_dist(tmp_path, "polyrl-badfield-twice", "1.0", {"polyrl.trackers": {"twice": "polyrl_badfield_twice"}})
    try:
        reg = Registry()
        assert "twice" not in reg.trackers_by_name()  # was registered as the second, the first dropped silently
        error = next(e for e in reg.load_errors if e.name == "twice")
        assert "registered two TrackerSpecs named 'twice' in one polyrl_register_trackers" in error.error
        assert "Fix: give each its own name" in error.error
    finally:
        sys.modules.pop("polyrl_badfield_twice", None)
