# Every target sets up its own environment: `.venv` (torch 2.13.0, CPU) or
# `.venv-xla` (torch 2.9.1 + torch-xla 2.9.0) on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
XVENV  := .venv-xla
XBIN   := $(XVENV)/bin
XSTAMP := $(XVENV)/.installed
PYTEST_FLAGS ?= -q

.PHONY: demo test test-dist test-xla bench fuzz clean

# pip shows what it collects and a progress bar for each download (no -q): the first
# `make demo` downloads torch (~200 MB) and takes a few minutes.
PIP := --disable-pip-version-check --progress-bar on

$(STAMP): requirements-dev.txt setup.cfg pyproject.toml
	@echo ">>> setting up $(VENV): torch (CPU) and the test tools from requirements-dev.txt, then named_axes (editable)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP) -r requirements-dev.txt
	$(BIN)/pip install $(PIP) --no-deps -e .
	@$(BIN)/python -c "import torch, named_axes; print('>>> ready: torch', torch.__version__, '| named_axes', named_axes.__version__)"
	touch $(STAMP)

demo: $(STAMP)
	@echo ">>> training the xmap tutorial's named MLP (examples/tutorial_mlp.py)"
	$(BIN)/python examples/tutorial_mlp.py

# pytest prints one character per test as it goes; the slowest tests are listed at the end
test: $(STAMP)
	@echo ">>> running the test suite (notebooks included; a few minutes on 2 cores)"
	$(BIN)/python -m pytest $(PYTEST_FLAGS) --durations=10

test-dist: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_FLAGS) -m distributed

$(XSTAMP): requirements-xla.txt setup.cfg pyproject.toml
	test -x $(XBIN)/python || $(PYTHON) -m venv $(XVENV)
	@echo ">>> setting up $(XVENV): torch 2.9.1 + torch-xla 2.9.0 (requirements-xla.txt)"
	$(XBIN)/pip install $(PIP) -r requirements-xla.txt
	$(XBIN)/pip install $(PIP) --no-deps -e .
	touch $(XSTAMP)

# The xla-marked tests and the core suite, in one pytest process, on torch 2.9.1.
test-xla: $(XSTAMP)
	PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 $(XBIN)/python -m pytest $(PYTEST_FLAGS) -m "not distributed and not slow" -p no:randomly

bench: $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
	$(BIN)/python benchmarks/run.py --out benchmarks/RESULTS.md $(BENCH_FLAGS)

fuzz: $(STAMP)
	NX_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest $(PYTEST_FLAGS) -m "not distributed" tests/test_properties.py

clean:
	rm -rf $(VENV) $(XVENV) build *.egg-info
