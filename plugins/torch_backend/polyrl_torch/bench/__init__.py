"""``polyrl bench``'s torch-side runners: TRL's GRPOTrainer, transformers' generate and the matmul
peak, each run as ``python -m polyrl_torch.bench.<module> JSON-ARGS`` in its own process."""
