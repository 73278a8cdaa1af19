"""TRL reward functions run unchanged: called by keyword as TRL 1.16's GRPOTrainer calls them.

The functions under test are TRL's own (``trl.rewards``) and the shapes TRL's GRPOTrainer
documentation shows ("Using a custom reward function"), written here as a user would copy them.
The end-to-end runs (tiny model, torch backend) are at the bottom.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import signal
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from polyrl.errors import ConfigError, RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.rewards.functions import function_reward_plugin
from polyrl.rewards.trl_compat import TrainerState
from polyrl.types import Completion, RewardContext

from trl_doc_rewards import (accuracy_reward_func, coding_reward_func, format_reward_func, length_reward,
                             math_reward_func)

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


def scored(fns, texts, rows, columns=None, state=None, ids=None):
    """Score ``texts`` (one per row) with the function rewards ``fns`` through a RewardComputer."""
    plugins = [function_reward_plugin(fn) for fn in fns]
    computer = RewardComputer(get_plugin_manager(extra=plugins, entry_points=False),
                              [(p.name, 1.0, {}) for p in plugins], columns=columns)
    ids = ids or [[7] * (i + 1) for i in range(len(texts))]
    comps = [Completion(0, [1], x, [0.0] * len(x), text=t) for t, x in zip(texts, ids)]
    context = RewardContext(rows=rows, wanted=tuple(p.name for p in plugins), trainer_state=state,
                            completion_ids=[np.asarray(x) for x in ids])
    return computer([r["prompt"] for r in rows], comps, context)


def test_length_reward_sees_the_sampled_token_ids():
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    res = scored([length_reward], ["x", "y"], rows, ids=[[1, 2, 3], [4]])
    np.testing.assert_array_equal(res.total, [3.0, 1.0])


def test_chat_prompts_give_conversational_completions():
    rows = [{"prompt": CHAT}, {"prompt": CHAT}]
    res = scored([format_reward_func], ["<think>hm</think><answer>4</answer>", "4"], rows, columns=["prompt"])
    np.testing.assert_array_equal(res.total, [1.0, 0.0])


def test_ground_truth_column_is_passed_by_name():
    rows = [{"prompt": "q1", "ground_truth": "4"}, {"prompt": "q2", "ground_truth": "5"}]
    res = scored([accuracy_reward_func], ["so \\boxed{4}", "\\boxed{4}"], rows, columns=["prompt", "ground_truth"])
    np.testing.assert_array_equal(res.total, [1.0, 0.0])


def test_multi_task_none_means_no_reward_from_that_function():
    rows = [{"prompt": "2+2?", "task": "math"}, {"prompt": "write f", "task": "coding"}]
    res = scored([math_reward_func, coding_reward_func], ["4", "def f(): pass"], rows,
                 columns=["prompt", "task"])
    np.testing.assert_array_equal(res.total, [1.0, 1.0])
    assert res.metrics["math_reward_func"]["none_count"] == 1
    assert np.isnan(res.per_reward["coding_reward_func"][0])


def test_trainer_state_and_log_metric():
    seen = {}

    def curriculum(completions, trainer_state, log_metric, **kwargs):
        progress = trainer_state.global_step / trainer_state.max_steps
        seen.update(step=trainer_state.global_step, epoch=trainer_state.epoch)
        log_metric("progress", progress)
        return [progress] * len(completions)

    state = TrainerState.for_run(step=3, max_steps=12, prompts_per_step=2, group_size=4, dataset_size=8,
                                 history=[])
    res = scored([curriculum], ["a", "b"], [{"prompt": "p"}] * 2, state=state)
    np.testing.assert_allclose(res.total, [0.25, 0.25])
    assert seen == {"step": 3, "epoch": 0.75}
    assert res.metrics["curriculum"]["progress"] == 0.25


def test_async_reward_is_awaited():
    async def judge(completions, **kwargs):
        await asyncio.sleep(0)
        return [0.5] * len(completions)

    np.testing.assert_array_equal(scored([judge], ["a"], [{"prompt": "p"}]).total, [0.5])


async def _judge_one(completion):
    await asyncio.sleep(0)  # the request to a judge
    return float(completion == "4")


def test_a_sync_reward_batching_requests_on_get_event_loop_runs_as_on_trl_s_main_thread():
    """TRL calls a sync reward on its main thread, where ``asyncio.get_event_loop()`` gives one loop
    for the whole run (Python < 3.14): a judge batching its requests on it trains there, and failed
    here with "There is no current event loop in thread 'polyrl-reward-...'"."""
    loops = []

    def batched_judge(completions, **kwargs):
        loop = asyncio.get_event_loop()
        loops.append(loop)
        return loop.run_until_complete(asyncio.gather(*(_judge_one(c) for c in completions)))

    for _ in range(2):
        assert scored([batched_judge], ["4", "5"], [{"prompt": "p"}] * 2).total.tolist() == [1.0, 0.0]
    assert loops[0] is loops[1] and not loops[0].is_closed()  # one loop across calls, as the main thread's


class _TimeLimit(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds):
    """The usual signal-based time limit around a completion's code (open-r1's code rewards')."""
    def expire(signum, frame):
        raise _TimeLimit()

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)


def timed_eval_reward(completions, **kwargs):
    scores = []
    for completion in completions:
        try:
            with _time_limit(5):
                scores.append(float(eval(completion) == 4))  # noqa: S307 - the test's own strings
        except _TimeLimit:
            scores.append(0.0)
    return scores


def test_a_reward_timing_its_work_with_signal_alarm_runs_as_on_trl_s_main_thread():
    """TRL calls rewards on the main thread, where signal handlers work; on a reward thread
    ``signal.signal`` raised "signal only works in main thread", and the error's fix (a TOML
    ``isolation = "process"``) has no spelling for a reward passed to polyrl.trl in Python."""
    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork (the forked child's main thread runs the signals)")
    assert function_reward_plugin(timed_eval_reward).isolation == "process"
    assert scored([timed_eval_reward], ["2 + 2", "2 + 3"], [{"prompt": "p"}] * 2).total.tolist() == [1.0, 0.0]
    assert function_reward_plugin(_scaled).isolation == "thread"  # no signals: stays on the thread


# --- the regressions the old positional call had -----------------------------------------------


def test_completions_with_trainer_state_default_gets_completions_not_prompts():
    def f(completions, trainer_state=None, **kw):
        return [float(c == "the completion") for c in completions]

    np.testing.assert_array_equal(scored([f], ["the completion"], [{"prompt": "the prompt"}]).total, [1.0])


def test_a_column_parameter_is_not_bound_twice():
    def f(completions, answer, **kw):
        return [float(c == a) for c, a in zip(completions, answer)]

    res = scored([f], ["4", "5"], [{"prompt": "p", "answer": "4"}] * 2, columns=["prompt", "answer"])
    np.testing.assert_array_equal(res.total, [1.0, 0.0])


# --- TRL's own reward functions, unchanged -------------------------------------------------------


def test_trl_think_format_reward_on_chat_prompts():
    from trl.rewards import think_format_reward

    rows = [{"prompt": CHAT}] * 2
    res = scored([think_format_reward], ["<think>\nsum\n</think>\n4", "4"], rows, columns=["prompt"])
    np.testing.assert_array_equal(res.total, [1.0, 0.0])


def test_trl_think_format_reward_on_text_prompts_fails_as_in_trl_and_is_named():
    """It indexes completion[0]["content"]: TRL documents it for chat data; a text run is an error."""
    from trl.rewards import think_format_reward

    with pytest.raises(RewardError, match=r"reward 'think_format_reward' from function .* raised TypeError"):
        scored([think_format_reward], ["<think>x</think>4"], [{"prompt": "plain"}])


def test_trl_soft_overlong_punishment_and_repetition_penalty_match_direct_calls():
    from trl.rewards import get_repetition_penalty_reward, get_soft_overlong_punishment

    overlong = get_soft_overlong_punishment(max_completion_len=10, soft_punish_cache=4)
    repetition = get_repetition_penalty_reward(ngram_size=2, max_penalty=-1.0)
    ids = [[1] * 5, [1, 2] * 4, [3] * 12]
    res = scored([overlong, repetition], ["a", "b", "c"], [{"prompt": "p"}] * 3, ids=ids)
    np.testing.assert_allclose(res.per_reward["soft_overlong_punishment_reward"], overlong(ids))
    np.testing.assert_allclose(res.per_reward["repetition_penalty_reward"], repetition(ids))
    assert overlong(ids) == [0.0, -0.5, -1.0]


def test_trl_accuracy_reward_with_math_verify():
    pytest.importorskip("math_verify")
    from trl.rewards import accuracy_reward

    rows = [{"prompt": CHAT, "solution": r"\frac{1}{3}"}] * 2
    res = scored([accuracy_reward], [r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}"], rows,
                 columns=["prompt", "solution"])
    np.testing.assert_array_equal(res.total, [1.0, 0.0])


# --- signatures are checked when the run is configured -----------------------------------------


def _check(fn, columns=("prompt", "answer")):
    plugin = function_reward_plugin(fn)
    RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [(plugin.name, 1.0, {})],
                   columns=list(columns))


@pytest.mark.parametrize(("source", "match"), [
    ("def f(p, c):\n    return []", r"'f'.*parameter 'p', which nothing fills.*called by keyword.*Fix: rename"),
    ("def f(completions, answr, **kw):\n    return []", r"parameter 'answr'.*columns \(answer\).*add a 'answr' column"),
    ("def f(prompts, completions, step):\n    return []", r"parameter 'step'.*Fix: read trainer_state.global_step"),
    ("def f(prompt, completions, **kw):\n    return []", r"parameter 'prompt'.*Fix: name it prompts \(plural\)"),
    ("def f(completions, /, **kw):\n    return []", r"positional-only parameter 'completions' \(before a '/'\), which a keyword.*Fix: remove the '/'"),
])
def test_unbindable_parameters_are_one_clear_error(source, match):
    namespace: dict = {}
    exec(source, namespace)
    with pytest.raises(ConfigError, match=match) as info:
        _check(namespace["f"])
    assert info.value.field == "rewards.function"


def test_defaults_and_var_args_need_nothing():
    def f(completions, *args, scale=2.0, answer=None, **kw):
        return [scale] * len(completions)

    _check(f)


def test_a_column_named_like_a_trl_argument_is_refused():
    with pytest.raises(ConfigError, match=r"column 'trainer_state'.*Fix: rename the 'trainer_state' column"):
        _check(length_reward, columns=["prompt", "trainer_state"])


def test_a_column_named_environments_is_refused_in_a_run_that_passes_environments():
    """With an environment_factory the call gets ``environments=`` (the episodes' instances), which
    replaced a dataset column of that name without a word: a reward reading the column got the
    instances. Refused as the other argument names are; without environments the column is passed."""
    def reads(completions, environments, **kw):
        return [0.0] * len(completions)

    plugin = function_reward_plugin(reads)
    plugin.check_binding(["prompt", "environments"])  # no environment_factory: the column fills it
    plugin.environments = True
    with pytest.raises(ConfigError, match=r"column 'environments'.*Fix: rename the 'environments' column"):
        plugin.check_binding(["prompt", "environments"])


def test_keyword_arguments_arrive_in_trls_order():
    """TRL 1.16 calls ``fn(prompts=, completions=, completion_ids=, **{<columns in dataset order>,
    trainer_state, log_extra, log_metric})``: a reward iterating ``kwargs`` (logging each column with
    log_extra, taking the first column as the answer) saw polyrl's columns before the prompts."""
    orders = []

    def every(**kwargs):
        orders.append(list(kwargs))
        return [0.0] * len(kwargs["completions"])

    rows = [{"prompt": "p", "answer": "1", "id": 0, "completion": "gold"}]
    scored([every], ["x"], rows, columns=["prompt", "answer", "id", "completion"])
    assert orders == [["prompts", "completions", "completion_ids", "answer", "id", "trainer_state", "log_extra",
                       "log_metric"]]


def test_the_old_positional_shape_keeps_working():
    def old(prompts, completions, **columns):
        return [float(p == "q" and c == "a" and columns["answer"][0] == "42") for p, c in zip(prompts, completions)]

    res = scored([old], ["a"], [{"prompt": "q", "answer": "42"}], columns=["prompt", "answer"])
    np.testing.assert_array_equal(res.total, [1.0])


def test_bad_log_metric_is_named():
    def f(completions, log_metric, **kw):
        log_metric("x", "0.5")
        return [1.0]

    with pytest.raises(RewardError, match=r"reward 'f'.*log_metric\('x', '0.5'\).*Fix: pass a metric name \(str\) "
                                          r"and a number"):
        scored([f], ["a"], [{"prompt": "p"}])


def test_log_metric_takes_nan_and_inf_as_trl_does(toy, tmp_path):
    """TRL's log_metric takes NaN (a mean of no score, ``scores.mean()`` over an empty selection)
    and inf; its ``log`` writes a step's NaN metric as None and keeps inf. polyrl raised
    RewardError ("pass ... a finite number") and stopped the run."""
    seen = []

    def accuracy(completions, log_metric, **kwargs):
        log_metric("solved_rate", float("nan"))
        log_metric("worst_ratio", float("inf"))
        log_metric("mixed", 1.0)
        log_metric("mixed", float("nan"))  # one NaN among a step's values: the step's mean is NaN, as TRL's sum
        return [0.0] * len(completions)

    def curriculum(completions, trainer_state, **kwargs):
        last = trainer_state.log_history[-1] if trainer_state.log_history else {}
        seen.append({key: last.get(key, "absent") for key in ("solved_rate", "reward/accuracy/solved_rate",
                                                              "worst_ratio", "mixed")})
        return [0.0] * len(completions)

    _api_run(tmp_path, [accuracy, curriculum], steps=2)
    assert seen[1] == {"solved_rate": None, "reward/accuracy/solved_rate": None, "worst_ratio": math.inf,
                       "mixed": None}
    lines = [json.loads(line) for line in (tmp_path / "api" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["reward/accuracy/solved_rate"] is None  # strict JSON: null


def test_trainer_state_has_transformers_fields():
    """Every field a transformers TrainerState has, so reward code reading one finds it."""
    import dataclasses

    import attrs
    from transformers import TrainerState as HFTrainerState

    ours = {a.name for a in attrs.fields(TrainerState)}
    missing = {f.name for f in dataclasses.fields(HFTrainerState)} - ours
    assert not missing, missing
    # TRL's epoch: 10 rows make 2 whole batches of 4 (its sampler drops the rest), so 5 steps are 2.5
    # epochs (a real GRPOTrainer on 10 prompts, 4 a step, logs 0.5, 1.0, 1.5), as the step lines say
    state = TrainerState.for_run(step=5, max_steps=11, prompts_per_step=4, group_size=2, dataset_size=10, history=[])
    assert math.isclose(state.epoch, 2.5)
    assert state.num_train_epochs == 6  # transformers: ceil(11 updates / 2 per epoch), not ceil(44 rows / 10) = 5


def test_load_error_before_any_model_loads(tmp_path, capsys):
    """A bad signature stops `polyrl train` with one error line while the model path does not even exist."""
    from polyrl.cli import main

    (tmp_path / "r.py").write_text("def score(completion, **kw):\n    return [0.0]\n")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "hi", "answer": "1"}) + "\n")
    config = tmp_path / "run.toml"
    config.write_text(f'[model]\npath = "{tmp_path / "no-model"}"\n[data]\npath = "{data}"\n'
                      f'[[rewards]]\nfunction = "{tmp_path / "r.py"}:score"\n'
                      f'[train]\noutput_dir = "{tmp_path / "out"}"\n')
    assert main(["train", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "parameter 'completion'" in err[0] and "Fix: name it completions" in err[0]


# --- end to end: a short real training run on the tiny model (torch backend) --------------------

DOC_REWARDS = Path(__file__).parent / "trl_doc_rewards.py"

#: (reward function spec, reward name) per prompt format: the chat run includes the shapes that
#: read completion[0]["content"], the text run the ones that read the completion as a string.
E2E_REWARDS = {
    "chat": [f"{DOC_REWARDS}:length_reward", f"{DOC_REWARDS}:format_reward_func",
             "trl.rewards:think_format_reward", f"{DOC_REWARDS}:curriculum", f"{DOC_REWARDS}:async_judge",
             f"{DOC_REWARDS}:overlong"],
    "text": [f"{DOC_REWARDS}:length_reward", f"{DOC_REWARDS}:accuracy_reward_func",
             f"{DOC_REWARDS}:math_reward_func", f"{DOC_REWARDS}:coding_reward_func",
             f"{DOC_REWARDS}:curriculum", f"{DOC_REWARDS}:async_judge", f"{DOC_REWARDS}:overlong"],
}


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_trl_reward_shapes_train_end_to_end(tiny_model_dir, tmp_path, kind):
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    rows = []
    for i in range(4):
        question = f"What is {i} + 2?"
        prompt = [{"role": "user", "content": question}] if kind == "chat" else question
        rows.append({"prompt": prompt, "ground_truth": str(i + 2), "task": "math" if i % 2 else "coding"})
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    specs = E2E_REWARDS[kind]
    config = RunConfig.from_dict({
        "model": {"path": tiny_model_dir}, "data": {"path": str(data)},
        "generation": {"group_size": 2, "max_new_tokens": 8},
        "rewards": [{"function": spec} for spec in specs],
        "train": {"steps": 2, "prompts_per_step": 2, "threads": 1, "output_dir": str(tmp_path / "run")},
    })
    summary = Trainer(config).run(progress=False)
    history = summary["history"]
    assert [m["step"] for m in history] == [1, 2]
    for spec in specs:
        name = spec.rsplit(":", 1)[1]
        assert all(f"reward/{name}/mean" in m for m in history), (name, sorted(history[0]))
    assert [m["reward/curriculum/progress"] for m in history] == [0.0, 0.5]  # global_step / max_steps
    assert all(m["reward/async_judge/mean"] == 0.5 for m in history)
    lengths = [m["reward/length_reward/mean"] for m in history]
    assert all(1.0 <= x <= 8.0 for x in lengths), lengths
    if kind == "text":  # one task per row: each multi-task function skips the other task's samples
        for m in history:  # 2 prompts x 2 samples, each of one task
            assert m["reward/math_reward_func/none_count"] + m["reward/coding_reward_func/none_count"] == 4
    else:  # a random tiny model does not write <think>...</think>: TRL's function scores 0, not an error
        assert all(m["reward/think_format_reward/mean"] == 0.0 for m in history)


# --- README "Coming from TRL": the same reward file through polyrl and through TRL ----------------

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "coming_from_trl"


def test_coming_from_trl_config_trains_with_the_reward_file(tiny_model_dir, tmp_path, monkeypatch):
    """examples/coming_from_trl/run.toml as written, on the tiny model and for 2 short steps."""
    import tomllib

    from polyrl.cli import main

    config = tomllib.loads((EXAMPLE / "run.toml").read_text())
    assert config["data"]["path"].endswith(".parquet")  # the example trains from a local Parquet file
    trl = pytest.importorskip("trl")  # the same run: TRL's default lr schedule (it was constant here)
    assert config["optimizer"]["schedule"] == trl.GRPOConfig(output_dir=str(tmp_path / "t"), use_cpu=True).lr_scheduler_type.value
    config["model"]["path"] = tiny_model_dir
    config["generation"].update(group_size=2, max_new_tokens=8)
    config["train"].update(steps=2, prompts_per_step=2, threads=1, output_dir=str(tmp_path / "run"))
    lines = []
    for section in ("model", "generation", "algorithm", "optimizer", "data", "train"):
        lines += [f"[{section}]"] + [f"{k} = {json.dumps(v)}" for k, v in config[section].items()]
    for reward in config["rewards"]:
        lines += ["[[rewards]]"] + [f"{k} = {json.dumps(v)}" for k, v in reward.items()]
    (tmp_path / "run.toml").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(EXAMPLE.parents[1])  # the paths in run.toml are relative to the repository root
    assert main(["train", str(tmp_path / "run.toml"), "--no-progress"]) == 0
    history = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 2
    for m in history:
        assert 0.0 <= m["reward/correct_answer/mean"] <= 1.0 and m["reward/brevity/mean"] == 0.0  # 8 <= 16 tokens


def test_coming_from_trl_script_runs_the_same_reward_file_in_trl(tiny_model_dir, tmp_path, monkeypatch):
    """examples/coming_from_trl/train_trl.py in TRL's GRPOTrainer, shrunk to one step on the tiny model."""
    source = (EXAMPLE / "train_trl.py").read_text()
    for old, new in [('"HuggingFaceTB/SmolLM2-135M-Instruct"', repr(tiny_model_dir)), ("max_steps=20", "max_steps=1"),
                     ("per_device_train_batch_size=16", "per_device_train_batch_size=8"),
                     ("max_completion_length=32", "max_completion_length=8"),
                     ('output_dir="runs/trl"', f"output_dir={str(tmp_path / 'trl')!r}, report_to=[]")]:
        assert old in source, old
        source = source.replace(old, new)
    monkeypatch.chdir(EXAMPLE)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "rewards", raising=False)  # the script's `from rewards import ...`
    namespace: dict = {"__name__": "train_trl"}
    try:
        exec(compile(source, str(EXAMPLE / "train_trl.py"), "exec"), namespace)
    finally:
        sys.modules.pop("rewards", None)
    logged = namespace["trainer"].state.log_history[0]
    assert 0.0 <= logged["rewards/correct_answer/mean"] <= 1.0 and logged["rewards/brevity/mean"] == 0.0


def test_options_on_a_function_reward_are_refused_not_ignored():
    plugin = function_reward_plugin(length_reward)
    with pytest.raises(ConfigError, match=r"rewards\[0\].options.*'length_reward' was given options \(scale\)"):
        RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False),
                       [(plugin.name, 1.0, {"scale": 2})], columns=["prompt"])


# --- what TRL 1.16 accepts that polyrl used to refuse or misread ---------------------------------


def test_log_metric_takes_what_trl_s_log_metric_takes():
    """TRL sums the values and builds a torch tensor: a 0-d tensor or array and a bool are fine there."""
    torch = pytest.importorskip("torch")

    def metered(completions, log_metric, **kwargs):
        scores = torch.tensor([1.0, 0.0])
        log_metric("mean_score", scores.mean())  # a 0-d tensor, the usual way to get a mean in torch
        log_metric("numpy_mean", np.array([0.25, 0.75]).mean(keepdims=True)[0, ...])  # a 0-d array
        log_metric("any_solved", bool(scores.max() > 0))
        return scores

    res = scored([metered], ["a", "b"], [{"prompt": "p"}] * 2)
    metrics = res.metrics["metered"]
    assert (metrics["mean_score"], metrics["numpy_mean"], metrics["any_solved"]) == (0.5, 0.5, 1.0)


def _trl_scores(returned):
    """The scores TRL 1.16's ``_calculate_rewards`` makes of what a reward function returned
    (its own two lines: None to NaN, then ``torch.tensor(..., dtype=float32)`` into one column)."""
    torch = pytest.importorskip("torch")
    column = torch.zeros(len(returned))
    column[:] = torch.tensor([r if r is not None else torch.nan for r in returned], dtype=torch.float32)
    return column.tolist()


def _one_element_tensors():
    torch = pytest.importorskip("torch")
    return [torch.tensor([0.5]), torch.tensor([[2.0]])]  # a reward model's logits[i], shape [1]


def _logits_column():
    torch = pytest.importorskip("torch")
    return torch.tensor([[0.5], [2.0]])  # reward_model(**inputs).logits returned as is, shape (n, 1)


def _exact_numbers():
    from decimal import Decimal
    from fractions import Fraction

    return [Fraction(1, 2), Decimal("2")]


def _sympy_numbers():
    sympy = pytest.importorskip("sympy")
    return [sympy.Rational(1, 2), sympy.Integer(2)]  # what a sympy-based checker computes


@pytest.mark.parametrize("make", [_one_element_tensors, _logits_column, _exact_numbers, _sympy_numbers],
                         ids=["one-element-tensors", "logits-column", "fraction-decimal", "sympy"])
def test_scores_torch_reads_as_numbers_train_as_in_trl(make):
    """Everything TRL's ``torch.tensor(scores, dtype=float32)`` reads as numbers is those numbers
    here: these were refused as "not a number", stopping a run that trains under TRL."""
    def scorer(completions, **kwargs):
        return make()

    res = scored([scorer], ["a", "b"], [{"prompt": "p"}] * 2)
    assert res.total.tolist() == _trl_scores(list(make())) == [0.5, 2.0]


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_log_extra_values_json_cannot_hold_are_logged_as_on_a_thread(isolation):
    """A math-verify reward (run in a forked child by default) that logs math-verify's parsed
    answers as they are, sympy objects, as TRL's completions table takes them: the child's answer
    could not be sent back, so the reward failed there while the same reward ran on a thread."""
    math_verify = pytest.importorskip("math_verify")

    def parsed_accuracy(completions, solution, log_extra, **kwargs):
        gold = [math_verify.parse(f"${s}$", parsing_timeout=None) for s in solution]  # None: also on a thread
        answers = [math_verify.parse(c, parsing_timeout=None) for c in completions]
        log_extra("answer_parsed", answers)
        return [float(math_verify.verify(g, a, timeout_seconds=None)) for g, a in zip(gold, answers)]

    plugin = function_reward_plugin(parsed_accuracy, isolation=isolation)
    computer = RewardComputer(get_plugin_manager(extra=[plugin], entry_points=False), [(plugin.name, 1.0, {})],
                              columns=["prompt", "solution"])
    comps = [Completion(0, [1], [7], [0.0], text=t) for t in ("$\\frac{1}{2}$", "$3$")]
    rows = [{"prompt": "p", "solution": "\\frac{1}{2}"}] * 2
    res = computer(["p", "p"], comps, RewardContext(rows=rows, wanted=(plugin.name,)))
    assert res.total.tolist() == [1.0, 0.0]
    from polyrl.tracking.completions import sample_records

    logged = [r["extra"]["answer_parsed"] for r in sample_records(
        1, ["p", "p"], comps, res.per_reward, res.total, [0.0, 0.0], 2, 0, extra=res.extra)]
    assert logged == [[x if isinstance(x, str) else repr(x)  # sympy's repr, as the table shows any object
                       for x in math_verify.parse(c.text, parsing_timeout=None)] for c in comps]
    assert logged[0][0] == "1/2"  # sympy.Rational(1, 2)


def _api_run(tmp_path, rewards, prompts=None, **config):
    """polyrl.api.run on the toy backend, one step of 2 prompts x 2 samples."""
    from polyrl import api

    return api.run(
        api.grpo, policy=api.Agent("toy-model", backend="toy"), rewards=rewards,
        prompts=prompts if prompts is not None else [f"p{i}" for i in range(2)],
        generation_config=api.GenerationConfig(max_new_tokens=4, group_size=2),
        grpo_config=api.GRPOConfig(**{"steps": 1, "prompts_per_step": 2, "output_dir": str(tmp_path / "api"),
                                      **config}),
        progress=False)


class HalfScorer:
    """A callable object reward (TRL names it after its class)."""

    def __call__(self, completions, **kwargs):
        return [0.5] * len(completions)


def _scaled(completions, scale, **kwargs):
    return [scale] * len(completions)


def test_api_names_partials_and_callable_objects_as_trl_names_them(toy, tmp_path):
    from trl.trainer.utils import get_callable_name

    rewards = [functools.partial(_scaled, scale=1.0), HalfScorer()]
    history = _api_run(tmp_path, rewards)["history"]
    assert [get_callable_name(r) for r in rewards] == ["_scaled", "HalfScorer"]
    assert history[0]["reward/_scaled/mean"] == 1.0 and history[0]["reward/HalfScorer/mean"] == 0.5


class GroupedScorer:
    """A callable object with a ``__name__`` holding a "/", which TRL logs as it is."""

    __name__ = "math/accuracy"

    def __call__(self, completions, **kwargs):
        return [0.75] * len(completions)


def test_a_reward_name_with_a_slash_keeps_trl_s_key_in_log_history(toy, tmp_path):
    """TRL logs ``rewards/math/accuracy/mean``; polyrl labelled the reward ``math/accuracy``, so its
    own keys were split at the wrong "/" and TRL's key was missing from log_history, with no word."""
    from trl.trainer.utils import get_callable_name

    reward = GroupedScorer()
    history = _api_run(tmp_path, [reward])["history"]
    assert get_callable_name(reward) == "math/accuracy"
    assert history[0]["rewards/math/accuracy/mean"] == 0.75 and history[0]["rewards/math/accuracy/std"] == 0.0
    assert history[0]["reward/math_accuracy/mean"] == 0.75  # polyrl's own key, one "/"-free label


def test_trainer_state_is_one_object_moving_on_as_trl_s(toy, tmp_path):
    """TRL passes every call its trainer's own ``TrainerState``: a reward keeping it (or its
    ``log_history``) sees the run advance. polyrl made a fresh object per call, so a kept state
    stayed at its step."""
    kept: list = []

    def keeper(completions, trainer_state, **kwargs):
        kept.append((trainer_state, trainer_state.global_step, trainer_state.log_history))
        return [0.5] * len(completions)

    _api_run(tmp_path, [keeper], steps=3)
    first = kept[0][0]
    assert [state is first for state, *_ in kept] == [True, True, True]
    assert [step for _, step, _ in kept] == [0, 1, 2] and first.global_step == 2
    assert kept[0][2] is first.log_history and len(first.log_history) == 2  # the list a reward kept grows too


def test_trainer_state_epoch_is_transformers_int_0_before_the_first_update(toy, tmp_path):
    """transformers' ``TrainerState.epoch`` starts as the int 0 and becomes a float with the first
    update, so TRL's first reward call sees ``0`` (a reward formatting it, ``f"{epoch}"``, writes
    "0"); polyrl passed ``0.0``."""
    epochs: list = []

    def watch(completions, trainer_state, **kwargs):
        epochs.append(trainer_state.epoch)
        return [0.5] * len(completions)

    _api_run(tmp_path, [watch], steps=2)
    assert [(type(e), e) for e in epochs] == [(int, 0), (float, 1.0)]


def test_a_name_given_twice_logs_under_trl_s_one_name(toy, tmp_path):
    """TRL names two partials of one function alike (``get_callable_name``) and logs
    ``rewards/<name>/mean`` as the mean of both; polyrl's labels must differ (``_scaled``,
    ``_scaled_2``) and TRL's keys were logged under them, ``rewards/_scaled_2/mean`` a key TRL never
    writes and ``rewards/_scaled/mean`` the first one's alone."""
    seen = []

    def curriculum(completions, trainer_state, **kwargs):
        last = trainer_state.log_history[-1] if trainer_state.log_history else {}
        seen.append({k: v for k, v in last.items() if k.startswith("rewards/")})
        return [0.0] * len(completions)

    rewards = [functools.partial(_scaled, scale=1.0), functools.partial(_scaled, scale=0.0), curriculum]
    history = _api_run(tmp_path, rewards, steps=2)["history"]
    assert history[0]["reward/_scaled/mean"] == 1.0 and history[0]["reward/_scaled_2/mean"] == 0.0  # polyrl's own
    trl_keys = {k: v for k, v in history[0].items() if k.startswith("rewards/")}
    assert trl_keys == {"rewards/_scaled/mean": 0.5, "rewards/_scaled/std": 0.0, "rewards/curriculum/mean": 0.0,
                        "rewards/curriculum/std": 0.0}
    assert seen == [{}, trl_keys]


def test_api_takes_one_reward_and_trl_s_reward_weights(toy, tmp_path):
    """GRPOTrainer takes reward_funcs=fn as well as a list, and GRPOConfig(reward_weights=[...])."""
    one = _api_run(tmp_path / "one", HalfScorer())["history"][0]
    assert one["reward_mean"] == 0.5
    rewards = [functools.partial(_scaled, scale=1.0), HalfScorer()]
    weighted = _api_run(tmp_path / "two", rewards, reward_weights=[1.0, 2.0])["history"][0]
    assert weighted["reward_mean"] == 1.0 * 1.0 + 2.0 * 0.5
    with pytest.raises(ConfigError, match=r"grpo_config.reward_weights: reward_weights has 1 weights for 2 "
                                          r"rewards.*Fix: give 2 weights") as info:
        _api_run(tmp_path / "bad", rewards, reward_weights=[1.0])
    assert info.value.field == "grpo_config.reward_weights"
    with pytest.raises(ConfigError, match=r"grpo_config.reward_weights: every reward weight is 0.*Fix:"):
        _api_run(tmp_path / "zero", rewards, reward_weights=[0, 0.0])


def test_log_history_has_trl_s_metric_names(toy, tmp_path):
    """A curriculum written for TRL reads the last logged mean reward as log_history[-1]["reward"]."""
    seen = []

    def curriculum(completions, trainer_state, **kwargs):
        last = trainer_state.log_history[-1] if trainer_state.log_history else {}
        seen.append((trainer_state.global_step, last.get("reward"), last.get("rewards/curriculum/mean")))
        return [0.25 * (1 + trainer_state.global_step)] * len(completions)

    _api_run(tmp_path, [curriculum], steps=2)
    assert seen == [(0, None, None), (1, 0.25, 0.25)]


def test_log_history_has_log_metric_values_under_their_own_names(toy, tmp_path):
    """TRL logs ``log_metric("format_rate", x)`` as ``format_rate``: a curriculum reading
    ``log_history[-1]["format_rate"]`` finds it (polyrl's ``reward/<function>/format_rate`` too)."""
    seen = []

    def fmt(completions, log_metric, **kwargs):
        log_metric("format_rate", 0.75)
        return [0.0] * len(completions)

    def curriculum(completions, trainer_state, **kwargs):
        last = trainer_state.log_history[-1] if trainer_state.log_history else {}
        seen.append((last.get("format_rate"), last.get("reward/fmt/format_rate"), "reward/fmt/mean" in last,
                     "mean" in last, "none_count" in last))
        return [0.0] * len(completions)

    _api_run(tmp_path, [fmt, curriculum], steps=2)
    assert seen == [(None, None, False, False, False), (0.75, 0.75, True, False, False)]  # not polyrl's own stats


def test_a_log_metric_name_two_rewards_log_is_trls_mean_of_all_their_values(toy, tmp_path):
    """TRL 1.16 keeps one list per ``log_metric`` name for the whole step (``_pending_metrics``),
    whichever reward logged into it, and logs its sum over its count: ``acc`` logged once as 1.0 by
    one reward and three times as 0.0 by another is 0.25. polyrl's ``log_history`` held the first
    reward's mean (1.0) under ``acc``; each reward's own ``reward/<function>/acc`` stays its own."""
    seen = []

    def solved(completions, log_metric, **kwargs):
        log_metric("acc", 1.0)
        return [1.0] * len(completions)

    def judged(completions, log_metric, **kwargs):
        for _ in range(3):
            log_metric("acc", 0.0)
        return [0.0] * len(completions)

    def curriculum(completions, trainer_state, **kwargs):
        last = trainer_state.log_history[-1] if trainer_state.log_history else {}
        seen.append((last.get("acc"), last.get("reward/solved/acc"), last.get("reward/judged/acc")))
        return [0.0] * len(completions)

    _api_run(tmp_path, [solved, judged, curriculum], steps=2)
    assert seen == [(None, None, None), (0.25, 1.0, 0.0)]


def test_api_a_dataset_without_a_prompt_column_says_how_to_fix_it_in_python(toy, tmp_path):
    """``data.prompt_column`` is a TOML key ``run`` has no argument for: the fix names the 🤗
    Dataset's rename (and, for a messages column, what to keep as the prompt)."""
    import datasets

    chats = datasets.Dataset.from_list([{"messages": [{"role": "user", "content": "hi"},
                                                      {"role": "assistant", "content": "hello"}]}] * 2)
    with pytest.raises(ConfigError, match=r"no column 'prompt'.*Fix: name the column that holds the prompts "
                                          r"\"prompt\".*rename_column.*messages column holds whole conversations") as info:
        _api_run(tmp_path, [HalfScorer()], prompts=chats)
    assert info.value.field == "prompts" and "data.prompt_column" not in str(info.value)


@pytest.mark.parametrize("kind", ["dataset_dict", "string"])
def test_api_prompts_that_would_iterate_as_other_prompts_are_refused(toy, tmp_path, kind):
    """load_dataset(...) without split= is a DatasetDict, which iterates as its split names: it
    would train on the prompt "train"; a lone string would train on its characters."""
    import datasets

    data = datasets.Dataset.from_list([{"prompt": "What is 1 + 1?", "answer": "2"}] * 2)
    prompts = datasets.DatasetDict(train=data) if kind == "dataset_dict" else "What is 1 + 1?"
    fix = r"pass one split, e.g. prompts=dataset\['train'\]" if kind == "dataset_dict" else "pass a list of prompts"
    with pytest.raises(ConfigError, match=fix) as info:
        _api_run(tmp_path, [HalfScorer()], prompts=prompts)
    assert info.value.field == "prompts"


@pytest.mark.parametrize(("path", "builder"), [("data/train.parquet", "parquet"), ("rows.CSV", "csv"),
                                               ("data.jsonl", "json")])
def test_api_a_data_files_path_as_prompts_gives_the_call_that_reads_it(path, builder):
    """It was "one string, which would be read as one prompt per character", fix "pass a list of prompts"."""
    from polyrl.api import prompt_rows

    with pytest.raises(ConfigError, match=rf"prompts is the path of a data file \('{path}'\)") as info:
        prompt_rows(path)
    assert f'prompts=datasets.load_dataset("{builder}", data_files={path!r}, split="train")' in info.value.fix
    with pytest.raises(ConfigError, match="prompts is one string"):  # a prompt is still named as one
        prompt_rows("What is 2 + 3?")


def test_api_one_row_as_prompts_is_refused_as_one_row():
    """It was "a dict of splits ('prompt', 'answer')" with the fix ``prompts=dataset['prompt']``."""
    from polyrl.api import prompt_rows

    for row in ({"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": [{"role": "user", "content": "Hi"}]}):
        with pytest.raises(ConfigError, match=r"prompts is one row \(a dict with the columns 'prompt'") as info:
            prompt_rows(row)
        assert info.value.fix.startswith("wrap it in a list: prompts=[{'prompt': ...")


def test_api_a_dict_of_columns_is_refused_as_columns_with_a_fix_keeping_them(toy, tmp_path):
    """``dataset[:2]`` is ``{column: [values]}``: it was "a dict of splits" with the fix
    ``prompts=dataset['prompt']``, which drops the answer column the rewards read."""
    import datasets

    columns = datasets.Dataset.from_list([{"prompt": "What is 1 + 1?", "answer": "2"}] * 2)[:2]
    with pytest.raises(ConfigError, match=r"prompts is a dict of columns \('prompt', 'answer'; 2 values each\)") \
            as info:
        _api_run(tmp_path, [HalfScorer()], prompts=columns)
    assert info.value.field == "prompts" and "prompts=datasets.Dataset.from_dict" in info.value.fix



def _endless_stream(read: list[int]):
    """A 🤗 IterableDataset that never ends, as ``load_dataset(..., streaming=True)`` over a large
    source is in effect; past 1000 rows it raises, so code reading it whole fails instead of hanging."""
    import datasets

    def rows():
        i = 0
        while True:
            if i >= 1000:
                raise RuntimeError("read the stream past 1000 rows: it never ends")
            read.append(i)
            yield {"prompt": f"What is {i} + 1?", "answer": str(i + 1)}
            i += 1

    return datasets.IterableDataset.from_generator(rows)


@pytest.mark.parametrize("argument", ["prompts", "eval_prompts"])
def test_api_an_iterable_dataset_is_one_error_not_a_run_that_never_starts(toy, tmp_path, argument):
    """polyrl.api.run reads its prompts whole: an IterableDataset was iterated to its end, so an
    endless one hung the run before it started, with nothing said. It is refused, as
    polyrl.trl.GRPOTrainer refuses one under polyrl's own GRPOConfig, naming TRL's streaming route."""
    from polyrl import api

    read: list[int] = []
    given = {"prompts": _endless_stream(read), "eval_prompts": None} if argument == "prompts" else \
        {"prompts": [f"p{i}" for i in range(2)], "eval_prompts": _endless_stream(read)}
    with pytest.raises(ConfigError, match=rf"{argument} is an IterableDataset, which may never end") as info:
        api.run(api.grpo, policy=api.Agent("toy-model", backend="toy"), rewards=[HalfScorer()], progress=False,
                generation_config=api.GenerationConfig(max_new_tokens=4, group_size=2),
                grpo_config=api.GRPOConfig(steps=1, prompts_per_step=2, output_dir=str(tmp_path / "api")), **given)
    assert info.value.field == argument and "stream.take(N)" in info.value.fix and "max_steps" in info.value.fix
    assert "\n" not in str(info.value) and len(read) <= 1  # refused before reading its rows

def _formatted(kind):
    import datasets

    rows = [{"prompt": f"What is {i} + 1?", "flag": i % 2 == 0, "x": i + 0.5} for i in range(2)]
    return datasets.Dataset.from_list(rows).with_format(kind)


@pytest.mark.parametrize(("kind", "types"), [("numpy", (np.bool_, np.float32)), ("pandas", (np.bool_, np.float64))])
def test_api_a_formatted_dataset_reaches_the_rewards_as_trls_dataloader_fetches_it(toy, tmp_path, kind, types):
    """TRL's DataLoader fetches rows with ``Dataset.__getitems__``; polyrl iterated the dataset, which
    under with_format("numpy") gave a bool column as a 0-d ndarray and a float as float64 (TRL passes
    np.bool_ and float32), and under with_format("pandas") a one-row DataFrame per row, read as the
    prompt: a multi-line error where TRL trains."""
    seen = []

    def spy(prompts, completions, flag, x, **kwargs):
        seen.extend((str(p), type(f), type(v)) for p, f, v in zip(prompts, flag, x))
        return [0.0] * len(completions)

    _api_run(tmp_path, [spy], prompts=_formatted(kind))
    assert {p for p, _, _ in seen} == {"What is 0 + 1?", "What is 1 + 1?"}
    assert {(f, v) for _, f, v in seen} == {types}


def test_api_a_dataset_formatted_as_arrow_is_one_error(toy, tmp_path):
    """Rows of an "arrow"-formatted dataset are pyarrow Tables (TRL's DataLoader fails on them):
    one line naming the format and with_format(None), not a Table printed over lines as the prompt."""
    with pytest.raises(ConfigError, match=r"formatted as 'arrow'.*Fix: pass dataset.with_format\(None\)") as info:
        _api_run(tmp_path, [HalfScorer()], prompts=_formatted("arrow"))
    assert info.value.field == "prompts" and "\n" not in str(info.value)


def test_api_a_pandas_data_frame_is_read_as_its_rows_not_its_column_names(toy, tmp_path):
    """A DataFrame iterates as its column names: the run trained on the prompts "prompt" and
    "answer". Its rows are read as datasets.Dataset.from_pandas gives them (the index is not a column)."""
    import pandas as pd

    frame = pd.DataFrame({"prompt": ["What is 1 + 1?", "skip", "What is 2 + 2?"], "answer": ["2", "-", "4"],
                          "n": [1, 0, 3]})
    frame = frame[frame["n"] > 0]  # a filtered frame: its index is 0, 2
    seen = []

    def spy(prompts, completions, answer, n, **kwargs):
        seen.extend(zip(prompts, answer, n))
        return [0.0] * len(completions)

    _api_run(tmp_path, [spy], prompts=frame)
    assert sorted(set(seen)) == [("What is 1 + 1?", "2", 1), ("What is 2 + 2?", "4", 3)], seen
    assert all(type(n) is int for _, _, n in seen)  # Python values, as 🤗 datasets passes them to TRL


def test_api_another_librarys_data_frame_is_one_error():
    from polyrl.api import prompt_rows

    DataFrame = type("DataFrame", (), {"__module__": "polars.dataframe.frame", "__iter__": lambda self: iter(["a"])})
    with pytest.raises(ConfigError, match="polars DataFrame, which iterates as its columns") as info:
        prompt_rows(DataFrame())
    assert info.value.field == "prompts" and "Fix:" in str(info.value)


def test_api_a_dataset_and_a_reward_model_folder_train_as_in_trl(tiny_model_dir, tmp_path):
    """TRL's GRPOTrainer(reward_funcs=["path/to/rm", fn], train_dataset=Dataset): the folder is a
    reward model (polyrl's reward_model), the Dataset's rows are the prompts and columns."""
    import datasets

    from polyrl import api
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    rm = build_tiny_reward_model(tmp_path / "tiny-rm")
    seen = []

    def answer_seen(completions, answer, **kwargs):
        seen.extend(answer)
        return [0.0] * len(completions)

    data = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
                                        "answer": str(i + 1)} for i in range(2)])
    summary = api.run(api.grpo, policy=api.Agent(tiny_model_dir), prompts=data, rewards=[rm, answer_seen],
                      generation_config=api.GenerationConfig(max_new_tokens=4, group_size=2),
                      grpo_config=api.GRPOConfig(steps=1, prompts_per_step=2, threads=1,
                                                 output_dir=str(tmp_path / "run")), progress=False)
    first = summary["history"][0]
    assert math.isfinite(first["reward/reward_model/mean"]) and first["reward/answer_seen/mean"] == 0.0
    assert sorted(seen) == ["1", "1", "2", "2"]


def test_api_a_model_object_or_hub_id_as_reward_is_one_clear_error(tiny_model_dir, tmp_path):
    """TRL loads a Hub id or takes a PreTrainedModel as a reward model; polyrl reads a folder, and
    says so before any model loads instead of calling the model as a reward function."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for reward, fix in [(model, r"save it and its tokenizer with save_pretrained\(DIR\) and pass DIR"),
                        ("my-org/my-reward-model", r"download the model to a folder")]:
        with pytest.raises(ConfigError, match=fix) as info:
            _api_run(tmp_path, [HalfScorer(), reward])
        assert info.value.field == "rewards[1]"


#: An environment as TRL 1.16's GRPOTrainer(environment_factory=...) documentation writes one.
TRL_ENVIRONMENT = '''
class CounterEnv:
    def __init__(self):
        self.count = 0

    def reset(self, **kwargs):
        self.count = 0
        return None

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: How much to add.
        """
        self.count += step
        return self.count

    def get_reward(self):
        return float(self.count == 3)
'''


def test_a_trl_environment_class_is_one_clear_error(tmp_path):
    """polyrl would call TRL's environment class with its options dict and then find no step."""
    from polyrl.agents.loading import resolve_environment
    from polyrl.registry import Registry

    (tmp_path / "env.py").write_text(TRL_ENVIRONMENT)
    with pytest.raises(ConfigError, match=r"class CounterEnv with reset but no step: TRL's environment_factory "
                                          r"shape.*Fix: point at a factory create\(options\)") as info:
        resolve_environment(f"{tmp_path / 'env.py'}:CounterEnv", Registry())
    assert info.value.field == "environment.name"


def test_a_misspelt_trl_reward_lists_trls_own_reward_functions():
    """``trl.rewards`` is a lazy module (its exports are not in ``vars`` until imported): the
    did-you-mean list comes from ``dir``, so it names ``accuracy_reward`` instead of nothing."""
    pytest.importorskip("trl")
    from polyrl.rewards.functions import load_function_reward

    with pytest.raises(ConfigError) as info:
        load_function_reward("trl.rewards:acuracy_reward")
    assert info.value.field == "rewards.function"
    assert "accuracy_reward" in info.value.fix and "think_format_reward" in info.value.fix


# --- what TRL's rows carry: every column on every call, the live state in evaluation too ----------


def _toy_run(tmp_path, rows, reward_source, **sections):
    """A toy-backend Trainer run on ``rows`` (written as JSONL) scored by ``reward_source``'s ``seen``."""
    from polyrl.config import RunConfig
    from polyrl.trainer import Trainer

    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(reward_source)
    config = RunConfig.from_dict({
        "model": {"path": "toy-model"}, "backends": {"train": "toy"},
        "generation": {"group_size": 2, "max_new_tokens": 4}, "data": {"path": str(tmp_path / "data.jsonl")},
        "rewards": [{"function": f"{tmp_path / 'rewards.py'}:seen"}],
        "train": {"steps": 3, "prompts_per_step": 1, "output_dir": str(tmp_path / "run")}, **sections,
    })
    return Trainer(config).run(progress=False)


def test_a_column_some_jsonl_lines_lack_reaches_every_call_as_none(toy, tmp_path):
    """A key written on some lines only: 🤗 datasets (so TRL) gives every row the column, None where
    the line lacks it. Every call gets it, also for a batch none of whose rows has it (polyrl passed
    only the batch's own keys: the run stopped with a TypeError at whichever step drew such a batch)."""
    import datasets

    rows = [{"prompt": "p0", "hint": "h0"}] + [{"prompt": f"p{i}"} for i in range(1, 4)]
    log = tmp_path / "seen.jsonl"
    _toy_run(tmp_path, rows, "import json\n"
                             "def seen(completions, hint, prompts, **kwargs):\n"
                             f"    with open({str(log)!r}, 'a') as f:\n"
                             "        f.write(json.dumps([prompts, hint]) + '\\n')\n"
                             "    return [0.0] * len(completions)\n")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 3
    (tmp_path / "trl").mkdir()
    trl_rows = {r["prompt"]: r["hint"] for r in datasets.load_dataset(
        "json", data_files=str(tmp_path / "data.jsonl"), split="train", cache_dir=str(tmp_path / "trl"))}
    assert trl_rows == {"p0": "h0", "p1": None, "p2": None, "p3": None}
    for prompts, hints in calls:
        assert hints == [trl_rows[p] for p in prompts]
    assert any(set(hints) == {None} for _, hints in calls)  # a batch without the column was scored


def test_a_jsonl_column_of_ints_and_floats_reaches_the_reward_as_datasets_types_it(toy, tmp_path):
    """5 and 5.5 in one JSONL column: 🤗 datasets (so TRL) gives the reward 5.0 for the first line;
    polyrl gave int 5, so a TRL reward doing ``str(answer) == ...`` scored that row differently."""
    import datasets

    rows = [{"prompt": "p0", "answer": 5}, {"prompt": "p1", "answer": 5.5}, {"prompt": "p2", "answer": 7}]
    log = tmp_path / "seen.jsonl"
    _toy_run(tmp_path, rows, "import json\n"
                             "def seen(completions, answer, prompts, **kwargs):\n"
                             f"    with open({str(log)!r}, 'a') as f:\n"
                             "        f.write(json.dumps([prompts, [repr(a) for a in answer]]) + '\\n')\n"
                             "    return [float(str(a) == '5.0') for a in answer]\n")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    (tmp_path / "trl").mkdir()
    trl_answers = {r["prompt"]: repr(r["answer"]) for r in datasets.load_dataset(
        "json", data_files=str(tmp_path / "data.jsonl"), split="train", cache_dir=str(tmp_path / "trl"))}
    assert trl_answers == {"p0": "5.0", "p1": "5.5", "p2": "7.0"}
    assert {p for prompts, _ in calls for p in prompts} == {"p0", "p1", "p2"}
    for prompts, answers in calls:
        assert answers == [trl_answers[p] for p in prompts]


def test_evaluation_rewards_get_the_live_trainer_state(toy, tmp_path):
    """TRL passes ``self.state`` to the rewards in evaluation as in training: a reward ramping with
    ``global_step / max_steps`` (README's ``brevity``) evaluates at the step reached, not at 0."""
    log = tmp_path / "seen.jsonl"
    rows = [{"prompt": f"p{i}", "answer": str(i)} for i in range(6)]
    summary = _toy_run(tmp_path, rows, "import json\n"
                                       "def seen(completions, trainer_state, **kwargs):\n"
                                       f"    with open({str(log)!r}, 'a') as f:\n"
                                       "        f.write(json.dumps([len(completions), trainer_state.global_step,\n"
                                       "                            trainer_state.max_steps]) + '\\n')\n"
                                       "    return [trainer_state.global_step / trainer_state.max_steps] * len(completions)\n",
                       eval={"count": 3, "every": 1, "reward": "seen", "pass_threshold": 0.0})
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    evaluations = [step for n, step, _ in calls if n == 3]  # 3 held-out prompts, one greedy sample each
    trained = [step for n, step, _ in calls if n == 2]  # 1 prompt x 2 samples
    assert trained == [0, 1, 2] and evaluations[0] == 0 and evaluations[1:4] == [1, 2, 3], calls
    assert {most for _, _, most in calls} == {3}
    assert summary["history"][-1]["step"] == 3


def test_environments_reach_a_reward_function_only_in_a_run_with_an_environment_factory():
    """TRL passes environments= (each completion's live instance, in order) only with an
    environment_factory: a function asking for it elsewhere is refused at load, naming the fix."""
    from types import SimpleNamespace

    def judged(completions, environments, **kwargs):
        return [e.score for e in environments]

    plugin = function_reward_plugin(judged)
    with pytest.raises(ConfigError, match="environment_factory"):
        plugin.check_binding([])
    plugin.environments = True  # what polyrl.trl sets in a run with an environment_factory
    plugin.check_binding([])
    envs = [SimpleNamespace(score=1.0), SimpleNamespace(score=0.5)]
    completions = [Completion(prompt_index=0, prompt_ids=[1], completion_ids=[2], logprobs=[0.0], text="a",
                              environment=e) for e in envs]
    out = plugin.reward(["p", "p"], completions, RewardContext(rows=[{}, {}], wanted=("judged",)))
    assert out == {"judged": [1.0, 0.5]}


def test_log_metric_over_ranks_is_trls_mean_of_every_value():
    """TRL 1.16's ``_calculate_rewards`` flushes a ``log_metric`` name as the sum of every
    process's values over their number (each process gathers ``[sum(values), len(values)]``): a
    rank that logged it more often weighs more, whatever its samples. polyrl took each rank's mean
    and weighted the ranks by their samples, so two ranks of two samples logging [4, 5] and [2]
    gave 3.25 where TRL logs 11 / 3."""
    from polyrl import step_gather

    def solved_length(completions, log_metric, **kwargs):
        for c in completions:  # one value per solved completion: the calls depend on the data
            if c.startswith("ok"):
                log_metric("solved_length", float(len(c)))
        return [float(c.startswith("ok")) for c in completions]

    ranks = [["okay", "ok!!!"], ["ok", "no"]]  # each rank's completions, as a launcher splits them
    shards = []
    for texts in ranks:
        rows = [{"prompt": "p"}] * len(texts)
        res = scored([solved_length], texts, rows)
        completions = [Completion(0, [1], [7] * len(t), [0.0] * len(t), text=t) for t in texts]
        # what the trainer packs for the step's gather (Trainer._step)
        shards.append(step_gather.Shard.of(completions, per_reward=res.per_reward, reward_metrics=res.metrics,
                                           metric_counts=res.metric_counts))
    # TRL's flush over the processes' [sum, len] of the values each logged
    logged = [[4.0, 5.0], [2.0]]
    total, count = (sum(x) for x in zip(*[(sum(v), len(v)) for v in logged]))
    joined = step_gather.join(shards).reward_metrics["solved_length"]
    assert joined["solved_length"] == pytest.approx(total / count)
    assert joined["mean"] == 0.75  # the reward's own mean stays over the samples
    one = step_gather.join(shards[:1]).reward_metrics["solved_length"]["solved_length"]
    assert one == 4.5  # one process: the mean of its values, as before


def test_log_metric_values_summing_past_float64_print_no_raw_numpy_warning():
    """Two ``log_metric`` values of 1e308 in one call sum past float64's largest: their mean is inf, as
    TRL's ``sum(values) / len(values)`` gives, and numpy's mean printed its raw ``RuntimeWarning:
    overflow encountered in reduce`` between the run's log lines."""
    def huge(completions, log_metric, **kwargs):
        log_metric("big", 1e308)
        log_metric("big", 1e308)
        log_metric("third", 1 / 3)
        return [0.5] * len(completions)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = scored([huge], ["a", "b"], [{"prompt": "p"}] * 2)
    assert res.metrics["huge"]["big"] == float("inf") and res.metrics["huge"]["third"] == 1 / 3
    assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == []


def test_a_trl_reward_factory_given_uncalled_is_refused_when_configured():
    """``trl.rewards.get_repetition_penalty_reward`` makes a reward function; given itself (uncalled,
    in reward_funcs or as a TOML ``function``), TRL's keyword call is a TypeError, and polyrl, which
    passes a function without **kwargs only what it names, called it with nothing at the first step:
    a RewardError after the models loaded whose fix ("return a list of floats") was not it. Its
    parameters all have defaults, so nothing was refused. Now: one error naming the fix, at load."""
    from trl.rewards import get_repetition_penalty_reward, get_soft_overlong_punishment

    with pytest.raises(ConfigError, match=r"'get_repetition_penalty_reward'.*takes none of the arguments.*"
                                          r"Fix: pass what it returns \(reward_funcs=\[get_repetition_penalty_reward"
                                          r"\(\.\.\.\)\]") as info:
        _check(get_repetition_penalty_reward)
    assert info.value.field == "rewards.function"
    # one with a parameter nothing fills keeps that error, its fix telling of the factory's product too
    with pytest.raises(ConfigError, match=r"parameter 'max_completion_len'.*Fix: rename.*or, if it makes the "
                                          r"reward function, pass what it returns"):
        _check(get_soft_overlong_punishment)
    # a reward class given uncalled is the same mistake: calling it made an instance, not scores

    class Scorer:
        def __call__(self, completions, **kwargs):
            return [0.0] * len(completions)

    with pytest.raises(ConfigError, match=r"'Scorer'.*takes none of the arguments.*Fix: pass what it returns"):
        _check(Scorer)
    _check(Scorer())
    # what the factory returns, and a function reading only **kwargs, still pass
    _check(get_repetition_penalty_reward(ngram_size=2))
    _check(lambda **kwargs: [0.0] * len(kwargs["completions"]))


def test_a_reward_class_given_uncalled_whose_init_takes_kwargs_is_refused_when_configured():
    """A reward class passed uncalled (``reward_funcs=[Scorer]``) whose ``__init__`` takes
    ``**kwargs`` (or the arguments TRL passes) passed the signature check: calling it builds an
    instance, which TRL's trainer fails iterating and polyrl refused only after the models loaded.
    Now one error at load naming the fix; an instance, and a class whose objects are the scores
    (a list subclass, which TRL iterates), still pass."""
    class Scorer:
        def __init__(self, **kwargs):
            self.weight = kwargs.get("weight", 1.0)

        def __call__(self, completions, **kwargs):
            return [self.weight] * len(completions)

    class Reads(Scorer):
        def __init__(self, completions, weight=1.0):
            self.weight = weight

    for cls in (Scorer, Reads, functools.partial(Scorer, weight=2.0)):
        name = getattr(cls, "__name__", "Scorer")
        with pytest.raises(ConfigError, match=rf"'{name}'.*is a class, not an instance.*Fix: pass an "
                                              rf"instance \(reward_funcs=\[{name}\(\.\.\.\)\]") as info:
            _check(cls)
        assert info.value.field == "rewards.function"
    _check(Scorer())

    class Scores(list):
        def __init__(self, completions, **kwargs):
            super().__init__([0.0] * len(completions))

    _check(Scores)
