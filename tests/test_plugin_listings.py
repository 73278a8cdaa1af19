"""Every listing command (``polyrl backends|rewards|trackers|environments``) names a plugin whose
register hook raised, in its table and in ``--json``.

Why: ``polyrl rewards`` showed only plugins that failed to import; one whose
``polyrl_register_rewards`` raised simply vanished from the listing (``"load_errors": []``).
"""

from __future__ import annotations

import json
import sys

import pytest

from polyrl import cli

from toy_dist import write_dist

pytestmark = pytest.mark.faults

#: kind -> (entry-point group, register hook, listing command, the --json list of its entries)
KINDS = {
    "backend": ("polyrl.backends", "polyrl_register_backends", "backends", "backends"),
    "reward": ("polyrl.rewards", "polyrl_register_rewards", "rewards", "rewards"),
    "tracker": ("polyrl.trackers", "polyrl_register_trackers", "trackers", "trackers"),
    "environment": ("polyrl.environments", "polyrl_register_environments", "environments", "environments"),
}


@pytest.fixture()
def broken_register(tmp_path, monkeypatch, request):
    """One installed distribution per kind whose register hook raises."""
    site = tmp_path / "site"
    site.mkdir()
    modules = []
    for kind, (group, hook, _, _) in KINDS.items():
        module = f"polyrl_regraise_{kind}"
        (site / f"{module}.py").write_text(
            "from polyrl.hookspecs import hookimpl\n"
            "@hookimpl\n"
            f"def {hook}(register):\n"
            f"    raise ValueError('{kind} register blew up')\n")
        write_dist(site, f"polyrl-regraise-{kind}", "1.0", {group: {f"regraise{kind}": module}})
        modules.append(module)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr("polyrl.registry._registry", None)
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # one table line per error, whatever the terminal
    yield site
    for module in modules:
        sys.modules.pop(module, None)


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_listing_names_a_plugin_whose_register_hook_raised(broken_register, kind, capsys):
    _, _, command, entries = KINDS[kind]
    assert cli.main([command, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing[entries], listing  # the working entries are still listed
    errors = {e["name"]: e for e in listing["load_errors"]}
    assert f"regraise{kind}" in errors, listing["load_errors"]
    mine = errors[f"regraise{kind}"]
    assert mine["distribution"] == f"polyrl-regraise-{kind}"
    assert f"ValueError: {kind} register blew up" in mine["error"]

    assert cli.main([command]) == 0
    table = capsys.readouterr().out
    assert f"'regraise{kind}' (polyrl-regraise-{kind}) failed to load" in table
    assert f"{kind} register blew up" in table
