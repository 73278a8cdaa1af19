#!/usr/bin/env bash
# The Python packages bench/gpu_suite.sh needs that the GPU machines lack (or hold in a version
# polyrl does not pin), as wheels in .whl/ (git-ignored) for the device tool to carry: polyrl's own
# dependencies, TRL and what it adds, and the transformers/tokenizers/peft versions polyrl pins
# (the machines have torch, accelerate, pytest and most of the rest: .library/device/KINDS.md).
# Python 3.12 x86-64 wheels, whatever this machine runs. About 17 MB.
#   bash bench/gpu_wheels.sh && python bench/gpu_models.py prepare --out .gpu/models
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v .venv/bin/python || command -v python3)}
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl \
  transformers==5.12.1 tokenizers==0.22.2 peft==0.21.2 trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
  multiprocess==0.70.19 fsspec==2026.9.0 structlog==26.1.0 pyseccomp==0.1.2 gguf==0.19.0
du -ch .whl/*.whl | tail -1
