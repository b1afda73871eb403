# The two commands of the README: `make book` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv book test test-lib test-notebooks test-build test-site bench notebooks serve colab-check lint clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-labs.txt lib/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -r requirements-labs.txt
	touch $(STAMP)

## Build the site into _build/html, executing every notebook (strict: warnings are errors).
book: $(STAMP)
	$(BIN)/jupyter-book build --all -W -n --keep-going .

## Every test: the library, the notebooks under nbval, the strict build, the site in a browser.
test: test-lib test-notebooks test-build test-site

test-lib: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider lib/tests tests/test_repo.py tests/test_checks_can_fail.py

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -q --nbval-lax --nbval-current-env -p no:cacheprovider notebooks solutions

test-build: book

test-site: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/site

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

lint: $(STAMP)
	$(BIN)/ruff check lib tools tests notebooks solutions
	$(BIN)/ruff format --check lib tools tests

clean:
	rm -rf _build
