"""What a third-party plugin author meets: entry-point names shared across distributions, reward
names claimed twice, brackets in a plugin's words, a banner printed on import, ``sys.exit`` on
import, a tracker factory that forgot ``return``, a ``check_options`` with a bug. Each plugin is
a real distribution (a ``.dist-info`` on ``sys.path``, as ``pip install`` leaves it); each case
was a traceback, a silent loss or a silent replacement before.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from polyrl import registry
from polyrl.cli import main
from polyrl.errors import ConfigError
from polyrl.registry import Registry
from polyrl.rewards.combine import RewardComputer

from toy_dist import write_dist

REWARD_PLUGIN = """from polyrl.hookspecs import hookimpl
from polyrl.types import RewardSpec
NAME = {name!r}
@hookimpl
def polyrl_register_rewards(register):
    register(RewardSpec(name=NAME, summary={summary!r}))
@hookimpl
def reward(prompts, completions, context):
    if NAME not in context.wanted:
        return None
    return {{NAME: [{score!r}] * len(completions)}}
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for distributions; the modules they import are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    before = set(sys.modules)
    yield tmp_path
    for module in set(sys.modules) - before:
        if module.startswith("contract_"):
            sys.modules.pop(module, None)
    # a test's plugin lists must not shape the registry the next tests find
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    registry.get_registry(refresh=True)


def reward_dist(site: Path, dist: str, entry: str, module: str, name: str, summary: str = "", score: float = 1.0) -> None:
    (site / f"{module}.py").write_text(REWARD_PLUGIN.format(name=name, summary=summary or name, score=score))
    write_dist(site, dist, "1.2.3", {"polyrl.rewards": {entry: module}})


def cli(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """``polyrl <args>`` in this process, its registry built by the command as in a fresh one."""
    monkeypatch.setattr(registry, "_registry", None)
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_two_distributions_with_one_entry_point_name_both_load(site):
    """Entry-point names are one namespace across every installed distribution: two third-party
    plugins both naming their entry point ``plugin`` lost the second without a word."""
    reward_dist(site, "acme-polyrl", "plugin", "contract_acme", "acme_score")
    reward_dist(site, "zeta-polyrl", "plugin", "contract_zeta", "zeta_score")
    reg = Registry()
    assert {"acme_score", "zeta_score"} <= set(reg.reward_names())
    assert not [e for e in reg.load_errors if e.distribution in ("acme-polyrl", "zeta-polyrl")]


def test_one_module_under_two_groups_loads_once_without_a_false_error(site):
    (site / "contract_both.py").write_text(
        REWARD_PLUGIN.format(name="both_score", summary="s", score=1.0)
        + "from polyrl.tracking import TrackerSpec\n"
          "@hookimpl\n"
          "def polyrl_register_trackers(register):\n"
          "    register(TrackerSpec(name='both_tracker', create=lambda ctx: None, summary='t'))\n")
    write_dist(site, "polyrl-both", "1.0", {"polyrl.rewards": {"both_reward": "contract_both"},
                                            "polyrl.trackers": {"both_tracker": "contract_both"}})
    reg = Registry()
    assert "both_score" in reg.reward_names() and "both_tracker" in reg.trackers_by_name()
    assert not [e for e in reg.load_errors if e.distribution == "polyrl-both"]


def test_a_reward_name_two_third_party_plugins_register_is_refused_naming_both(site):
    """Last-registered won silently, and which one registers last follows the order entry points
    are found in."""
    reward_dist(site, "polyrl-aa", "aa", "contract_aa", "dup_score", score=0.0)
    reward_dist(site, "polyrl-bb", "bb", "contract_bb", "dup_score", score=1.0)
    reg = Registry()
    conflict = next(e for e in reg.load_errors if e.name == "dup_score")
    assert "polyrl-aa" in conflict.error and "polyrl-bb" in conflict.error and "POLYRL_DISABLE_PLUGINS" in conflict.error
    with pytest.raises(ConfigError, match=r"rewards: reward name 'dup_score' is registered by 2 distributions: "
                                          r"polyrl-(aa|bb), polyrl-(aa|bb); polyrl will not guess"):
        RewardComputer(reg.pm, [("dup_score", 1.0, {})])


def test_a_plugin_replacing_one_of_polyrls_rewards_is_said_once(site):
    """A plugin registering ``numeric_match`` replaced the built-in without a word (reward_mean 1.0
    on a model that answered nothing)."""
    from structlog.testing import capture_logs

    reward_dist(site, "polyrl-shadow", "shadow", "contract_shadow", "numeric_match", score=1.0)
    reg = Registry()
    assert not [e for e in reg.load_errors if e.name == "numeric_match"]  # allowed: an override
    with capture_logs() as logs:
        computer = RewardComputer(reg.pm, [("numeric_match", 1.0, {})])
    warned = [e for e in logs if "reward 'numeric_match' of polyrl is replaced by polyrl-shadow's" in e["event"]]
    assert len(warned) == 1 and "POLYRL_DISABLE_PLUGINS" in warned[0]["fix"]
    assert computer.specs["numeric_match"].distribution == "polyrl-shadow"


def test_a_check_options_bug_is_one_error_naming_the_reward(site):
    (site / "contract_checks.py").write_text(
        REWARD_PLUGIN.format(name="co_score", summary="s", score=1.0)
        + "def check_options(name, options):\n    return options['threshold'] > 0\n")
    write_dist(site, "polyrl-co", "1.0", {"polyrl.rewards": {"co": "contract_checks"}})
    reg = Registry()
    with pytest.raises(ConfigError) as info:
        RewardComputer(reg.pm, [("co_score", 1.0, {})])
    assert info.value.field == "rewards[0].options"
    assert "reward 'co_score' (polyrl-co): its check_options raised KeyError: 'threshold'" in str(info.value)


def test_an_unknown_reward_names_the_reward_plugin_that_did_not_import(site):
    (site / "contract_broken.py").write_text("raise ImportError('needs libscore.so')\n")
    write_dist(site, "polyrl-broken-reward", "1.0", {"polyrl.rewards": {"broken_reward": "contract_broken"}})
    reg = Registry()
    with pytest.raises(ConfigError, match=r"unknown reward 'broken_score'.*broken_reward \(polyrl-broken-reward\) "
                                          r"failed to load: ImportError: needs libscore.so"):
        RewardComputer(reg.pm, [("broken_score", 1.0, {})])


def test_brackets_in_a_plugins_words_are_printed_as_written(site, capsys, monkeypatch):
    """Rich read them as markup: ``[/docs]`` stopped ``polyrl backends`` with a MarkupError, and
    ``pip install 'x[gpu]'`` lost its brackets (the core's own environment reward too)."""
    (site / "contract_brackets.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec, RewardSpec\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='brk', load=lambda config: None, probe=lambda: \"needs 'brlib[gpu]' (see [/docs])\",\n"
        "                         install_hint=\"pip install 'brlib[gpu]'\"))\n"
        "@hookimpl\n"
        "def polyrl_register_rewards(register):\n"
        "    register(RewardSpec(name='brk_score', summary='score in [0, 1] of the [data] table'))\n")
    (site / "contract_badimport.py").write_text("raise ImportError('pip install polyrl-br[cuda12] [/opt/cuda missing]')\n")
    write_dist(site, "polyrl-brk", "1.0", {"polyrl.backends": {"brk": "contract_brackets"},
                                           "polyrl.rewards": {"brk_reward": "contract_badimport"}})
    code, out, err = cli(["backends"], capsys, monkeypatch)
    assert code == 0 and "brlib[gpu]" in out and "[/docs]" in out, err
    code, out, err = cli(["rewards"], capsys, monkeypatch)
    flat = " ".join(out.split())
    assert code == 0 and "score in [0, 1] of the [data] table" in flat and "[/opt/cuda missing]" in flat, err
    assert "the [environment]'s own reward" in flat  # the core's own summary


def test_a_plugins_import_banner_stays_out_of_the_json_listings(site, capsys, monkeypatch):
    (site / "contract_banner.py").write_text("print('*** banner: acme tracker v1 ***')\n"
                                             + REWARD_PLUGIN.format(name="banner_score", summary="s", score=1.0))
    write_dist(site, "polyrl-banner", "1.0", {"polyrl.rewards": {"banner": "contract_banner"}})
    for command in (["rewards", "--json"], ["backends", "--json"], ["trackers", "--json"], ["environments", "--json"],
                    ["doctor", "--json"]):
        sys.modules.pop("contract_banner", None)  # imported (and printing) again, as in a fresh process
        code, out, err = cli(command, capsys, monkeypatch)
        json.loads(out)  # parses: nothing but the listing
        assert "banner" in err and "*** banner" not in out, command


def test_sys_exit_on_import_is_a_load_error_not_the_end_of_every_command(site, capsys, monkeypatch):
    (site / "contract_exits.py").write_text("import sys\nsys.exit('CUDA 12 required')\n")
    write_dist(site, "polyrl-exits", "1.0", {"polyrl.backends": {"exits": "contract_exits"}})
    code, out, err = cli(["backends", "--json"], capsys, monkeypatch)
    assert code == 0
    failed = next(e for e in json.loads(out)["load_errors"] if e["name"] == "exits")
    assert failed["distribution"] == "polyrl-exits" and failed["error"].startswith("SystemExit: CUDA 12 required. Fix: ")


def test_a_backend_without_a_version_shows_its_distributions(site):
    (site / "contract_nover.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='nover', load=lambda config: None))\n")
    write_dist(site, "polyrl-nover", "2.3.4", {"polyrl.backends": {"nover": "contract_nover"}})
    assert Registry().status("nover").version == "2.3.4"


def test_a_tracker_factory_returning_nothing_is_one_error_at_start(site, tmp_path):
    """A factory that forgot ``return`` made the run end at step 0 with a traceback (its drop
    called ``None.close``)."""
    from polyrl.tracking.session import RunTracking

    (site / "contract_tracker.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.tracking import TrackerSpec\n"
        "@hookimpl\n"
        "def polyrl_register_trackers(register):\n"
        "    register(TrackerSpec(name='forgetful', create=lambda ctx: None, summary='t'))\n")
    write_dist(site, "polyrl-forgetful", "1.0", {"polyrl.trackers": {"forgetful": "contract_tracker"}})
    spec = Registry().trackers_by_name()["forgetful"]
    tracking = RunTracking(specs=[spec], output_dir=tmp_path / "out", completions_per_step=0, run_name="r",
                           project="p", config={})
    with pytest.raises(ConfigError) as info:
        tracking.open()
    assert info.value.field == "logging.report_to"
    assert ("tracker 'forgetful' (polyrl-forgetful): its create returned a NoneType without log_metrics, "
            "log_completions, close") in str(info.value)
    assert tracking.trackers == {}


def test_a_probe_or_register_hook_that_hangs_costs_its_plugin_not_the_command(site, monkeypatch, capsys):
    """No limit guarded discovery: a probe asking a hung driver kept ``polyrl backends`` waiting
    forever, and a register hook that blocked hung every command, ``train`` included. Seen, not
    timed: the hooks hang 120 s (then return as if fine), so only a cut at the 1 s limit gives the
    reasons below (a bound of 30 s on the elapsed time, imports included, measured the machine)."""
    from polyrl.plugin_calls import LIMIT_ENV

    monkeypatch.setenv(LIMIT_ENV, "1")
    (site / "contract_hangs.py").write_text(
        "import threading\n"
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec, RewardSpec\n"
        "_forever = threading.Event()\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='hangs', load=lambda config: None, probe=lambda: _forever.wait(120) and None))\n"
        "@hookimpl\n"
        "def polyrl_register_rewards(register):\n"
        "    _forever.wait(120)\n")
    write_dist(site, "polyrl-hangs", "1.0", {"polyrl.backends": {"hangs": "contract_hangs"}})
    code, out, err = cli(["backends", "--json"], capsys, monkeypatch)
    assert code == 0
    data = json.loads(out)
    hangs = {b["name"]: b for b in data["backends"]}["hangs"]
    assert not hangs["available"] and "did not return within 1 s" in hangs["reason"]
    stuck = [e for e in data["load_errors"] if e["group"] == "polyrl_register_rewards" and e["distribution"] == "polyrl-hangs"]
    assert len(stuck) == 1 and "PluginCallTimedOut" in stuck[0]["error"] and LIMIT_ENV in stuck[0]["error"]
    assert "torch" in {b["name"] for b in data["backends"]}  # the others answered


@pytest.mark.parametrize(("body", "said"), [  # one module name each: the fixture's refresh imports it again
    ("sys.exit(3)", "error: SystemExit: 3"),
    ("_forever.wait(120)", "error: the diagnostics of backend 'diag' did not return within 1 s"),
    # two-character strings: dict() read them as the pairs {'g': 'p', 'o': 'k'} without a word
    ("['gp', 'ok']", "error: diagnostics returned list, expected a mapping of name to text"),
])
def test_backend_diagnostics_that_exit_hang_or_answer_no_mapping_cost_their_line_not_doctor(site, monkeypatch,
                                                                                             capsys, body, said):
    """``polyrl doctor`` called ``BackendSpec.diagnostics`` on its own thread, with no limit and
    catching ``Exception`` alone: ``sys.exit(3)`` there ended doctor with exit code 3 and no output,
    one that hung made doctor wait forever (probes were already limited), and a list of
    two-character strings was shown as made-up facts."""
    from polyrl.plugin_calls import LIMIT_ENV

    monkeypatch.setenv(LIMIT_ENV, "1")
    module = f"contract_diag_{abs(hash(body))}"
    (site / f"{module}.py").write_text(
        "import sys, threading\n"
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec\n"
        "_forever = threading.Event()\n"
        "def _facts():\n"
        f"    return {body}\n"
        "@hookimpl\n"
        "def polyrl_register_backends(register):\n"
        "    register(BackendSpec(name='diag', load=lambda config: None, diagnostics=_facts))\n")
    write_dist(site, "polyrl-diag", "1.0", {"polyrl.backends": {"diag": module}})
    code, out, _ = cli(["doctor"], capsys, monkeypatch)
    assert code == 0, out
    lines = out.splitlines()
    at = lines.index("[ok ] diag 1.0 (polyrl-diag)")
    assert lines[at + 1].strip().startswith(said), lines[at + 1]
    assert any(line.startswith("[ok ] torch") for line in lines)  # the backends after it are still reported
    code, out, _ = cli(["doctor", "--json"], capsys, monkeypatch)
    assert json.loads(out)["backends"]["diag"]["diagnostics"]["error"].startswith(said.removeprefix("error: "))


def _installed_entry_point_names() -> list[str]:
    """The entry-point names the installed distributions (polyrl-torch, polyrl-max, ...) really have."""
    from importlib import metadata

    from polyrl.plugins import ENTRY_POINT_GROUPS

    return sorted({ep.name for group in ENTRY_POINT_GROUPS for ep in metadata.entry_points(group=group)})


def test_a_misspelt_name_in_the_disable_list_is_warned_once_and_shown_by_doctor(site, capsys, monkeypatch):
    """``POLYRL_DISABLE_PLUGINS=mxa`` (meant: max) disabled nothing without a word: max still loaded."""
    from structlog.testing import capture_logs

    from polyrl.plugins import get_plugin_manager

    installed = _installed_entry_point_names()
    # every real entry point disabled (nothing heavy imports), plus a typo
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", ",".join([*installed, "mxa-f6"]))
    with capture_logs() as logs:
        first, second = get_plugin_manager(), get_plugin_manager()
    for pm in (first, second):
        assert len(pm.env_warnings) == 1
    text = first.env_warnings[0]
    assert text.startswith("POLYRL_DISABLE_PLUGINS: 'mxa-f6' is not the name of an installed plugin entry point")
    assert all(name in text for name in installed) and "Fix:" in text
    assert [e["event"] for e in logs if "mxa-f6" in e["event"]] == [text]  # once, though built twice
    code, out, err = cli(["doctor"], capsys, monkeypatch)
    assert code == 1 and f"[WARN] {text}" in out, (out, err)
    code, out, err = cli(["doctor", "--json"], capsys, monkeypatch)
    assert json.loads(out)["env_warnings"] == [text]
    code, out, err = cli(["backends", "--json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["env_warnings"] == [text]


def test_a_load_list_of_only_unknown_names_is_one_error_line(site, capsys, monkeypatch):
    """``POLYRL_LOAD_PLUGINS=tourch`` loaded no plugin at all, and ``polyrl train`` then said the
    torch backend was not installed."""
    installed = _installed_entry_point_names()
    monkeypatch.setenv("POLYRL_LOAD_PLUGINS", "tourch")
    code, out, err = cli(["backends"], capsys, monkeypatch)
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS")  # before the fixture rebuilds the registry
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: POLYRL_LOAD_PLUGINS: names no installed plugin entry point ('tourch')")
    assert all(name in err for name in installed) and "Fix:" in err


def test_a_load_list_with_one_unknown_name_loads_the_rest_and_warns(site, monkeypatch):
    from polyrl.plugins import get_plugin_manager

    write_dist(site, "polyrl-loadme", "1.0", {"polyrl.rewards": {"loadme": "contract_loadme"}})
    (site / "contract_loadme.py").write_text(REWARD_PLUGIN.format(name="loadme_score", summary="s", score=1.0))
    monkeypatch.setenv("POLYRL_LOAD_PLUGINS", "loadme,lodme")
    pm = get_plugin_manager()
    assert pm.has_plugin("loadme")
    assert pm.env_warnings == [pm.env_warnings[0]] and "POLYRL_LOAD_PLUGINS: 'lodme' is not" in pm.env_warnings[0]
    assert "so it loads nothing" in pm.env_warnings[0]


def _load_error(name: str) -> str:
    errors = registry.get_plugin_manager().load_errors
    return next(e.error for e in errors if e.name == name)


def test_a_hookimpl_with_argument_names_polyrl_never_passes_is_a_load_error_naming_the_hookspecs(site):
    (site / "contract_argnames.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def polyrl_register_backends(reg):\n"
        "    pass\n")
    write_dist(site, "polyrl-argnames", "1.0", {"polyrl.backends": {"argnames": "contract_argnames"}})
    error = _load_error("argnames")  # was pluggy's three lines, naming no fix
    assert "hook polyrl_register_backends takes argument(s) 'reg'" in error
    assert "Fix: name them as the hookspec does, polyrl_register_backends(register)" in error


def test_an_entry_point_naming_a_class_is_a_load_error_asking_for_an_instance(site):
    (site / "contract_classes.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "from polyrl.types import BackendSpec\n"
        "class Unbound:\n"
        "    @hookimpl\n"
        "    def polyrl_register_backends(self, register):\n"
        "        register(BackendSpec(name='unbound', load=lambda config: object()))\n"
        "class Static:\n"
        "    @hookimpl\n"
        "    @staticmethod\n"
        "    def polyrl_register_backends(register):\n"
        "        register(BackendSpec(name='static', load=lambda config: object()))\n")
    write_dist(site, "polyrl-classes", "1.0", {"polyrl.backends": {"unbound": "contract_classes:Unbound",
                                                                   "static": "contract_classes:Static"}})
    # was loaded, then its register hook failed with "missing 1 required positional argument: 'self'"
    error = _load_error("unbound")
    assert "names class Unbound, not an instance" in error
    assert "`plugin = Unbound()` in contract_classes, then contract_classes:plugin" in error
    names = {s.name for s in Registry().statuses()}
    assert "static" in names and "unbound" not in names  # a class whose hooks need no self still loads


class _AsyncTracker:
    """A tracker written for an async client: its ``log_metrics`` returned a coroutine nobody awaited."""

    def __init__(self) -> None:
        self.logged: list[dict] = []

    async def log_metrics(self, metrics, step):
        self.logged.append(dict(metrics))

    def log_completions(self, records, step):
        pass

    def close(self):
        pass


def test_a_tracker_whose_log_metrics_is_async_is_one_error_at_start_not_silently_nothing_logged(tmp_path):
    from polyrl.tracking import TrackerSpec
    from polyrl.tracking.session import RunTracking

    spec = TrackerSpec(name="asyncy", create=lambda ctx: _AsyncTracker(), distribution="polyrl-asyncy")
    tracking = RunTracking(specs=[spec], output_dir=tmp_path / "out", completions_per_step=0, run_name="r",
                           project="p", config={})
    with pytest.raises(ConfigError) as info:  # was opened, and every step's metrics went nowhere
        tracking.open()
    assert info.value.field == "logging.report_to"
    assert "tracker 'asyncy' (polyrl-asyncy): log_metrics is async def or a generator" in str(info.value)
    assert "make them plain def methods" in info.value.fix
    assert tracking.trackers == {}


def test_a_bare_keyboard_interrupt_on_import_is_a_load_error_with_a_reason_not_an_empty_one(site):
    (site / "contract_interrupts.py").write_text("raise KeyboardInterrupt\n")
    write_dist(site, "polyrl-interrupts", "1.0", {"polyrl.backends": {"interrupts": "contract_interrupts"}})
    assert _load_error("interrupts").startswith("KeyboardInterrupt (raised with no message). Fix:")  # was "KeyboardInterrupt: "
