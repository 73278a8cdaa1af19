"""Fault injection: crashes, signals, numerical faults, hostile plugins, bad input (`make test-faults`).

The signal tests run the real CLI (`polyrl train`) in a subprocess on the tiny local model with
the torch backend; the kill -9 / damaged-checkpoint tests live in tests/test_checkpoint_faults.py.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import attrs
import numpy as np
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl import checkpoint as ckpt
from polyrl.config import DataSection, RunConfig
from polyrl.engine import Engine
from polyrl.errors import ConfigError, PluginError
from polyrl.hookspecs import hookimpl
from polyrl.plugins import get_plugin_manager
from polyrl.registry import Registry
from polyrl.previous_runs import SetAsideError
from polyrl.trainer import OutputWriteError, TooManySkippedSteps, Trainer
from polyrl.types import EngineConfig, SamplingParams, StepMetrics

from crash_util import POLYRL, metric_steps, train, write_config
from model_copies import edited_copy

pytestmark = pytest.mark.faults


# --- crash safety -------------------------------------------------------------------------------


# kill -9 at random moments (checkpoint writes included) then --resume, damaged checkpoints, the
# output_dir lock, config changes at resume, a full disk: tests/test_checkpoint_faults.py


def test_incomplete_or_corrupt_checkpoints_are_never_chosen(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3):
        ckpt.write_checkpoint(root, step, {"step": step}, lambda model, state: Path(model).mkdir())
    assert ckpt.latest_checkpoint(root).name == "step-00000003"
    (root / "step-00000003" / ckpt.MARKER).unlink()  # crashed before the marker
    (root / "step-00000002" / ckpt.STATE_FILE).write_text('{"step": 2, "sampl')  # truncated
    (root / ".tmp-step-00000004").mkdir()  # a write in progress
    (root / "step-00000005").mkdir()  # a directory that only looks like one
    assert ckpt.latest_checkpoint(root).name == "step-00000001"
    ckpt.prune(root, keep=1)
    assert not (root / ".tmp-step-00000004").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_signal_finishes_the_step_checkpoints_and_exits_zero(tiny_model_dir, tmp_path, signum):
    out = tmp_path / "other run"  # the config names another output_dir: the hint must carry the flags
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=10, checkpoint_every=0)
    flags = ["--set", "train.seed=3", "--steps", "10000", "--output-dir", str(out)]
    proc = subprocess.Popen([*POLYRL, "train", str(config), "--no-progress", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopped on request" in err
    hint = err.split("Continue with: ")[1].splitlines()[0]
    assert shlex.split(hint) == ["polyrl", "train", str(config), *flags, "--resume"]
    done = len(metric_steps(out))
    newest = ckpt.latest_checkpoint(out / "checkpoints")
    assert newest is not None and ckpt.read_state(newest)["step"] == done  # the step finished


# --- numerical faults ---------------------------------------------------------------------------


def toy_config(tmp_path, rewards=None, backend="toy", **train) -> RunConfig:
    return RunConfig.from_dict({
        "model": {"path": "toy-model"}, "backends": {"train": backend},
        "generation": {"group_size": 4, "max_new_tokens": 8}, "optimizer": {"lr": 1.0},
        "data": {"task": "arithmetic", "options": {"count": 64}},
        "rewards": rewards or [{"name": "toy_sevens"}],
        "train": {"steps": 8, "prompts_per_step": 4, "output_dir": str(tmp_path / "run"), **train},
    })


class NonFiniteSteps:
    """Backend "faulty": the toy backend whose chosen train_step calls report a non-finite loss,
    as a real backend does when it skips such a step (its other hooks are the toy's)."""

    def __init__(self, bad_calls: set[int]) -> None:
        from polyrl_toy import ToyPlugin

        class Faulty(ToyPlugin):
            @hookimpl
            def train_step(inner, engine, batch, objective):
                self.calls += 1
                if self.calls in self.bad_calls:
                    return StepMetrics(loss=float("nan"), grad_norm=float("inf"), skipped=True)
                return super().train_step(engine, batch, objective)

        self.bad_calls, self.calls = bad_calls, 0
        self.plugin = Faulty("faulty")


def test_isolated_non_finite_steps_are_skipped_and_the_run_goes_on(toy, tmp_path):
    summary = Trainer(toy_config(tmp_path, backend="faulty"), extra_plugins=(NonFiniteSteps({2, 5}).plugin,)).run(progress=False)
    assert summary["steps"] == 8
    skipped = [m["step"] for m in metric_steps(tmp_path / "run") if m.get("skipped")]
    assert skipped == [2, 5]


def test_too_many_non_finite_steps_in_a_row_stop_with_a_fix(toy, tmp_path):
    trainer = Trainer(toy_config(tmp_path, backend="faulty", max_consecutive_skips=3),
                      extra_plugins=(NonFiniteSteps({3, 4, 5, 6}).plugin,))
    with pytest.raises(TooManySkippedSteps, match="3 steps in a row.*Fix: lower optimizer.lr"):
        trainer.run(progress=False)
    assert ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints") is not None  # nothing lost


@pytest.mark.slow
def test_exploding_gradients_on_torch_stop_with_a_clear_message(tiny_model_dir, tmp_path):
    """A real fault: a reward weight of 1e38, unscaled, overflows the gradient's norm; the backend
    skips non-finite steps, the run stops. (An lr of 1e30 did it once; the config now refuses an lr
    of 10 or more before any model loads.)"""
    config = write_config(tmp_path, tiny_model_dir, tmp_path / "run", steps=10, checkpoint_every=0,
                          extra='weight = 1e38\n[algorithm]\nscale_rewards = "none"\n')
    result = train(config)
    assert result.returncode == 2, result.stderr
    assert "non-finite" in result.stderr and "Fix: lower optimizer.lr" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("algorithm", ["grpo", "dapo"])
def test_zero_variance_groups_give_no_update_and_no_nan(toy, tmp_path, algorithm):
    """Equal rewards in every group: zero advantages (GRPO) or dropped groups (DAPO), never NaN."""
    (tmp_path / "const.py").write_text("def const(prompts, completions, **kw):\n    return [1.0] * len(completions)\n")
    data = toy_config(tmp_path, rewards=[{"function": f"{tmp_path / 'const.py'}:const"}], steps=3)
    # no overlong shaping: it would make equal rewards differ by completion length
    config = attrs.evolve(data, algorithm=AlgorithmConfig.preset(algorithm, overlong_buffer=None))
    summary = Trainer(config).run(progress=False)
    assert summary["steps"] == 3
    for m in summary["history"]:
        if algorithm == "dapo":  # dynamic sampling drops every group: the update is skipped
            assert m["skipped"] and m["samples_kept"] == 0
        else:
            assert not m["skipped"] and m["grad_norm"] == 0.0 and np.isfinite(m["loss"])


NONE_REWARD = """
def never_scores(prompts, completions, **kw):
    return [None] * len(completions)

def scores_on_steps(prompts, completions, trainer_state, **kw):
    return [1.0 if trainer_state.global_step in (2, 5) else None] * len(completions)
"""


def test_rewards_that_never_score_stop_the_run_naming_them(toy, tmp_path):
    """Every reward returned None for every sample: the step's warning says so (not "equal
    rewards"), and max_consecutive_skips such steps checkpoint and stop the run with a fix."""
    from structlog.testing import capture_logs

    (tmp_path / "none.py").write_text(NONE_REWARD)
    config = toy_config(tmp_path, rewards=[{"function": f"{tmp_path / 'none.py'}:never_scores"}],
                        max_consecutive_skips=2, checkpoint_every=0)
    with capture_logs() as logs, pytest.raises(TooManySkippedSteps) as raised:
        Trainer(config).run(progress=False)  # old code: all 8 steps ran, training nothing
    message = str(raised.value)
    assert "2 steps in a row no reward scored any sample" in message and "never_scores" in message
    assert "Fix: make at least one of them return a number" in message
    assert ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints"))["step"] == 2
    warned = [e["event"] for e in logs if e["event"].startswith("no informative samples")]
    assert len(warned) == 2 and all("no reward scored any of the 16 samples" in w for w in warned)
    assert not any("equal" in w for w in warned)


def test_with_a_kl_term_an_unscored_step_trains_the_kl_alone_and_still_stops_the_run(toy, tmp_path):
    """TRL keeps unscorable completions at advantage 0, so with beta > 0 its step is the KL term's
    alone; polyrl takes that step too (it skipped it), warns, and still stops after the same count."""
    from structlog.testing import capture_logs

    (tmp_path / "none.py").write_text(NONE_REWARD)
    config = toy_config(tmp_path, rewards=[{"function": f"{tmp_path / 'none.py'}:never_scores"}],
                        max_consecutive_skips=2, checkpoint_every=0)
    config = attrs.evolve(config, algorithm=attrs.evolve(config.algorithm, beta=0.04))
    with capture_logs() as logs, pytest.raises(TooManySkippedSteps) as raised:
        Trainer(config).run(progress=False)
    assert "2 steps in a row no reward scored any sample" in str(raised.value)
    history = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["skipped"] for m in history] == [False, False]
    assert all(m["samples_kept"] == 16 and "kl" in m for m in history)
    warned = [e["event"] for e in logs if e["event"].startswith("no reward scored any sample this step")]
    assert len(warned) == 2


def test_steps_no_reward_scored_count_only_in_a_row(toy, tmp_path):
    (tmp_path / "none.py").write_text(NONE_REWARD)
    config = toy_config(tmp_path, rewards=[{"function": f"{tmp_path / 'none.py'}:scores_on_steps"}],
                        max_consecutive_skips=3)
    summary = Trainer(config).run(progress=False)
    assert summary["steps"] == 8
    assert [m["step"] for m in summary["history"] if m["skipped"]] == [1, 2, 4, 5, 7, 8]


def test_equal_reward_groups_under_dynamic_sampling_never_stop_the_run(toy, tmp_path):
    """A saturated model under DAPO has nothing to train on every step: legitimate, not counted."""
    from structlog.testing import capture_logs

    (tmp_path / "const.py").write_text("def const(prompts, completions, **kw):\n    return [1.0] * len(completions)\n")
    data = toy_config(tmp_path, rewards=[{"function": f"{tmp_path / 'const.py'}:const"}], steps=3,
                      max_consecutive_skips=1)
    config = attrs.evolve(data, algorithm=AlgorithmConfig.preset("dapo", overlong_buffer=None))
    with capture_logs() as logs:
        summary = Trainer(config).run(progress=False)
    assert summary["steps"] == 3 and all(m["skipped"] for m in summary["history"])
    warned = [e["event"] for e in logs if e["event"].startswith("no informative samples")]
    assert len(warned) == 3
    assert all("16 of 16 samples are in groups whose rewards were all equal" in w for w in warned)
    assert not any("no reward scored" in w for w in warned)


class CutSteps:
    """Backend "cut": the toy backend whose completions on the chosen steps (1-based calls of
    generate) all end at the length limit; the others end as the toy's do, or with
    ``finish_others`` all finish (a step between cut ones then always trains)."""

    def __init__(self, cut_calls: set[int] | None = None, finish_others: bool = False) -> None:
        from polyrl_toy import ToyPlugin

        class Cut(ToyPlugin):
            @hookimpl
            def generate(inner, engine, prompts, sampling):
                self.calls += 1
                out = super().generate(engine, prompts, sampling)
                if self.cut_calls is None or self.calls in self.cut_calls:
                    out = [attrs.evolve(x, finish_reason="length") for x in out]
                elif finish_others:
                    out = [attrs.evolve(x, finish_reason="stop") for x in out]
                return out

        self.cut_calls, self.calls = cut_calls, 0
        self.plugin = Cut("cut")


def _masking(config: RunConfig) -> RunConfig:
    return attrs.evolve(config, algorithm=attrs.evolve(config.algorithm, mask_truncated_completions=True))


def test_steps_whose_every_completion_was_cut_warn_with_the_fix_and_stop_the_run(toy, tmp_path):
    """Every completion cut under mask_truncated_completions: the step trains nothing (TRL's loss
    is 0 with no word). Each such step's warning names the cause and the fix, and
    max_consecutive_skips of them in a row checkpoint and stop the run (old code: every step ran,
    training nothing, with no fix)."""
    from structlog.testing import capture_logs

    config = _masking(toy_config(tmp_path, backend="cut", max_consecutive_skips=2, checkpoint_every=0))
    with capture_logs() as logs, pytest.raises(TooManySkippedSteps) as raised:
        Trainer(config, extra_plugins=(CutSteps().plugin,)).run(progress=False)
    message = str(raised.value)
    assert "2 steps in a row trained on no completion: every completion was cut at the length limit" in message
    assert "Fix: raise generation.max_new_tokens (now 8)" in message
    assert "algorithm.mask_truncated_completions = false" in message and "--resume-weights-only" in message
    assert ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints"))["step"] == 2
    warned = [e for e in logs if e["event"].startswith("no informative samples")]
    assert len(warned) == 2
    assert all("16 of 16 samples were cut at the length limit" in e["event"] for e in warned)
    assert all("raise generation.max_new_tokens (now 8)" in e["fix"] and "2 such steps in a row stop the run"
               in e["fix"] for e in warned)


def test_steps_whose_every_completion_was_cut_count_only_in_a_row(toy, tmp_path):
    """Cut steps apart from each other (a step with one finished completion trains) never stop it."""
    config = _masking(toy_config(tmp_path, backend="cut", max_consecutive_skips=2))
    # the others finish: the optimizer's step on a cut one (TRL's, on a zero gradient) moves the
    # toy's weights by momentum, which may leave a step between them with no finished completion
    summary = Trainer(config, extra_plugins=(CutSteps({1, 3, 5, 7}, finish_others=True).plugin,)).run(progress=False)
    assert summary["steps"] == 8
    assert [m["step"] for m in summary["history"] if m["skipped"]] == [1, 3, 5, 7]


def test_a_resume_continues_the_streak_of_cut_steps_so_it_stops_where_the_run_would(toy, tmp_path):
    """Cut steps 1-2 checkpointed, then a resume (more steps): step 3 is the third in a row and
    stops the run, as without the interruption. The streak lived in a local of the loop, so the
    resumed run counted from 0 and trained nothing two steps longer before it stopped."""
    from polyrl import checkpoint as ckpt

    first = _masking(toy_config(tmp_path, backend="cut", max_consecutive_skips=3, checkpoint_every=1, steps=2))
    assert Trainer(first, extra_plugins=(CutSteps().plugin,)).run(progress=False)["steps"] == 2
    saved = ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints"))
    assert saved["in_a_row"] == {"skips": 0, "unscored": 0, "cut": 2}
    more = attrs.evolve(first, train=attrs.evolve(first.train, steps=5))
    with pytest.raises(TooManySkippedSteps, match="3 steps in a row trained on no completion") as raised:
        Trainer(more, extra_plugins=(CutSteps().plugin,), resume="").run(progress=False)
    assert isinstance(raised.value, TooManySkippedSteps)
    assert ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints"))["step"] == 3


# --- hostile plugins ----------------------------------------------------------------------------


class RaisesForEveryEngine:
    """A third-party plugin with a bug: it raises in hooks for engines that are not its own."""

    @hookimpl
    def generate(self, engine, prompts, sampling):
        raise RuntimeError("boom")

    @hookimpl
    def polyrl_register_backends(self, register):
        raise RuntimeError("registration bug")


def test_a_plugin_raising_in_hooks_does_not_take_down_other_backends(toy):
    reg = Registry(get_plugin_manager(extra=[RaisesForEveryEngine()]))
    assert any("registration bug" in e.error for e in reg.load_errors)
    engine = Engine(reg, "toy", EngineConfig(model="toy-model"))
    assert len(engine.generate(["ab"], SamplingParams(max_new_tokens=3, n=2, seed=0))) == 2


def test_a_backend_raising_in_its_own_hook_is_named_with_its_distribution(toy):
    class Owner:
        @hookimpl
        def polyrl_register_backends(self, register):
            from polyrl.types import BackendSpec

            register(BackendSpec(name="flaky", load=lambda c: object(), distribution="polyrl-flaky"))

        @hookimpl
        def generate(self, engine, prompts, sampling):
            raise RuntimeError("device lost")

    reg = Registry(get_plugin_manager(extra=[Owner()]))
    engine = Engine(reg, "flaky", EngineConfig(model="x"))
    with pytest.raises(PluginError, match=r"'flaky' \(polyrl-flaky\) hook generate: raised RuntimeError: device lost"):
        engine.generate(["p"], SamplingParams(max_new_tokens=2))
    toy_engine = Engine(reg, "toy", EngineConfig(model="toy-model"))
    assert len(toy_engine.generate(["p"], SamplingParams(max_new_tokens=2))) == 1


# --- bad input: one clear error from the CLI, never a traceback ------------------------------------


def _cli(tmp_path: Path, toml: str) -> subprocess.CompletedProcess:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    return subprocess.run([*POLYRL, "train", str(path), "--no-progress"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "POLYRL_DISABLE_PLUGINS": "mlx"})


def _bad_inputs(tmp_path: Path, model: str) -> dict[str, tuple[str, str]]:
    """name -> (config text, text the one-line error must contain)."""
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "nocol.jsonl").write_text('{"question": "2+2?"}\n')
    (tmp_path / "long.jsonl").write_text(json.dumps({"prompt": "word " * 400, "answer": "1"}) + "\n")
    (tmp_path / "noanswer.jsonl").write_text(json.dumps({"prompt": "2+2?", "solution": "4"}) + "\n")
    (tmp_path / "short.py").write_text("def short(prompts, completions, **kw):\n    return [1.0]\n")
    (tmp_path / "boom.py").write_text("def boom(prompts, completions, **kw):\n    raise ValueError('bad row')\n")
    import shutil

    mismatched = edited_copy(model, tmp_path / "mismatched", {"vocab_size": 64})  # the tokenizer has more ids
    no_weights = tmp_path / "no-weights"
    shutil.copytree(model, no_weights)
    (no_weights / "model.safetensors").unlink()

    def run(model_path=model, data='task = "arithmetic"', rewards='name = "numeric_match"', extra=""):
        return (f'[model]\npath = "{model_path}"\nmax_length = 128\n[data]\n{data}\n'
                f'[[rewards]]\n{rewards}\n[train]\nsteps = 1\nprompts_per_step = 1\n'
                f'output_dir = "{tmp_path / "out"}"\n{extra}')

    return {
        "toml syntax": ("[model\npath = 1", "not valid TOML"),
        "wrong type": (run(extra="[generation]\ntemperature = \"hot\"\n"), "generation.temperature"),
        "misspelt key": (run(extra="[generation]\ntemprature = 0.7\n"), "did you mean 'temperature'"),
        "empty dataset": (run(data=f'path = "{tmp_path / "empty.jsonl"}"'), "data.path"),
        "missing column": (run(data=f'path = "{tmp_path / "nocol.jsonl"}"'), "prompt"),
        "prompt too long": (run(data=f'path = "{tmp_path / "long.jsonl"}"'), "model.max_length"),
        "answer column missing": (run(data=f'path = "{tmp_path / "noanswer.jsonl"}"'), "column 'answer'"),
        "reward wrong length": (run(rewards=f'function = "{tmp_path / "short.py"}:short"'), "short"),
        "reward raises": (run(rewards=f'function = "{tmp_path / "boom.py"}:boom"'), "bad row"),
        "unknown reward": (run(rewards='name = "numeric_mach"'), "numeric_match"),
        "mismatched tokenizer": (run(model_path=mismatched), "do not belong to the same model"),
        "folder without weights": (run(model_path=no_weights), "cannot load the model weights"),
        "unknown backend": (run(extra='[backends]\ntrain = "jax"\n'), "backends.train"),
    }


def _assert_one_clear_error(returncode: int, stderr: str, expected: str) -> None:
    assert returncode == 2, (returncode, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected in errors[0], stderr[-2000:]


@pytest.mark.parametrize("case", ["toml syntax", "wrong type", "misspelt key"])
def test_bad_input_gives_one_clear_error(tiny_model_dir, tmp_path, case):
    """Refused as the config is read: the real program in a subprocess (under a second each), its
    exit code and stderr as a user sees them."""
    toml, expected = _bad_inputs(tmp_path, tiny_model_dir)[case]
    result = _cli(tmp_path, toml)
    _assert_one_clear_error(result.returncode, result.stderr, expected)


@pytest.mark.parametrize("case", ["empty dataset", "missing column", "answer column missing", "unknown reward",
                                  "unknown backend", "prompt too long", "reward wrong length", "reward raises",
                                  "mismatched tokenizer", "folder without weights"])
def test_bad_input_found_past_the_config_gives_one_clear_error(tiny_model_dir, tmp_path, capfd, monkeypatch, case):
    """Found reading the data, looking up a reward or backend, loading the models or in the first
    step: ``polyrl.cli.main`` in this process (a subprocess paid the imports of datasets, torch and
    transformers again, 2-7 s a case; the same checks on the exit code and stderr). The program's
    own exit path after such an error stays covered in a subprocess by test_bad_input_gives_one_clear_error
    and test_checkpoint_faults.py::test_missing_optimizer_state_is_an_error_unless_weights_only."""
    from polyrl.cli import main

    toml, expected = _bad_inputs(tmp_path, tiny_model_dir)[case]
    (tmp_path / "bad.toml").write_text(toml)
    monkeypatch.setenv("POLYRL_DISABLE_PLUGINS", "mlx")
    code = main(["train", str(tmp_path / "bad.toml"), "--no-progress"])
    _assert_one_clear_error(code, capfd.readouterr().err, expected)


# --- security -----------------------------------------------------------------------------------

SOURCES = [p for root in ("core", "plugins") for p in (Path(__file__).parents[1] / root).rglob("*.py")]


def test_no_pickle_loading_and_torch_load_only_with_weights_only():
    offenders = []
    for path in SOURCES:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "pickle.load" in code or "import pickle" in code:
                offenders.append(f"{path}:{lineno}: {line.strip()}")
            if "torch.load(" in code and "weights_only=True" not in code:
                offenders.append(f"{path}:{lineno}: {line.strip()}")
    assert SOURCES and not offenders, offenders


def test_remote_code_is_off_unless_asked(tiny_model_dir):
    pytest.importorskip("torch")
    config = RunConfig.from_dict({"model": {"path": tiny_model_dir}, "data": {"task": "arithmetic"},
                                  "rewards": [{"name": "numeric_match"}]})
    assert config.model.trust_remote_code is False
    assert EngineConfig(model="m").trust_remote_code is False
    source = (Path(__file__).parents[1] / "plugins/torch_backend/polyrl_torch/engine.py").read_text()
    assert 'extra["trust_remote_code"] = bool(config.trust_remote_code)' in source


def test_api_keys_are_redacted_from_logs(capsys):
    from polyrl import logs

    logs.configure(json=True)
    logs.get_logger("t").info("calling judge", api_key="sk-live-123456", headers={"Authorization": "Bearer sk-live-123456"})
    err = capsys.readouterr().err
    assert "sk-live-123456" not in err and "calling judge" in err


def test_servers_bind_to_localhost_by_default():
    from polyrl.cli import build_parser

    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1"


def test_more_prompts_per_step_than_rows_is_a_warning_naming_both(toy, tmp_path):
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        Trainer(toy_config(tmp_path, steps=1, prompts_per_step=100))  # the toy dataset has 64 rows
    warned = [e for e in logs if "more than the dataset's rows" in e["event"]]
    assert len(warned) == 1 and (warned[0]["prompts_per_step"], warned[0]["rows"]) == (100, 64)
    assert "train.prompts_per_step <= 64" in warned[0]["fix"]


def test_an_eval_reward_that_is_not_one_of_the_runs_rewards_is_a_warning(toy, tmp_path):
    from structlog.testing import capture_logs

    config = toy_config(tmp_path, steps=1)
    with capture_logs() as logs:
        Trainer(attrs.evolve(config, eval=attrs.evolve(config.eval, count=4)))  # eval.reward: numeric_match
    warned = [e for e in logs if "evaluation scores with eval.reward = 'numeric_match'" in e["event"]]
    assert len(warned) == 1 and warned[0]["rewards"] == "toy_sevens" and "set eval.reward" in warned[0]["fix"]
    with capture_logs() as logs:
        Trainer(attrs.evolve(config, eval=attrs.evolve(config.eval, count=4, reward="toy_sevens")))
    assert not [e for e in logs if "evaluation scores with" in e["event"]]


# --- resume lineage, reward code, a signal during the final save ---------------------------------


def _checkpoint_steps(root: Path) -> list[int]:
    return [ckpt.read_state(p)["step"] for p in ckpt.complete_checkpoints(root)]


def test_resuming_an_older_checkpoint_sets_the_abandoned_runs_newer_ones_aside(toy, tmp_path):
    """Going back to step 2 of a finished run (after a divergence, with a new lr): its step 3 and 4
    stayed in checkpoints/, sorted after the new run's own, so pruning deleted what the resumed
    run wrote and the printed ``--resume`` went back to the abandoned run's step 4."""
    Trainer(toy_config(tmp_path, steps=4, checkpoint_every=1, keep_checkpoints=3)).run(progress=False)
    root = tmp_path / "run" / "checkpoints"
    assert _checkpoint_steps(root) == [2, 3, 4]
    branch = attrs.evolve(toy_config(tmp_path, steps=3, checkpoint_every=1, keep_checkpoints=3),
                          optimizer=attrs.evolve(toy_config(tmp_path).optimizer, lr=0.5))
    trainer = Trainer(branch)
    assert trainer.resume(root / "step-00000002")
    trainer.run(progress=False)
    assert _checkpoint_steps(root) == [2, 3]  # the branch's own: its step 3 was kept, not pruned
    assert ckpt.read_state(ckpt.latest_checkpoint(root))["config"]["optimizer.lr"] == 0.5
    aside = sorted((tmp_path / "run" / "previous").glob("*/checkpoints/step-*"))
    assert [p.name for p in aside] == ["step-00000003", "step-00000004"]  # set aside, not deleted
    logs = aside[0].parent.parent  # the abandoned run's lines of steps 3 and 4, dropped by the rewind, kept here
    assert [r["step"] for r in map(json.loads, (logs / "metrics.jsonl").read_text().splitlines())] == [1, 2, 3, 4]
    assert [r["step"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())] == [1, 2, 3]
    # and its run_plan.json: how that run ended, for polyrl report there (old code: only in the output_dir,
    # which the branch's start rewrote)
    assert json.loads((logs / "run_plan.json").read_text()) == {"train.steps": 4, "ended": {"how": "finished", "step": 4}}
    again = Trainer(branch)
    assert again.resume() and again.step == 3  # what a later --resume continues: the branch


@pytest.mark.parametrize("leftover", ["metrics.jsonl folder", "previous file", "temp checkpoint file"])
def test_a_strange_entry_in_the_output_dir_at_resume_is_one_error_or_cleared(toy, tmp_path, leftover):
    """A folder where metrics.jsonl belongs, or a file named previous when an older checkpoint is
    resumed, ended the resume in an OSError traceback; a file named like a checkpoint's temp
    folder failed every later save with "Not a directory" (and "free space" as the fix)."""
    Trainer(toy_config(tmp_path, steps=3, checkpoint_every=1)).run(progress=False)
    run, root = tmp_path / "run", tmp_path / "run" / "checkpoints"
    resume_from = None
    if leftover == "metrics.jsonl folder":
        (run / "metrics.jsonl").unlink()
        (run / "metrics.jsonl").mkdir()
        expected: type[Exception] | None = OutputWriteError
        match = "metrics.jsonl into .*: Is a directory"
    elif leftover == "previous file":
        (run / "previous").write_text("notes")
        resume_from, expected, match = root / "step-00000002", SetAsideError, r"previous to move .*\(File exists\); nothing was moved"
    else:
        (root / ".tmp-step-00000004").write_text("x")
        expected, match = None, ""
    trainer = Trainer(toy_config(tmp_path, steps=5, checkpoint_every=1), resume="")
    try:
        if expected is None:
            assert trainer.resume() and trainer.run(progress=False)["steps"] == 5
            assert ckpt.verify(root / "step-00000005") is None
        else:
            with pytest.raises(expected, match=match):
                trainer.resume(resume_from)
            assert ckpt.verify(root / "step-00000003") is None  # nothing lost
    finally:
        trainer.lock.release()


def test_a_reward_function_edited_since_the_checkpoint_is_refused_at_resume(toy, tmp_path):
    """The config was compared at resume, the reward's code was not: an edited function at the same
    path scored the resumed steps with other code, without a word."""
    reward = tmp_path / "reward.py"
    reward.write_text("def digits(completions, **kw):\n    return [float(len(c) % 3) for c in completions]\n")
    config = toy_config(tmp_path, rewards=[{"function": f"{reward}:digits"}], steps=2, checkpoint_every=1)
    Trainer(config).run(progress=False)
    reward.write_text("def digits(completions, **kw):\n    return [-float(len(c)) for c in completions]\n")
    longer = attrs.evolve(config, train=attrs.evolve(config.train, steps=3))
    with pytest.raises(ConfigError, match=r"the code of reward function\(s\) digits changed since .*Fix: restore "
                                          r"the file as it was, or continue from the weights with --resume-weights-only"):
        Trainer(longer).resume()
    trainer = Trainer(longer)
    assert trainer.resume(weights_only=True)  # asked for: a warning, and it goes on
    assert trainer.run(progress=False)["steps"] == 3


def test_a_signal_during_the_final_save_only_asks_to_stop(toy, tmp_path, monkeypatch):
    """With checkpoint_every = 0 the final save is the run's one checkpoint: SIGTERM there (a
    preemption, a second impatient stop) killed the process mid-save, and the run was lost."""
    config = toy_config(tmp_path, steps=2, checkpoint_every=0)
    trainer = Trainer(config)
    save = Trainer.save

    def signalled_save(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while this save runs
        return save(self, *args, **kwargs)

    def outside_the_run(signum, frame):
        raise AssertionError("SIGTERM reached the default handler: the final save was not protected")

    monkeypatch.setattr(Trainer, "save", signalled_save)
    previous = signal.signal(signal.SIGTERM, outside_the_run)
    try:
        summary = trainer.run(progress=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert summary["steps"] == 2 and not summary.get("stopped_early")  # every step had trained
    assert _checkpoint_steps(tmp_path / "run" / "checkpoints") == [2] and Path(summary["model"]).is_dir()


def test_a_signal_during_the_evaluation_before_training_stops_the_run_with_nothing_saved(toy, tmp_path, monkeypatch):
    """The evaluation before training ran before the stop handling was in place: SIGTERM there (a
    preemption during a long evaluation) ended the process without a word. Now it finishes the
    evaluation, trains nothing, saves nothing, and says so (``stopped_early`` without a checkpoint)."""
    from structlog.testing import capture_logs

    config = toy_config(tmp_path, steps=2)
    config = attrs.evolve(config, eval=attrs.evolve(config.eval, count=4, reward="toy_sevens"))
    trainer = Trainer(config)
    evaluate = Trainer.evaluate

    def signalled_evaluate(self, phase="during"):
        if phase == "before":
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while this evaluation runs
        return evaluate(self, phase)

    def outside_the_run(signum, frame):
        raise AssertionError("SIGTERM reached the default handler: the evaluation before training was not covered")

    monkeypatch.setattr(Trainer, "evaluate", signalled_evaluate)
    previous = signal.signal(signal.SIGTERM, outside_the_run)
    try:
        with capture_logs() as logs:
            summary = trainer.run(progress=False)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert summary["stopped_early"] and summary["steps"] == 0 and "eval_before" in summary
    assert "checkpoint" not in summary and "model" not in summary
    assert not (tmp_path / "run" / "checkpoints").exists() or not list((tmp_path / "run" / "checkpoints").iterdir())
    assert any("stopped on request before the first step" in e["event"] for e in logs)


def test_a_fresh_start_sets_the_earlier_runs_tensorboard_files_aside_with_the_rest_of_it(toy, tmp_path):
    """A fresh start moved the earlier run's checkpoints, model and metrics to previous/<time>/ but
    left its TensorBoard files, where the new run's session start hid its curves ("out of order
    event.step ... Removing scalars"). Read back with TensorBoard's own reader."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(folder: Path) -> list[int]:
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        return [e.step for e in acc.Scalars("loss")]

    config = toy_config(tmp_path, steps=2)
    config = attrs.evolve(config, logging=attrs.evolve(config.logging, report_to=["tensorboard"]))
    Trainer(config).run(progress=False)
    Trainer(attrs.evolve(config, train=attrs.evolve(config.train, steps=1))).run(progress=False)
    [aside] = (tmp_path / "run" / "previous").iterdir()
    assert scalars(tmp_path / "run" / "tensorboard") == [1]
    assert scalars(aside / "tensorboard") == [1, 2] and (aside / "checkpoints").is_dir()


def test_a_model_folder_changed_in_place_since_the_checkpoint_is_refused_at_resume(toy, tmp_path):
    """The dataset had a fingerprint at resume, the model folder not: one rebuilt at the same path
    (another seed, another tokenizer) became the resumed run's KL reference without a word."""
    model = tmp_path / "model-folder"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "toy"}')
    (model / "weights.bin").write_bytes(bytes(range(256)) * 64)
    config = toy_config(tmp_path, steps=2, checkpoint_every=1)
    config = attrs.evolve(config, model=attrs.evolve(config.model, path=str(model)))
    Trainer(config).run(progress=False)
    (model / "weights.bin").write_bytes(bytes(reversed(range(256))) * 64)  # same size, other weights
    longer = attrs.evolve(config, train=attrs.evolve(config.train, steps=3))
    with pytest.raises(ConfigError, match=r"the files of model.path changed since .*step-00000002 was "
                                          r"written .*Fix: restore the folder as it was, or continue from the "
                                          r"weights with --resume-weights-only") as info:
        Trainer(longer).resume()
    assert info.value.field == "model.path"
    trainer = Trainer(longer)
    assert trainer.resume(weights_only=True)  # asked for: a warning, and it goes on
    assert trainer.run(progress=False)["steps"] == 3
    # that run's checkpoints hold the folder as it is now: they resume without a word
    assert Trainer(attrs.evolve(config, train=attrs.evolve(config.train, steps=4))).resume()


def test_held_out_rows_edited_since_the_checkpoint_are_refused_at_resume(toy, tmp_path):
    """The training rows had a fingerprint at resume, the held-out rows not: an eval file edited at
    the same path put another set's scores on the resumed run's eval curve, after the old set's,
    without a word."""
    rows, held_out = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    rows.write_text("".join(json.dumps({"prompt": f"Count to {i}:"}) + "\n" for i in range(8)))
    held_out.write_text("".join(json.dumps({"prompt": f"Spell {i}:"}) + "\n" for i in range(4)))
    config = toy_config(tmp_path, steps=2, checkpoint_every=1)
    config = attrs.evolve(config, data=DataSection(path=str(rows), eval_path=str(held_out)),
                          eval=attrs.evolve(config.eval, count=4, reward="run"))
    Trainer(config).run(progress=False)
    held_out.write_text("".join(json.dumps({"prompt": f"Spell {i + 10}:"}) + "\n" for i in range(4)))
    longer = attrs.evolve(config, train=attrs.evolve(config.train, steps=3))
    with pytest.raises(ConfigError, match=r"the held-out rows differ from the ones the run of .*step-00000002 "
                                          r"evaluated on .*Fix: restore the held-out data as it was, or continue "
                                          r"from the weights with --resume-weights-only") as info:
        Trainer(longer, resume="")
    assert info.value.field == "data.eval_path"
    trainer = Trainer(longer)
    assert trainer.resume(weights_only=True)  # asked for: a warning, and it goes on
    assert trainer.run(progress=False)["steps"] == 3
    # that run's checkpoints hold the rows as they are now: they resume without a word
    assert Trainer(attrs.evolve(config, train=attrs.evolve(config.train, steps=4))).resume()


@pytest.mark.parametrize("saved", ["rows as read", "older checkpoint"])
def test_training_rows_edited_since_the_checkpoint_are_refused_before_any_model_loads(toy, tmp_path, monkeypatch,
                                                                                     saved):
    """The sampler refused rows edited at the same data.path only inside resume(), after the models
    had loaded (minutes with a big model): the rows as read are compared first, with the same error,
    by the checkpoint's ``train_data`` or, in an older checkpoint without it, the sampler's print."""
    from checkpoint_states import rewrite_state

    from polyrl import trainer as trainer_module

    rows = tmp_path / "train.jsonl"
    original = "".join(json.dumps({"prompt": f"Count to {i}:"}) + "\n" for i in range(8))
    rows.write_text(original)
    config = toy_config(tmp_path, steps=2, checkpoint_every=1)
    config = attrs.evolve(config, data=DataSection(path=str(rows)))
    Trainer(config).run(progress=False)
    if saved == "older checkpoint":
        last = ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints")
        state = json.loads((last / ckpt.STATE_FILE).read_text())
        state.pop("train_data", None)  # as a checkpoint written before it was saved
        rewrite_state(last, json.dumps(state))
    rows.write_text(original.replace("Count to 3:", "Count to 30:"))
    longer = attrs.evolve(config, train=attrs.evolve(config.train, steps=3))
    load_engines = trainer_module.load_engines

    def no_engines(*args, **kwargs):
        raise AssertionError("the engines loaded before the resume was refused")

    monkeypatch.setattr(trainer_module, "load_engines", no_engines)
    for weights_only in (False, True):  # the sampler's check refuses a weights-only resume too
        with pytest.raises(ConfigError, match=r"^data: the dataset differs from the one the checkpoint was trained "
                                              r"on\. Fix: resume with the same data section") as info:
            Trainer(longer, resume="", weights_only=weights_only)
        assert info.value.field == "data"
    rows.write_text(original)  # as it was: the resume goes on
    monkeypatch.setattr(trainer_module, "load_engines", load_engines)
    assert Trainer(longer, resume="").run(progress=False)["steps"] == 3


def test_a_failed_copy_names_the_disks_reason_not_a_list_of_every_file():
    """copytree's shutil.Error (the final model's export on a full disk) was printed as a ~2 KB
    Python list of (source, destination, reason) tuples."""
    import shutil

    from polyrl.trainer import _os_reason

    failures = [(f"/ck/model/{i}", f"/out/.tmp-model/{i}", f"[Errno 28] No space left on device: '/ck/model/{i}'")
                for i in range(6)]
    assert _os_reason(shutil.Error(failures)) == "No space left on device (6 files failed)"
    assert _os_reason(OSError(30, "Read-only file system")) == "Read-only file system"


def test_a_vanished_output_dir_is_named_not_taken_for_a_run_without_checkpoints(tmp_path):
    """The output_dir deleted mid-run (two checkpoints in it) was reported as "no checkpoint was
    written yet", with the disk-full fix."""
    from polyrl.trainer import Trainer

    trainer = Trainer.__new__(Trainer)  # only the fields _write_failed reads
    trainer.output_dir = tmp_path / "run"
    trainer.checkpoint_root = trainer.output_dir / "checkpoints"
    trainer._saved_step = 2
    trainer.started_by = None  # started by polyrl train
    assert "train.output_dir itself is gone" in str(trainer._write_failed("checkpoint of step 3", "No such file"))
    trainer.checkpoint_root.mkdir(parents=True)
    assert "the checkpoints this run wrote are gone" in str(trainer._write_failed("checkpoint of step 3", "x"))
    trainer._saved_step = None
    assert "no checkpoint was written yet" in str(trainer._write_failed("checkpoint of step 0", "x"))


# --- the lr schedule's span at resume -----------------------------------------------------------


def _scheduled(tmp_path, steps: int, schedule: str = "linear", total_steps: int | None = None) -> RunConfig:
    config = toy_config(tmp_path, steps=steps, checkpoint_every=1, keep_checkpoints=4)
    return attrs.evolve(config, optimizer=attrs.evolve(config.optimizer, schedule=schedule, total_steps=total_steps))


def _resume_at_step_2(config: RunConfig, tmp_path) -> tuple[list[str], list[float]]:
    """Resume ``config`` from step 2 of a finished 4-step linear run: the warnings, every step's lr."""
    from structlog.testing import capture_logs

    Trainer(_scheduled(tmp_path, 4)).run(progress=False)
    trainer = Trainer(config)
    with capture_logs() as logs:
        assert trainer.resume(tmp_path / "run" / "checkpoints" / "step-00000002")
    trainer.run(progress=False)
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return [e["event"] for e in logs if e["log_level"] == "warning"], [json.loads(line)["lr"] for line in lines]


def test_more_steps_at_resume_say_how_the_lr_schedule_stretches_and_how_to_keep_it(toy, tmp_path):
    """A linear run of 4 steps resumed at step 2 with train.steps = 8: the decay's span follows
    train.steps, so the lr went back up (0.5 due, 0.75 used) and only ``train.steps 4 -> 8`` was
    logged."""
    warned, lrs = _resume_at_step_2(_scheduled(tmp_path, 8), tmp_path)
    assert lrs[:3] == [1.0, 0.75, 0.75]  # what the warning announces: the new span's lr
    note = [w for w in warned if w.startswith("lr schedule changed at resume:")]
    assert note == ["lr schedule changed at resume: the linear lr schedule now decays over 8 optimizer updates "
                    "instead of the checkpoint's 4 (train.steps 4 -> 8): after the 2 updates already applied, "
                    "the next lr is 0.75 where the checkpoint's schedule is at 0.5. Fix: to keep the "
                    "checkpoint's schedule, resume with optimizer.total_steps = 4 and train.steps = 4 (past "
                    "update 4 it is at lr 0); or go on, and the rest of the run follows the new span"]


def test_the_checkpoints_span_as_total_steps_keeps_its_schedule_at_resume(toy, tmp_path):
    """The fix the warning gives: optimizer.total_steps = the checkpoint's span was refused at resume
    as a change that breaks exactness, though it keeps the schedule exactly."""
    warned, lrs = _resume_at_step_2(_scheduled(tmp_path, 4, total_steps=4), tmp_path)
    assert lrs == [1.0, 0.75, 0.5, 0.25]  # the uninterrupted 4-step schedule
    assert not [w for w in warned if w.startswith("lr schedule")]
    assert "config changed at resume: optimizer.total_steps None -> 4" in warned


def test_more_steps_past_the_checkpoints_span_at_lr_0_are_refused_before_any_step(toy, tmp_path):
    """optimizer.total_steps = the checkpoint's span (4) with train.steps 4 -> 8: steps 5-8 trained
    at the linear schedule's floor, lr 0 (the model unchanged by four steps of rollouts), and no
    line said so."""
    Trainer(_scheduled(tmp_path, 4)).run(progress=False)
    with pytest.raises(ConfigError) as info:
        Trainer(_scheduled(tmp_path, 8, total_steps=4), resume=str(tmp_path / "run" / "checkpoints" / "step-00000002"))
    assert str(info.value) == (
        "optimizer.total_steps: the last 4 optimizer updates of the resumed run would train at lr 0, changing "
        "nothing: the linear lr schedule ends its decay at update 4 (optimizer.total_steps = 4), and this run goes "
        "on to update 8 (steps 5-8, train.steps = 8). Fix: resume with train.steps = 4 to end where the schedule "
        "does, or optimizer.total_steps = 8 (or unset) to decay over the whole run (the lr then leaves the "
        "checkpoint's schedule, as its warning says)")
    assert info.value.field == "optimizer.total_steps"
    assert json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 4  # untouched


def test_more_steps_past_the_span_at_a_floor_above_0_say_the_lr_they_get(toy, tmp_path):
    """With min_lr_ratio = 0.5 the added steps train at lr x 0.5: applied, and the warning says so."""
    from structlog.testing import capture_logs

    def floored(steps: int, total_steps: int | None = None) -> RunConfig:
        config = _scheduled(tmp_path, steps, total_steps=total_steps)
        return attrs.evolve(config, optimizer=attrs.evolve(config.optimizer, min_lr_ratio=0.5))

    Trainer(floored(4)).run(progress=False)
    trainer = Trainer(floored(6, total_steps=4))
    with capture_logs() as logs:
        assert trainer.resume(tmp_path / "run" / "checkpoints" / "step-00000004")
    warned = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert ("lr schedule floor at resume: the last 2 optimizer updates train at the schedule's floor, lr 0.5 (lr x "
            "min_lr_ratio 0.5): the linear lr schedule ends its decay at update 4 (optimizer.total_steps = 4), and "
            "this run goes on to update 6 (steps 5-6, train.steps = 6). Fix: to decay over the whole run, resume "
            "with optimizer.total_steps = 6 (or unset)") in warned
    trainer.run(progress=False)
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lrs[4:] == [0.5, 0.5]  # what the warning said


def test_more_steps_under_a_constant_schedule_say_nothing_of_the_schedule(toy, tmp_path):
    Trainer(_scheduled(tmp_path, 4, schedule="constant")).run(progress=False)
    from structlog.testing import capture_logs

    trainer = Trainer(_scheduled(tmp_path, 8, schedule="constant"))
    with capture_logs() as logs:
        assert trainer.resume(tmp_path / "run" / "checkpoints" / "step-00000002")
    warned = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert "config changed at resume: train.steps 4 -> 8" in warned
    assert not [w for w in warned if w.startswith("lr schedule changed")]


def test_a_new_run_whose_schedule_ends_before_its_last_steps_at_lr_0_is_refused_before_any_step(toy, tmp_path):
    """optimizer.total_steps = 4 with train.steps = 8 and a linear decay to 0: steps 5-8 rolled out
    and scored at lr 0, the model unchanged by them, and no line said so (the same check as at
    resume, for a run that starts over)."""
    with pytest.raises(ConfigError) as info:
        Trainer(_scheduled(tmp_path, 8, total_steps=4)).run(progress=False)
    assert str(info.value) == (
        "optimizer.total_steps: the last 4 optimizer updates would train at lr 0, changing nothing: the linear lr "
        "schedule ends its decay at update 4 (optimizer.total_steps = 4), and this run goes on to update 8 "
        "(steps 5-8, train.steps = 8). Fix: set train.steps = 4 to end where the schedule does, or "
        "optimizer.total_steps = 8 (or unset) to decay over the whole run, or optimizer.min_lr_ratio > 0 to train "
        "those steps at a floor")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("optimizer", [{"total_steps": 8}, {"total_steps": 4, "min_lr_ratio": 0.5},
                                       {"total_steps": 4, "schedule": "constant"}])
def test_a_new_run_within_its_schedule_or_above_lr_0_trains(toy, tmp_path, optimizer):
    config = _scheduled(tmp_path, 8)
    config = attrs.evolve(config, optimizer=attrs.evolve(config.optimizer, **optimizer))
    Trainer(config).run(progress=False)
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lrs) == 8 and lrs[-1] > 0
