"""The TRL side of README's "Coming from TRL": the same run as run.toml, in TRL."""

from datasets import load_dataset
from trl import GRPOConfig, GRPOTrainer

from rewards import brevity, correct_answer

dataset = load_dataset("parquet", data_files="prompts.parquet", split="train")
args = GRPOConfig(
    output_dir="runs/trl", max_steps=20, learning_rate=1e-5, beta=0.0,
    num_generations=4, per_device_train_batch_size=16,  # 4 prompts x 4 completions per step
    max_completion_length=32, reward_weights=[1.0, 0.5], use_cpu=True,
)
trainer = GRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", reward_funcs=[correct_answer, brevity],
                      args=args, train_dataset=dataset)
trainer.train()
