#!/usr/bin/env bash
# Every GPU check and measurement of polyrl in one command, so each GPU session repeats it unchanged.
#
#   here, once per checkout:  bash bench/gpu_wheels.sh && python bench/gpu_models.py prepare --out .gpu/models
#   on the GPU machine:       bash bench/gpu_suite.sh [SECTION ...]
#                             (the device tool: carry [".whl", ".gpu"]; one call holds 10 minutes, so
#                              run the sections over a few calls: env tests | small | large | max)
#
# Sections, default all in this order:
#   env     GPU, driver, versions; installs the carried wheels and this tree (polyrl, polyrl-torch)
#   tests   the CUDA-relevant tests, on CUDA (device "auto" picks it): torch backend, conformance kit,
#           mixed precision, distributed (NCCL and FSDP2 on one rank), device selection
#   small   polyrl bench vs TRL (bf16, same run) and HF generate on the SmolLM2-135M shape, 8x8x256 and 8x8x1024
#   large   the same on the SmolLM2-1.7B shape: full and LoRA at 8x8x256, full at 8x8x1024
#   max     MAX on the GPU beside torch and HF generate (only where MAX is importable there)
# Results: JSON per bench, logs and summary.txt in $RESULTS (default: $OUT/../gpu-results when the device
# tool's $OUT is set, else bench/results/gpu); with $OUT set they come back as $OUT/gpu_results.tgz plus
# $OUT/summary.txt. The summary table prints last.
# GPU_SUITE_REHEARSE=1 runs every section on the CPU at toy sizes: it checks this script where there is no GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REHEARSE=${GPU_SUITE_REHEARSE:-0}
if [ -n "${OUT:-}" ]; then RESULTS=${RESULTS:-/tmp/gpu-results}; else RESULTS=${RESULTS:-$ROOT/bench/results/gpu}; fi
SITE=${GPU_SUITE_SITE:-/tmp/polyrl-site}
MODELS=${GPU_SUITE_MODELS:-$ROOT/.gpu/models}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$REHEARSE" = 1 ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}; DEVICE=cpu
  SIZES_SMALL=("--prompts 2 --group-size 2 --max-new-tokens 8 --steps 2")
  SIZES_LARGE=("--prompts 2 --group-size 2 --max-new-tokens 8 --steps 2")
  TESTS=(tests/test_device_selection.py)
  THREADS=1
else
  PY=${PYTHON:-python3}; DEVICE=cuda
  SIZES_SMALL=("--prompts 8 --group-size 8 --max-new-tokens 256 --steps 3"
               "--prompts 8 --group-size 8 --max-new-tokens 1024 --steps 3")
  SIZES_LARGE=("--prompts 8 --group-size 8 --max-new-tokens 256 --steps 3"
               "--prompts 8 --group-size 8 --max-new-tokens 256 --steps 3 --lora"
               "--prompts 8 --group-size 8 --max-new-tokens 1024 --steps 3")
  TESTS=(tests/test_device_selection.py tests/test_torch_backend.py tests/test_torch_kv_cache.py
         tests/test_torch_mixed_precision.py tests/test_torch_target_logprobs.py tests/test_torch_episodes.py
         tests/test_conformance_kit.py tests/test_policy_loss_runs.py tests/test_determinism.py
         tests/test_distributed.py)
  THREADS=8
fi

say() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

install() {
  # the carried wheels and this tree, into one folder on PYTHONPATH (nothing is fetched there)
  if [ "$REHEARSE" = 1 ]; then return 0; fi
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || return 1
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
    --target "$SITE" . plugins/torch_backend || return 1
  if PYTHONPATH="$SITE" "$PY" -c "import max.pipelines" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
      --target "$SITE" plugins/max_backend
  fi
}

section_env() {
  say "env"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
    lscpu | grep -E "Model name|^CPU\(s\)" || true
    "$PY" - <<'PYEOF'
import importlib.metadata as md, platform
print("python", platform.python_version())
for name in ("torch", "transformers", "tokenizers", "trl", "peft", "accelerate", "datasets", "numpy",
             "polyrl", "polyrl-torch", "polyrl-max", "max"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "not installed")
import torch
print("cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PYEOF
    "$PY" -m polyrl.cli backends 2>&1 | tail -20
  } 2>&1 | tee "$RESULTS/env.txt"
}

section_tests() {
  say "tests on ${DEVICE}"
  timeout 500 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "${TESTS[@]}" \
    --junitxml "$RESULTS/tests.xml" >"$RESULTS/tests.log" 2>&1
  echo "pytest exit $?" >>"$RESULTS/tests.log"
  tail -25 "$RESULTS/tests.log"
}

bench() {  # bench NAME MODEL ARGS...: polyrl vs TRL (bf16 both) and HF generate, one JSON
  local name=$1 model=$2; shift 2
  say "bench $name"
  # shellcheck disable=SC2068  # the sizes are word lists on purpose
  timeout 580 "$PY" -m polyrl.cli bench --model "$model" --backends torch --device "$DEVICE" \
    --compute-dtype bfloat16 --ignore-eos --threads "$THREADS" --trl --hf-generate $@ \
    --output "$RESULTS/bench_$name.json" 2>&1 | tail -22
}

models() {  # random weights for the shapes asked for (seconds on a GPU)
  local depth=()
  if [ "$REHEARSE" = 1 ]; then depth=(--num-layers 2); fi
  "$PY" bench/gpu_models.py build --out "$MODELS" --only "$@" "${depth[@]}" || return 1
}

section_small() {
  models smollm2-135m-shape || return 1
  local i=0
  for sizes in "${SIZES_SMALL[@]}"; do
    bench "135m_$i" "$MODELS/smollm2-135m-shape" $sizes; i=$((i + 1))
  done
}

section_large() {
  models smollm2-1.7b-shape || return 1
  local i=0
  for sizes in "${SIZES_LARGE[@]}"; do
    bench "1.7b_$i" "$MODELS/smollm2-1.7b-shape" $sizes; i=$((i + 1))
  done
}

section_max() {
  say "max"
  if ! "$PY" -c "import polyrl_max" 2>/dev/null; then
    echo "MAX is not importable here: nothing run (its wheels must be carried: see the README's GPU section)" \
      | tee "$RESULTS/max.txt"
    return 0
  fi
  models smollm2-135m-shape || return 1
  timeout 580 "$PY" -m polyrl.cli bench --model "$MODELS/smollm2-135m-shape" --backends max torch --device "$DEVICE" \
    --generate-only --hf-generate --ignore-eos --threads "$THREADS" ${SIZES_SMALL[0]} \
    --output "$RESULTS/bench_max_generate.json" 2>&1 | tail -22
}

install || { echo "error: installing the carried wheels or this tree failed (see above)"; exit 2; }
if [ "$REHEARSE" != 1 ]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
sections=("$@")
if [ ${#sections[@]} -eq 0 ] || [ "${sections[0]}" = all ]; then sections=(env tests small large max); fi
for s in "${sections[@]}"; do
  case $s in
    env|tests|small|large|max) "section_$s" ;;
    *) echo "error: unknown section '$s'. Fix: use env, tests, small, large, max or all"; exit 2 ;;
  esac
done
"$PY" bench/gpu_summary.py "$RESULTS" | tee "$RESULTS/summary.txt"
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/gpu_results.tgz" -C "$RESULTS" . && cp "$RESULTS/summary.txt" "$OUT/summary.txt"
fi
