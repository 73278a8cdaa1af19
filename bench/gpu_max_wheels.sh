#!/usr/bin/env bash
# MAX for the GPU machines, in parts one device call can carry (.maxparts/, git-ignored).
#
# MAX's wheels and the packages it needs that those machines lack (msgspec, exceptiongroup, taskgroup,
# and pydantic + av, which max.pipelines imports at load: bench/gpu_max_closure.py --run checks the
# list against what a real MAX load, compile and generate import here), for
# Python 3.12 x86-64, installed into one folder here, packed as tar + xz and cut into parts of 52 MiB:
# a part plus the working tree (~10 MiB) must stay under one call's 64 MiB, so the calls that carry a
# part carry nothing else (.whl installs once); the last, smaller part can travel with .whl and .gpu.
#   bash bench/gpu_max_wheels.sh           # here: several minutes (xz over ~900 MB, the closure's MAX run)
#   then one device call per part, each carrying .maxparts/manifest.json and .maxparts/part-NNN:
#   bash bench/gpu_suite.sh max-parts [max]  # keeps the part in /tmp; the call that brings the last
#                                            # one unpacks MAX into the suite's site, then max runs
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(command -v .venv/bin/python || command -v python3)}
STAGE=.maxstage
rm -rf "$STAGE" && mkdir -p "$STAGE/wheels" "$STAGE/site" "$STAGE/packed"
PLATFORMS=(--python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
           --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$PY" -m pip download -q --no-deps --only-binary=:all: "${PLATFORMS[@]}" -d "$STAGE/wheels" \
  max==26.7.0 max-core==26.7.0 max-mojo-libs==26.7.0 max-shmem-libs==26.7.0 mojo-compiler==1.2.0 \
  mojo-compiler-mojo-libs==1.2.0 msgspec==0.22.0 exceptiongroup==1.3.2 taskgroup==0.2.2 \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 av==18.1.0
# every package MAX's import path loads, and what its load, compile and generate import after that,
# must be in the GPU image or carried (checked here, at no device time; --run loads a tiny Llama
# through polyrl-max on the CPU: ~6 min the first time on 2 shared cores, ~45 s from MAX's compile cache)
PYTHONPATH=core:plugins/torch_backend:plugins/max_backend "$PY" bench/gpu_max_closure.py --run
"$PY" -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: "${PLATFORMS[@]}" \
  --target "$STAGE/site" "$STAGE"/wheels/*.whl
tar -C "$STAGE/site" -cf - . | xz -6 -T0 >"$STAGE/packed/maxsite.tar.xz"
"$PY" bench/gpu_parts.py split "$STAGE/packed" .maxparts --size 52M
du -ch "$STAGE"/wheels/*.whl | tail -1
