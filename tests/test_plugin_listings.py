"""Every listing command (``polyrl backends|rewards|trackers|environments``) names a plugin whose
register hook raised, in its table and in ``--json``, and a probe answering something other than
None or a reason string makes its entry unusable (with that reason) instead of breaking the listing.

Why: ``polyrl rewards`` showed only plugins that failed to import; one whose
``polyrl_register_rewards`` raised simply vanished from the listing (``"load_errors": []``). And a
backend probe returning ``42`` raised AttributeError in ``polyrl backends``, ``polyrl doctor`` and
``get_registry().statuses()``, hiding every other backend with it.
"""

from __future__ import annotations

import json
import sys

import pytest

from polyrl import cli
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.types import BackendSpec

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


# --- probes answering something other than None or a reason string --------------------------------


class _OddProbe:
    """A backend, a tracker and an environment whose probes answer ``answer``."""

    __name__ = "oddprobe"

    def __init__(self, answer: object) -> None:
        self.answer = answer

    def _probe(self) -> object:
        return self.answer

    @hookimpl
    def polyrl_register_backends(self, register):
        register(BackendSpec(name="oddprobe", load=lambda config: object(), probe=self._probe))

    @hookimpl
    def polyrl_register_trackers(self, register):
        from polyrl.tracking import TrackerSpec

        register(TrackerSpec(name="oddprobe", create=lambda ctx: None, probe=self._probe))

    @hookimpl
    def polyrl_register_environments(self, register):
        from polyrl.agents.spec import EnvironmentSpec

        register(EnvironmentSpec(name="oddprobe", create=lambda options: None, probe=self._probe))


ODD_ANSWERS = [(42, "probe returned int, expected None or a reason string"),
               (b"no gpu", "probe returned bytes, expected None or a reason string"),
               (False, "probe returned bool, expected None or a reason string"),
               ("", "probe returned an empty reason string (None means usable)"),
               ("  ", "probe returned an empty reason string (None means usable)")]


@pytest.mark.parametrize(("answer", "reason"), ODD_ANSWERS)
def test_a_probe_answering_neither_none_nor_a_string_makes_only_its_entry_unusable(answer, reason):
    reg = Registry(get_plugin_manager(extra=[_OddProbe(answer)]))
    statuses = {s.name: s for s in reg.statuses()}  # raised AttributeError for every backend
    odd = statuses["oddprobe"]
    assert (odd.available, odd.reason) == (False, reason)
    assert statuses["torch"].distribution == "polyrl-torch"  # the others are still listed
    assert "oddprobe" not in reg.available()
    tracker = {s.name: s for s in reg.tracker_statuses()}["oddprobe"]
    assert (tracker.available, tracker.reason) == (False, reason)
    env = {(s.kind, s.name): s for s in reg.environment_statuses()}[("environment", "oddprobe")]
    assert (env.available, env.reason) == (False, reason)


def test_backends_and_doctor_list_a_backend_whose_probe_answered_a_number(monkeypatch, capsys):
    reg = Registry(get_plugin_manager(extra=[_OddProbe(42)]))
    monkeypatch.setattr("polyrl.registry._registry", reg)
    monkeypatch.setenv("COLUMNS", "400")
    assert cli.main(["backends", "--json"]) == 0
    backends = {b["name"]: b for b in json.loads(capsys.readouterr().out)["backends"]}
    assert backends["oddprobe"]["available"] is False and "torch" in backends
    assert backends["oddprobe"]["reason"] == "probe returned int, expected None or a reason string"
    assert cli.main(["backends"]) == 0
    assert "probe returned int, expected None or a reason string" in capsys.readouterr().out
    assert cli.main(["doctor", "--json"]) == 0
    doctor = json.loads(capsys.readouterr().out)
    assert doctor["backends"]["oddprobe"]["available"] is False


@pytest.mark.parametrize("command", ["backends", "trackers", "environments"])
def test_an_unusable_entry_without_an_install_hint_shows_its_reason_alone(command, monkeypatch, capsys):
    """``polyrl trackers`` wrote "<reason> ()" for a tracker whose spec gives no install hint; every
    listing writes the reason alone, and the hint in parentheses only where there is one."""
    reg = Registry(get_plugin_manager(extra=[_OddProbe("no dashboard on this machine")]))
    monkeypatch.setattr("polyrl.registry._registry", reg)
    monkeypatch.setenv("COLUMNS", "400")
    assert cli.main([command]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "oddprobe" in line)
    cells = [cell.strip() for cell in row.split("│")]
    assert cells[-2] == "no dashboard on this machine", row
