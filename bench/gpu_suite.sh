#!/usr/bin/env bash
# Every GPU check and measurement of polyrl in one command, so each GPU session repeats it unchanged.
#
#   here, once per checkout:  bash bench/gpu_wheels.sh && python bench/gpu_models.py prepare --out .gpu/models
#   on the GPU machine:       bash bench/gpu_suite.sh [SECTION ...]
#                             (the device tool: carry [".whl", ".gpu"]; one call holds 10 minutes, so
#                              run the sections over a few calls: env tests | small small-long | large ...)
#
# Sections, default all in this order:
#   env     GPU, driver, versions; installs the carried wheels and this tree (polyrl, polyrl-torch)
#   tests   the CUDA-relevant tests, on CUDA (device "auto" picks it): torch backend, conformance kit,
#           mixed precision, distributed (NCCL and FSDP2 on one rank), device selection (the gloo
#           multi-rank tests are left to the CPU suite: they never touch CUDA)
#   small, small-long            polyrl bench vs TRL (bf16, same run) on the SmolLM2-135M shape, 8x8x256
#                                (with HF generate) and 2x8x1024 (TRL's generate is HF's there; one JSON each)
#   large, large-lora, large-long the same on the SmolLM2-1.7B shape: full at 8x8x256 (with HF generate),
#                                LoRA at 8x8x256, full at 2x8x1024
#   profile torch.profiler over one polyrl generate and train step on the SmolLM2-1.7B shape (8x8x64,
#           bf16): device-busy share, kernel launches, host syncs and the top ops per phase
#   fixed-ab   sampling with fixed shapes (one CUDA graph replayed per token, polyrl_torch.fixed_decode)
#           against the row-dropping loop, taking turns in one process (bench/fixed_decode_ab.py), bf16,
#           8x8x256, on both shapes: each way's seconds and ms per decode step, their ratio
#   max-parts  keeps the MAX part this call carries (bench/gpu_max_wheels.sh) in /tmp; once every part
#           is there, unpacks MAX into the suite's site and installs polyrl-max
#   max     MAX on the GPU beside torch and HF generate (only where MAX is importable there)
# Results: JSON per bench, logs and summary.txt in $RESULTS (default: /tmp/gpu-results when the device
# tool's $OUT is set, else bench/results/gpu); with $OUT set they come back as $OUT/gpu_results.tgz plus
# $OUT/summary.txt. The summary table prints last.
# GPU_SUITE_REHEARSE=1 runs every section on the CPU at toy sizes: it checks this script where there is no GPU.
# GPU_SUITE_TESTS="ID ...": the tests section runs these pytest ids instead of its list.
# GPU_SUITE_SECONDS=N: the whole call's budget (the device tool's timeout_s less a margin): each section's
# timeout shrinks to what is left, a section that can no longer finish (need(): what it took on an H200)
# is skipped and named in the summary, one cut off by its timeout is named too, and the summary and the
# archive are still written before the call's end. A call that only brings a MAX part needs 10 s + 25.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
REHEARSE=${GPU_SUITE_REHEARSE:-0}
DTYPE=(--compute-dtype bfloat16)
# MAX: float32 weights computed in bfloat16 (its bfloat16 encoding), GPU only: on the CPU (the
# rehearsal) MAX refuses bfloat16 and runs float32. Without it MAX would run float32 on the GPU.
MAXDTYPE=(--compute-dtype bfloat16)
if [ -n "${OUT:-}" ]; then RESULTS=${RESULTS:-/tmp/gpu-results}; else RESULTS=${RESULTS:-$ROOT/bench/results/gpu}; fi
SITE=${GPU_SUITE_SITE:-/tmp/polyrl-site}
MAXPARTS=${GPU_SUITE_MAXPARTS:-.maxparts} MAXKEEP=${GPU_SUITE_MAXKEEP:-/tmp/polyrl-maxparts}
if [ "$REHEARSE" = 1 ]; then  # its 2-layer builds never land where a GPU run reads its models
  MODELS=${GPU_SUITE_MODELS:-/tmp/polyrl-gpu-rehearsal/models}
else
  MODELS=${GPU_SUITE_MODELS:-$ROOT/.gpu/models}
fi
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$REHEARSE" = 1 ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}; DEVICE=cpu; THREADS=1; MAXDTYPE=()
  SHORT="--prompts 2 --group-size 2 --max-new-tokens 8 --steps 2"; LONG=$SHORT
  TESTS=(tests/test_device_selection.py)
  # bfloat16 only where the CPU computes it natively: emulated on an AVX2-only CPU, the 1.7B-shape
  # rehearsal alone outlasts its section's timeout; the GPU run below always times bfloat16
  if [ "$("$PY" -c 'import torch; print(torch.ops.mkldnn._is_mkldnn_bf16_supported())')" != True ]; then
    DTYPE=()
  fi
else
  PY=${PYTHON:-python3}; DEVICE=cuda; THREADS=8
  # the long points use 2 prompts: 8 x 8 x 1024 tokens would keep ~70k positions of activations
  # (~1.5 MB each for SmolLM2 without checkpointing), past an H100's 80 GB on either side
  SHORT="--prompts 8 --group-size 8 --max-new-tokens 256 --steps 3"
  LONG="--prompts 2 --group-size 8 --max-new-tokens 1024 --steps 3"
  TESTS=(tests/test_device_selection.py tests/test_torch_backend.py tests/test_torch_kv_cache.py
         tests/test_torch_mixed_precision.py tests/test_torch_target_logprobs.py tests/test_torch_episodes.py
         tests/test_conformance_kit.py tests/test_policy_loss_runs.py tests/test_determinism.py
         tests/test_torch_fixed_decode.py
         "tests/test_distributed.py::test_one_launched_rank_runs_the_collectives_and_matches_one_process[cuda]")
fi
if [ -n "${GPU_SUITE_TESTS:-}" ]; then  # a few test ids (space-separated), e.g. a previous call's failures
  read -r -a TESTS <<<"$GPU_SUITE_TESTS"
fi
SMALL=smollm2-135m-shape LARGE=smollm2-1.7b-shape

START=$SECONDS BUDGET=${GPU_SUITE_SECONDS:-0} RESERVE=25  # seconds kept for the summary and the archive
left() {  # seconds a section may still take (a large number without a budget)
  if [ "$BUDGET" -gt 0 ]; then echo $((BUDGET - (SECONDS - START) - RESERVE)); else echo 100000; fi
}
cap() { local l; l=$(left); echo $(($1 < l ? $1 : l)); }  # cap SECONDS: the lesser of SECONDS and left

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
    install_max_backend
  fi
}

install_max_backend() {  # polyrl-max into the site (where MAX itself is already)
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
    --target "$SITE" plugins/max_backend
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
  local limit status
  limit=$(cap "${GPU_SUITE_TEST_S:-500}")
  timeout "$limit" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "${TESTS[@]}" \
    --junitxml "$RESULTS/tests.xml" >"$RESULTS/tests.log" 2>&1
  status=$?
  echo "pytest exit $status" >>"$RESULTS/tests.log"
  stopped "tests" "$limit" "$status"
  tail -25 "$RESULTS/tests.log"
}

bench() {  # bench NAME MODEL ARGS...: polyrl vs TRL (bf16 both), one JSON
  local name=$1 model=$2 limit; shift 2
  say "bench $name"
  limit=$(cap 580)
  timeout "$limit" "$PY" -m polyrl.cli bench --model "$model" --backends torch --device "$DEVICE" \
    "${DTYPE[@]}" --ignore-eos --threads "$THREADS" --trl "$@" \
    --output "$RESULTS/bench_$name.json" 2>&1 | tail -22
  stopped "bench $name" "$limit" "${PIPESTATUS[0]}"
}

stopped() {  # stopped WHAT LIMIT STATUS: say so when timeout cut WHAT off (its table prints only at the end)
  if [ "$3" = 124 ] || [ "$3" = 137 ]; then
    echo "stopped: $1 at its cap of $2 s, before its report (GPU_SUITE_SECONDS=$BUDGET)" | tee -a "$RESULTS/skipped.txt"
  fi
}

need() {  # seconds section $1 takes on the GPU (its models built, every side warmed): one that
  # cannot finish is not started, since a cut-off bench or pytest leaves no report
  if [ "$REHEARSE" = 1 ]; then [ "$1" = max-parts ] && echo 10 || echo 45; return; fi
  case $1 in
    max-parts) echo 10 ;; env) echo 20 ;; profile) echo 90 ;; fixed-ab) echo 120 ;;
    tests|small|large|large-lora|max) echo 150 ;; small-long|large-long) echo 200 ;; *) echo 45 ;;
  esac
}

models() {  # random weights for the shapes asked for (seconds on a GPU)
  local depth=()
  if [ "$REHEARSE" = 1 ]; then depth=(--num-layers 2); fi
  "$PY" bench/gpu_models.py build --out "$MODELS" --only "$@" "${depth[@]}" || return 1
}

bench_section() {  # bench_section NAME MODEL SIZES [--lora]
  local name=$1 model=$2 sizes=$3; shift 3
  models "$model" || return 1
  # shellcheck disable=SC2086  # the sizes are a word list on purpose
  bench "$name" "$MODELS/$model" $sizes "$@"
}

section_profile() {
  say "profile"
  models "$LARGE" || return 1
  local size=(--prompts 8 --group-size 8 --max-new-tokens 64)
  if [ "$REHEARSE" = 1 ]; then size=(--prompts 2 --group-size 2 --max-new-tokens 8); fi
  timeout "$(cap 300)" "$PY" bench/gpu_profile.py --model "$MODELS/$LARGE" --device "$DEVICE" \
    "${DTYPE[@]}" "${size[@]}" --out "$RESULTS/profile_1.7b" 2>&1 | grep -v "^USDT:" | tail -8
}

section_fixed_ab() {
  say "fixed-ab"
  local size=(--prompts 8 --group-size 8 --max-new-tokens 256 --rounds 3) shape
  if [ "$REHEARSE" = 1 ]; then size=(--prompts 2 --group-size 2 --max-new-tokens 8 --rounds 2); fi
  for shape in "$SMALL" "$LARGE"; do
    models "$shape" || return 1
    timeout "$(cap 240)" "$PY" bench/fixed_decode_ab.py --model "$MODELS/$shape" --device "$DEVICE" \
      "${DTYPE[@]}" --threads "$THREADS" "${size[@]}" --output "$RESULTS/fixed_ab_$shape.json" 2>&1 | tail -4
  done
}

section_max_parts() {
  say "max-parts"
  local state
  state=$("$PY" bench/gpu_parts.py receive "$MAXPARTS" "$MAXKEEP") || return 1
  echo "$state" | tee -a "$RESULTS/max.txt"
  case $state in "all parts here"*) ;; *) return 0 ;; esac
  "$PY" bench/gpu_parts.py join "$MAXKEEP" "$MAXKEEP/joined" || return 1
  mkdir -p "$SITE" && tar -xJf "$MAXKEEP/joined/maxsite.tar.xz" -C "$SITE" || return 1
  echo "MAX unpacked into $SITE" | tee -a "$RESULTS/max.txt"
  if [ "$REHEARSE" != 1 ]; then install_max_backend || return 1; fi
}

section_max() {
  say "max"
  local why  # what the max backend's load imports, checked in seconds before any model builds
  if ! why=$("$PY" -c "import polyrl_max.engine, max.pipelines" 2>&1); then
    { echo "MAX is not importable here: nothing run (its wheels must be carried: see the README's GPU section)"
      echo "$why" | tail -1; } | tee -a "$RESULTS/max.txt"
    return 0
  fi
  models "$SMALL" || return 1
  # MAX in bfloat16 over the float32 weights (MAXDTYPE), alone; torch (bfloat16 autocast) and HF
  # generate follow at once on the same workload
  # shellcheck disable=SC2086  # the sizes are a word list on purpose
  timeout "$(cap 580)" "$PY" -m polyrl.cli bench --model "$MODELS/$SMALL" --backends max --device "$DEVICE" \
    "${MAXDTYPE[@]}" --generate-only --ignore-eos --threads "$THREADS" $SHORT \
    --output "$RESULTS/bench_max_generate.json" 2>&1 | tail -12
  stopped "bench max_generate" "$(cap 580)" "${PIPESTATUS[0]}"
  # shellcheck disable=SC2086
  timeout "$(cap 200)" "$PY" -m polyrl.cli bench --model "$MODELS/$SMALL" --backends torch --device "$DEVICE" \
    "${DTYPE[@]}" --generate-only --hf-generate --ignore-eos --threads "$THREADS" $SHORT \
    --output "$RESULTS/bench_max_generate_torch.json" 2>&1 | tail -12
}

sections=("$@")
ALL=(env tests small small-long large large-lora large-long profile fixed-ab max-parts max)
if [ ${#sections[@]} -eq 0 ] || [ "${sections[0]}" = all ]; then sections=("${ALL[@]}"); fi
for s in "${sections[@]}"; do  # every name checked before anything installs or runs
  case " ${ALL[*]} " in
    *" $s "*) ;;
    *) echo "error: unknown section '$s'. Fix: use one of ${ALL[*]}, or all"; exit 2 ;;
  esac
done
install || { echo "error: installing the carried wheels or this tree failed (see above)"; exit 2; }
uses_models=0  # every section but env, tests and max-parts reads the prepared configs
for s in "${sections[@]}"; do case $s in env|tests|max-parts) ;; *) uses_models=1 ;; esac; done
if [ "$REHEARSE" = 1 ] && [ "$uses_models" = 1 ] && [ ! -f "$MODELS/$SMALL/config.json" ]; then
  "$PY" bench/gpu_models.py prepare --out "$MODELS" || exit 2
fi
if [ "$REHEARSE" != 1 ]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
for s in "${sections[@]}"; do
  if [ "$(left)" -lt "$(need "$s")" ]; then  # too little left to finish it: named, so a later call runs it
    echo "skipped: section $s (needs $(need "$s") s, $(left) s left of GPU_SUITE_SECONDS=$BUDGET)" \
      | tee -a "$RESULTS/skipped.txt"
    continue
  fi
  case $s in
    env|tests|profile|max) "section_$s" ;;
    max-parts) section_max_parts ;;
    fixed-ab) section_fixed_ab ;;
    small) bench_section 135m_short "$SMALL" "$SHORT" --hf-generate ;;
    small-long) bench_section 135m_long "$SMALL" "$LONG" ;;
    large) bench_section 1.7b_short "$LARGE" "$SHORT" --hf-generate ;;
    large-lora) bench_section 1.7b_short_lora "$LARGE" "$SHORT" --lora ;;
    large-long) bench_section 1.7b_long "$LARGE" "$LONG" ;;
  esac
done
"$PY" bench/gpu_summary.py "$RESULTS" | tee "$RESULTS/summary.txt"
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/gpu_results.tgz" -C "$RESULTS" . && cp "$RESULTS/summary.txt" "$OUT/summary.txt"
fi
