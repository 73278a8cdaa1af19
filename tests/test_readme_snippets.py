"""README.md's code blocks as a fresh user would paste them: every TOML block loads through the
config validation, every polyrl Python snippet imports and builds what it shows (no training),
and the blocks copied from examples/ match those files, so README drift fails here.

Rules for blocks meant as fragments (most TOML blocks show one or two tables):
- a block without both ``[model]`` and ``[data]`` is merged, table by table, into ``BASE`` (the
  smallest run: the embedded model, a data file, one reward); the block's own keys win;
- a fragment that names an eval source (``data.eval_path``/``eval_split``) but no ``[eval]`` gets
  ``eval.count = 64``, as the README's comment in that block says it needs;
- the one block that is a distribution's ``pyproject.toml`` (its entry point) is not a run config:
  it is checked against the entry-point group polyrl reads instead.
"""

from __future__ import annotations

import ast
import copy
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from polyrl.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

#: the smallest run a fragment is merged into (paths are not read while validating)
BASE: dict[str, Any] = {"model": {"path": "smollm2-135m-instruct"}, "data": {"path": "data/train.jsonl"},
                        "rewards": [{"name": "numeric_match"}]}


def blocks(language: str) -> list[tuple[int, str]]:
    """(line of the block's first line, its text) for each ```language block of README.md."""
    return [(README[: m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(rf"^```{language}\n(.*?)^```", README, re.S | re.M)]


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def run_config(block: str) -> dict[str, Any]:
    """The run config a README TOML block stands for (see the module's rules)."""
    data = tomllib.loads(block)
    if "model" in data and "data" in data:
        return data
    config = merged(BASE, data)
    given = data.get("data", {})
    if ("eval_path" in given or "eval_split" in given) and "eval" not in data:
        config["eval"] = {"count": 64}
    return config


TOML = blocks("toml")
RUN_BLOCKS = [(line, text) for line, text in TOML if "[project." not in text]


def test_readme_has_the_blocks_this_file_checks():
    assert len(RUN_BLOCKS) >= 8 and len(TOML) - len(RUN_BLOCKS) == 1


@pytest.mark.parametrize("block", [text for _, text in RUN_BLOCKS], ids=[f"line{line}" for line, _ in RUN_BLOCKS])
def test_readme_toml_block_is_a_valid_config(block):
    RunConfig.from_dict(run_config(block))


def test_readme_entry_point_block_names_the_group_polyrl_reads():
    (block,) = [text for _, text in TOML if "[project." in text]
    from polyrl import hookspecs
    from polyrl.plugins import ENTRY_POINT_GROUPS

    groups = tomllib.loads(block)["project"]["entry-points"]
    assert groups and set(groups) <= set(ENTRY_POINT_GROUPS)
    hook = re.search(r"@hookimpl (\w+)", block).group(1)  # the hook the comment says the module implements
    assert callable(getattr(hookspecs, hook, None)), f"README names a hook {hook!r} that polyrl does not call"


def test_readme_coming_from_trl_config_is_the_example_file():
    (shown,) = [text for _, text in TOML if "coming_from_trl" in text]
    assert tomllib.loads(shown) == tomllib.loads((ROOT / "examples" / "coming_from_trl" / "run.toml").read_text())


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").rglob("*.toml")
                                        if p.name != "pyproject.toml"))
def test_example_config_is_valid(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the examples are run from the repository root
    RunConfig.from_toml(ROOT / path)


# --- Python snippets ---------------------------------------------------------------------------

PYTHON = blocks("python")


def python_block(marker: str) -> str:
    (code,) = [text for _, text in PYTHON if marker in text]
    return code


def without_docstrings(tree: ast.Module) -> str:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:]  # type: ignore[attr-defined]
    return ast.dump(tree)


def test_readme_python_blocks_are_all_checked_here():
    checked = ("get_registry", "def correct_answer", "GRPOTrainer(", "class Wordle", "from polyrl import api",
               "BackendConformance")
    assert all(any(marker in text for marker in checked) for _, text in PYTHON), "a new README Python block: check it here"


def test_readme_registry_snippet_lists_the_backends(capsys):
    exec(python_block("get_registry"), {})
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "torch" in names


def test_readme_trl_reward_file_is_the_example_file():
    """The README's rewards.py is examples/coming_from_trl/rewards.py (docstrings and comments aside)."""
    shown = ast.parse(python_block("def correct_answer"))
    example = ast.parse((ROOT / "examples" / "coming_from_trl" / "rewards.py").read_text())
    assert without_docstrings(shown) == without_docstrings(example)


def test_readme_trl_script_is_the_example_script():
    """The README's TRL column is train_trl.py past its imports."""
    shown = ast.parse(python_block("GRPOTrainer("))
    script = ast.parse((ROOT / "examples" / "coming_from_trl" / "train_trl.py").read_text())
    script.body = [s for s in script.body[1:] if not isinstance(s, (ast.Import, ast.ImportFrom))]
    assert ast.dump(shown) == ast.dump(script)


def test_readme_api_snippet_builds_its_run():
    """``api.run``'s config, built by ``api.run_config`` from the README's arguments (no training)."""
    code = python_block("from polyrl import api")
    assert "api.run(" in code
    scope: dict[str, Any] = {}
    exec(code.replace("api.run(", "api.run_config("), scope)
    config, plugins = scope["summary"]
    assert config.model.path == "smollm2-135m-instruct" and config.backends.train == "torch"
    assert [r.label for r in config.rewards] == ["numeric_match", "short_answer"] and len(plugins) == 1
    assert (config.generation.group_size, config.generation.max_new_tokens, config.train.steps) == (4, 32, 20)
    assert (config.algorithm.beta, config.algorithm.epsilon) == (0.04, 0.2)


def test_readme_conformance_snippet_subclasses_the_kit():
    from polyrl.testing.conformance import BackendConformance

    scope: dict[str, Any] = {}
    exec(python_block("BackendConformance"), scope)
    assert issubclass(scope["TestMine"], BackendConformance) and scope["TestMine"].compare_with == "torch"


# --- the CLI section ---------------------------------------------------------------------------


def cli_block() -> dict[str, str]:
    """README's "## CLI" block: each ``polyrl <command>``'s text, continuation lines included."""
    section = README[README.index("## CLI\n"):]
    block = re.search(r"^```\n(.*?)^```", section, re.S | re.M).group(1)
    commands: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        line = line.split("   # ")[0]  # the comments name other flags (`polyrl serve --help`)
        match = re.match(r"polyrl (?:\[--log-json\] )?([a-z-]+)", line)
        if match:
            current = match.group(1)
        commands[current] = commands.get(current, "") + " " + line
    return commands


def test_readme_cli_block_shows_every_subcommand_with_real_flags():
    from polyrl.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    shown = cli_block()
    assert sorted(shown) == sorted(sub.choices), "README's CLI block and `polyrl --help` list other commands"
    listed = re.findall(r"[a-z-]+", parser.description.partition(":")[2])  # `polyrl --help`'s own list
    assert sorted(listed) == sorted(sub.choices), "`polyrl --help`'s description lists other commands"
    for name, text in shown.items():
        flags = {f for a in sub.choices[name]._actions for f in a.option_strings} | {"--log-json"}
        unknown = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) - flags)
        assert not unknown, f"README's `polyrl {name}` shows flags it does not take: {unknown}"


# --- files README names ------------------------------------------------------------------------


def brace_expanded(text: str) -> list[str]:
    """Shell brace expansion (nested too): ``a_{x{1,2},y}.json`` -> a_x1.json, a_x2.json, a_y.json."""
    start = text.find("{")
    if start < 0:
        return [text]
    depth, parts, last = 0, [], start + 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if text[i] == "," and depth == 1:
            parts.append(text[last:i])
            last = i + 1
        elif depth == 0:
            parts.append(text[last:i])
            return [out for part in parts for out in brace_expanded(text[:start] + part + text[i + 1:])]
    raise ValueError(f"unbalanced braces in {text!r}")


def test_brace_expansion_is_the_shells():
    assert brace_expanded("a_{x{1,2},y}.{json,png}") == ["a_x1.json", "a_x1.png", "a_x2.json", "a_x2.png",
                                                         "a_y.json", "a_y.png"]


def test_every_bench_result_readme_names_is_there():
    named = set(re.findall(r"bench/results/[\w.{},-]+\.(?:json|png|md|\{[\w,]+\})", README))
    missing = [path for pattern in sorted(named) for path in brace_expanded(pattern) if not (ROOT / path).exists()]
    assert len(named) > 40 and not missing, missing


def polyrl_command_lines() -> list[tuple[str, str]]:
    """(command, rest of the line) for every ``polyrl ...`` README shows: code block lines (after
    environment assignments, continuation lines joined, comments cut) and inline code spans."""
    found = []
    for match in re.finditer(r"^```\w*\n(.*?)^```", README, re.S | re.M):
        for line in match.group(1).replace("\\\n", " ").splitlines():
            command = re.match(r"\s*(?:[A-Z_]+=\S+\s+)*polyrl (?:\[?--log-json\]? )?([a-z-]+)(.*)", line.split("  #")[0])
            if command:
                found.append((command.group(1), command.group(2)))
    found += re.findall(r"`polyrl (?:--log-json )?([a-z-]+)([^`]*)`", README)
    return found


def test_every_polyrl_command_readme_shows_takes_its_flags():
    from polyrl.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    top_options = {f for a in parser._actions for f in a.option_strings}
    lines = polyrl_command_lines()
    assert len(lines) > 60
    for name, rest in lines:
        if name.startswith("-"):  # `polyrl --help`, `polyrl --version`: the top-level parser's own
            assert name in top_options, f"README shows `polyrl {name}`, which polyrl does not take"
            continue
        assert name in sub.choices, f"README shows `polyrl {name}`, which is no command"
        flags = {f for a in sub.choices[name]._actions for f in a.option_strings}
        unknown = sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest)) - flags)
        assert not unknown, f"README's `polyrl {name}{rest}` shows flags it does not take: {unknown}"
