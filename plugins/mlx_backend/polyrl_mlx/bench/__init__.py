"""Bench children for the MLX backend (``polyrl bench``): peers run on the same workload."""
