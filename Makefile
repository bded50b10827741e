# memsafe — developer entry points. Each target works on a fresh machine with Python 3.10+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint clean docs completions man install-check

$(BIN)/memsafe: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## demo: install memsafe and run it on this repository's own git history
demo: $(BIN)/memsafe
	MEMSAFE_DB=$(CURDIR)/.demo/memory.db $(BIN)/python scripts/demo.py

## test: run the test suite (offline, real model, real SQLite file)
test: $(BIN)/memsafe
	$(BIN)/pytest -q

## install-check: build the wheel, install it with its dependencies in a fresh venv (as pipx or
## uv tool would), then run it there (CI runs this; needs the package index)
CHECK := build/install-check
install-check: $(BIN)/memsafe
	rm -rf $(CHECK) && mkdir -p $(CHECK)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir $(CHECK)/dist .
	$(PYTHON) -m venv $(CHECK)/venv
	$(CHECK)/venv/bin/pip install --quiet $(CHECK)/dist/memsafe-*.whl
	cd $(CHECK) && export MEMSAFE_HOME=$$PWD/home && venv/bin/memsafe --version \
	  && venv/bin/memsafe remember "The install check ran from the wheel" --global \
	  && venv/bin/memsafe recall "did the install check run?" | grep -q "install check ran"
	@echo "install-check: the wheel installs and runs"

## lint: ruff, then mypy (its settings: [tool.mypy] in pyproject.toml); both must report nothing
lint: $(BIN)/memsafe
	$(BIN)/ruff check memsafe tests scripts
	$(BIN)/mypy

## docs: regenerate completions/ and man/ from the CLI (run after changing any command or option)
docs: $(BIN)/memsafe
	$(BIN)/python scripts/gen_docs.py all

## completions: regenerate completions/ (bash, zsh, fish)
completions: $(BIN)/memsafe
	$(BIN)/python scripts/gen_docs.py completions

## man: regenerate the man pages in man/ (view with: man ./man/memsafe.1)
man: $(BIN)/memsafe
	$(BIN)/python scripts/gen_docs.py man

clean:
	rm -rf $(VENV) .demo .pytest_cache
