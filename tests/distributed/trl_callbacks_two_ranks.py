"""A TRL script with transformers callbacks, run by torchrun on 2 ranks (``test_trl_callbacks``): rank 0
alone asks to stop after step 1; each rank writes the events its callback saw to ``OUT/events-<rank>.json``.
Usage: torchrun --standalone --nproc_per_node 2 trl_callbacks_two_ranks.py MODEL_DIR OUT"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import datasets
import trl
from transformers import TrainerCallback

from polyrl.trl import GRPOTrainer


class StopOnRankZero(TrainerCallback):
    def __init__(self) -> None:
        self.events: list[list] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.events.append(["on_train_begin", state.global_step, state.is_world_process_zero])

    def on_step_end(self, args, state, control, **kwargs):
        self.events.append(["on_step_end", state.global_step, state.is_world_process_zero])
        if state.is_world_process_zero and state.global_step == 1:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.events.append(["on_train_end", state.global_step, state.is_world_process_zero])


def short(completions, **kwargs):
    return [-len(c) / 10 for c in completions]


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    rows = datasets.Dataset.from_list([{"prompt": f"What is {i} + 1?"} for i in range(8)])
    args = trl.GRPOConfig(output_dir=str(out / "run"), max_steps=3, num_generations=2, per_device_train_batch_size=2,
                          max_completion_length=4, learning_rate=1e-4, use_cpu=True, report_to="none",
                          disable_tqdm=True)
    callback = StopOnRankZero()
    done = GRPOTrainer(model=model, reward_funcs=[short], args=args, train_dataset=rows, callbacks=[callback]).train()
    rank = os.environ.get("RANK", "0")
    (out / f"events-{rank}.json").write_text(json.dumps({"events": callback.events, "global_step": done.global_step}))


if __name__ == "__main__":
    main()
