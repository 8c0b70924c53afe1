# Two front doors: `make run` (the main job) and `make test` (the test suite).
# Both create ./.venv and install everything first (all extras; CPU-only torch, pinned).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-0.1

.PHONY: install run test lint bench

$(STAMP): setup.cfg pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[all,test]"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/mara reproduce

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

bench: $(STAMP)
	$(PY) -m pip install -q pygame
	$(PY) benchmarks/env_speed.py
