"""A TRL script run by torchrun on 2 ranks (``test_trl_callbacks``): eval_steps 1 of 2 steps; a
callback clears ``should_evaluate`` in ``on_step_end`` at step 1 on rank 0 alone, at step 2 on both.
Each rank writes the steps its ``on_evaluate`` saw to ``OUT/evaluated-<rank>.json``.
Usage: torchrun --standalone --nproc_per_node 2 trl_eval_cancel_two_ranks.py MODEL_DIR OUT"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import datasets
import trl
from transformers import TrainerCallback

from polyrl.trl import GRPOTrainer


class ClearsTheEvaluation(TrainerCallback):
    def __init__(self) -> None:
        self.evaluated: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2 or state.is_world_process_zero:
            control.should_evaluate = False

    def on_evaluate(self, args, state, control, **kwargs):
        self.evaluated.append(state.global_step)


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(8)])
    args = trl.GRPOConfig(output_dir=str(out / "run"), max_steps=2, num_generations=2, per_device_train_batch_size=2,
                          max_completion_length=4, learning_rate=1e-4, use_cpu=True, report_to="none",
                          disable_tqdm=True, eval_strategy="steps", eval_steps=1)
    callback = ClearsTheEvaluation()
    GRPOTrainer(model=model, reward_funcs=[short], args=args, train_dataset=rows, eval_dataset=rows.select(range(2)),
                callbacks=[callback]).train()
    rank = os.environ.get("RANK", "0")
    (out / f"evaluated-{rank}.json").write_text(json.dumps(callback.evaluated))


if __name__ == "__main__":
    main()
