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

$(STAMP): requirements-dev.txt setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/tutorial_mlp.py

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_FLAGS)

test-dist: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_FLAGS) -m distributed

$(XSTAMP): requirements-xla.txt setup.cfg pyproject.toml
	test -x $(XBIN)/python || $(PYTHON) -m venv $(XVENV)
	$(XBIN)/pip install -q --disable-pip-version-check -r requirements-xla.txt
	$(XBIN)/pip install -q --disable-pip-version-check --no-deps -e .
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
