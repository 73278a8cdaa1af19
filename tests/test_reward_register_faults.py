"""A reward plugin whose register hook exits, or registers a spec with a wrong field, costs a run
nothing unless the run names its reward; then it is one ``error:`` line naming the plugin.

Why: the registry asks register hooks on a thread, under the time limit, and checks their specs,
but the reward computer asked the reward register hooks again, bare: one calling ``sys.exit(5)``
ended ``polyrl train`` with exit code 5 and no word (``polyrl rewards`` listed it as a load error),
and one registering ``RewardSpec(name=7)`` was kept. Real distributions with entry points.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.cli import main

from toy_dist import toy_site, write_dist

pytestmark = pytest.mark.faults

BODIES = {
    "exits": "import sys\nsys.exit(5)",
    "raises_base": "raise KeyboardInterrupt",  # its own thread's: never the user's Ctrl-C
    "badname": "from polyrl.types import RewardSpec\nregister(RewardSpec(name=7))",
}


@pytest.fixture()
def installed(tmp_path, monkeypatch):
    with toy_site(tmp_path, monkeypatch) as (site, modules):
        def install(how: str) -> None:
            module = f"polyrl_regfault_{how}"
            body = "\n".join(f"    {line}" for line in BODIES[how].splitlines())
            (site / f"{module}.py").write_text(
                f"from polyrl.hookspecs import hookimpl\n@hookimpl\ndef polyrl_register_rewards(register):\n{body}\n")
            write_dist(site, f"polyrl-regfault-{how}", "1.0", {"polyrl.rewards": {f"regfault{how}": module}})
            modules.append(module)

        yield install


def _config_file(tmp_path: Path, reward: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f"""
[model]
path = "toy-model"
[backends]
train = "toy"
[data]
task = "arithmetic"
[[rewards]]
name = "{reward}"
[train]
steps = 1
prompts_per_step = 2
output_dir = "{tmp_path / 'run'}"
""")
    return path


@pytest.mark.parametrize("how", list(BODIES))
def test_a_run_not_naming_the_broken_reward_plugin_trains(installed, tmp_path, capsys, how):
    installed(how)
    code = main(["train", str(_config_file(tmp_path, "numeric_match"))])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (tmp_path / "run" / "checkpoints" / "step-00000001").is_dir()


def test_a_run_naming_a_reward_its_plugin_could_not_register_is_one_error_naming_it(installed, tmp_path, capsys):
    installed("exits")
    code = main(["train", str(_config_file(tmp_path, "regfault_reward"))])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "error: rewards: unknown reward 'regfault_reward'" in err
    assert "regfaultexits (polyrl-regfault-exits) failed to register rewards: SystemExit: 5" in err
