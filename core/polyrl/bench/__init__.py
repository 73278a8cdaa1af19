"""``polyrl bench`` and what it measures, in one place.

``workload`` times the same rollout + update on each backend (each in its own child process),
``flops`` counts the workload's FLOPs for the utilisation figures, ``report`` draws the chart and
table (and the scaling sweep's), ``sweep`` runs polyrl and TRL over completion length, group size
and LoRA at fixed lengths (``bench/scaling.py``), and ``speed_records`` keeps each backend's
measured generation speed for ``backends.generate = "auto"``.
"""

from polyrl.bench.workload import bench_backend, run_bench

__all__ = ["bench_backend", "run_bench"]
