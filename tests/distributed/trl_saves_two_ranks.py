"""A TRL script with save_strategy "epoch" and then "best" (``test_trl_checkpoints``), run by torchrun
on 2 ranks or by python on 1 (the same global batch: 4 completions a step). For each strategy it
trains 4 steps uninterrupted into ``OUT/<strategy>/whole``, and into ``OUT/<strategy>/cut`` 2 steps
(a callback stops the run) then ``train(resume_from_checkpoint=True)`` to step 4. Each rank writes
what its callback saw (``on_save`` steps, the best fields at the end) to ``OUT/seen-<rank>.json``.
Usage: [torchrun --standalone --nproc_per_node 2] trl_saves_two_ranks.py MODEL_DIR OUT"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import datasets
import trl
from transformers import TrainerCallback

from polyrl.trl import GRPOTrainer


class Saves(TrainerCallback):
    """Each ``on_save``'s step; stops the run after step ``stop_at`` (0: never)."""

    def __init__(self, stop_at: int = 0) -> None:
        self.saved: list[int] = []
        self.stop_at = stop_at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.stop_at:
            control.should_training_stop = True

    def on_save(self, args, state, control, **kwargs):
        self.saved.append(state.global_step)


def peak_at_step_2(completions, trainer_state, **kwargs):
    """The evaluation after step 2 is the best on every rank, whatever was sampled (what was
    sampled adds under 0.1: the run trains)."""
    return [-10.0 * abs(trainer_state.global_step - 2) + sum(map(ord, c)) % 10 / 100 for c in completions]


def train(model: str, out: Path, strategy: str, stop_at: int = 0, resume: bool = False) -> dict:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(4)])
    extra = {"eval_strategy": "epoch"} if strategy == "epoch" else {
        "eval_strategy": "steps", "eval_steps": 1, "metric_for_best_model": "reward"}
    args = trl.GRPOConfig(output_dir=str(out), max_steps=4, num_generations=2, per_device_train_batch_size=4 // world,
                          per_device_eval_batch_size=4 // world, max_completion_length=4, learning_rate=1e-4,
                          use_cpu=True, report_to="none", disable_tqdm=True, save_strategy=strategy, **extra)
    saves = Saves(stop_at)
    trainer = GRPOTrainer(model=model, reward_funcs=[peak_at_step_2], args=args, train_dataset=rows,
                          eval_dataset=rows.select(range(2)), callbacks=[saves])
    done = trainer.train(resume_from_checkpoint=resume or None)
    best = trainer.state.best_model_checkpoint
    return {"saved": saves.saved, "global_step": done.global_step, "best_metric": trainer.state.best_metric,
            "best_global_step": trainer.state.best_global_step, "best_model_checkpoint": best and Path(best).name}


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    seen = {}
    for strategy in ("epoch", "best"):
        seen[strategy] = {"whole": train(model, out / strategy / "whole", strategy),
                          "cut": train(model, out / strategy / "cut", strategy, stop_at=2),
                          "resumed": train(model, out / strategy / "cut", strategy, resume=True)}
    (out / f"seen-{os.environ.get('RANK', '0')}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main()
