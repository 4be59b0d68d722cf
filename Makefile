# Every target sets up its own environment: `.venv` (torch 2.13.0, CPU) or
# `.venv-xla` (torch 2.9.1 + torch-xla 2.9.0) on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
XVENV  := .venv-xla
XBIN   := $(XVENV)/bin
XSTAMP := $(XVENV)/.installed
JVENV  := .venv-jax
JSTAMP := $(JVENV)/.installed
ORACLE_N ?= 2000
FUZZ_N   ?= 20000
PYTEST_FLAGS ?= -q

.PHONY: demo test test-all test-slow test-dist test-xla test-oracle fuzz-oracle fuzz-oracle-mesh fuzz-store bench bench-autotune fuzz clean

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

# pytest prints one character per test as it goes; the slowest tests are listed at the end.
# Tests marked `slow` (GPT-J under nx.jit against JAX: minutes of inductor) run in test-slow.
# Two pytest-xdist workers (tests that start process groups share one, in turn).
XDIST ?= -n 2 --dist loadgroup
test: $(STAMP)
	@echo ">>> running the test suite (notebooks included; a few minutes on 2 cores)"
	$(BIN)/python -m pytest $(PYTEST_FLAGS) $(XDIST) -m "not slow and not hunt" --durations=10

# What CI runs beside make test: the long sweeps (hunt-marked tests) and the whole OpInfo
# sweep (make test runs a fixed sample of it).
test-all: test
	NX_OPINFO_FULL=1 $(BIN)/python -m pytest $(PYTEST_FLAGS) $(XDIST) tests/test_opinfo_sweep.py
	$(BIN)/python -m pytest $(PYTEST_FLAGS) $(XDIST) -m "hunt and not slow" --durations=10

test-slow: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_FLAGS) -m slow --durations=10

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
	PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 $(XBIN)/python -m pytest $(PYTEST_FLAGS) -m "not distributed and not slow and not hunt" -p no:randomly

# The JAX 0.4.30 oracle env (tests/oracle runs its programs under xmap there).
$(JSTAMP):
	test -x $(JVENV)/bin/python || $(PYTHON) -m venv $(JVENV)
	$(JVENV)/bin/pip install -q --disable-pip-version-check jax==0.4.30 jaxlib==0.4.30 numpy 'scipy<1.14'
	touch $(JSTAMP)

# Differential oracle: a fixed corpus of generated named programs, JAX xmap vs named_axes.
test-oracle: $(STAMP) $(JSTAMP)
	NX_ORACLE_JAX_PYTHON=$(abspath $(JVENV))/bin/python NX_ORACLE_N=$(ORACLE_N) NX_ORACLE_SEED=0 \
		$(BIN)/python -m pytest $(PYTEST_FLAGS) -p no:randomly -o timeout=900 tests/oracle/test_oracle.py

# Open-ended: a random seed (or FUZZ_SEED=...), many more programs.
fuzz-oracle: $(STAMP) $(JSTAMP)
	NX_ORACLE_JAX_PYTHON=$(abspath $(JVENV))/bin/python NX_ORACLE_N=$(FUZZ_N) NX_ORACLE_JIT_EVERY=1 \
		NX_ORACLE_SEED=$${FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')} \
		$(BIN)/python -m pytest $(PYTEST_FLAGS) -p no:randomly -o timeout=0 tests/oracle/test_oracle.py

# nx.jit's program store against eager on generated programs (tests/oracle/test_store_hunt.py:
# each compiled, saved, then loaded by a fresh jit); `make test` runs a fixed 12. Here
# STORE_N programs (about 5 s each), a random seed (or FUZZ_SEED=...).
STORE_N ?= 100
fuzz-store: $(STAMP)
	seed=$${FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo ">>> seed $$seed"; \
	NX_STORE_N=$(STORE_N) NX_STORE_SEED=$$seed \
		$(BIN)/python -m pytest $(PYTEST_FLAGS) -p no:randomly -s -o timeout=0 tests/oracle/test_store_hunt.py

# The same generated programs on real meshes (tests/oracle/mesh_runs.py): the DTensor
# engine on 4 gloo ranks and the torch-xla engine on 4 CPU devices, every sensible
# axis_resources of each, against the vectorized run.  CI samples 200 / 250 programs (3
# assignments each; `make test` / `make test-xla`); here MESH_N programs (env
# NX_ORACLE_MESH_N), every assignment (NX_ORACLE_MESH_PER_PROG=0), a random seed (or
# FUZZ_SEED=..., NX_ORACLE_MESH_SEED), the DTensor launch bounded by NX_ORACLE_MESH_TIMEOUT.
MESH_N ?= 1000
fuzz-oracle-mesh: $(STAMP) $(XSTAMP)
	seed=$${FUZZ_SEED:-$$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}; echo ">>> seed $$seed"; \
	export NX_ORACLE_MESH_N=$(MESH_N) NX_ORACLE_MESH_SEED=$$seed NX_ORACLE_MESH_PER_PROG=0 \
		NX_ORACLE_MESH_TIMEOUT=3600; \
	$(BIN)/python -m pytest $(PYTEST_FLAGS) -p no:randomly -o timeout=0 tests/parallel/test_oracle_dtensor.py; \
	r=$$?; PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 $(XBIN)/python -m pytest $(PYTEST_FLAGS) -p no:randomly \
		-o timeout=0 tests/parallel/test_oracle_xla.py && exit $$r

bench: $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
	$(BIN)/python benchmarks/run.py --out benchmarks/RESULTS.md $(BENCH_FLAGS)

# nx.jit and torch.compile of the positional twins, both in inductor's max-autotune mode
bench-autotune: $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -r benchmarks/requirements.txt
	$(BIN)/python benchmarks/run.py --mode max-autotune --out benchmarks/RESULTS_max_autotune.md \
		--programs p1_small,p1_tutorial,p2_attention,p3_chain \
		--variants eager,compile,nx.jit,jax.jit --no-p4 --no-overhead --no-parallel --no-startup \
		$(BENCH_FLAGS)

fuzz: $(STAMP)
	NX_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest $(PYTEST_FLAGS) -m "not distributed" tests/test_properties.py

clean:
	rm -rf $(VENV) $(XVENV) $(JVENV) tests/oracle/.cache build *.egg-info
