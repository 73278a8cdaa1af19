"""One backend's bench, in a child process of ``run_bench`` (``python -m polyrl.bench JSON-ARGS``)."""

import json
import sys

from polyrl.bench.workload import bench_backend

print(json.dumps(bench_backend(*json.loads(sys.argv[1]))))
