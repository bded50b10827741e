# memsafe — developer entry points. Each target works on a fresh machine with Python 3.10+ and make.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint clean

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

clean:
	rm -rf $(VENV) .demo .pytest_cache
