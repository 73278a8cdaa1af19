"""A step with nothing to train still takes TRL's optimizer step: the lr schedule advances (no
silent shift of every later lr) and AdamW's moments decay and move the weights, as transformers'
``optimizer.step()`` on TRL's zero-loss step does (``Trainer._idle_updates``)."""

from __future__ import annotations

import copy

import attrs
import numpy as np
import pytest

from polyrl.algorithms.presets import AlgorithmConfig
from polyrl.config import RunConfig
from polyrl.hookspecs import hookimpl
from polyrl.schedules import lr_multiplier
from polyrl.trainer import Trainer

pytestmark = pytest.mark.faults

#: scores on the first step only (so the optimizer has moments), None after: nothing scored
FIRST_STEP_ONLY = """
def first_only(prompts, completions, trainer_state, **kw):
    if trainer_state.global_step == 0:
        return [float(len(str(c)) % 3) for c in completions]
    return [None] * len(completions)

def const(prompts, completions, **kw):
    return [1.0] * len(completions)
"""


def _config(tmp_path, reward: str, steps: int, backend: str = "toy", **optimizer) -> RunConfig:
    (tmp_path / "rewards.py").write_text(FIRST_STEP_ONLY)
    return RunConfig.from_dict({
        "model": {"path": "toy-model"}, "backends": {"train": backend, "generate": "toy"},
        "generation": {"group_size": 4, "max_new_tokens": 8},
        "optimizer": {"lr": 0.5, **optimizer},
        "data": {"task": "arithmetic", "options": {"count": 64}},
        "rewards": [{"function": f"{tmp_path / 'rewards.py'}:{reward}"}],
        "train": {"steps": steps, "prompts_per_step": 4, "output_dir": str(tmp_path / "run"),
                  "max_consecutive_skips": 10},
    })


class Recorder:
    """Backend "recorder": the toy backend that keeps its AdamW state after every train_step."""

    def __init__(self) -> None:
        from polyrl_toy import ToyPlugin

        states = self.states = []

        class Recording(ToyPlugin):
            @hookimpl
            def train_step(inner, engine, batch, objective):
                before = copy.deepcopy((engine.logits, engine.m, engine.v, engine.t))
                out = super().train_step(engine, batch, objective)
                states.append((before, copy.deepcopy((engine.logits, engine.m, engine.v, engine.t)),
                               batch, objective))
                return out

        self.plugin = Recording("recorder")


@pytest.mark.parametrize("algorithm,beta", [("dapo", 0.0), ("dapo", 0.04), ("grpo", 0.0)])
def test_a_step_with_nothing_to_train_advances_the_lr_schedule(toy, tmp_path, algorithm, beta):
    """Dynamic sampling dropping every group (DAPO, with or without a KL term) or no reward
    scoring anything (GRPO, beta 0): each step's lr is the schedule's at its own place, as TRL's
    scheduler (which steps every step) gives; before, every skip held the schedule back a step
    (lrs [0.5, 0.5, 0.5])."""
    reward = "const" if algorithm == "dapo" else "first_only"
    config = _config(tmp_path, reward, 3, schedule="linear")
    config = attrs.evolve(config, algorithm=AlgorithmConfig.preset(algorithm, overlong_buffer=None, beta=beta))
    history = Trainer(config).run(progress=False)["history"]
    assert [m["skipped"] for m in history] == ([True] * 3 if algorithm == "dapo" else [False, True, True])
    assert [m["lr"] for m in history] == pytest.approx([0.5 * lr_multiplier(k, "linear", 0, 3) for k in range(3)])


def test_the_optimizer_steps_on_zero_gradients_as_trl_does(toy, tmp_path):
    """After a trained step, two steps no reward scored: each is one AdamW update on a zero
    gradient (the moments decay and still move the weights, weight decay applies), exactly what
    torch's AdamW does on TRL's zero-loss step; the generator gets those weights."""
    from polyrl_toy import _adamw

    recorder = Recorder()
    config = _config(tmp_path, "first_only", 3, backend="recorder", weight_decay=0.1)
    trainer = Trainer(config, extra_plugins=(recorder.plugin,))
    history = trainer.run(progress=False)["history"]
    assert [m["samples_kept"] for m in history] == [16, 0, 0]
    assert len(recorder.states) == 3  # one update per step, as TRL's
    for before, after, batch, objective in recorder.states[1:]:
        assert not np.any(batch.advantages) and objective.beta == 0 and objective.entropy_coef == 0
        engine = attrs.make_class("E", ["config", "logits", "m", "v", "t"])(trainer.train_engine.raw.config,
                                                                            *copy.deepcopy(before))
        _adamw(engine, np.zeros_like(engine.logits), 0.0)  # AdamW on a zero gradient
        for got, want in zip(after, (engine.logits, engine.m, engine.v, engine.t)):
            np.testing.assert_array_equal(got, want)
        assert not np.array_equal(after[0], before[0])  # momentum moved the weights
    final = recorder.states[-1][1][0]
    assert trainer.engines.generate is not trainer.engines.train  # its own copy, given the weights
    np.testing.assert_array_equal(trainer.engines.generate.raw.logits, final)


def test_on_torch_the_idle_update_is_adamw_on_a_zero_gradient(tiny_model_dir):
    """The trainer's idle update (one sequence at advantage 0, a plain objective) on the torch
    backend equals its AdamW stepping on zero gradients (what TRL's optimizer.step() does on its
    zero-loss step): the gradient is exactly 0, momentum and weight decay still move the weights."""
    torch = pytest.importorskip("torch")
    from polyrl.algorithms.objective import Objective
    from polyrl.types import OptimizerConfig, TrainBatch
    from polyrl_torch.schedule import apply_scheduled_lr
    from test_optim_sampling import batch_of, make_engine, weights

    opt = OptimizerConfig(lr=1e-2, max_grad_norm=1.0, weight_decay=0.1)
    idle, manual = (make_engine("torch", tiny_model_dir, optimizer=opt, seed=0) for _ in range(2))
    batch = batch_of(idle)
    for engine in (idle, manual):
        assert not engine.train_step(batch, Objective()).skipped
    np.testing.assert_array_equal(*(np.concatenate([w.ravel() for w in weights(e).values()]) for e in (idle, manual)))
    before = weights(idle)
    out = idle.train_step(TrainBatch(batch.sequences[:1], np.zeros(1)), Objective())
    assert not out.skipped and out.grad_norm == 0.0
    raw = manual.raw
    for p in raw.trainable_parameters():
        p.grad = torch.zeros_like(p)
    apply_scheduled_lr(raw)
    raw.require_optimizer().step()
    got, want = weights(idle), weights(manual)
    assert any(not np.array_equal(got[k], before[k]) for k in got)  # the weights moved
    for k in got:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
