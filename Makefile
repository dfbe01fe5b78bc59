# Threadline: `make run` to chat, `make test` to check everything. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Stamps record which extras are installed; they are redone when pyproject.toml changes.
LOCAL_STAMP := $(VENV)/.installed-local
DEV_STAMP   := $(VENV)/.installed-dev

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(LOCAL_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[local]'
	touch $@

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,local]'
	touch $@ $(LOCAL_STAMP)

run: $(LOCAL_STAMP)
	$(BIN)/threadline run

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

test: $(DEV_STAMP) lint
	$(BIN)/pytest

bench: $(DEV_STAMP)
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/compress.py
	$(BIN)/python bench/store.py
	$(BIN)/python bench/telegram.py
	$(BIN)/python bench/discord.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
