# Two commands do all set-up on a fresh clone:
#   make demo   — the main job (reproduce --preset demo) on the built-in corpus
#   make test   — ruff (lint + format check), then the test suite (all of it: what CI runs)
#   make lint   — ruff check and ruff format --check only; `make format` rewrites the tree in ruff's format
#   make test-fast — the suite without the `slow` marker, with the 15 slowest tests listed (the edit loop)
PY      ?= python3
# where pip finds torch: empty = pip's own configuration; for the CPU build from a stock PyPI set-up,
#   make test TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu"
TORCH_INDEX ?=
VENV    := .venv
VPY     := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
DATA    := data/stdlib
DEMO    := out/demo

.PHONY: demo test test-fast lint format install bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q torch==2.13.0 $(TORCH_INDEX)
	$(VPY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(VPY) -m ruff check .
	$(VPY) -m ruff format --check .

format: $(STAMP)
	$(VPY) -m ruff format .
	$(VPY) -m ruff check --fix .

test: lint
	$(VPY) -m pytest -p no:cacheprovider

test-fast: $(STAMP)
	$(VPY) -m pytest -p no:cacheprovider -m "not slow" --durations=15

demo: $(STAMP)
	$(VPY) -m smallinit reproduce --preset demo --out $(DEMO) --corpus $(DATA)

bench: $(STAMP)
	$(VPY) benchmarks/throughput.py

clean:
	rm -rf $(VENV) out .pytest_cache
