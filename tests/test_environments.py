"""Environments and tools as plugins: entry-point discovery, broken plugins isolated, name conflicts
refused, ``polyrl environments [--json]``, config errors for bad ``[environment]`` entries, and the
built-ins doing their job (the calculator, the python tool really running in the sandbox, the
guess_number game played to the end)."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal

import pytest
from toy_dist import write_dist

from polyrl import cli
from polyrl.agents import Environment, Observation, ToolBox, ToolCall, reset_environment, step_environment
from polyrl.agents import builtin
from polyrl.agents.loading import resolve_environment, resolve_tools
from polyrl.errors import ConfigError
from polyrl.registry import Registry

# --- discovery and isolation ------------------------------------------------------------------------

GOOD_PLUGIN = '''
from polyrl.hookspecs import hookimpl
from polyrl.agents import EnvironmentSpec, Observation, ToolSpec


def lookup(key: str) -> str:
    """Look a word up.

    Args:
        key: The word.
    """
    return key[::-1]


class Echo:
    def __init__(self, options):
        self.options = options

    def reset(self, row):
        return [{"role": "user", "content": row["q"]}]

    async def step(self, message):
        return Observation([{"role": "user", "content": "again"}], reward=0.5, done=True)


@hookimpl
def polyrl_register_environments(register):
    register(EnvironmentSpec(name="echo", create=Echo, summary="echoes"))
    register(EnvironmentSpec(name="needs_gym", create=Echo, summary="a gym game",
                             probe=lambda: "the gymnasium package is not installed",
                             install_hint="pip install gymnasium"))


@hookimpl
def polyrl_register_tools(register):
    register(ToolSpec(name="reverse", function=lookup, summary="reverses"))
    register(ToolSpec(name="calculator", function=lookup, summary="a second calculator"))
'''


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """A good environment plugin, one that fails to import, one whose register hook raises and one
    with a misspelt hook."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "polyrl_env_good.py").write_text(GOOD_PLUGIN)
    (site / "polyrl_env_import.py").write_text("raise ImportError('no module named gymnasium')\n")
    (site / "polyrl_env_register.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def polyrl_register_tools(register):\n"
        "    raise RuntimeError('tool registration exploded')\n")
    (site / "polyrl_env_typo.py").write_text(
        "from polyrl.hookspecs import hookimpl\n"
        "@hookimpl\n"
        "def polyrl_register_environment(register):\n"  # singular: no such hook
        "    pass\n")
    write_dist(site, "polyrl-env-typo", "1.0", {"polyrl.environments": {"envtypo": "polyrl_env_typo"}})
    write_dist(site, "polyrl-env-good", "1.0", {"polyrl.environments": {"envgood": "polyrl_env_good"}})
    write_dist(site, "polyrl-env-import", "1.0", {"polyrl.environments": {"envimport": "polyrl_env_import"}})
    write_dist(site, "polyrl-env-register", "1.0", {"polyrl.environments": {"envreg": "polyrl_env_register"}})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr("polyrl.registry._registry", None)
    monkeypatch.delenv("POLYRL_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("POLYRL_DISABLE_PLUGINS", raising=False)
    yield site
    import sys

    for mod in ("polyrl_env_good", "polyrl_env_import", "polyrl_env_register", "polyrl_env_typo"):
        sys.modules.pop(mod, None)


def test_builtins_are_registered_like_any_plugin():
    reg = Registry()
    assert {"guess_number"} <= set(reg.environments_by_name())
    assert {"calculator", "python"} <= set(reg.tools_by_name())
    statuses = {(s.kind, s.name): s for s in reg.environment_statuses()}
    assert statuses[("tool", "calculator")].available and statuses[("tool", "python")].distribution == "polyrl"
    assert isinstance(reg.environments_by_name()["guess_number"].create({}), Environment)


@pytest.mark.faults
def test_environment_plugins_from_entry_points_and_broken_ones_isolated(third_party, capsys):
    assert cli.main(["environments", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    envs = {e["name"]: e for e in listing["environments"]}
    tools = {t["name"]: t for t in listing["tools"]}
    assert envs["echo"]["available"] and envs["echo"]["distribution"] == "polyrl-env-good"
    assert (envs["needs_gym"]["available"], envs["needs_gym"]["reason"]) == (False, "the gymnasium package is not installed")
    assert tools["reverse"]["available"] and envs["guess_number"]["available"]
    # the python tool is usable where its sandbox is (bubblewrap), else the listing says why
    assert tools["python"]["available"] or "bubblewrap" in tools["python"]["reason"], tools["python"]
    # two distributions claim "calculator": neither is used, and the listing says why
    assert not tools["calculator"]["available"]
    assert "registered by 2 distributions: polyrl, polyrl-env-good" in tools["calculator"]["reason"]
    errors = {e["name"]: e["error"] for e in listing["load_errors"]}
    assert "ImportError: no module named gymnasium" in errors["envimport"]
    assert "tool registration exploded" in errors["envreg"]
    assert "calculator" in errors
    assert "unknown hook(s) 'polyrl_register_environment'" in errors["envtypo"]
    assert "polyrl_register_environments" in errors["envtypo"]  # the fix names the right hook

    assert cli.main(["environments"]) == 0  # the table names the broken plugins too
    table = capsys.readouterr().out
    assert "echo" in table and "envimport" in table and "envreg" in table and "gymnasium" in table


EXITING_PLUGINS = {
    # a BaseException of its own at import: it escaped `polyrl environments` as a traceback
    "polyrl_env_base": "class Gone(BaseException):\n    pass\nraise Gone('driver missing')\n",
    # sys.exit in a register hook and in a probe: the command ended with code 2, saying nothing
    "polyrl_env_regexit": ("from polyrl.hookspecs import hookimpl\n"
                           "@hookimpl\n"
                           "def polyrl_register_environments(register):\n"
                           "    raise SystemExit(2)\n"),
    "polyrl_env_probeexit": ("from polyrl.hookspecs import hookimpl\n"
                             "from polyrl.agents import EnvironmentSpec\n"
                             "def probe():\n"
                             "    raise SystemExit('no gpu here')\n"
                             "@hookimpl\n"
                             "def polyrl_register_environments(register):\n"
                             "    register(EnvironmentSpec(name='needs_gpu', create=lambda options: None, probe=probe))\n"),
}


@pytest.mark.faults
def test_a_plugin_exiting_or_raising_a_base_exception_is_listed_not_the_end_of_the_command(third_party, capsys):
    """What a plugin's import, register hook or probe raises that is no ``Exception`` ran on a
    daemon thread (the user's Ctrl-C never reaches it there): it is that plugin's failure, listed."""
    for module, body in EXITING_PLUGINS.items():
        (third_party / f"{module}.py").write_text(body)
        write_dist(third_party, module.replace("_", "-"), "1.0", {"polyrl.environments": {module: module}})
    try:
        assert cli.main(["environments", "--json"]) == 0
        listing = json.loads(capsys.readouterr().out)
    finally:
        import sys

        for module in EXITING_PLUGINS:
            sys.modules.pop(module, None)
    errors = {e["name"]: e["error"] for e in listing["load_errors"]}
    assert errors["polyrl_env_base"].startswith("Gone: driver missing. Fix: ")
    assert errors["polyrl_env_regexit"].startswith("SystemExit: 2. Fix: ")
    envs = {e["name"]: e for e in listing["environments"]}
    assert (envs["needs_gpu"]["available"], envs["needs_gpu"]["reason"]) == (False, "probe raised SystemExit: no gpu here")
    assert envs["echo"]["available"]  # the good plugin beside them still loads


@pytest.mark.faults
def test_third_party_tools_and_environments_resolve_and_bad_ones_are_config_errors(third_party):
    from polyrl.registry import get_registry

    reg = get_registry()
    [reverse] = resolve_tools(["reverse"], reg)
    assert asyncio.run(ToolBox([reverse]).run([ToolCall("reverse", {"key": "abc"})]))[0]["content"] == "cba"
    with pytest.raises(ConfigError, match="registered by 2 distributions") as err:
        resolve_tools(["reverse", "calculator"], reg)
    assert err.value.field == "environment.tools[1]"
    env = resolve_environment("echo", reg).create({"k": 1})
    assert asyncio.run(reset_environment(env, {"q": "hi"})) == [{"role": "user", "content": "hi"}]
    assert asyncio.run(step_environment(env, {"role": "assistant", "content": "x"})).reward == 0.5
    with pytest.raises(ConfigError, match="environment 'needs_gym' cannot run here: the gymnasium") as err:
        resolve_environment("needs_gym", reg)
    assert "pip install gymnasium" in str(err.value) and err.value.field == "environment.name"


# --- resolving names ----------------------------------------------------------------------------------

USER_TOOLS = '''
def word_count(text: str) -> int:
    """Count the words.

    Args:
        text: Some text.
    """
    return len(text.split())


def undocumented(text: str) -> int:
    return 0


NOT_A_FUNCTION = 3


class Counter:
    def __init__(self, options):
        self.limit = options.get("limit", 1)

    def reset(self, row):
        return [{"role": "user", "content": "count"}]

    def step(self, message):
        return Observation(done=True)


from polyrl.agents import Observation
'''


def test_tools_by_registered_name_module_and_file(tmp_path, monkeypatch):
    (tmp_path / "my_tools.py").write_text(USER_TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry()
    tools = resolve_tools(["calculator", "my_tools:word_count", f"{tmp_path}/my_tools.py:word_count"][:2], reg)
    assert [t.__name__ for t in tools] == ["calculator", "word_count"]
    [from_file] = resolve_tools([f"{tmp_path}/my_tools.py:word_count"], reg)
    assert from_file("a b c") == 3
    spec = resolve_environment(f"{tmp_path}/my_tools.py:Counter", reg)
    assert spec.create({"limit": 4}).limit == 4


@pytest.mark.faults
@pytest.mark.parametrize(("entries", "index", "words"), [
    (["calculator", "abacus"], 1, "unknown tool 'abacus' (registered: calculator, python"),
    (["FILE:missing"], 0, "has no attribute 'missing'"),
    (["FILE:NOT_A_FUNCTION"], 0, "is a int, not a function"),
    (["FILE:undocumented"], 0, "tool 'undocumented': has no docstring"),
    (["no/such/file.py:f"], 0, "not found"),
    (["no_such_module_xyz:f"], 0, "module 'no_such_module_xyz' not found"),
    (["calculator", "calculator"], 1, "two tools are named 'calculator'"),
    (["FILE:word_count", "FILE:word_count"], 1, "two tools are named 'word_count'"),
    ([""], 0, "is not a name"),
])
def test_bad_tool_entries_are_one_config_error_naming_the_entry(tmp_path, entries, index, words):
    (tmp_path / "my_tools.py").write_text(USER_TOOLS)
    entries = [e.replace("FILE", str(tmp_path / "my_tools.py")) for e in entries]
    with pytest.raises(ConfigError) as err:
        resolve_tools(entries, Registry())
    assert words in str(err.value) and "Fix:" in str(err.value)
    assert err.value.field == f"environment.tools[{index}]"


def test_tools_must_be_a_list_and_the_environment_must_exist():
    with pytest.raises(ConfigError, match="must be a list") as err:
        resolve_tools("calculator", Registry())  # type: ignore[arg-type]
    assert err.value.field == "environment.tools"
    with pytest.raises(ConfigError, match="unknown environment 'maze' \\(registered: guess_number"):
        resolve_environment("maze", Registry())


@pytest.mark.faults
def test_an_unknown_name_names_the_environment_plugins_that_failed_to_load(third_party):
    """A config naming the environment of a plugin that failed to import (or whose register hook
    raised) was told only "unknown environment": now the error names the broken plugins and why."""
    from polyrl.registry import get_registry

    with pytest.raises(ConfigError) as err:
        resolve_environment("envimport", get_registry())
    text = str(err.value)
    assert err.value.field == "environment.name" and "\n" not in text
    assert "unknown environment 'envimport'" in text and "failed to load" in text
    assert "'envimport' (polyrl-env-import): ImportError: no module named gymnasium" in text
    assert "tool registration exploded" in text
    with pytest.raises(ConfigError, match="'envimport' \\(polyrl-env-import\\)") as err:
        resolve_tools(["wordle_hint"], get_registry())
    assert err.value.field == "environment.tools[0]"
    assert resolve_environment("echo", get_registry()).name == "echo"  # the good plugin still works


BAD_FACTORIES = '''
import time

from polyrl.agents import Observation


class Game:
    def __init__(self, options):
        pass

    def reset(self, row):
        return [{"role": "user", "content": "hi"}]

    def step(self, message):
        return Observation(done=True)


def raises(options):
    raise ValueError("factory boom")


def returns_none(options):
    return None


def returns_class(options):
    return Game


def no_arguments():
    return Game({})


def exits(options):
    raise SystemExit(3)


def slow(options):
    time.sleep(60)
    return Game(options)


_ONE = Game({})


def singleton(options):
    return _ONE


class WithTools(Game):
    def __init__(self, options):
        self.tools = [self.lookup]

    def lookup(self, key: str) -> str:  # no docstring: no schema can be built
        return key


def undocumented_tool(options):
    return WithTools(options)


def calculator(expression: str) -> str:
    """Same name as the built-in tool.

    Args:
        expression: anything
    """
    return expression


class Clashing(Game):
    tools = [calculator]


def clashing_tool(options):
    return Clashing(options)


async def async_factory(options):
    return Game(options)


class Yields(Game):
    def episode_over(self):
        yield


def yields(options):
    return Yields(options)
'''


@pytest.mark.faults
@pytest.mark.parametrize(("factory", "words"), [
    ("raises", "failed when called with environment.options: ValueError: factory boom"),
    ("returns_none", "the factory returned NoneType None, which has no reset or step method"),
    ("returns_class", "the factory returned the class Game, not an instance of it (return Game(options))"),
    ("no_arguments", "TypeError: no_arguments() takes 0 positional arguments but 1 was given"),
    ("exits", "failed when called with environment.options: SystemExit(3)."),
    ("slow", "did not return within 0.5 s (environment.env_timeout_s"),
    ("singleton", "returned the same Game object twice; episodes run concurrently"),
    # once after the models loaded, naming environment.tools, a key the config never set
    ("undocumented_tool", "made a WithTools whose own tools cannot be offered: tool 'lookup': has no docstring"),
    ("clashing_tool", "made a Clashing whose own tools cannot be offered: the environment's tool(s) 'calculator' clash"),
    # once "returned coroutine <coroutine object async_factory at 0x...>, which has no reset or step method"
    ("async_factory", "the factory returned a coroutine (it is an async def), which polyrl does not await; make "
                      "the factory a plain def"),
    # once never told its episode was over, without a word (its generator was dropped unrun)
    ("yields", "made an environment whose Yields.episode_over is a generator function (its body has a yield), so "
               "calling it runs none of its code. Fix: make it a plain function or an async def without yield"),
])
def test_a_bad_environment_factory_is_one_error_line_before_any_model_loads(tmp_path, capsys, factory, words):
    """Each was a traceback (raises, wrong arguments), a silent exit with the factory's code, a run
    that 'trained' with every episode an environment error (None, a class), a setup that blocked
    as long as the factory (slow), or concurrent episodes sharing one object without a word.
    The slow one's cut is seen in its words, not timed (was < 10 s elapsed): a setup that waited
    out its 60 s would get its None and say so instead."""
    (tmp_path / "factories.py").write_text(BAD_FACTORIES)
    config = tmp_path / "run.toml"
    config.write_text(
        '[model]\npath = "no/such/model"\n[data]\ntask = "arithmetic"\n[[rewards]]\nname = "environment"\n'
        f'[environment]\nname = "{tmp_path / "factories.py"}:{factory}"\nenv_timeout_s = 0.5\n'
        + ('tools = ["calculator"]\n' if factory == "clashing_tool" else "")
        + f'[train]\nsteps = 1\noutput_dir = "{tmp_path / "run"}"\n')
    assert cli.main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: environment.name: ") and "\n" not in err and "Traceback" not in err
    assert words in err and "Fix:" in err and "the run goes on" not in err


def test_a_call_blocking_limit_past_what_a_thread_can_wait_is_no_limit():
    """Event.wait(1e300) raises OverflowError: a huge env/tracker timeout (any finite number is
    accepted) failed every call instead of waiting."""
    from polyrl.agents.threads import Worker

    worker = Worker()
    try:
        assert worker.call_blocking(lambda: 5, 1e300) == 5
    finally:
        worker.close()


# --- the calculator ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("expression", "answer"), [
    ("2 + 3 * 4", "14"), ("(2 + 3) * 4", "20"), ("-(7 // 2) % 5", "2"), ("2 ** 100", str(2 ** 100)),
    ("1 / 4", "0.25"), ("-2.5 * -2", "5.0"), ("+3", "3"), ("2 ** -1", "0.5"),
])
def test_calculator_computes_exact_arithmetic(expression, answer):
    assert builtin.calculator(expression) == answer


@pytest.mark.faults
@pytest.mark.parametrize(("expression", "words"), [
    ("__import__('os').system('true')", "is not allowed"),
    ("x + 1", "'x' is not allowed"),
    ("(1).real", "is not allowed"),
    ("'a' * 3", "is not allowed"),
    ("9 ** 9 ** 9", "too large"),
    ("10 ** 5000", "exponent 5000 is too large"),
    ("7 ** 2000", "is too large"),
    ("2 ** 4000 * 2 ** 4000", "too large"),
    ("1 / 0", "division by zero"),
    ("(-8) ** 0.5", "not a real number"),
    ("1e308 * 10", "not a finite number"),
    ("1 +", "cannot read"),
    ("1" + "+1" * 600, "longer than 1000 characters"),
])
def test_calculator_refusals_reach_the_model_as_errors(expression, words):
    [message] = asyncio.run(ToolBox([builtin.calculator]).run([ToolCall("calculator", {"expression": expression})]))
    assert message["content"].startswith("error: tool 'calculator' raised ValueError") and words in message["content"]


# --- the python tool (really sandboxed) ------------------------------------------------------------------


def test_python_tool_runs_code_in_the_sandbox():
    box = ToolBox([builtin.python])
    calls = [ToolCall("python", {"code": "print(sum(range(10)))\nimport socket\nsocket.socket()"}),
             ToolCall("python", {"code": "x = 6\nx * 7"}),
             ToolCall("python", {"code": "print('partial')\nraise KeyError('k')"}),
             ToolCall("python", {"code": "def f(:"}),
             ToolCall("python", {"code": "open('/work/brief/common.md').read()"})]
    out = [m["content"] for m in asyncio.run(box.run(calls))]
    assert out[0].startswith("45\nerror: ") and "socket" in out[0]  # no network in the sandbox
    assert out[1] == "42\n"
    assert out[2] == "partial\nerror: KeyError: 'k'"
    assert out[3].startswith("error: SyntaxError")
    assert out[4].startswith("error: FileNotFoundError") or out[4].startswith("error: PermissionError")


@pytest.mark.parametrize(("code", "answer"), [
    ("x = 1\n" + "-" * 900 + "x", "1\n"),  # Python compiles it; ast.unparse of it recursed too deep
    ("x = 1  # kept\n(x +\n 1)  # as written", "2\n"),
    ("-" * 200_000 + "1", "error: MemoryError: "),  # past the parser's limits: the sandbox says so
    ("1" + "+1" * 200_000, "error: RecursionError: maximum recursion depth exceeded during compilation"),
])
def test_python_tool_runs_hostile_nesting_in_the_sandbox_not_the_trainer(code, answer):
    """The REPL rewrite (print the last expression) parses the model's text in the trainer: nesting
    made it raise RecursionError or MemoryError there, so the tool answered "tool 'python' raised
    ..." and never ran the program (a valid one too). Now the program runs, or the sandbox's own
    compiler answers."""
    [message] = asyncio.run(ToolBox([builtin.python]).run([ToolCall("python", {"code": code})]))
    assert message["content"] == answer


@pytest.mark.faults
def test_python_tool_stops_a_program_that_never_ends(monkeypatch):
    monkeypatch.setattr(builtin, "PYTHON_TIMEOUT_S", 1.0)
    monkeypatch.setattr(builtin, "_sandbox", None)
    [message] = asyncio.run(ToolBox([builtin.python], timeout_s=30).run([ToolCall("python", {"code": "while True: pass"})]))
    assert message["content"] == "error: the program ran past 1 s and was stopped"
    monkeypatch.setattr(builtin, "_sandbox", None)  # the next user gets the default limits back


# --- guess_number ----------------------------------------------------------------------------------------


def play(env, guesses: list[str]) -> list[Observation]:
    async def go() -> list[Observation]:
        out = []
        for text in guesses:
            out.append(await step_environment(env, {"role": "assistant", "content": text}))
            if out[-1].done:
                break
        return out

    return asyncio.run(go())


def test_guess_number_gives_feedback_and_rewards_success():
    env = builtin.GuessNumber({"max_guesses": 5})
    first = asyncio.run(reset_environment(env, {"secret": "37"}))
    assert "between 1 and 100" in first[0]["content"] and first[0]["role"] == "user"
    obs = play(env, ["I guess 50", "hmm", "Is it 20?", "37"])
    assert [o.messages[0]["content"] for o in obs] == [
        "Lower. 4 guesses left.", "Answer with one integer between 1 and 100. 3 guesses left.",
        "Higher. 2 guesses left.", "Correct! It was 37."]
    assert [(o.reward, o.done) for o in obs] == [(None, False)] * 3 + [(1.0, True)]


def test_guess_number_ends_with_zero_when_the_guesses_run_out():
    env = builtin.GuessNumber({"max_guesses": 2, "low": 0, "high": 9})
    asyncio.run(reset_environment(env, {"secret": 3}))
    obs = play(env, ["5", "4", "3"])
    assert len(obs) == 2 and (obs[-1].reward, obs[-1].done) == (0.0, True)
    assert obs[-1].messages[0]["content"] == "Lower. No guesses left; it was 3."


def test_guess_number_seeded_secret_is_the_same_for_one_row_and_differs_across_rows():
    def secret(row: dict, seed: int = 0) -> int:
        env = builtin.GuessNumber({"seed": seed})
        env.reset(row)
        return env.secret

    rows = [{"id": i} for i in range(20)]
    assert [secret(r) for r in rows] == [secret(dict(r)) for r in rows]  # every episode of a group plays one game
    assert len({secret(r) for r in rows}) > 10
    assert [secret(r, 1) for r in rows] != [secret(r) for r in rows]


@pytest.mark.faults
@pytest.mark.parametrize(("options", "field"), [
    ({"hgih": 10}, "environment.options"), ({"low": 5, "high": 5}, "environment.options.low"),
    ({"max_guesses": 0}, "environment.options.max_guesses"), ({"low": "1"}, "environment.options.low"),
    ({"reward": "one"}, "environment.options.reward"),
    # never found in a row: every secret silently random
    ({"secret_column": 3}, "environment.options.secret_column"), ({"secret_column": ""}, "environment.options.secret_column"),
])
def test_guess_number_bad_options_are_config_errors(options, field):
    with pytest.raises(ConfigError) as err:
        builtin.GuessNumber(options)
    assert err.value.field == field and "Fix:" in str(err.value)


@pytest.mark.faults
def test_malformed_environment_answers_are_type_errors_naming_the_class():
    class Broken:
        def reset(self, row):
            return "hello"

        async def step(self, message):
            return {"done": True}

    with pytest.raises(TypeError, match="Broken.reset returned str"):
        asyncio.run(reset_environment(Broken(), {}))
    with pytest.raises(TypeError, match="Broken.step returned dict, expected polyrl.agents.Observation"):
        asyncio.run(step_environment(Broken(), {"role": "assistant", "content": ""}))
    with pytest.raises(ValueError, match="row column 'secret' is 500"):
        builtin.GuessNumber({}).reset({"secret": 500})


class Answers:
    """An environment whose reset and step return what it is given."""

    def __init__(self, first=None, obs=None):
        self.first, self.obs = first, obs

    def reset(self, row):
        return self.first

    def step(self, message):
        return self.obs


def _user(content):
    return [{"role": "user", "content": content}]


@pytest.mark.faults
@pytest.mark.parametrize(("obs", "words"), [
    (Observation(_user("x"), reward=10**400), "reward int 1000000"),  # passes an isinstance check, overflows float()
    (Observation(_user("x"), reward=float("nan")), "reward float nan"),
    (Observation(_user("x"), reward=float("-inf")), "reward float -inf"),
    (Observation(_user("x"), reward=True), "reward bool True"),
    (Observation(_user("x"), reward="1.0"), "reward str '1.0'"),
    # a finite Decimal is refused (not numbers.Real) and the message must not call it "not finite"
    (Observation(_user("x"), reward=Decimal("0.5")), "reward Decimal Decimal('0.5'); expected a finite real number"),
    (Observation(_user("x"), done="no"), "done str 'no'"),  # would read as True
    (Observation(_user("x"), done=None), "done NoneType None"),
    (Observation(_user(12345)), "content int 12345"),
    (Observation(_user(None)), "content NoneType None"),
    (Observation(_user([{"type": "text", "text": "x"}, 5])), "content list"),
    (Observation(_user({"a": 1})), "content dict"),
    (Observation(_user("bad \udcff text")), "content holds a lone surrogate"),
    # a role outside the allowed ones, whatever it holds (a lone surrogate included)
    (Observation([{"role": "user\ud800", "content": "x"}]), "has role str 'user\\ud800'; expected one of 'user', 'tool'"),
    (Observation([{"role": "assistant", "content": "x"}]), "has role str 'assistant'; expected one of 'user', 'tool'"),
    (Observation([{"role": "user", "content": "x", "meta": {1, 2}}]), "message 0 key 'meta' holds set"),
    (Observation([{"role": "user", "content": "x", b"k": 1}]), "message 0 has a key bytes b'k'"),
])
def test_bad_observation_values_are_type_errors_naming_the_field(obs, words):
    with pytest.raises(TypeError, match="Answers.step") as err:
        asyncio.run(step_environment(Answers(obs=obs), {"role": "assistant", "content": ""}))
    assert words in str(err.value)


@pytest.mark.faults
@pytest.mark.parametrize("content", [12345, None, ["x"], {"a": 1}, "\ud800"])
def test_bad_reset_message_content_is_a_type_error(content):
    with pytest.raises(TypeError, match=r"Answers.reset message 0 (has content|content holds)"):
        asyncio.run(reset_environment(Answers(first=_user(content)), {}))


def test_good_observations_pass_numpy_values_included():
    import numpy as np

    for reward, done in [(1, True), (0.5, False), (None, False), (np.float32(0.25), np.bool_(True)), (np.int64(2), False)]:
        obs = Observation(_user("more"), reward=reward, done=done)
        assert asyncio.run(step_environment(Answers(obs=obs), {"role": "assistant", "content": ""})) == obs


@pytest.mark.parametrize("value", [0, -1, "60", float("nan"), True])
def test_env_timeout_s_must_be_a_positive_number(value):
    from polyrl.config import RunConfig

    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict({"model": {"path": "m"}, "data": {"task": "arithmetic"}, "rewards": [{"name": "environment"}],
                             "environment": {"name": "guess_number", "env_timeout_s": value}})
    assert err.value.field == "environment.env_timeout_s" and "Fix:" in str(err.value)


def test_a_tool_whose_schema_cannot_be_built_is_listed_as_unusable_with_why():
    """The listing asked only the probe: a tool without a docstring showed as usable, then failed
    the run that named it."""
    from polyrl.agents.spec import ToolSpec, probe_status

    def nodoc(x: int) -> int:
        return x

    def documented(x: int) -> int:
        """Return x.

        Args:
            x: a number.
        """
        return x

    status = probe_status("tool", ToolSpec(name="nodoc", function=nodoc))
    assert not status.available and "its schema cannot be built" in status.reason and "docstring" in status.reason
    assert probe_status("tool", ToolSpec(name="documented", function=documented)).available


@pytest.mark.parametrize("is_async", [False, True], ids=["generator", "async-generator"])
def test_a_trl_environment_whose_get_reward_is_a_generator_is_one_config_error(is_async):
    """A ``get_reward`` with a ``yield`` ran none of its code: its reward scored each rollout with
    a generator object (or an async generator awaited as a coroutine), never the number the class
    meant. Now the probe refuses it, as a generator reset, step or episode_over is refused."""
    from polyrl.agents.trl_environments import trl_environments
    from polyrl.errors import ConfigError

    class Yielding:
        def reset(self, **kwargs):
            return None

        if is_async:
            async def get_reward(self):
                yield 1.0
        else:
            def get_reward(self):
                yield 1.0

    with pytest.raises(ConfigError) as err:
        trl_environments({"yielding": Yielding})
    assert err.value.field == "environment_factory['yielding']"
    assert "Yielding.get_reward is a generator function (its body has a yield)" in err.value.message
    assert "without yield" in (err.value.fix or "")


@pytest.mark.parametrize("column", ["question", "prompt"])
def test_a_trl_environments_reset_gets_the_rows_own_prompt_under_a_system_prompt(column):
    """TRL's rollout calls ``reset(**row)`` with the dataset's row. With ``data.system_prompt``
    set, polyrl's row holds the system + user chat in its prompt column (what the model is asked),
    and ``reset`` got that chat for ``question``/``prompt`` instead of the row's own text. Now it
    gets the text, as the rewards do (``stored_rows``); the model is still asked the chat."""
    from polyrl.agents.episodes import EpisodeRunner
    from polyrl.agents.trl_environments import trl_environments
    from polyrl.stored_rows import with_asked

    class Quiz:
        def reset(self, **kwargs):
            self.got = kwargs
            return " Think."

    plugin = trl_environments(Quiz, prompt_column=column)
    specs = []
    plugin.polyrl_register_environments(specs.append)
    episode = specs[0].create({})
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    row = with_asked({column: "What is 2+2?", "answer": "4"}, column, chat)  # as data.system_prompt writes it
    first, tools = EpisodeRunner._first_messages(episode, row)
    assert episode.rewarded.got == {column: "What is 2+2?", "answer": "4"}
    assert first == [chat[0], {"role": "user", "content": "What is 2+2? Think."}] and tools == []
    episode.episode_over()
    plugin.pool.close()


@pytest.mark.parametrize("observation", [" Think.", [{"type": "text", "text": " Think."}]])
def test_a_trl_reset_answer_is_appended_to_the_text_of_a_prompt_of_text_parts(observation):
    """A row whose prompt's last message holds TRL's content parts: ``reset``'s answer was appended
    to the list's Python repr, and the model read ``[{'type': 'text', 'text': 'Hi'}] Think.``. Now
    it is appended to the parts' text; a part that is not text stops the run, named."""
    from polyrl.agents.episodes import EpisodeRunner
    from polyrl.agents.trl_environments import trl_environments
    from polyrl.errors import EnvironmentFailed

    class Quiz:
        def reset(self, **kwargs):
            return observation

    plugin = trl_environments(Quiz)
    specs = []
    plugin.polyrl_register_environments(specs.append)
    parts = [{"type": "text", "text": "Hi,"}, {"type": "text", "text": " you."}]
    episode = specs[0].create({})
    first, _ = EpisodeRunner._first_messages(episode, {"prompt": [{"role": "user", "content": parts}]})
    assert first == [{"role": "user", "content": "Hi, you. Think."}]
    episode.episode_over()
    episode = specs[0].create({})
    with pytest.raises(EnvironmentFailed, match="content parts that are not all text"):
        EpisodeRunner._first_messages(episode, {"prompt": [{"role": "user", "content": [{"type": "image"}]}]})
    plugin.pool.close()
