# memsafe — developer entry points. Each target works on a fresh machine with Python 3.10+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint clean docs completions man

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

## lint: ruff
lint: $(BIN)/memsafe
	$(BIN)/ruff check memsafe tests scripts

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
